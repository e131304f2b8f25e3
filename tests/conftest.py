"""Shared fixtures: small real sessions written through the public API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.messages import Message, ToolCall, Usage, assistant, new_id, tool_result, user
from cairn.store import JsonlTranscriptStore, SessionRecord
from cairn.wire_apis import WIRE_APIS, WireAPI


def tool_round(n_calls: int = 1, *, text: str = "result", tag: str = "") -> list[Message]:
    """An assistant message with ``n_calls`` parallel calls and all their results."""
    calls = [
        ToolCall(new_id("call"), "read_file", f'{{"path": "f{i}{tag}.py"}}') for i in range(n_calls)
    ]
    head = assistant(f"reading {tag}", calls, usage=Usage(100, 10, 110))
    return [head, *(tool_result(c.id, f"{text} {c.id}") for c in calls)]


def chat_round(text: str) -> list[Message]:
    return [user(text)]


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "projects" / "ws" / "session.jsonl"


@pytest.fixture
def store(store_path: Path) -> Iterator[JsonlTranscriptStore]:
    s = JsonlTranscriptStore.create(store_path, SessionRecord(session_id="s1", workspace="/ws"))
    yield s
    s.close()


@pytest.fixture(params=WIRE_APIS)
def wire_api(request: pytest.FixtureRequest) -> WireAPI:
    """Each wire API in turn: a test that takes it runs once per API, its body unchanged."""
    api: WireAPI = request.param
    return api
