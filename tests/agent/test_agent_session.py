"""AgentSession, the facade every surface uses: prompt, compact, cancel, answer, events,
status, ui_messages, usage, and the session guard on new / resume / clear."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from cairn import AgentSession, SessionBusyError
from cairn.agent.events import Event, MessageAdded, PermissionRequested, StatusChange
from cairn.agent.session import Runtime
from cairn.agent.settings import Settings
from cairn.provider import ModelConfig, OpenAIProvider
from openai_server import (  # noqa: F401  (the fixture registers itself by import)
    OpenAIServer,
    Reply,
    ToolCallSpec,
    openai_server_fixture,
)

SUMMARY = "<summary>\n## Objective and constraints\nWrite the file.\n</summary>"


def runtime(tmp_path: Path, server: OpenAIServer) -> Runtime:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    model = ModelConfig(model="test-model", base_url=server.base_url, context_window=32_768)
    return Runtime(
        workspace,
        model,
        OpenAIProvider(model),
        settings=Settings(),
        home=tmp_path / "home",
        answers_permissions=True,
    )


def is_fork(body: dict[str, Any]) -> bool:
    last = body["messages"][-1]
    return last["role"] == "user" and "TEXT ONLY" in str(last.get("content"))


def test_a_surface_drives_a_session_through_the_facade_alone(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    write = json.dumps({"path": "a.txt", "content": "A"})
    read = json.dumps({"path": "notes.txt"})
    plan = [
        *(Reply(tool_calls=[ToolCallSpec("read_file", read)]) for _ in range(3)),
        Reply(tool_calls=[ToolCallSpec("write_file", write)]),
        Reply(text="Wrote a.txt."),
    ]
    openai_server.respond_with(
        lambda body: Reply(text=SUMMARY) if is_fork(body) else (plan.pop(0) if plan else None)
    )
    rt = runtime(tmp_path, openai_server)
    (rt.workspace / "notes.txt").write_text(
        "".join(f"note {i}: the file is a.txt\n" for i in range(300))
    )
    agent = AgentSession.new(rt)
    seen: list[Event] = []

    async def scenario() -> None:
        async def watch() -> None:
            async for event in agent.events():
                seen.append(event)
                if isinstance(event, PermissionRequested):
                    # While the tool waits, the guard holds: no switching away.
                    assert agent.status == "tools"
                    with pytest.raises(SessionBusyError, match="is tools"):
                        agent.clear()
                    with pytest.raises(SessionBusyError):
                        await agent.prompt("and another thing")
                    assert agent.answer(event.id, "allow_once")

        watcher = asyncio.create_task(watch())
        await asyncio.sleep(0)
        result = await asyncio.wait_for(agent.prompt("write a.txt"), 60)
        assert result.text == "Wrote a.txt."
        outcome = await agent.compact("keep the file name")
        assert outcome.ok, outcome.text
        rt.close()  # closes the event stream too
        await asyncio.wait_for(watcher, 5)

    asyncio.run(scenario())
    assert (rt.workspace / "a.txt").read_text() == "A"
    assert sorted(p.name for p in rt.workspace.iterdir()) == ["a.txt", "notes.txt"]
    assert agent.status == "idle"
    statuses = [e.status for e in seen if isinstance(e, StatusChange)]
    assert statuses[:3] == ["streaming", "tools", "streaming"] and "compacting" in statuses
    assert any(isinstance(e, MessageAdded) for e in seen)
    usage = agent.usage
    assert usage.window == 32_768 and usage.input_budget and usage.compactions == 1
    texts = [m.text for m in agent.ui_messages()]
    assert "write a.txt" in texts and "Wrote a.txt." in texts  # kept after the compaction
    assert agent.transcript_path.exists()


def test_new_resume_and_clear_open_the_runtime_s_sessions(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    rt = runtime(tmp_path, openai_server)
    first = AgentSession.new(rt)
    asyncio.run(first.prompt("hello"))
    cleared = first.clear()
    assert cleared.id != first.id
    listed = [s.id for s in AgentSession.sessions(rt)]
    assert first.id in listed
    again = AgentSession.resume(rt, first.id)
    assert again.id == first.id and next(m.text for m in again.ui_messages()) == "hello"
    with pytest.raises(ValueError, match="is a command"):
        asyncio.run(again.prompt("/compact"))
    rt.close()


def test_usage_is_the_latest_total_tokens_only(tmp_path: Path, openai_server: OpenAIServer) -> None:
    rt = runtime(tmp_path, openai_server)
    agent = AgentSession.new(rt)
    assert agent.usage.latest_total_tokens is None
    asyncio.run(agent.prompt("hi"))
    request = openai_server.requests[-1]
    assert request.body["stream"] is True
    latest = agent.usage.latest_total_tokens
    rt.close()
    assert isinstance(latest, int) and latest > 0
