"""The runtime opens every session through a StoreFactory, so another store can plug in."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from cairn.agent.loop import run_turn
from cairn.agent.runtime import Runtime
from cairn.agent.settings import Settings
from cairn.context import CompactionConfig, ContextPipeline
from cairn.messages import user
from cairn.provider import ModelConfig, OpenAIProvider
from cairn.store import (
    JsonlStoreFactory,
    Record,
    SessionDigest,
    SessionRecord,
    StoredSession,
    StoreFactory,
    Transcript,
    TranscriptStore,
    read_transcript,
)
from support.openai_server import (
    OpenAIServer,
    Reply,
    ToolCallSpec,
)


class Elsewhere:
    """A store factory of its own: JSONL files in a folder of its choosing, calls recorded."""

    def __init__(self, root: Path) -> None:
        self.calls: list[str] = []
        self._files = JsonlStoreFactory(root)
        self.root = root

    def create(self, workspace: Path, header: SessionRecord) -> TranscriptStore:
        self.calls.append(f"create {header.session_id}")
        return self._files.create(workspace, header)

    def open(self, workspace: Path, session_id: str) -> TranscriptStore:
        self.calls.append(f"open {session_id}")
        return self._files.open(workspace, session_id)

    def create_from_records(self, workspace: Path, records: Sequence[Record]) -> None:
        self.calls.append(f"create_from_records {records[0].id}")
        self._files.create_from_records(workspace, records)

    def create_subagent(
        self, workspace: Path, parent_id: str, header: SessionRecord
    ) -> TranscriptStore:
        self.calls.append(f"create_subagent {parent_id} {header.session_id}")
        return self._files.create_subagent(workspace, parent_id, header)

    def exists(self, workspace: Path, session_id: str) -> bool:
        return self._files.exists(workspace, session_id)

    def sessions(self, workspace: Path) -> list[StoredSession]:
        self.calls.append("sessions")
        return self._files.sessions(workspace)

    def read(self, workspace: Path, session_id: str) -> Transcript:
        self.calls.append(f"read {session_id}")
        return self._files.read(workspace, session_id)

    def subagents(self, workspace: Path, session_id: str) -> list[str]:
        return self._files.subagents(workspace, session_id)

    def read_subagent(self, workspace: Path, session_id: str, task_id: str) -> Transcript:
        return self._files.read_subagent(workspace, session_id, task_id)

    def describe(self, workspace: Path, session_id: str) -> SessionDigest:
        self.calls.append(f"describe {session_id}")
        return self._files.describe(workspace, session_id)

    def follow(
        self,
        workspace: Path,
        session_id: str,
        after: int = 0,
        *,
        timeout: float | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[tuple[int, Record]]:
        self.calls.append(f"follow {session_id}")
        return self._files.follow(workspace, session_id, after, timeout=timeout, stop=stop)

    def artifacts_dir(self, workspace: Path, session_id: str) -> Path:
        return self._files.artifacts_dir(workspace, session_id)

    def find(self, session_id: str) -> str | None:
        return self._files.find(session_id)

    def delete(self, workspace: Path, session_id: str) -> bool:
        self.calls.append(f"delete {session_id}")
        return self._files.delete(workspace, session_id)

    def close(self) -> None:
        self.calls.append("close")


def _conforms(factory: Elsewhere) -> StoreFactory:
    return factory


def test_the_runtime_creates_resumes_and_lists_through_its_factory(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    stores = Elsewhere(tmp_path / "elsewhere")
    model = ModelConfig(model="test-model", base_url=openai_server.base_url, context_window=32_768)
    rt = Runtime(
        workspace,
        model,
        OpenAIProvider(model),
        settings=Settings(),
        home=tmp_path / "home",
        store_factory=_conforms(stores),
    )
    session = rt.new_session()
    asyncio.run(run_turn(session, "hello"))
    first = session.id
    rt.clear()
    listed = rt.list_sessions()
    resumed = rt.resume(first)
    rt.close()
    assert stores.calls[:2] == [f"create {first}", f"create {listed[0].id}"]
    assert "sessions" in stores.calls and stores.calls[-1] == f"open {first}"
    assert {s.id for s in listed} == {first, resumed.id} | {listed[0].id}
    # The picker describes each session; it never reads one whole.
    assert {c for c in stores.calls if c.startswith(("describe", "read"))} == {
        f"describe {s.id}" for s in listed
    }
    assert [(s.first_prompt, s.messages) for s in listed if s.id == first] == [("hello", 2)]
    # Nothing was written under the runtime's home: only where the factory put it.
    assert not list((tmp_path / "home").rglob("*.jsonl"))
    assert session.path.is_relative_to(tmp_path / "elsewhere")
    assert resumed.ui_messages()[0].text == "hello"


def test_the_pipeline_opens_through_a_factory_too(tmp_path: Path) -> None:
    stores = Elsewhere(tmp_path / "elsewhere")
    model = ModelConfig(model="m", context_window=32_768)
    p = ContextPipeline.open(
        tmp_path / "ws", CompactionConfig(), model=model, session_id="s1", store_factory=stores
    )
    p.add(user("hi"))
    p.close()
    again = ContextPipeline.open(
        tmp_path / "ws", CompactionConfig(), model=model, session_id="s1", store_factory=stores
    )
    assert [m.text for m in again.messages] == ["hi"]
    again.close()
    assert stores.calls == ["create s1", "open s1"]
    assert again.transcript_path.is_relative_to(tmp_path / "elsewhere")


def test_a_subagent_transcript_goes_through_the_factory_and_is_not_a_session(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()

    def responder(body: dict[str, Any]) -> Reply:
        if "You are a Cairn subagent" in str(body["messages"][0]["content"]):
            return Reply(text="Nothing to report.")
        if body["messages"][-1]["role"] == "user":
            arguments = {
                "description": "look",
                "prompt": "Look around.",
                "run_in_background": False,
            }
            return Reply(tool_calls=[ToolCallSpec("task", json.dumps(arguments))])
        return Reply(text="Done.")

    openai_server.respond_with(responder)
    stores = Elsewhere(tmp_path / "elsewhere")
    model = ModelConfig(model="test-model", base_url=openai_server.base_url, context_window=32_768)
    rt = Runtime(
        workspace,
        model,
        OpenAIProvider(model),
        settings=Settings(),
        home=tmp_path / "home",
        store_factory=stores,
        permission_mode="bypass",
    )
    session = rt.new_session()
    result = asyncio.run(run_turn(session, "look around in a subagent"))
    listed = rt.list_sessions()
    rt.close()
    assert result.text == "Done."
    task = next(iter(session.state.tasks.values()))
    assert f"create_subagent {session.id} {task.id}" in stores.calls
    assert [s.id for s in listed] == [session.id]  # the task's transcript is not a session
    found = list((tmp_path / "elsewhere").rglob(f"{task.id}.jsonl"))
    assert len(found) == 1 and not list((tmp_path / "home").rglob("*.jsonl"))
    assert [m.text for m in read_transcript(found[0]).api().messages][-1] == "Nothing to report."


def test_the_open_session_is_listed_first_even_when_an_older_one_looks_newer(
    tmp_path: Path,
) -> None:
    """Regression: after ``/clear`` the list was ordered by file time alone, which a file
    system keeps to a clock tick, so the session just left could come first."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    model = ModelConfig(model="test-model", context_window=32_768)
    rt = Runtime(workspace, model, OpenAIProvider(model), settings=Settings(), home=tmp_path)
    left = rt.new_session()
    current = rt.clear()
    later = time.time() + 5  # the old file's time at or past the new one's
    os.utime(left.path, (later, later))
    listed = rt.list_sessions()
    rt.close()
    assert [s.id for s in listed] == [current.id, left.id]
