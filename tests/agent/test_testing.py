"""cairn.testing's scripted provider drives the real agent loop, fast, without a socket."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from cairn.agent.events import Event, MessageUpdated, StatusChange, ToolFinished, ToolStarted
from cairn.agent.loop import run_turn
from cairn.agent.runtime import Runtime
from cairn.agent.settings import Settings
from cairn.messages import find_orphans
from cairn.provider import ContextLimitError, ModelConfig
from cairn.testing import Answer, ScriptedProvider


def runtime(tmp_path: Path, provider: ScriptedProvider, window: int = 32_768) -> Runtime:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    (workspace / "notes.txt").write_text("".join(f"note {i}\n" for i in range(200)))
    model = ModelConfig(model="scripted", context_window=window)
    return Runtime(workspace, model, provider, settings=Settings(), home=tmp_path / "home")


def test_a_tool_round_then_an_answer(tmp_path: Path) -> None:
    provider = ScriptedProvider(
        Answer(calls=[("read_file", json.dumps({"path": "notes.txt"}))]),
        Answer("The notes count to 199."),
    )
    rt = runtime(tmp_path, provider)
    session = rt.new_session()
    seen: list[Event] = []
    session.events.on(seen.append)
    result = asyncio.run(run_turn(session, "how far do the notes go?"))
    rt.close()
    assert result.text == "The notes count to 199." and result.requests == 2
    # The second request carries the tool result, paired with its call.
    second = provider.requests[1].messages
    tool = next(m for m in second if m["role"] == "tool")
    assert "note 199" in str(tool["content"])
    assert not find_orphans(session.api_messages)
    kinds = [type(e) for e in seen]
    assert ToolStarted in kinds and ToolFinished in kinds and MessageUpdated in kinds
    statuses = [e.status for e in seen if isinstance(e, StatusChange)]
    assert statuses == ["streaming", "tools", "streaming", "idle"]


def test_a_context_limit_error_compacts_once_and_replays(tmp_path: Path) -> None:
    read = Answer(calls=[("read_file", json.dumps({"path": "notes.txt"}))])
    provider = ScriptedProvider(
        read,
        read,
        read,
        Answer(error=ContextLimitError("maximum context length exceeded")),
        # The compaction fork comes first, then the replayed request.
        Answer("<summary>\n## Objective and constraints\nRead the notes.\n</summary>"),
        Answer("Done after the compaction."),
    )
    rt = runtime(tmp_path, provider)
    session = rt.new_session()
    result = asyncio.run(run_turn(session, "read the notes three times"))
    rt.close()
    assert result.text == "Done after the compaction."
    assert session.pipeline.epoch == 1
    assert not find_orphans(session.api_messages)
    fork, replayed = provider.requests[4], provider.requests[5]
    assert "TEXT ONLY" in str(fork.messages[-1]["content"])
    # The replayed request is the compacted context: a compact block comes first.
    assert "continued from a previous conversation" in str(replayed.messages[1]["content"])
