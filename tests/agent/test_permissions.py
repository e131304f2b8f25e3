"""Permissions are requests: a tool publishes permissionRequested and waits for answer()."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from cairn.agent.events import Event, PermissionRequested
from cairn.agent.loop import run_turn
from cairn.agent.permissions import PermissionDecision
from cairn.agent.runtime import Runtime, Session
from cairn.agent.settings import Settings
from cairn.provider import ModelConfig, OpenAIProvider
from support.cli_run import cairn_p
from support.openai_server import (
    OpenAIServer,
    Reply,
    ToolCallSpec,
)


def write(path: str, content: str) -> Reply:
    return Reply(
        tool_calls=[ToolCallSpec("write_file", json.dumps({"path": path, "content": content}))]
    )


def session_for(tmp_path: Path, server: OpenAIServer) -> tuple[Runtime, Session]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    model = ModelConfig(model="test-model", base_url=server.base_url, context_window=32_768)
    rt = Runtime(
        workspace,
        model,
        OpenAIProvider(model),
        settings=Settings(),
        home=tmp_path / "home",
        answers_permissions=True,
    )
    return rt, rt.new_session()


def answering(session: Session, decisions: list[PermissionDecision]) -> list[PermissionRequested]:
    """Answer each request with the next decision, as a surface would, from the event."""
    asked: list[PermissionRequested] = []

    def on_event(event: Event) -> None:
        if isinstance(event, PermissionRequested):
            asked.append(event)
            decision = decisions.pop(0)
            asyncio.get_running_loop().call_soon(session.answer, event.id, decision)

    session.events.on(on_event)
    return asked


@pytest.mark.parametrize(
    ("decisions", "written", "asked"),
    [
        (["allow_once", "allow_once"], ["a.txt", "b.txt"], 2),
        (["allow_always"], ["a.txt", "b.txt"], 1),  # the second write is not asked again
        (["reject", "reject"], [], 2),
    ],
)
def test_a_write_waits_for_the_answer(
    tmp_path: Path,
    openai_server: OpenAIServer,
    decisions: list[PermissionDecision],
    written: list[str],
    asked: int,
) -> None:
    openai_server.script(write("a.txt", "A"), write("b.txt", "B"), Reply(text="Done."))
    rt, session = session_for(tmp_path, openai_server)
    requests = answering(session, list(decisions))
    result = asyncio.run(run_turn(session, "write two files"))
    rt.close()
    assert result.text == "Done."
    assert len(requests) == asked
    first = requests[0]
    assert first.tool == "write_file" and json.loads(first.arguments) == {
        "path": "a.txt",
        "content": "A",
    }
    assert first.options == ("allow_once", "allow_always", "reject") and "a.txt" in first.summary
    assert sorted(p.name for p in session.workspace.iterdir()) == written
    tool_results = [
        m["content"] for m in openai_server.requests[-1].body["messages"] if m["role"] == "tool"
    ]
    if not written:
        assert all("the user denied write_file" in t for t in tool_results)


def test_a_cancel_answers_every_pending_request_as_cancelled(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.script(write("a.txt", "A"), Reply(text="never asked"))
    rt, session = session_for(tmp_path, openai_server)
    asked: list[PermissionRequested] = []

    def on_event(event: Event) -> None:
        if isinstance(event, PermissionRequested):
            asked.append(event)
            asyncio.get_running_loop().call_soon(session.abort)  # the user presses Esc

    session.events.on(on_event)
    result = asyncio.run(run_turn(session, "write a file"))
    rt.close()
    assert result.aborted and len(asked) == 1
    assert not (session.workspace / "a.txt").exists()
    assert session.answer(asked[0].id, "allow_once") is False  # nothing waits any more
    with pytest.raises(ValueError, match="unknown permission decision"):
        session.answer("perm_x", "maybe")  # type: ignore[arg-type]


def test_cairn_p_answers_by_its_permission_mode(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """Nobody can be asked in cairn -p: in ask mode a write is refused, with a notice."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    openai_server.script(write("a.txt", "A"), Reply(text="Could not write."))
    env = {
        "CAIRN_MODEL": "test-model",
        "OPENAI_BASE_URL": openai_server.base_url,
        "CAIRN_HOME": str(tmp_path / "home"),
        # A window: the only notice is the refusal (no "automatic compaction is off").
        "CAIRN_CONTEXT_WINDOW": "128000",
    }
    done = cairn_p("-p", "write a.txt", "--permission-mode", "ask", cwd=workspace, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Could not write."
    assert (
        "permission refused: write_file" in done.stderr and "--permission-mode ask" in done.stderr
    )
    assert not (workspace / "a.txt").exists()
    tool = next(m for m in openai_server.requests[-1].body["messages"] if m["role"] == "tool")
    assert "the user denied write_file" in tool["content"]
    notices = [line for line in done.stderr.splitlines() if line.startswith("cairn: notice:")]
    assert len(notices) == 1  # one line per refusal


def test_without_a_surface_that_answers_nothing_waits(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """A library user who never answers permission requests is refused at once."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    model = ModelConfig(model="test-model", base_url=openai_server.base_url, context_window=32_768)
    rt = Runtime(workspace, model, OpenAIProvider(model), home=tmp_path / "home")
    session = rt.new_session()
    asked: list[Event] = []
    session.events.on(lambda e: asked.append(e) if isinstance(e, PermissionRequested) else None)
    openai_server.script(write("a.txt", "A"), Reply(text="Refused."))
    result = asyncio.run(run_turn(session, "write a file"))
    rt.close()
    assert result.text == "Refused." and not asked
    tool = next(m for m in openai_server.requests[-1].body["messages"] if m["role"] == "tool")
    assert "permission could not be requested" in tool["content"]
