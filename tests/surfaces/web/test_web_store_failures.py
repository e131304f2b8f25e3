"""A store failure in the middle of a browser pane's turn or ``/compact`` (an fsync that
fails with EIO, which a tmpfs never produces): the pane gets one line, the connection
and the other panes go on, and the session is still there to open."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest

from support.openai_server import (
    OpenAIServer,
)
from surfaces.web.test_web_server import Page, answering, make_client, page


def failing_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    def fsync(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fsync", fsync)  # the store calls os.fsync at each use


def failure_text(frame: dict[str, Any]) -> str | None:
    """The text of an error frame or an error event, else None."""
    if frame["type"] == "error":
        return str(frame["text"])
    if frame["type"] == "event" and frame["event"]["type"] == "error":
        return str(frame["event"]["message"])
    return None


def next_failure(p: Page) -> dict[str, Any]:
    """The next error frame or error event (``Page.until`` stops at an error frame)."""
    for _ in range(5_000):
        frame: dict[str, Any] = json.loads(p.socket.receive_text())
        p.seen.append(frame)
        if failure_text(frame) is not None:
            return frame
    raise AssertionError("no error came")


@pytest.mark.parametrize("where", ["turn", "compact"])
def test_an_fsync_that_fails_mid_turn_or_mid_compact_is_one_line_in_its_pane(
    tmp_path: Path, openai_server: OpenAIServer, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    answering(openai_server)
    with make_client(tmp_path, openai_server) as client, page(client) as p:
        sid = p.open("left")["sessionId"]
        p.open("right")
        for n in (1, 2, 3):  # rounds before the kept tail: /compact has work to do
            p.ask("left", f"question {n}")
        with monkeypatch.context() as patch:
            failing_fsync(patch)
            p.send(type="prompt", pane="left", text="question 4" if where == "turn" else "/compact")
            failure = next_failure(p)
        assert failure["pane"] == "left"
        text = failure_text(failure)
        assert text is not None and "Input/output error" in text
        assert "\n" not in text.strip() and "Traceback" not in text
        p.idle("left")
        # The connection goes on, and so does the other pane.
        p.ask("right", "question in the other pane")
        p.send(type="list")
        listed = p.until(lambda f: f["type"] == "sessions")
        assert sid in [s["id"] for s in listed["sessions"]]
