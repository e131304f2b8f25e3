"""Issue 24, items 2 and 4, as the terminal app shows them: a store failure in a turn or
in ``/compact`` is one error line, and a transcript deleted under a live session is
one notice; the app goes on in both cases."""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot

from cairn import AgentSession
from cairn.agent.runtime import Runtime
from cairn.agent.settings import Settings
from cairn.provider import ModelConfig, OpenAIProvider
from cairn.store import read_transcript
from cairn.surfaces.terminal import CairnApp
from cairn.surfaces.terminal.widgets import PromptInput
from support.openai_server import (
    OpenAIServer,
    Reply,
)

LONG = "all work and no play makes jack a dull boy " * 40


def make_runtime(tmp_path: Path, server: OpenAIServer) -> Runtime:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    model = ModelConfig(model="test-model", base_url=server.base_url, context_window=None)
    return Runtime(
        workspace, model, OpenAIProvider(model), settings=Settings(), home=tmp_path / "home"
    )


def answering(server: OpenAIServer) -> None:
    """Long answers to questions; a short summary to a compaction's request."""

    def reply(body: dict[str, object]) -> Reply:
        messages = body["messages"]
        assert isinstance(messages, list)
        if str(messages[-1].get("content")).startswith("question"):
            return Reply(text=LONG)
        return Reply(text="## Summary\nthe questions were answered")

    server.respond_with(reply)


async def until(pilot: Pilot[None], condition: Callable[[], bool], what: str) -> None:
    for _ in range(2000):
        if condition():
            return
        await pilot.pause(0.01)
    raise AssertionError(f"never happened: {what}")


async def submit(pilot: Pilot[None], text: str) -> None:
    pilot.app.query_one(PromptInput).value = text
    await pilot.press("enter")


def entries(app: CairnApp, kind: str) -> list[str]:
    return [e.text for e in app.transcript.entries if e.kind == kind]


def answers(app: CairnApp, count: int) -> Callable[[], bool]:
    return lambda: len(entries(app, "assistant")) == count


def test_a_failing_fsync_in_a_turn_and_in_compact_is_one_error_line_each(
    tmp_path: Path, openai_server: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    answering(openai_server)
    rt = make_runtime(tmp_path, openai_server)
    agent = AgentSession.new(rt)
    app = CairnApp(rt, agent)
    failing = False
    real = os.fsync

    def fsync(fd: int) -> None:
        if failing:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)

    async def scenario() -> None:
        nonlocal failing
        async with app.run_test() as pilot:
            for n in range(4):
                await submit(pilot, f"question {n}")
                await until(pilot, answers(app, n + 1), "answer")
                await until(pilot, lambda: not app.busy, "idle")
            failing = True
            await submit(pilot, "question 4")
            await until(pilot, lambda: bool(entries(app, "error")) and not app.busy, "the error")
            (error,) = entries(app, "error")
            assert "\n" not in error and "fsync failed (Input/output error)" in error
            assert f"--resume {agent.id}" in error
            await submit(pilot, "/compact")
            await until(pilot, lambda: len(entries(app, "error")) == 2 and not app.busy, "error")
            compact = entries(app, "error")[1]
            assert "\n" not in compact and "compaction checkpoint not saved" in compact
            assert "the context is unchanged" in compact
            failing = False
            await submit(pilot, "question 5")
            await until(pilot, lambda: len(entries(app, "assistant")) == 6, "the app goes on")
            assert len(entries(app, "error")) == 2

    asyncio.run(scenario())
    rt.close()


def test_a_transcript_deleted_under_the_app_is_one_notice_and_restored(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    answering(openai_server)
    rt = make_runtime(tmp_path, openai_server)
    agent = AgentSession.new(rt)
    app = CairnApp(rt, agent)
    path = agent.transcript_path

    async def scenario() -> None:
        async with app.run_test() as pilot:
            await submit(pilot, "question 0")
            await until(pilot, lambda: bool(entries(app, "assistant")) and not app.busy, "answer")
            path.unlink()
            await submit(pilot, "question 1")
            await until(pilot, lambda: len(entries(app, "assistant")) == 2, "the second answer")
            restored = [n for n in entries(app, "notice") if "was deleted" in n]
            assert len(restored) == 1 and str(path) in restored[0]
            assert entries(app, "error") == []

    asyncio.run(scenario())
    rt.close()
    assert [m.text for m in read_transcript(path).ui()] == [
        "question 0",
        LONG,
        "question 1",
        LONG,
    ]
