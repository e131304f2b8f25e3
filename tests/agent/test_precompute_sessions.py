"""A summary prepared in the background while the user clears or switches (issue 28).

The real runtime and ``AgentSession`` against the local server: a session of
pasted logs reaches the band, its handoff is answered, and the compaction
fork starts in the background — and stalls. ``/clear`` or a switch to a new
session is not refused (nobody waits for that summary: no guard), cancels it
(the server sees the connection close), writes nothing to the session left,
and leaves the new session without any of it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from cairn.agent.events import Event, SummaryPrepared
from cairn.agent.facade import AgentSession
from cairn.agent.runtime import Runtime
from cairn.agent.settings import Settings
from cairn.provider import ModelConfig, open_provider
from cairn.store import CompactionRecord, read_transcript
from support.openai_server import (
    OpenAIServer,
    Reply,
    ToolCallSpec,
)

SUMMARY = "<summary>\n## Objective and constraints\nRead the logs.\n</summary>"


def is_fork(body: dict[str, Any]) -> bool:
    return any(
        m["role"] == "user" and "TEXT ONLY" in str(m.get("content")) for m in body["messages"]
    )


def log(n: int) -> str:
    return "".join(f"[{n}:{i:03}] step {i} of build {n}: compiled, tested, OK\n" for i in range(40))


@pytest.mark.parametrize("action", ["clear", "switch"])
def test_clear_or_a_switch_cancels_it_and_the_session_left_is_as_if_it_never_ran(
    tmp_path: Path, openai_server: OpenAIServer, action: str
) -> None:
    held = Reply(text=SUMMARY, stall_after=2)  # streams a little, then waits

    def model(body: dict[str, Any]) -> Reply:
        if is_fork(body):
            return held
        if body["messages"][-1]["role"] == "tool":
            return Reply(text="Noted.")
        return Reply(tool_calls=[ToolCallSpec("bash", json.dumps({"command": "echo ok"}))])

    openai_server.respond_with(model)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    config = ModelConfig(model="m", base_url=openai_server.base_url, context_window=32_768)
    runtime = Runtime(
        workspace,
        config,
        open_provider(config),
        settings=Settings(),
        home=tmp_path / "home",
        permission_mode="bypass",
    )
    agent = AgentSession.new(runtime)
    first = runtime.current_session
    assert first is not None
    later: list[Event] = []

    async def scenario() -> tuple[bytes, bytes, bool, AgentSession]:
        for n in range(120):
            await agent.prompt(f"Build {n}'s log; rerun its step:\n{log(n)}")
            if first.pipeline.prepared is not None:
                break
        assert first.pipeline.prepared == "preparing", "the band was never reached"
        await asyncio.to_thread(held.started.wait, 10)
        before = first.path.read_bytes()
        # Not refused: a summary prepared in the background is no compaction to wait for.
        other = agent.clear() if action == "clear" else AgentSession.new(runtime)
        other.on_event(later.append)
        left = await asyncio.to_thread(held.client_left.wait, 10)
        await asyncio.sleep(0.1)
        await other.prompt("hello")
        return before, first.path.read_bytes(), left, other

    try:
        before, after, left, other = asyncio.run(scenario())
        new = runtime.current_session
    finally:
        runtime.close()
    assert left  # the background fork was cancelled: its connection closed
    assert after == before  # nothing written to the session left
    assert not any(isinstance(r, CompactionRecord) for r in read_transcript(first.path).records)
    # The new session saw none of it.
    assert not any(isinstance(e, SummaryPrepared) for e in later)
    assert new is not None and new.id != first.id
    assert not any(isinstance(r, CompactionRecord) for r in read_transcript(new.path).records)
    assert other.usage.compactions == 0
