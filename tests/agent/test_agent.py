"""The agent runtime end to end against a real local OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cairn.agent.commands import parse_command, run_command
from cairn.agent.events import CompactBlockAdded, Event, MessageAdded, Notice, StatusChange
from cairn.agent.loop import INTERRUPTED, run_turn
from cairn.agent.runtime import Runtime, Session
from cairn.agent.settings import Settings
from cairn.agent.tools.task import next_task_id
from cairn.context import CompactionConfig
from cairn.context.budget import handoff_line
from cairn.messages import KIND_COMPACT_SUMMARY, KIND_HANDOFF, find_orphans
from cairn.provider import ModelConfig
from cairn.provider.factory import open_provider
from cairn.store import CompactionRecord, MessageRecord, Record, read_transcript
from cairn.wire_apis import BASE_URL_ENV
from support.cli_run import cairn_p
from support.openai_server import (  # noqa: F401  (the fixture registers itself by import)
    OpenAIServer,
    Reply,
    ToolCallSpec,
    UsageSpec,
    every_api_server_fixture,
)

SUMMARY = (
    "<summary>\n## Objective and constraints\nFix add() in calc.py.\n"
    "## Exact next action\nRun python check.py.\n</summary>"
)
FORK_MARK = "Respond with TEXT ONLY"
#: Small enough that the session crosses the handoff and compaction lines twice.
WINDOW = 12_288


def is_fork(body: dict[str, Any]) -> bool:
    last = body["messages"][-1]
    return last["role"] == "user" and FORK_MARK in str(last.get("content"))


class ScriptedModel:
    """Answers compaction forks with a summary and plays the plan for everything else."""

    def __init__(self, plan: list[Reply]) -> None:
        self.plan = plan
        self.forks = 0
        self.calls = 0

    def __call__(self, body: dict[str, Any]) -> Reply:
        if is_fork(body):
            self.forks += 1
            return Reply(text=SUMMARY)
        self.calls += 1
        return self.plan.pop(0) if self.plan else Reply(text="Done.")


def cli_env(server: OpenAIServer, tmp_path: Path) -> dict[str, str]:
    """``cairn -p``'s environment for ``server.api``: the SDK's own base-URL variable."""
    return {
        "CAIRN_MODEL": "test-model",
        "CAIRN_API": server.api,
        BASE_URL_ENV[server.api]: server.base_url,
        "CAIRN_HOME": str(tmp_path / "home"),
    }


def call(name: str, **args: Any) -> Reply:
    return Reply(tool_calls=[ToolCallSpec(name, json.dumps(args))])


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "project"
    ws.mkdir()
    (ws / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (ws / "check.py").write_text("from calc import add\nassert add(2, 3) == 5\nprint('OK')\n")
    (ws / "big.txt").write_text("".join(f"log line {i}: nothing to see here\n" for i in range(400)))
    return ws


def runtime(
    workspace: Path, server: OpenAIServer, tmp_path: Path, *, window: int = 16_384
) -> Runtime:
    model = ModelConfig(
        model="test-model", base_url=server.base_url, context_window=window, api=server.api
    )
    settings = Settings(compaction=CompactionConfig())
    return Runtime(
        workspace,
        model,
        open_provider(model),
        settings=settings,
        home=tmp_path / "home",
        permission_mode="bypass",
    )


def record(session: Session) -> list[Event]:
    events: list[Event] = []
    session.events.on(events.append)
    return events


def transcript(session: Session) -> list[Record]:
    return read_transcript(session.path).records


def test_a_coding_session_crosses_the_lines_twice_and_resumes_exactly(
    workspace: Path, tmp_path: Path, openai_server: OpenAIServer
) -> None:
    plan = [
        call("read_file", path="calc.py"),
        # Outputs well under the handoff band's width (10 % of a 6,144 budget),
        # so that the context steps into the band before it reaches the line.
        *(call("bash", command=f"sed -n '{n % 9 * 40 + 1},+39p' big.txt") for n in range(30)),
        call("edit_file", path="calc.py", old_string="return a - b", new_string="return a + b"),
        call("bash", command="python check.py"),
        Reply(text="Fixed add(): it subtracted. check.py prints OK."),
    ]
    model = ScriptedModel(plan)
    openai_server.respond_with(model)
    rt = runtime(workspace, openai_server, tmp_path, window=WINDOW)
    session = rt.new_session()
    events = record(session)
    result = asyncio.run(run_turn(session, "add() in calc.py is wrong; fix it and run check.py"))

    assert result.text.startswith("Fixed add()")
    assert (workspace / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    records = transcript(session)
    compactions = [r for r in records if isinstance(r, CompactionRecord)]
    assert len(compactions) >= 2 and model.forks >= 2
    assert any(r.message.meta.kind == KIND_HANDOFF for r in records if hasattr(r, "message"))
    ids = [r.message.id for r in records if isinstance(r, MessageRecord)]
    assert len(ids) == len(set(ids))
    # Every request went out with whole rounds.
    for body in openai_server.bodies:
        tool_ids = {m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"}
        call_ids = {c["id"] for m in body["messages"] for c in m.get("tool_calls") or []}
        assert tool_ids <= call_ids
    # Handoff reminders are never published; compact blocks are, in order.
    assert not any(isinstance(e, MessageAdded) and e.message.meta.hidden for e in events)
    assert sum(isinstance(e, CompactBlockAdded) for e in events) == len(compactions)

    api_before = list(session.api_messages)
    ui_before = session.ui_messages()
    rt.close()
    again = runtime(workspace, openai_server, tmp_path, window=WINDOW).resume(session.id)
    assert list(again.api_messages) == api_before
    ui = again.ui_messages()
    assert ui == ui_before
    blocks = [m for m in ui if m.meta.kind == KIND_COMPACT_SUMMARY]
    assert [b.id for b in blocks] == [c.id for c in compactions]
    assert ui[0].text.startswith("add() in calc.py is wrong")


def held(server: OpenAIServer, predicate: Callable[[dict[str, Any]], bool]) -> threading.Event:
    """Stall the first request matching ``predicate`` until the returned event is set."""
    gate = threading.Event()
    used: list[bool] = []

    def responder(body: dict[str, Any]) -> Reply:
        if predicate(body) and not used:
            used.append(True)
            return Reply(text=SUMMARY if is_fork(body) else "slow answer", hold=gate)
        return Reply(text=SUMMARY if is_fork(body) else "ok")

    server.respond_with(responder)
    return gate


def warm_up(session: Session, server: OpenAIServer, turns: int = 4) -> None:
    """Earlier exchanges, so that a compaction has history to summarize and shrink."""
    answer = "calc.py defines add(), which subtracts where it should add. " * 20
    server.respond_with(lambda body: Reply(text=SUMMARY if is_fork(body) else answer))
    for n in range(turns):
        asyncio.run(run_turn(session, f"question {n} about calc.py"))


async def wait_requests(server: OpenAIServer, count: int) -> None:
    for _ in range(500):
        if len(server.requests) >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the server never got the request")


def test_manual_compact_while_idle_streaming_and_twice(
    workspace: Path, tmp_path: Path, openai_server: OpenAIServer
) -> None:
    session = runtime(workspace, openai_server, tmp_path).new_session()
    warm_up(session, openai_server)
    gate = held(openai_server, lambda body: not is_fork(body))
    rt = session.runtime

    async def scenario() -> list[str]:
        turn = asyncio.create_task(run_turn(session, "explain calc.py"))
        await wait_requests(openai_server, len(openai_server.requests) + 1)
        before = session.path.read_bytes()
        during = await run_command(rt, "/compact", "")
        assert session.path.read_bytes() == before  # ignored: nothing changed
        gate.set()
        await turn
        # Idle: it works whatever the token count, and the instructions reach the fork.
        first = asyncio.create_task(run_command(rt, "/compact", "focus on the API design"))
        second = asyncio.create_task(run_command(rt, "/compact", ""))
        results = await asyncio.gather(first, second)
        return [during.text, *(r.text for r in results)]

    during, first, second = asyncio.run(scenario())
    assert "ignored" in during
    assert first.startswith("compacted (llm)")
    assert "skipped" in second
    forks = [b for b in openai_server.bodies if is_fork(b)]
    assert len(forks) == 1 and "focus on the API design" in forks[0]["messages"][-1]["content"]


@pytest.mark.parametrize("how", ["/clear", "/resume"])
def test_switching_sessions_during_a_held_compaction_writes_nothing(
    workspace: Path, tmp_path: Path, openai_server: OpenAIServer, how: str
) -> None:
    rt = runtime(workspace, openai_server, tmp_path)
    other = rt.new_session()
    openai_server.respond_with(lambda body: Reply(text="ok"))
    asyncio.run(run_turn(other, "first session"))
    session = rt.new_session()
    warm_up(session, openai_server)
    gate = held(openai_server, is_fork)
    files = {p: p.read_bytes() for p in (other.path, session.path)}
    statuses: list[Event] = record(session)

    async def scenario() -> None:
        compaction = asyncio.create_task(run_command(rt, "/compact", ""))
        await wait_requests(openai_server, len(openai_server.requests) + 1)
        await run_command(rt, *(("/clear", "") if how == "/clear" else ("/resume", other.id)))
        gate.set()
        await compaction

    asyncio.run(scenario())
    for path, content in files.items():
        assert path.read_bytes() == content
    assert session.status == "idle" and not session.pipeline.compacting
    changes = [e for e in statuses if not isinstance(e, StatusChange)]
    assert changes[-1].is_compacting is False  # type: ignore[union-attr]
    assert not any(isinstance(e, CompactBlockAdded) for e in statuses)


def test_abort_mid_stream_and_mid_tool_leaves_whole_rounds(
    workspace: Path, tmp_path: Path, openai_server: OpenAIServer
) -> None:
    session = runtime(workspace, openai_server, tmp_path).new_session()
    openai_server.respond_with(
        lambda body: (
            call("bash", command="sleep 30") if len(body["messages"]) < 4 else Reply(text="x")
        )
    )

    async def mid_tool() -> None:
        turn = asyncio.create_task(run_turn(session, "run the slow thing"))
        for _ in range(500):
            if any(m.role == "assistant" and m.tool_calls for m in session.api_messages):
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        session.abort()
        result = await turn
        assert result.aborted

    asyncio.run(mid_tool())
    api = read_transcript(session.path).api().messages
    assert not find_orphans(api)
    assert any(INTERRUPTED in m.text or "interrupted" in m.text for m in api if m.role == "tool")

    gate = held(openai_server, lambda body: True)

    async def mid_stream() -> None:
        turn = asyncio.create_task(run_turn(session, "and now talk slowly"))
        await wait_requests(openai_server, len(openai_server.requests) + 1)
        session.abort()
        gate.set()
        await turn

    asyncio.run(mid_stream())
    api = read_transcript(session.path).api().messages
    assert not find_orphans(api)


def test_status_and_help_commands(
    workspace: Path, tmp_path: Path, openai_server: OpenAIServer
) -> None:
    rt = runtime(workspace, openai_server, tmp_path)
    session = rt.new_session()
    status = asyncio.run(run_command(rt, "/status", "")).text
    assert session.id in status and "window       16,384" in status and "compactions  0" in status
    assert "last total   none reported" in status
    budget = session.pipeline.input_budget
    assert budget
    handoff, compact = handoff_line(budget, 0.70), math.ceil(0.80 * budget)
    assert f"thresholds   handoff above {handoff:,}, compaction at {compact:,}" in status
    openai_server.script(Reply(text="Hi.", usage=UsageSpec(900, 34, total_tokens=934)))
    asyncio.run(run_turn(session, "hello"))
    status = asyncio.run(run_command(rt, "/status", "")).text
    assert "last total   934 (the provider's total_tokens)" in status
    assert "/compact" in asyncio.run(run_command(rt, "/help", "")).text
    assert parse_command("/compact focus here") == ("/compact", "focus here")
    assert parse_command("/unknown") is None and parse_command("plain text") is None
    listed = asyncio.run(run_command(rt, "/resume", "")).text
    assert "no sessions" in listed or session.id in listed


def test_background_task_status_survives_compaction(
    workspace: Path, tmp_path: Path, openai_server: OpenAIServer
) -> None:
    def responder(body: dict[str, Any]) -> Reply:
        if is_fork(body):
            return Reply(text=SUMMARY)
        system = body["messages"][0]["content"]
        if "subagent" in system:
            return Reply(text="The tests live in check.py; add() is wrong.")
        if body["messages"][-1]["content"] == "survey the project in the background":
            return call("task", description="survey the tests", prompt="Where are the tests?")
        return Reply(text="Started the survey.")

    rt = runtime(workspace, openai_server, tmp_path)
    session = rt.new_session()
    warm_up(session, openai_server)
    openai_server.respond_with(responder)

    async def scenario() -> None:
        await run_turn(session, "survey the project in the background")
        for _ in range(500):
            task = next(iter(session.state.tasks.values()), None)
            if task and task.status != "running":
                break
            await asyncio.sleep(0.01)
        await run_command(rt, "/compact", "")

    asyncio.run(scenario())
    task = next(iter(session.state.tasks.values()))
    assert task.status.startswith("completed")
    restoration = next(m for m in session.api_messages if m.meta.kind == "restoration")
    assert "survey the tests" in restoration.text and "completed" in restoration.text


# ---------------------------------------------------------------------------
# cairn -p as a real subprocess


def test_cairn_p_runs_a_task_to_the_end(
    workspace: Path, tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(
        lambda body: (
            call("edit_file", path="calc.py", old_string="a - b", new_string="a + b")
            if len(body["messages"]) == 2
            else Reply(text="Fixed it.")
        )
    )
    env = cli_env(openai_server, tmp_path)
    done = cairn_p("-p", "fix add()", cwd=workspace, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Fixed it."
    assert "a + b" in (workspace / "calc.py").read_text()

    streamed = cairn_p(
        "-p", "--output-format", "stream-json", cwd=workspace, env=env, stdin="hello"
    )
    assert streamed.returncode == 0, streamed.stderr
    kinds = [json.loads(line)["type"] for line in streamed.stdout.splitlines()]
    assert "messageAdded" in kinds and kinds[-1] == "result"

    as_json = cairn_p("-p", "hi", "--output-format", "json", cwd=workspace, env=env)
    assert json.loads(as_json.stdout)["result"] == "Fixed it."


def test_cairn_p_errors(workspace: Path, tmp_path: Path, openai_server: OpenAIServer) -> None:
    no_model = cairn_p("-p", "hi", cwd=workspace, env={"CAIRN_HOME": str(tmp_path / "home")})
    assert no_model.returncode == 2 and "CAIRN_MODEL" in no_model.stderr
    (workspace / ".cairn").mkdir()
    (workspace / ".cairn" / "settings.json").write_text('{"compaction": {"keep_rounds": -1}}')
    bad = cairn_p(
        "-p", "hi", cwd=workspace, env={"CAIRN_MODEL": "m", "CAIRN_HOME": str(tmp_path / "home")}
    )
    assert bad.returncode == 2 and "keep_rounds" in bad.stderr and "Traceback" not in bad.stderr
    (workspace / ".cairn" / "settings.json").unlink()
    openai_server.respond_with(lambda body: Reply.http_error(500, "the model is down"))
    env = cli_env(openai_server, tmp_path)
    down = cairn_p("-p", "hi", cwd=workspace, env=env)
    assert down.returncode == 1 and "the model is down" in down.stderr


def test_latest_total_tokens_shows_total_tokens_only(
    workspace: Path, tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """总 token 展示 #4: latestTotalTokens uses total_tokens; cache fields are never added."""
    from cairn.agent.events import UsageUpdate

    usage = UsageSpec(
        1_000, 10, 1_010, cached_tokens=900, extra={"cache_read_input_tokens": 50_000}
    )
    openai_server.respond_with(lambda body: Reply(text="hello", usage=usage))
    session = runtime(workspace, openai_server, tmp_path).new_session()
    events = record(session)
    asyncio.run(run_turn(session, "hi"))
    assert [e.latest_total_tokens for e in events if isinstance(e, UsageUpdate)] == [1_010]


