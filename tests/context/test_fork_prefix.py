"""The compaction fork extends the request the provider cached, byte for byte (issue 11).

A long agent session on the local SSE server — reads, commands, edits, with
snips, a handoff and several compactions — and the recorded JSON bodies:
every fork's messages begin with exactly the messages of the main request
before it, and every other field of the body is the same.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from cairn.agent.loop import run_turn
from cairn.agent.session import Runtime
from cairn.agent.settings import Settings
from cairn.provider import ModelConfig
from cairn.provider.factory import open_provider
from cairn.store import CompactionRecord, ContextEditRecord, HandoffRecord, read_transcript
from openai_server import (  # noqa: F401  (the fixture registers itself by import)
    OpenAIServer,
    Reply,
    ToolCallSpec,
    every_api_server_fixture,
)

SUMMARY = (
    "<summary>\n## Objective and constraints\nFix add() in calc.py.\n"
    "## Exact next action\nRun python check.py.\n</summary>"
)


def is_fork(body: dict[str, Any]) -> bool:
    last = body["messages"][-1]
    return last["role"] == "user" and "TEXT ONLY" in str(last.get("content"))


def call(name: str, **args: Any) -> Reply:
    return Reply(tool_calls=[ToolCallSpec(name, json.dumps(args))])


def test_every_fork_extends_its_main_request_byte_for_byte(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
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

    openai_server.respond_with(model)
    # Small enough for several compactions, big enough that a fork (the request past the
    # line + the instruction) fits the budget with the margin on its estimated part.
    config = ModelConfig(
        model="m",
        base_url=openai_server.base_url,
        context_window=14_336,
        api=openai_server.api,
    )
    runtime = Runtime(
        workspace,
        config,
        open_provider(config),
        settings=Settings(),
        home=tmp_path / "home",
        permission_mode="bypass",
    )
    session = runtime.new_session()
    result = asyncio.run(run_turn(session, "add() in calc.py is wrong; survey and fix it"))
    runtime.close()
    assert result.text == "Fixed add()."

    records = read_transcript(session.path).records
    assert sum(isinstance(r, CompactionRecord) for r in records) >= 2
    assert any(isinstance(r, ContextEditRecord) for r in records)  # snips happened
    assert any(isinstance(r, HandoffRecord) for r in records)  # and a handoff
    bodies = openai_server.bodies
    forks = [i for i, b in enumerate(bodies) if is_fork(b)]
    assert len(forks) >= 2
    # Each fork answered at once: the k-th fork made the k-th compaction.
    compactions = [r for r in records if isinstance(r, CompactionRecord)]
    assert [r.strategy for r in compactions] == ["llm"] * len(forks)
    extended = 0
    for i, record in zip(forks, compactions, strict=True):
        main = next(b for b in reversed(bodies[:i]) if not is_fork(b))
        fork = bodies[i]
        sent = main["messages"]
        # Byte for byte, unless it would not fit the budget: then the record
        # names what was left out (issue 25 item 6), and nothing else differs.
        same = json.dumps(fork["messages"][: len(sent)]) == json.dumps(sent)
        assert same == (not record.fork_elisions), (i, record.fork_elisions)
        extended += same
        assert {k: v for k, v in fork.items() if k != "messages"} == {
            k: v for k, v in main.items() if k != "messages"
        }
        handoffs = [m for m in sent if "token-budget-handoff" in str(m.get("content"))]
        assert all(m in fork["messages"] for m in handoffs)
    assert extended >= 1
