"""The everyday gestures through ``AgentSession`` (issue 29): ``@path`` mentions,
``!command``, prompts queued while the agent works, and in-session modes."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from cairn import AgentSession
from cairn.agent.events import (
    Event,
    MessageAdded,
    ModeChange,
    Notice,
    PermissionRequested,
    QueueChange,
)
from cairn.agent.mentions import MAX_MENTIONS, complete_paths, find_mentions
from cairn.agent.runtime import Runtime
from cairn.agent.settings import Settings
from cairn.agent.tools.base import PermissionMode
from cairn.provider import ModelConfig, OpenAIProvider
from cairn.store import MessageRecord, read_transcript
from support.openai_server import (
    OpenAIServer,
    Reply,
    ToolCallSpec,
)

SUMMARY = "<summary>\n## Objective and constraints\nRead the notes.\n</summary>"


def runtime(
    tmp_path: Path, server: OpenAIServer, *, mode: PermissionMode = "ask", window: int = 32_768
) -> Runtime:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    model = ModelConfig(model="test-model", base_url=server.base_url, context_window=window)
    return Runtime(
        workspace,
        model,
        OpenAIProvider(model),
        settings=Settings(),
        home=tmp_path / "home",
        permission_mode=mode,
        answers_permissions=True,
    )


def is_fork(body: dict[str, Any]) -> bool:
    last = body["messages"][-1]
    return last["role"] == "user" and "TEXT ONLY" in str(last.get("content"))


def contents(body: dict[str, Any]) -> list[str]:
    return [str(m.get("content") or "") for m in body["messages"]]


async def _until(condition: Any) -> None:
    for _ in range(2_000):  # a bound on polls, not a time limit
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


# -- @path -----------------------------------------------------------------


def test_mentions_name_existing_workspace_paths_only(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "app.py").write_text("print(1)\n")
    (ws / "notes.txt").write_text("n\n")
    (tmp_path / "secret.txt").write_text("s\n")
    text = (
        "see @notes.txt, @src/ and @src/app.py. mail me@example.com, not @missing.txt "
        "nor @../secret.txt nor @/etc/passwd; again @notes.txt"
    )
    found = find_mentions(text, ws)
    assert [(m.raw, m.is_dir) for m in found] == [
        ("notes.txt", False),
        ("src/", True),
        ("src/app.py", False),
    ]
    many = " ".join(f"@f{n}.txt" for n in range(MAX_MENTIONS + 3))
    for n in range(MAX_MENTIONS + 3):
        (ws / f"f{n}.txt").write_text("x")
    assert len(find_mentions(many, ws)) == MAX_MENTIONS


def test_completion_lists_one_folder_folders_first_and_nothing_outside(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    for folder in ("src/cairn", "src/tests", ".git", "node_modules"):
        (ws / folder).mkdir(parents=True)
    (ws / "src" / "setup.py").write_text("")
    (ws / "README.md").write_text("")
    (ws / ".env").write_text("")
    assert complete_paths(ws, "") == ["src/", "README.md"]
    assert complete_paths(ws, "src/") == ["src/cairn/", "src/tests/", "src/setup.py"]
    assert complete_paths(ws, "src/se") == ["src/setup.py"]
    assert complete_paths(ws, ".e") == [".env"]
    assert complete_paths(ws, "../") == []
    assert complete_paths(ws, "/etc/") == []


def test_a_mentioned_file_and_folder_are_attached_as_the_host_s_reads(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(lambda body: Reply(text="It adds."))
    rt = runtime(tmp_path, openai_server)
    (rt.workspace / "src").mkdir()
    (rt.workspace / "src" / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    agent = AgentSession.new(rt)
    seen: list[Event] = []
    rt.current.events.on(seen.append)

    asyncio.run(agent.prompt("what does @src/calc.py do? the folder: @src"))
    # Remembered for restoration after a compaction, like the model's own read_file.
    reads = [r.path.name for r in rt.current.state.reads]
    rt.close()
    assert reads == ["calc.py"]

    body = openai_server.bodies[-1]
    roles = [m["role"] for m in body["messages"]]
    assert roles[-4:] == ["user", "assistant", "tool", "tool"]
    call = body["messages"][-3]
    assert [c["function"]["name"] for c in call["tool_calls"]] == ["read_file", "list_files"]
    read, listing = body["messages"][-2]["content"], body["messages"][-1]["content"]
    assert "return a + b" in read and "calc.py" in listing
    # Persisted before the request, whole: the call and its results.
    records = [
        r.message
        for r in read_transcript(agent.transcript_path).records
        if isinstance(r, MessageRecord)
    ]
    assert [m.role for m in records][:4] == ["user", "assistant", "tool", "tool"]
    assert records[1].meta.synthetic


def test_a_mentioned_file_over_the_tool_result_budget_is_cut_like_a_tool_result(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(lambda body: Reply(text="A long log."))
    rt = runtime(tmp_path, openai_server, window=16_384)
    (rt.workspace / "big.log").write_text("".join(f"entry {n}: all fine\n" for n in range(9_000)))
    agent = AgentSession.new(rt)
    asyncio.run(agent.prompt("summarize @big.log"))
    rt.close()
    attached = openai_server.bodies[-1]["messages"][-1]["content"]
    assert len(attached) < 40_000
    assert "omitted" in attached


# -- !command --------------------------------------------------------------


def test_a_bang_command_runs_in_the_workspace_and_the_model_reads_it_next_turn(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(lambda body: Reply(text="Seen."))
    rt = runtime(tmp_path, openai_server, mode="bypass")
    (rt.workspace / "marker.txt").write_text("here")
    agent = AgentSession.new(rt)

    async def scenario() -> Any:
        ran = await agent.send("!ls && echo done")
        await agent.send("what did the command show?")
        return ran

    ran = asyncio.run(scenario())
    rt.close()
    assert ran.shell is not None and ran.shell.ok
    assert "marker.txt" in ran.shell.output and "done" in ran.shell.output
    assert len(openai_server.bodies) == 1  # the command itself asked no model
    shown = contents(openai_server.bodies[0])
    assert any("!ls && echo done" in c and "marker.txt" in c for c in shown)
    assert shown[-1] == "what did the command show?"
    ui = agent.ui_messages()
    assert any("marker.txt" in m.text for m in ui)


def test_a_bang_command_asks_permission_as_bash_does_and_a_refusal_runs_nothing(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    rt = runtime(tmp_path, openai_server, mode="ask")
    agent = AgentSession.new(rt)
    asked: list[PermissionRequested] = []

    def refuse(event: Event) -> None:
        if isinstance(event, PermissionRequested):
            asked.append(event)
            agent.answer(event.id, "reject")

    rt.current.events.on(refuse)
    outcome = asyncio.run(agent.send("!touch made.txt"))
    rt.close()
    assert [e.tool for e in asked] == ["bash"]
    assert outcome.shell is not None and outcome.shell.ok is False
    assert not (rt.workspace / "made.txt").exists()


# -- queued prompts --------------------------------------------------------


async def test_a_prompt_sent_while_the_agent_works_is_queued_editable_and_sent_when_the_turn_ends(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    release = threading.Event()
    first = Reply(text="First answer.", hold=release, hold_after=2)
    replies = [first, Reply(text="Second answer.")]
    openai_server.respond_with(lambda body: replies.pop(0))
    rt = runtime(tmp_path, openai_server)
    agent = AgentSession.new(rt)
    seen: list[Event] = []
    rt.current.events.on(seen.append)

    try:
        running = asyncio.create_task(agent.send("first"))
        await _until(lambda: first.started.is_set())
        queued = await agent.send("second, draft")
        dropped = await agent.send("third")
        assert queued.queued is not None and dropped.queued is not None
        assert agent.edit_queued(queued.queued.id, "second")
        assert agent.unqueue(dropped.queued.id) == dropped.queued
        release.set()
        done, _, _ = await running, queued, dropped
    finally:
        release.set()
        rt.close()
    assert done.turn is not None and done.turn.text == "Second answer."
    assert [contents(b)[-1] for b in openai_server.bodies] == ["first", "second"]
    queues = [[p.text for p in e.prompts] for e in seen if isinstance(e, QueueChange)]
    assert queues == [
        ["second, draft"],
        ["second, draft", "third"],
        ["second", "third"],
        ["second"],  # "third" withdrawn
        [],  # "second" sent
    ]
    assert agent.queued == ()


async def test_a_cancel_keeps_the_queue_for_the_user_to_edit(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    release = threading.Event()
    first = Reply(text="Long answer.", hold=release, hold_after=2)
    openai_server.respond_with(lambda body: first)
    rt = runtime(tmp_path, openai_server)
    agent = AgentSession.new(rt)
    seen: list[Event] = []
    rt.current.events.on(seen.append)

    try:
        running = asyncio.create_task(agent.send("first"))
        await _until(lambda: first.started.is_set())
        await agent.send("then this")
        agent.cancel()
        done = await asyncio.wait_for(running, 60)  # a bound: without the cancel it hangs
    finally:
        release.set()
        rt.close()
    assert done.turn is not None and done.turn.aborted
    assert len(openai_server.bodies) == 1  # the queued line was not sent
    assert [p.text for p in agent.queued] == ["then this"]
    assert agent.take_queued() == "then this" and agent.queued == ()
    cancels = [e for e in seen if isinstance(e, Notice) and e.code == "cancelled"]
    assert len(cancels) == 1


# -- modes -----------------------------------------------------------------


def test_shift_tab_cycles_the_modes_and_plan_mode_is_told_to_the_model(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    write = json.dumps({"path": "a.txt", "content": "A"})
    replies = [
        Reply(tool_calls=[ToolCallSpec("write_file", write)]),
        Reply(text="I will plan first."),
        Reply(text="Now I may edit."),
    ]
    openai_server.respond_with(lambda body: replies.pop(0))
    rt = runtime(tmp_path, openai_server, mode="ask")
    agent = AgentSession.new(rt)
    seen: list[Event] = []
    rt.current.events.on(seen.append)

    assert agent.mode == "ask"
    assert [agent.cycle_mode() for _ in range(3)] == ["accept-edits", "bypass", "plan"]
    asyncio.run(agent.prompt("change a.txt"))
    assert not (rt.workspace / "a.txt").exists()  # plan mode refused the write
    first = contents(openai_server.bodies[0])
    assert any("Plan mode is active" in c for c in first)
    assert agent.cycle_mode() == "ask"
    asyncio.run(agent.prompt("go ahead"))
    rt.close()
    last = contents(openai_server.bodies[-1])
    assert any("turned plan mode off" in c and "ask mode" in c for c in last)
    assert [e.mode for e in seen if isinstance(e, ModeChange)] == [
        "accept-edits",
        "bypass",
        "plan",
        "ask",
    ]
    # The reminders are the model's: no surface shows them.
    assert not any("Plan mode is active" in m.text for m in agent.ui_messages())
    with pytest.raises(ValueError, match="unknown mode"):
        agent.set_mode("yolo")  # type: ignore[arg-type]


def test_added_messages_are_published_in_order_for_a_mention(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(lambda body: Reply(text="ok"))
    rt = runtime(tmp_path, openai_server)
    (rt.workspace / "a.txt").write_text("alpha")
    agent = AgentSession.new(rt)
    seen: list[Event] = []
    rt.current.events.on(seen.append)
    asyncio.run(agent.prompt("read @a.txt"))
    rt.close()
    roles = [e.message.role for e in seen if isinstance(e, MessageAdded)]
    assert roles == ["user", "assistant", "tool", "assistant"]


async def test_a_mentioned_file_is_restored_after_a_compaction_like_a_read(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(
        lambda body: Reply(text=SUMMARY if is_fork(body) else "The rule is noted. " * 40)
    )
    rt = runtime(tmp_path, openai_server)
    (rt.workspace / "RULES.md").write_text("Rule 7: never push on Fridays.\n")
    agent = AgentSession.new(rt)

    await agent.prompt("follow @RULES.md")
    for n in range(3):
        await agent.prompt(f"step {n}")
    outcome = await agent.compact()

    context = list(rt.current.api_messages)
    rt.close()
    assert outcome.compaction is not None, outcome.text
    restored = [m for m in context if m.meta.kind == "restoration" and "RULES.md" in m.text]
    assert restored and "Rule 7: never push on Fridays." in restored[0].text


async def test_lines_queued_during_a_command_go_when_it_ends_and_a_queued_command_says_its_result(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(lambda body: Reply(text="Fine."))
    rt = runtime(tmp_path, openai_server, mode="bypass")
    agent = AgentSession.new(rt)
    seen: list[Event] = []
    rt.current.events.on(seen.append)

    running = asyncio.create_task(agent.send("!sleep 0.2; echo slept"))
    await _until(lambda: agent.busy)
    await agent.send("/status")
    await agent.send("and now?")
    ran = await running

    rt.close()
    assert ran.shell is not None and "slept" in ran.shell.output
    assert agent.queued == ()
    notices = [e.text for e in seen if isinstance(e, Notice)]
    assert any("window" in n for n in notices)  # /status, said as a notice
    assert contents(openai_server.bodies[-1])[-1] == "and now?"
