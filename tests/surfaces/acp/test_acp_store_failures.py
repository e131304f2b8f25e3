"""A store failure in the middle of an editor's turn or ``/compact`` (an fsync that fails
with EIO, which a tmpfs never produces): the editor is told in one line, the prompt
ends normally, the agent goes on, and the session resumes with what was acknowledged."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path

import pytest

from support.acp_client import answering, connected, make_setup
from support.openai_server import (
    OpenAIServer,
)


def failing_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    def fsync(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fsync", fsync)  # the store calls os.fsync at each use


def said(updates: list[dict[str, object]]) -> list[str]:
    return [
        str(u["content"]["text"])  # type: ignore[index]
        for u in updates
        if u["sessionUpdate"] == "agent_message_chunk"
    ]


@pytest.mark.parametrize("where", ["turn", "compact"])
def test_an_fsync_that_fails_mid_turn_or_mid_compact_is_one_line_to_the_editor(
    tmp_path: Path, openai_server: OpenAIServer, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    answering(openai_server)
    workspace = tmp_path / "ws"

    async def scenario() -> tuple[str, list[str], str, str]:
        async with connected(make_setup(tmp_path, openai_server), workspace) as editor:
            sid = await editor.new()
            for n in (1, 2, 3):  # rounds before the kept tail: /compact has work to do
                assert await editor.ask(sid, f"question {n}") == "end_turn"
            before = len(editor.client.updates(sid))
            with monkeypatch.context() as patch:
                failing_fsync(patch)
                text = "question 4" if where == "turn" else "/compact"
                stop = await editor.ask(sid, text)
            lines = said(editor.client.updates(sid)[before:])
            # The agent goes on: the same connection serves the next prompt.
            after = await editor.ask(sid, "question 5")
            return stop, lines, after, sid

    stop, lines, after, sid = asyncio.run(scenario())
    assert stop == "end_turn"
    failures = [line for line in lines if "Input/output error" in line]
    assert len(failures) == 1, lines
    assert "\n" not in failures[0].strip() and "Traceback" not in failures[0]
    assert f"cairn --resume {sid}" in failures[0]
    assert after == "end_turn"

    # A later editor loads the session: the first question and its answer are there.
    async def reload() -> list[str]:
        async with connected(make_setup(tmp_path, openai_server), workspace) as editor:
            await editor.conn.load_session(cwd=str(workspace), session_id=sid)
            return [
                str(u["content"]["text"])
                for u in editor.client.updates(sid)
                if u["sessionUpdate"] == "user_message_chunk"
            ]

    users = asyncio.run(reload())
    assert users[0] == "question 1"
