"""LLM compaction end to end, through a real OpenAI-compatible server on 127.0.0.1.

Each seed-004 acceptance scenario of the fork loop, extraction, breaker,
restoration, plan-mode, hooks and session-guard stories is a test named
after it (the story in the docstring).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import stat
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cairn.agent.hooks import HookRunner
from cairn.agent.settings import HooksSettings
from cairn.context import CompactionConfig, ContextPipeline, FixedContext
from cairn.context.hooks import CompactionBlockedError
from cairn.context.llm_summarizer import TOOL_REJECTION, LLMSummarizer
from cairn.context.pipeline import (
    CheckResult,
    CompactionFailedError,
    ContextWindowExceededError,
    RequestTooLargeError,
)
from cairn.context.restoration_source import BackgroundTask, FileRead, InvokedSkill, PlanState
from cairn.messages import (
    KIND_COMPACT_SUMMARY,
    KIND_PLAN_REMINDER,
    JSONObject,
    Message,
    ToolCall,
    Usage,
    assistant,
    system,
    tool_result,
    user,
)
from cairn.provider import (
    ContextLimitError,
    ModelConfig,
    TurnAccumulator,
    chat_request,
)
from cairn.provider.factory import open_provider
from cairn.store import CompactionRecord, ErrorRecord, read_transcript
from support.openai_server import (  # noqa: F401  (the fixture registers itself by import)
    OpenAIServer,
    Reply,
    ToolCallSpec,
    UsageSpec,
    every_api_server_fixture,
)
from support.recording_listener import Events

SUMMARY = (
    "<analysis>scratch: the user wants the CSV bug fixed</analysis>\n<summary>\n"
    "## Objective and constraints\nFix the CSV export; keep the public API.\n\n\n"
    "## Decisions and rationale\nEncode names as UTF-8.\n"
    "## Workspace mutations\nsrc/export.py edited.\n"
    "## Verification evidence\npytest: 12 passed.\n"
    "## Active tasks and background work\n(none)\n"
    "## Open risks or blockers\n(none)\n"
    "## Exact next action\nRun the full suite.\n</summary>"
)
TOOLS: tuple[JSONObject, ...] = (
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    },
)
FIXED = FixedContext((system("You are a careful coding agent."),), TOOLS)


class Host:
    """Which session the host shows; tests switch it to exercise the guard."""

    def __init__(self) -> None:
        self.current = "s1"


class Source:
    """A RestorationSource over real files, as the agent runtime will provide."""

    def __init__(self, workspace: Path, plan: PlanState | None = None) -> None:
        self.workspace = workspace
        self.plan = plan
        self.reads: list[FileRead] = []

    def cwd(self) -> Path:
        return self.workspace

    def file_reads(self) -> list[FileRead]:
        return self.reads

    def plan_state(self) -> PlanState | None:
        return self.plan

    def invoked_skills(self) -> list[InvokedSkill]:
        return []

    def background_tasks(self) -> list[BackgroundTask]:
        return [BackgroundTask("t1", "run the slow integration suite", "running")]


def model(server: OpenAIServer) -> ModelConfig:
    return ModelConfig(
        model="test-model",
        base_url=server.base_url,
        context_window=32_768,
        params={"temperature": 0.2},
        api=server.api,
    )


def make(
    tmp_path: Path,
    server: OpenAIServer,
    *,
    hooks: Any = None,
    source: Source | None = None,
    events: Events | None = None,
    host: Host | None = None,
    **config: Any,
) -> ContextPipeline:
    provider = open_provider(model(server))
    pipeline = ContextPipeline.open(
        tmp_path / "ws",
        CompactionConfig.model_validate(config),
        model=model(server),
        session_id="s1",
        home=tmp_path / "home",
        tool_effects={"read_file": "read_only"},
        summarizer=LLMSummarizer(provider, model(server)),
        hooks=hooks,
        restoration=source,
        listener=events,
    )
    if host is not None:
        pipeline._current_session = lambda: host.current  # the host's view of the session
    return pipeline


def conversation(p: ContextPipeline, rounds: int = 3, start: int = 0) -> None:
    p.add(user("The CSV export drops rows with unicode names. Fix it; keep the public API."))
    for i in range(start, start + rounds):
        call = ToolCall(f"call_{i}", "read_file", f'{{"path": "src/m{i}.py"}}')
        p.add(assistant(f"Reading module {i}.", [call], usage=Usage(1_000 + i, 20, 1_020 + i)))
        p.add(tool_result(call.id, f"def f{i}(row):\n    return row['name']\n" * 30))


def grow(p: ContextPipeline, lines: int = 6_000) -> None:
    """A tool result that takes the context over the compaction line (and, by
    default, over the input budget)."""
    call = ToolCall(f"call_big_{len(p.messages)}", "bash", '{"command": "cat build.log"}')
    p.add(assistant(None, [call]))
    p.add(tool_result(call.id, "compiling module\n" * lines))


def transcript_bytes(p: ContextPipeline) -> bytes:
    return p.transcript_path.read_bytes()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def main_request(p: ContextPipeline, server: OpenAIServer) -> Message:
    """What the agent loop sends for the next turn."""
    request = chat_request(model(server), FIXED.system, FIXED.tools, p.messages)
    turn = TurnAccumulator()
    async with open_provider(model(server)) as provider:
        async for event in provider.stream(request):
            turn.add(event)
    return turn.message()


# ---------------------------------------------------------------------------
# 压缩 fork 代理循环 (the compaction fork loop)


def test_fork_uses_the_main_model_system_tools_and_parameters_unchanged(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """#1, #4: the fork body is the main body plus one final user message: a shared cache prefix."""
    p = make(tmp_path, openai_server)
    conversation(p)
    openai_server.script(Reply(text="main answer"), Reply(text=SUMMARY))
    run(main_request(p, openai_server))
    assert run(p.compact(FIXED)) is not None
    main, fork = openai_server.bodies[0], openai_server.bodies[1]
    assert {k: v for k, v in fork.items() if k != "messages"} == {
        k: v for k, v in main.items() if k != "messages"
    }
    assert fork["messages"][:-1] == main["messages"]
    assert fork["messages"][-1]["role"] == "user"
    assert "TEXT ONLY" in fork["messages"][-1]["content"]
    # No cap of its own: the model's (none for chat completions and Responses here;
    # Anthropic requires one, the model's reserve).
    assert fork.get("max_tokens") == model(openai_server).max_output_tokens
    assert fork["model"] == "test-model"
    assert fork["temperature"] == 0.2
    assert json.dumps(fork["messages"][:-1]) == json.dumps(main["messages"])


