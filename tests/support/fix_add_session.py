"""A long coding session through the real agent, for the fork and cache tests.

``play(tmp_path, server, api)``: the agent surveys six modules and a build
log, then fixes ``add()`` in ``calc.py`` — reads, commands, snips, a handoff
and several LLM compactions in a 14,336-token window, every fork answered
with ``SUMMARY`` — against the local server speaking ``api``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from cairn.agent.loop import run_turn
from cairn.agent.runtime import Runtime, Session
from cairn.agent.settings import Settings
from cairn.context import CompactionConfig
from cairn.provider import ModelConfig, open_provider
from cairn.wire_apis import WireAPI
from support.openai_server import OpenAIServer, Reply, ToolCallSpec

SUMMARY = (
    "<summary>\n## Objective and constraints\nFix add() in calc.py.\n"
    "## Exact next action\nRun python check.py.\n</summary>"
)
#: Small enough for several compactions, big enough that a fork (the request past
#: the line + the instruction) fits the budget with the margin on its estimated part.
WINDOW = 14_336


def is_fork(body: dict[str, Any]) -> bool:
    """Whether a request (in chat form) is a compaction fork: its instruction is last."""
    last = body["messages"][-1]
    return last["role"] == "user" and "TEXT ONLY" in str(last.get("content"))


def call(name: str, **args: Any) -> Reply:
    return Reply(tool_calls=[ToolCallSpec(name, json.dumps(args))])


def play(
    tmp_path: Path,
    server: OpenAIServer,
    api: WireAPI | None = None,
    compaction: CompactionConfig | None = None,
) -> Session:
    """Run the session on ``api`` (default ``server.api``) to its answer; the session."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    for n in range(6):
        lines = "".join(f"module {n} line {i}: value = compute({i})\n" for i in range(45))
        (workspace / f"m{n}.py").write_text(lines)
    (workspace / "log.txt").write_text("".join(f"build step {i} ok\n" for i in range(300)))
    plan = [
        *(call("read_file", path=f"m{n % 6}.py") for n in range(10)),
        *(call("bash", command="cat log.txt") for _ in range(6)),
        *(call("read_file", path=f"m{n % 6}.py") for n in range(10)),
        call("edit_file", path="calc.py", old_string="a - b", new_string="a + b"),
        Reply(text="Fixed add()."),
    ]

    def model(body: dict[str, Any]) -> Reply:
        return Reply(text=SUMMARY) if is_fork(body) else (plan.pop(0) if plan else Reply("ok"))

    server.respond_with(model)
    config = ModelConfig(
        model="m", base_url=server.base_url, context_window=WINDOW, api=api or server.api
    )
    runtime = Runtime(
        workspace,
        config,
        open_provider(config),
        settings=Settings(compaction=compaction or CompactionConfig()),
        home=tmp_path / "home",
        permission_mode="bypass",
    )
    session = runtime.new_session()
    result = asyncio.run(run_turn(session, "add() in calc.py is wrong; survey and fix it"))
    runtime.close()
    assert result.text == "Fixed add()."
    return session