def test_the_loop_checks_before_every_request_including_after_tool_results(
    workspace: Path, tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """Within one turn, a read that pushes the context over the line is compacted before
    the very next request, not at the next user turn (moved from test_pipeline: the
    loop, not the test, must call the check)."""
    model = ScriptedModel([call("read_file", path="big.txt") for _ in range(8)])
    openai_server.respond_with(model)
    rt = runtime(workspace, openai_server, tmp_path, window=WINDOW)
    session = rt.new_session()
    checks: list[int] = []
    check = session.pipeline.check_and_compact

    async def counted(*args: Any, **kwargs: Any) -> Any:
        checks.append(len(openai_server.requests))
        return await check(*args, **kwargs)

    session.pipeline.check_and_compact = counted  # type: ignore[method-assign]
    result = asyncio.run(run_turn(session, "read big.txt until you know it"))
    rt.close()
    assert result.text == "Done."
    bodies = [r.body for r in openai_server.requests]
    main = [i for i, b in enumerate(bodies) if not is_fork(b)]
    # One check before each main request, none skipped: the n-th check ran when n main
    # requests (and the forks of earlier compactions) had gone out.
    assert len(checks) == len(main) == 9
    assert [sum(1 for j in main if j < n) for n in checks] == list(range(9))
    # The turn had a single user message, so any compact block the server saw came from
    # a check between tool results.
    compacted = [
        i
        for i in main
        if any("continued from a previous" in str(m.get("content")) for m in bodies[i]["messages"])
    ]
    assert compacted and model.forks >= 1


def test_the_subagent_runs_the_same_loop_with_reactive_recovery_and_events(
    workspace: Path, tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """Regression: tools/task.py ran its own copy of the loop, without reactive recovery,
    abort or events; now a context-limit error in the subagent compacts once and replays,
    and its notices reach the parent session."""
    subagent_requests: list[int] = []

    def responder(body: dict[str, Any]) -> Reply:
        if is_fork(body):
            return Reply(text=SUMMARY)
        if "You are a Cairn subagent" in str(body["messages"][0]["content"]):
            subagent_requests.append(len(body["messages"]))
            if len(subagent_requests) <= 4:
                return call("read_file", path="big.txt")
            if len(subagent_requests) == 5:
                return Reply.http_error(
                    400, "maximum context length exceeded", code="context_length_exceeded"
                )
            return Reply(text="The log is uneventful.")
        if body["messages"][-1]["content"] == "read the log in a subagent":
            return call(
                "task", description="read the log", prompt="Read big.txt.", run_in_background=False
            )
        return Reply(text="Done.")

    rt = runtime(workspace, openai_server, tmp_path)
    session = rt.new_session()
    openai_server.respond_with(responder)
    events = record(session)
    result = asyncio.run(run_turn(session, "read the log in a subagent"))
    rt.close()
    assert result.text == "Done."
    task = next(iter(session.state.tasks.values()))
    assert task.status == "completed: The log is uneventful.", task.status
    # The rejected request was replayed after one reactive compaction.
    assert len(subagent_requests) == 6 and subagent_requests[5] < subagent_requests[4]
    transcript = session.session_dir / "subagents" / f"{task.id}.jsonl"
    records = read_transcript(transcript).records
    assert sum(isinstance(r, CompactionRecord) and r.trigger == "reactive" for r in records) == 1
    notices = [e.text for e in events if isinstance(e, Notice)]
    assert all(n.startswith(f"{task.id}") for n in notices if "task_" in n)


def test_task_ids_follow_the_sessions_own_tasks() -> None:
    assert next_task_id([]) == "task_1"
    assert next_task_id(["bash_4", "task_1", "task_3"]) == "task_4"
    # Only the task tool's own ids count, not look-alikes.
    assert next_task_id(["task_x", "task_0", "task_01", "bash_9"]) == "task_1"


def test_a_resumed_session_numbers_its_next_task_after_the_last(
    workspace: Path, tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """Regression: task ids restarted at task_1 in every process, so the next process
    resuming a session gave its task the id of the session's first one, whose transcript
    already exists ("already exists": the task failed). Two real ``cairn -p`` processes."""

    def responder(body: dict[str, Any]) -> Reply:
        if "You are a Cairn subagent" in str(body["messages"][0]["content"]):
            return Reply(text="Surveyed.")
        if body["messages"][-1]["role"] == "user":
            return call("task", description="survey", prompt="Survey.", run_in_background=False)
        return Reply(text="Done.")

    openai_server.respond_with(responder)
    env = cli_env(openai_server, tmp_path)
    first = cairn_p("-p", "survey the code", "--permission-mode", "bypass", cwd=workspace, env=env)
    assert first.returncode == 0, first.stderr
    [path] = (tmp_path / "home" / "projects").glob("*/*.jsonl")
    resume = ("--resume", path.stem, "--permission-mode", "bypass")
    again = cairn_p("-p", "survey it again", *resume, cwd=workspace, env=env)
    assert again.returncode == 0, again.stderr
    folder = path.with_suffix("") / "subagents"
    assert sorted(p.name for p in folder.glob("*.jsonl")) == ["task_1.jsonl", "task_2.jsonl"]
    results = [
        r.message.text
        for r in read_transcript(path).records
        if isinstance(r, MessageRecord) and r.message.role == "tool"
    ]
    assert len(results) == 2 and all("Surveyed." in text for text in results), results