def test_tool_calls_in_the_fork_are_rejected_and_the_loop_continues(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """#2: no tool runs; a rejection result goes back and the loop goes on."""
    p = make(tmp_path, openai_server)
    conversation(p)
    openai_server.script(
        Reply(tool_calls=[ToolCallSpec("read_file", '{"path": "/etc/passwd"}', id="call_x")]),
        Reply(text=SUMMARY),
    )
    outcome = run(p.compact(FIXED))
    assert outcome is not None and outcome.strategy == "llm"
    second = openai_server.bodies[1]["messages"]
    assert second[-2]["tool_calls"][0]["id"] == "call_x"
    assert second[-1] == {"role": "tool", "content": TOOL_REJECTION, "tool_call_id": "call_x"}
    assert "Fix the CSV export" in p.messages[0].text


def test_three_tool_only_rounds_fail_and_count_toward_the_breaker(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """#3: no text after 3 rounds is a failure counted by the breaker; the fallback takes over."""
    p = make(tmp_path, openai_server)
    conversation(p)
    p.add(user("please go on " * 8_000))
    openai_server.script(*(Reply(tool_calls=[ToolCallSpec("read_file")]) for _ in range(3)))
    result = run(p.check_and_compact(FIXED))
    assert len(openai_server.requests) == 3
    assert result.compaction is not None and result.compaction.strategy == "fallback"
    assert any("no summary text in 3 rounds" in w and "(1 in a row)" in w for w in result.warnings)


def test_fork_streams_its_text_to_the_ui_between_state_changes(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    events = Events()
    p = make(tmp_path, openai_server, events=events)
    conversation(p)
    openai_server.script(Reply(text=SUMMARY, delta_chars=40))
    run(p.compact(FIXED))
    kinds = events.kinds()
    assert kinds[0] == "state" and events.log[0][1] is True
    assert kinds[-1] == "state" and events.log[-1][1] is False
    contents = [c for k, c in events.log if k == "content"]
    assert len(contents) > 3 and contents[-1] == SUMMARY
    assert all(b.startswith(a) for a, b in itertools.pairwise(contents))
    assert kinds[-2] == "block" and "Fix the CSV export" in events.log[-2][1]


# ---------------------------------------------------------------------------
# 压缩摘要格式提取 (summary extraction), end to end


def test_only_the_summary_enters_the_context(tmp_path: Path, openai_server: OpenAIServer) -> None:
    p = make(tmp_path, openai_server)
    # Enough rounds that the kept tail is not trimmed for the result to come out
    # smaller than its source (``RESULT_SHARE``).
    conversation(p, rounds=6)
    openai_server.script(Reply(text=SUMMARY))
    run(p.compact(FIXED))
    block = p.messages[0]
    assert block.meta.kind == KIND_COMPACT_SUMMARY and block.role == "user"
    assert "scratch" not in block.text and "<summary>" not in block.text
    assert "Fix the CSV export; keep the public API.\n\n## Decisions" in block.text
    record = next(
        r for r in read_transcript(p.transcript_path).records if isinstance(r, CompactionRecord)
    )
    assert record.strategy == "llm" and record.trigger == "manual"
    # The kept tail: the last two complete API rounds, verbatim.
    assert [m.tool_call_id for m in p.messages if m.role == "tool"] == ["call_4", "call_5"]


def test_exact_continuation_records_are_placed_by_the_host(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    p = make(tmp_path, openai_server)
    p.add(user("EXACT CONTINUATION RECORD [Exact next action] :: run `pytest -k csv` exactly"))
    conversation(p)
    openai_server.script(Reply(text=SUMMARY))
    run(p.compact(FIXED))
    section = p.messages[0].text.split("## Exact next action")[1]
    assert "Run the full suite." in section
    assert "EXACT CONTINUATION RECORD [Exact next action] :: run `pytest -k csv` exactly" in section


# ---------------------------------------------------------------------------
# Gates and shrink-and-retry


def test_an_inflated_summary_fails_the_gate_and_the_fallback_is_applied(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    p = make(tmp_path, openai_server)
    conversation(p, rounds=6)
    p.add(user("more context " * 9_000))
    inflated = "<summary>" + "padding words " * 20_000 + "</summary>"
    openai_server.script(Reply(text=inflated, delta_chars=10_000))
    result = run(p.check_and_compact(FIXED))
    assert result.compaction is not None and result.compaction.strategy == "fallback"
    assert any("effect gate" in w for w in result.warnings)


def test_a_fork_overflow_shrinks_the_input_strictly_and_retries(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    p = make(tmp_path, openai_server)
    conversation(p, rounds=6)
    overflow = Reply.http_error(
        400, "This model's maximum context length is 8192 tokens", code="context_length_exceeded"
    )
    openai_server.script(overflow, overflow, Reply(text=SUMMARY))
    outcome = run(p.compact(FIXED))
    assert outcome is not None and outcome.strategy == "llm"
    sizes = [len(r.raw) for r in openai_server.requests]
    assert len(sizes) == 3 and sizes[0] > sizes[1] > sizes[2]


def test_three_overflows_exhaust_the_shared_budget(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    p = make(tmp_path, openai_server)
    conversation(p, rounds=6)
    overflow = Reply.http_error(413, "Request Entity Too Large")
    openai_server.script(overflow, overflow, overflow, Reply(text=SUMMARY))
    before = list(p.messages)
    with pytest.raises(CompactionFailedError, match="3 attempts"):
        run(p.compact(FIXED))
    assert len(openai_server.requests) == 3  # SDK retries are off: one request per attempt
    assert list(p.messages) == before


def test_a_failed_background_fork_sent_shrunk_is_named_by_the_record_at_the_line(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """The fork's promise (DESIGN §5.5a): the summary prepared in the background
    overflows, is sent again with the file contents elided, then fails; the line's
    own fork fits unchanged, but its record still names what the shrunk one left out."""
    p = make(tmp_path, openai_server)
    overflow = Reply.http_error(
        400, "This model's maximum context length is 8192 tokens", code="context_length_exceeded"
    )
    background = iter([overflow, Reply.http_error(500), Reply.http_error(500)])

    def answer(body: dict[str, Any]) -> Reply | None:
        fork = "TEXT ONLY" in str(body["messages"][-1].get("content"))
        return next(background, Reply(text=SUMMARY)) if fork else None

    openai_server.respond_with(answer)

    async def session() -> CheckResult:
        p.add(user("Survey the modules src/m0.py … and summarise each; change nothing."))
        for i in range(60):
            result = await p.check_and_compact(FIXED)
            if result.compaction is not None:
                return result
            prompt = result.after.tokens or 0
            call = ToolCall(f"call_{i}", "read_file", f'{{"path": "src/m{i}.py"}}')
            p.add(assistant(f"Reading module {i}.", [call], usage=Usage(prompt, 20, prompt + 20)))
            p.add(tool_result(call.id, f"def f{i}(row):\n    return row['name']\n" * 60))
            await asyncio.sleep(0)
            for _ in range(1_000):  # the background summary, if started, ends before the line
                if p.prepared is None:
                    break
                await asyncio.sleep(0.01)
        raise AssertionError("the session never compacted")

    result = run(session())
    forks = [b for b in openai_server.bodies if "TEXT ONLY" in str(b["messages"][-1]["content"])]
    assert len(forks) == 4  # three in the background, one at the line
    assert forks[1]["messages"] != forks[0]["messages"]  # the retry was sent shrunk
    # The line's own fork extends the main request unchanged: it leaves nothing out.
    history = forks[0]["messages"][:-1]
    assert forks[3]["messages"][: len(history)] == history
    [record] = [
        r for r in read_transcript(p.transcript_path).records if isinstance(r, CompactionRecord)
    ]
    assert not record.precomputed and record.strategy == "llm"
    assert any("background" in line and "shortened" in line for line in record.fork_elisions), (
        record.fork_elisions
    )
    assert any("the fork left out" in w for w in result.warnings), result.warnings


def test_a_compact_that_drops_a_background_fork_in_flight_names_what_it_left_out(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """The fork's promise when the summary prepared in the background is dropped while
    its shrunk retry is still out (found by the hard-session property): the /compact
    that drops it names, in its record, what that retry left out."""
    p = make(tmp_path, openai_server)
    overflow = Reply.http_error(
        400, "This model's maximum context length is 8192 tokens", code="context_length_exceeded"
    )
    shrunk_out = Reply(text=SUMMARY, stall_before_headers=True)
    background = iter([overflow, shrunk_out])

    def answer(body: dict[str, Any]) -> Reply | None:
        fork = "TEXT ONLY" in str(body["messages"][-1].get("content"))
        return next(background, Reply(text=SUMMARY)) if fork else None

    openai_server.respond_with(answer)

    async def session() -> None:
        p.add(user("Survey the modules src/m0.py … and summarise each; change nothing."))
        for i in range(60):
            result = await p.check_and_compact(FIXED)
            assert result.compaction is None
            prompt = result.after.tokens or 0
            call = ToolCall(f"call_{i}", "read_file", f'{{"path": "src/m{i}.py"}}')
            p.add(assistant(f"Reading module {i}.", [call], usage=Usage(prompt, 20, prompt + 20)))
            p.add(tool_result(call.id, f"def f{i}(row):\n    return row['name']\n" * 60))
            await asyncio.sleep(0)
            if p.prepared is not None:
                break
        await asyncio.to_thread(shrunk_out.started.wait, 30)
        assert shrunk_out.started.is_set(), "the shrunk background fork never went out"
        assert await p.compact(FIXED, instructions=None) is not None

    run(session())
    forks = [b for b in openai_server.bodies if "TEXT ONLY" in str(b["messages"][-1]["content"])]
    assert len(forks) == 3  # two in the background (the second dropped), one for /compact
    assert forks[1]["messages"] != forks[0]["messages"]  # the retry was sent shrunk
    [record] = [
        r for r in read_transcript(p.transcript_path).records if isinstance(r, CompactionRecord)
    ]
    assert record.trigger == "manual" and record.strategy == "llm"
    assert any("background" in line and "shortened" in line for line in record.fork_elisions), (
        record.fork_elisions
    )


# ---------------------------------------------------------------------------
# Reactive compaction


async def send_with_recovery(p: ContextPipeline, server: OpenAIServer) -> Message:
    """A minimal agent step: send, and on a context-limit error compact once and replay."""
    try:
        return await main_request(p, server)
    except ContextLimitError as error:
        await p.recover_from_context_limit(error, FIXED)
        return await main_request(p, server)


def test_a_context_limit_before_any_output_compacts_once_and_replays(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    p = make(tmp_path, openai_server)
    conversation(p)
    openai_server.script(
        Reply.http_error(400, "prompt is too long", code="context_length_exceeded"),
        Reply(text=SUMMARY),  # the compaction fork
        Reply(text="the replayed answer"),
    )
    answer = run(send_with_recovery(p, openai_server))
    assert answer.text == "the replayed answer"
    assert p.messages[0].meta.kind == KIND_COMPACT_SUMMARY
    replayed = openai_server.bodies[2]["messages"]
    assert "Fix the CSV export" in replayed[1]["content"]  # after the system prompt


def test_a_context_limit_after_output_is_a_friendly_error_and_keeps_the_context(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    p = make(tmp_path, openai_server)
    conversation(p)
    before = list(p.messages)
    openai_server.script(
        Reply(
            text="partial answer that streams",
            error_after=3,
            error=Reply.http_error(
                400, "maximum context length exceeded", code="context_length_exceeded"
            ).error,
        )
    )
    with pytest.raises(ContextWindowExceededError) as info:
        run(send_with_recovery(p, openai_server))
    assert info.value.code == "invalid_request"
    assert "after it had started answering" in str(info.value)
    assert list(p.messages) == before
    assert len(openai_server.requests) == 1


def test_a_second_context_limit_at_the_same_boundary_does_not_compact_again(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    p = make(tmp_path, openai_server)
    conversation(p)
    too_long = Reply.http_error(400, "prompt is too long", code="context_length_exceeded")
    openai_server.script(too_long, Reply(text=SUMMARY), too_long)
    with pytest.raises(ContextWindowExceededError, match="still does not fit"):

        async def twice() -> None:
            try:
                await main_request(p, openai_server)
            except ContextLimitError as error:
                await p.recover_from_context_limit(error, FIXED)
            try:
                await main_request(p, openai_server)
            except ContextLimitError as error:
                await p.recover_from_context_limit(error, FIXED)

        run(twice())
    records = read_transcript(p.transcript_path).records
    assert sum(isinstance(r, CompactionRecord) for r in records) == 1


# ---------------------------------------------------------------------------
# PreCompact 和 PostCompact 钩子事件 (hooks), with real scripts


def script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def hooks(tmp_path: Path, **events: list[str]) -> HookRunner:
    settings = HooksSettings.model_validate(
        {
            event: [{"hooks": [{"type": "command", "command": c} for c in cmds]}]
            for event, cmds in events.items()
        }
    )
    return HookRunner(settings, session_id="s1", transcript_path=tmp_path / "t.jsonl", cwd=tmp_path)


def test_hooks_run_pre_then_compaction_then_session_start_then_post(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """#1, #2, #5: PreCompact gets the instructions and adds its stdout; Post gets the summary."""
    log = tmp_path / "order.log"
    pre = script(
        tmp_path,
        "pre.sh",
        f'cat > {tmp_path}/pre.json\necho pre >> {log}\necho "Mention the release date."\n',
    )
    start = script(tmp_path, "start.sh", f"cat > {tmp_path}/start.json\necho start >> {log}\n")
    post = script(tmp_path, "post.sh", f"cat > {tmp_path}/post.json\necho post >> {log}\n")
    p = make(
        tmp_path,
        openai_server,
        hooks=hooks(tmp_path, PreCompact=[pre], SessionStart=[start], PostCompact=[post]),
    )
    conversation(p)
    openai_server.script(Reply(text=SUMMARY))
    run(p.compact(FIXED, instructions="focus on the API design"))
    assert log.read_text().split() == ["pre", "start", "post"]
    pre_input = json.loads((tmp_path / "pre.json").read_text())
    assert pre_input["hook_event_name"] == "PreCompact"
    assert pre_input["trigger"] == "manual"
    assert pre_input["compact_instructions"] == "focus on the API design"
    instruction = openai_server.bodies[0]["messages"][-1]["content"]
    assert "focus on the API design" in instruction and "Mention the release date." in instruction
    assert json.loads((tmp_path / "start.json").read_text())["source"] == "compact"
    assert (
        "Fix the CSV export" in json.loads((tmp_path / "post.json").read_text())["compact_summary"]
    )


def test_pre_and_post_compact_exit_2_are_shown_and_work_goes_on(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """#3, #4: exit code 2 is not blocking."""
    pre = script(tmp_path, "pre.sh", "echo 'pre hook says careful' >&2\nexit 2\n")
    post = script(tmp_path, "post.sh", "echo 'post hook complains' >&2\nexit 2\n")
    p = make(tmp_path, openai_server, hooks=hooks(tmp_path, PreCompact=[pre], PostCompact=[post]))
    conversation(p)
    grow(p)
    openai_server.script(Reply(text=SUMMARY))
    result = run(p.check_and_compact(FIXED))
    assert result.compaction is not None and result.compaction.strategy == "llm"
    assert any("pre hook says careful" in w for w in result.warnings)
    assert any("post hook complains" in w for w in result.warnings)


def test_a_block_decision_stops_the_compaction_and_keeps_the_context(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    pre = script(tmp_path, "pre.sh", 'echo \'{"decision": "block", "reason": "release freeze"}\'\n')
    p = make(tmp_path, openai_server, hooks=hooks(tmp_path, PreCompact=[pre]))
    conversation(p)
    before = transcript_bytes(p)
    with pytest.raises(CompactionBlockedError, match="release freeze"):
        run(p.compact(FIXED))
    assert transcript_bytes(p) == before
    assert openai_server.requests == []
    # An automatic compaction is skipped with a warning instead.
    while (p.project(FIXED).tokens or 0) < 0.8 * 24_576 + 500:
        prompt = p.project(FIXED).tokens or 0
        p.add(assistant("the build links slowly " * 120, usage=Usage(prompt, 600, prompt + 600)))
        p.add(user("go on"))
    result = run(p.check_and_compact(FIXED))
    assert result.compaction is None
    assert any("release freeze" in w for w in result.warnings)
    # Over the budget, the request is refused rather than sent; nothing changes.
    grow(p, lines=1_500)
    before = transcript_bytes(p)
    with pytest.raises(RequestTooLargeError, match=r"release freeze.*not sent"):
        run(p.check_and_compact(FIXED))
    assert transcript_bytes(p) == before


# ---------------------------------------------------------------------------
# 压缩后上下文恢复 and 压缩后计划模式提醒保留 (restoration, plan mode)


def test_restoration_follows_the_block_and_plan_mode_is_reinjected_in_full(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "src").mkdir()
    (workspace / "src" / "export.py").write_text("def export(rows):\n    return rows\n")
    plan = workspace / ".cairn" / "plan.md"
    source = Source(workspace, PlanState(plan))
    source.reads.append(FileRead(workspace / "src" / "export.py", "s1", workspace, 1.0))
    p = make(tmp_path, openai_server, source=source)
    conversation(p, rounds=10)
    openai_server.script(Reply(text=SUMMARY))
    run(p.compact(FIXED))
    kinds = [m.meta.kind for m in p.messages]
    assert kinds[0] == KIND_COMPACT_SUMMARY and kinds[1] == "restoration"
    assert str(workspace) in p.messages[1].text
    assert (
        "run the slow integration suite" in p.messages[1].text and "running" in p.messages[1].text
    )
    assert any("def export(rows)" in m.text for m in p.messages)
    reminder = next(m for m in p.messages if m.meta.kind == KIND_PLAN_REMINDER)
    assert (
        reminder.role == "user" and "plan.md" in reminder.text and "does not exist" in reminder.text
    )
    # Outside plan mode no reminder is injected.
    source.plan = None
    conversation(p, rounds=10, start=10)
    openai_server.script(Reply(text=SUMMARY))
    run(p.compact(FIXED))
    assert all(m.meta.kind != KIND_PLAN_REMINDER for m in p.messages)


# ---------------------------------------------------------------------------
# 压缩期间的会话保护 (session guard, SDK write layer)


def guarded(
    tmp_path: Path, server: OpenAIServer, switch: bool
) -> tuple[ContextPipeline, Events, Host, bytes, Path]:
    log = tmp_path / "hooks.log"
    post = script(tmp_path, "post.sh", f"echo post >> {log}\n")
    start = script(tmp_path, "start.sh", f"echo start >> {log}\n")
    events, host = Events(), Host()
    p = make(
        tmp_path,
        server,
        events=events,
        host=host,
        hooks=hooks(tmp_path, PostCompact=[post], SessionStart=[start]),
    )
    conversation(p)
    before = transcript_bytes(p)
    hold = threading.Event()
    server.script(Reply(text=SUMMARY, hold=hold))

    async def scenario() -> None:
        task = asyncio.create_task(p.compact(FIXED))
        while not server.requests:
            await asyncio.sleep(0.01)
        if switch:
            host.current = "s2"  # the user restored another session meanwhile
        hold.set()
        await task

    run(scenario())
    return p, events, host, before, log


def test_a_session_switched_during_the_fork_gets_nothing_written(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """#4, #5, #6: no block, no transcript write, no hooks, no error block; state back to false."""
    p, events, _, before, log = guarded(tmp_path, openai_server, switch=True)
    assert transcript_bytes(p) == before
    assert not log.exists()
    assert "block" not in events.kinds()
    assert events.log[-1] == ("state", False)
    assert p.messages[0].meta.kind != KIND_COMPACT_SUMMARY


def test_without_a_switch_the_block_is_written_to_the_session_that_asked(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """#8: the control case."""
    p, events, _, before, log = guarded(tmp_path, openai_server, switch=False)
    assert transcript_bytes(p) != before
    assert log.read_text().split() == ["start", "post"]
    assert "block" in events.kinds() and events.log[-1] == ("state", False)


def test_a_failed_fork_without_a_switch_writes_the_error_block_there(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """#7: the error block goes to the session that started the compaction."""
    p = make(tmp_path, openai_server)
    conversation(p)
    openai_server.script(*(Reply.http_error(500) for _ in range(3)))
    with pytest.raises(CompactionFailedError):
        run(p.compact(FIXED))
    records = read_transcript(p.transcript_path).records
    assert isinstance(records[-1], ErrorRecord) and "Compaction failed" in records[-1].text


def test_manual_compact_is_ignored_while_a_response_streams(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """手动 /compact #3: ignored while streaming; history unchanged."""
    p = make(tmp_path, openai_server)
    conversation(p)
    p.streaming = True
    before = transcript_bytes(p)
    assert run(p.compact(FIXED)) is None
    assert transcript_bytes(p) == before and openai_server.requests == []
    p.streaming = False
    openai_server.script(Reply(text=SUMMARY))
    assert run(p.compact(FIXED)) is not None


def test_usage_in_the_fork_response_is_not_a_baseline(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """The fork's own usage never anchors the main conversation's projection."""
    p = make(tmp_path, openai_server)
    conversation(p)
    openai_server.script(Reply(text=SUMMARY, usage=UsageSpec(900_000, 10)))
    run(p.compact(FIXED))
    assert p.project(FIXED).source == "estimate"
    assert (p.project(FIXED).tokens or 0) < 20_000


def test_a_fork_that_times_out_is_not_retried_and_the_fallback_takes_over(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """A deadline already waited its full length: no second and third wait for the summary."""
    config = replace(model(openai_server), first_byte_timeout=0.3)
    pipeline = ContextPipeline.open(
        tmp_path / "ws",
        CompactionConfig(),
        model=config,
        session_id="s1",
        home=tmp_path / "home",
        tool_effects={"read_file": "read_only"},
        summarizer=LLMSummarizer(open_provider(config), config),
    )
    conversation(pipeline)
    pipeline.add(user("please go on " * 8_000))
    openai_server.script(Reply(stall_before_headers=True), Reply(text="never asked for"))
    result = run(pipeline.check_and_compact(FIXED))
    assert len(openai_server.requests) == 1
    assert result.compaction is not None and result.compaction.strategy == "fallback"
    assert any("first-byte" in w or "first_byte" in w for w in result.warnings), result.warnings
