"""Two ``cairn web`` workers on one store: the second follows, read-only, a session the
first is writing (JSONL files on one machine; a PostgreSQL database for several)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from cairn.agent.settings import Settings, StoreSettings
from support.openai_server import (
    OpenAIServer,
)
from support.postgres_server import postgres_server_fixture, postgres_url_fixture  # noqa: F401
from surfaces.web.test_web_server import ANSWER, Page, answering, make_client, page

STORES = ["jsonl", "postgres"]


@pytest.fixture(params=STORES)
def store_settings(request: pytest.FixtureRequest) -> Settings:
    if request.param == "jsonl":
        return Settings()
    url: str = request.getfixturevalue("postgres_url")
    return Settings(store=StoreSettings(url=url))


@contextmanager
def within(p: Page, seconds: float = 60) -> Iterator[None]:
    """Fail, rather than hang, if a frame waited for never comes: after ``seconds`` a bad
    frame makes the server answer an error, which ``Page.until`` raises on."""
    timer = threading.Timer(seconds, lambda: p.send(type="no such frame"))
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def added(p: Page, pane: str, kind: str = "messageAdded") -> dict[str, Any]:
    frame = p.until(
        lambda f: f["type"] == "event" and f["pane"] == pane and f["event"]["type"] == kind
    )
    event: dict[str, Any] = frame["event"]
    return event


def contents(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in messages]


def test_a_second_worker_follows_a_session_the_first_is_writing(
    tmp_path: Path, openai_server: OpenAIServer, store_settings: Settings
) -> None:
    answering(openai_server)
    with (
        make_client(tmp_path, openai_server, settings=store_settings) as first,
        make_client(tmp_path, openai_server, settings=store_settings) as second,
        page(first) as writer,
        page(second) as follower,
        within(follower),
    ):
        session_id = writer.open("p1")["sessionId"]
        writer.ask("p1", "first question")

        opened = follower.open("q1", session_id)
        assert opened["type"] == "opened" and opened["readOnly"] is True
        assert opened["sessionId"] == session_id and opened["busy"] is False
        assert contents(opened["messages"]) == [("user", "first question"), ("assistant", ANSWER)]
        assert (opened["start"], opened["total"]) == (0, 2)
        assert opened["usage"]["compactions"] == 0
        notice = follower.until(lambda f: f["type"] == "notice" and f["pane"] == "q1")
        assert "being written by another process" in notice["text"]

        # What the first worker writes reaches the second as it is committed.
        writer.ask("p1", "second question")
        assert added(follower, "q1")["message"]["content"] == "second question"
        assert added(follower, "q1")["message"]["content"] == ANSWER
        writer.send(type="prompt", pane="p1", text="/compact keep the questions")
        block = added(follower, "q1", "compactBlockAdded")["block"]
        assert block["meta"]["kind"] == "compact_summary"
        meter = follower.until(lambda f: f["type"] == "state" and f["pane"] == "q1")
        assert meter["usage"]["compactions"] == 1 and meter["busy"] is False
        writer.idle("p1")

        # Read-only: nothing the follower sends can write to the session.
        for frame in (
            {"type": "prompt", "text": "may I?"},
            {"type": "prompt", "text": "/compact"},
            {"type": "cancel"},
        ):
            follower.send(pane="q1", **frame)
            refused = follower.until(lambda f: f["type"] == "refused" and f["pane"] == "q1")
            assert refused["text"].startswith(f"read-only: session {session_id} is being written")

        # Pages before the end come from the store, positions as the writer's own.
        follower.send(type="history", pane="q1", before=2, limit=1)
        history = follower.until(lambda f: f["type"] == "history" and f["pane"] == "q1")
        assert contents(history["messages"]) == [("assistant", ANSWER)]
        assert (history["start"], history["total"]) == (1, 5)
        writer.send(type="history", pane="p1", before=2, limit=1)
        assert writer.until(lambda f: f["type"] == "history")["messages"] == history["messages"]

        # Once the first worker lets it go, opening it again resumes it for writing.
        writer.send(type="close", pane="p1")
        writer.send(type="list")
        writer.until(lambda f: f["type"] == "sessions")
        reopened = follower.open("q1", session_id)
        assert reopened["type"] == "opened" and "readOnly" not in reopened
        assert reopened["total"] == 5
        follower.ask("q1", "third question")
    events = [f["event"] for f in follower.seen if f["type"] == "event" and f["pane"] == "q1"]
    written = [e["message"]["content"] for e in events if e["type"] == "messageAdded"]
    assert "third question" in written


def test_a_session_open_in_another_pane_of_the_same_worker_is_still_refused(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """One worker shows a session in one pane at a time: it needs no follower for its own."""
    answering(openai_server)
    with make_client(tmp_path, openai_server) as client, page(client) as p:
        session_id = p.open("p1")["sessionId"]
        refused = p.open("p2", session_id)
        assert refused["type"] == "refused" and "open in another pane" in refused["text"]
