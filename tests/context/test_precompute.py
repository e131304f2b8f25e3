"""The summary prepared before the line (issue 28, DESIGN §5.5a), through the real server.

A session grows round by round as the agent loop grows it — a check, the
model's answer carrying the provider's count, the tool's result — into the
band, where the handoff is added; once the model has answered it, the next
check starts the compaction fork in the background. At the line the summary
is committed with the rounds since kept verbatim, without a model call; if
it is not ready, the check waits for it (the usual hint and tail); if it
failed or went stale, today's path runs. Nothing is written before the line.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cairn.agent.hooks import HookRunner
from cairn.agent.settings import HooksSettings
from cairn.context import CompactionConfig, ContextPipeline, FixedContext
from cairn.context.llm_summarizer import LLMSummarizer
from cairn.context.pipeline import CheckResult
from cairn.context.summarizer import Summarizer, Summary, SummaryRequest
from cairn.messages import (
    KIND_HANDOFF,
    JSONObject,
    Message,
    ToolCall,
    Usage,
    assistant,
    system,
    tool_result,
    user,
)
from cairn.provider import ModelConfig
from cairn.provider.factory import open_provider
from cairn.store import CompactionRecord, MessageRecord, read_transcript
from openai_server import (  # noqa: F401  (the fixture registers itself by import)
    OpenAIServer,
    Reply,
    ToolCallSpec,
    openai_server_fixture,
)
from recording_listener import Events

SUMMARY = (
    "<summary>\n## Objective and constraints\nSurvey the modules; change nothing.\n"
    "## Exact next action\nRead m9.py.\n</summary>"
)
TOOL: JSONObject = {"type": "function", "function": {"name": "read_file", "parameters": {}}}
FIXED = FixedContext((system("You are a careful coding agent."),), (TOOL,))
WINDOW = 32_768


def is_fork(body: dict[str, Any]) -> bool:
    """A fork request: the instruction is a user message (the last, but for the rounds
    that answer a tool call the fork made)."""
    return any(
        m["role"] == "user" and "TEXT ONLY" in str(m.get("content")) for m in body["messages"]
    )


def make(
    tmp_path: Path,
    server: OpenAIServer,
    *,
    events: Events | None = None,
    session_id: str = "s1",
    window: int = WINDOW,
    hooks: HookRunner | None = None,
    summarizer: Summarizer | None = None,
    **config: Any,
) -> ContextPipeline:
    model = ModelConfig(model="m", base_url=server.base_url, context_window=window)
    return ContextPipeline.open(
        tmp_path / "ws",
        CompactionConfig.model_validate(config),
        model=model,
        session_id=session_id,
        home=tmp_path / "home",
        tool_effects={"read_file": "read_only"},
        summarizer=summarizer or LLMSummarizer(open_provider(model), model),
        listener=events,
        hooks=hooks,
    )


def module(i: int, lines: int = 70) -> str:
    return "".join(f"def f{i}_{n}(row):  # module {i}\n    return row[{n}]\n" for n in range(lines))


async def step(p: ContextPipeline, i: int, lines: int = 70) -> CheckResult:
    """One round of the agent loop: the check, the answer (the provider counted the
    request as projected), the tool's result."""
    result = await p.check_and_compact(FIXED)
    prompt = result.after.tokens or 0
    call = ToolCall(f"call_{i}", "read_file", f'{{"path": "m{i}.py"}}')
    p.add(assistant(f"Reading module {i}.", [call], usage=Usage(prompt, 20, prompt + 20)))
    p.add(tool_result(call.id, module(i, lines)))
    return result


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(1_000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never {what}")


async def grow(
    p: ContextPipeline,
    *,
    on_prepare: Callable[[int], Awaitable[None]] | None = None,
    limit: int = 60,
    lines: int = 70,
) -> tuple[CheckResult, int | None]:
    """Rounds until a check compacts; the result and the round the fork started at."""
    p.add(user("Survey the modules m0.py … and summarise each; change nothing."))
    started: int | None = None
    for i in range(limit):
        result = await step(p, i, lines)
        await asyncio.sleep(0)  # the loop's turn: what the main request's stream gives it
        if started is None and p.prepared is not None:
            started = len(p.messages) - 2  # the view the fork took: before this round
            if on_prepare is not None:
                await on_prepare(i)
        if result.compaction is not None:
            return result, started
    raise AssertionError("the session never compacted")


async def into_the_band(p: ContextPipeline, fork: Reply) -> None:
    """Rounds until the summary starts in the background, and its fork was sent."""
    p.add(user("Survey the modules m0.py … and summarise each; change nothing."))
    for i in range(60):
        await step(p, i)
        if p.prepared is not None:
            break
    await until(lambda: fork.started.is_set(), "sent")


def compactions(p: ContextPipeline) -> list[CompactionRecord]:
    return [
        r for r in read_transcript(p.transcript_path).records if isinstance(r, CompactionRecord)
    ]


def shape(messages: Sequence[Message]) -> list[tuple[object, ...]]:
    """What the model sees of a message (ids and times aside)."""
    return [(m.role, m.text, m.tool_calls, m.meta.kind) for m in messages]


# ---------------------------------------------------------------------------


def test_a_summary_prepared_in_the_band_is_committed_at_the_line_without_a_model_call(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    events = Events()
    p = make(tmp_path, openai_server, events=events)
    openai_server.respond_with(lambda body: Reply(text=SUMMARY) if is_fork(body) else None)

    async def scenario() -> tuple[CheckResult, int | None]:
        async def ready(_: int) -> None:
            await until(lambda: p.prepared == "ready", "ready")

        return await grow(p, on_prepare=ready)

    result, started = asyncio.run(scenario())
    assert started is not None
    [record] = compactions(p)
    assert record.precomputed and record.rounds_after >= 1 and record.strategy == "llm"
    assert result.compaction is not None and result.compaction.record_id == record.id
    # One fork, the one prepared in the background: the line made no model call.
    assert sum(is_fork(b) for b in openai_server.bodies) == 1
    # Quiet while it was prepared; the commit alone is bracketed like any compaction.
    prepared = [state for kind, state in events.log if kind == "prepared"]
    assert prepared[0] == "preparing" and prepared[-1] is None
    assert set(prepared) <= {"preparing", "ready", None}
    first_state = events.kinds().index("state")
    assert events.kinds()[first_state : first_state + 3] == ["state", "block", "state"]
    assert "content" not in events.kinds()  # nobody waited: no tail
    assert p.precompute_stats.committed == 1 and p.precompute_stats.waited == 0
    p.close()


def test_the_commit_is_a_blocking_compaction_at_p_followed_by_the_same_rounds(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """Same fork answer: the same summary, the same kept rounds, the same context after."""
    openai_server.respond_with(lambda body: Reply(text=SUMMARY) if is_fork(body) else None)
    a = make(tmp_path, openai_server)
    snapshot: list[Message] = []

    async def scenario() -> None:
        async def ready(_: int) -> None:
            snapshot.extend(a.messages[: len(a.messages) - 2])
            await until(lambda: a.prepared == "ready", "ready")

        await grow(a, on_prepare=ready)

    asyncio.run(scenario())
    [record] = compactions(a)
    assert record.precomputed and record.rounds_after >= 1
    assert_blocking_equivalent(a, snapshot, tmp_path / "b", openai_server, trimmed=False)
    a.close()


def assert_blocking_equivalent(
    a: ContextPipeline,
    snapshot: list[Message],
    folder: Path,
    server: OpenAIServer,
    *,
    trimmed: bool = True,
) -> None:
    """``a``'s precomputed commit against today's compaction at ``P`` (the snapshot) on
    a twin session, followed by the same rounds: the same summary and block, the same
    rounds after ``P``; the tail kept at ``P`` may only have lost its oldest rounds
    (``trimmed``) to let the rounds since fit."""
    [record] = compactions(a)
    b = make(folder, server, precompute=False)
    for message in snapshot:
        b.add(message)

    async def blocking() -> None:
        outcome = await b._compactor.run("auto", b.messages, FIXED, None, [], b.project(FIXED))
        assert outcome is not None

    asyncio.run(blocking())
    added = [
        r.message
        for r in read_transcript(a.transcript_path).records
        if isinstance(r, MessageRecord)
    ]
    for message in added[len(snapshot) - _handoffs(snapshot) :]:
        b.add(message)
    [blocked] = compactions(b)
    assert blocked.summary == record.summary
    ours, theirs = shape(a.messages), shape(b.messages)
    head = next(i for i, m in enumerate(b.messages) if m.id in {x.id for x in snapshot})
    assert ours[:head] == theirs[:head]  # the block and the restoration
    assert theirs[head:][len(theirs) - len(ours) :] == ours[head:]  # a suffix: the newest
    assert len(ours) == len(theirs) or trimmed
    b.close()


def _handoffs(messages: list[Message]) -> int:
    return sum(m.meta.kind == KIND_HANDOFF for m in messages)


def test_not_ready_at_the_line_the_check_waits_for_it_with_the_hint_and_tail(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    events = Events()
    p = make(tmp_path, openai_server, events=events)
    release = threading.Event()
    fork = Reply(text=SUMMARY, hold=release, hold_after=6)  # a slow summary

    def model(body: dict[str, Any]) -> Reply | None:
        return fork if is_fork(body) else None

    openai_server.respond_with(model)

    async def scenario() -> tuple[CheckResult, int | None]:
        async def slow(_: int) -> None:
            # Released only once the line waits for it (the hint is up).
            async def later() -> None:
                await until(lambda: ("state", True) in events.log, "waited")
                release.set()

            asyncio.get_running_loop().create_task(later())

        return await grow(p, on_prepare=slow)

    _, started = asyncio.run(scenario())
    [record] = compactions(p)
    assert record.precomputed and started is not None
    assert sum(is_fork(b) for b in openai_server.bodies) == 1  # waited, no second fork
    kinds = events.kinds()
    hint = kinds.index("state")
    # The hint, then the tail streamed so far, then the block, then the hint goes.
    assert kinds[hint + 1] == "content" and "block" in kinds[hint:]
    assert events.log[-1] == ("prepared", None) or ("state", False) in events.log[hint:]
    assert p.precompute_stats.waited == 1
    p.close()


def test_a_failed_summary_in_the_background_leaves_today_s_path_at_the_line(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    p = make(tmp_path, openai_server)
    forks = iter([Reply.http_error(500), Reply.http_error(500), Reply.http_error(500)])

    def model(body: dict[str, Any]) -> Reply | None:
        return next(forks, Reply(text=SUMMARY)) if is_fork(body) else None

    openai_server.respond_with(model)

    async def scenario() -> tuple[CheckResult, int | None]:
        async def settled(_: int) -> None:
            await until(lambda: p.prepared is None, "settled")

        return await grow(p, on_prepare=settled)

    _, started = asyncio.run(scenario())
    [record] = compactions(p)
    # The line asked again (today's path) and got its summary.
    assert not record.precomputed and record.strategy == "llm"
    assert started is not None and p.precompute_stats.failed + p.precompute_stats.discarded >= 1
    p.close()


def test_nothing_is_written_before_the_line_and_a_manual_compact_cancels_it(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    p = make(tmp_path, openai_server)
    held = Reply(text=SUMMARY, stall_after=2)  # streams, then goes silent until cancelled
    replies = iter([held])

    def model(body: dict[str, Any]) -> Reply | None:
        return next(replies, Reply(text=SUMMARY)) if is_fork(body) else None

    openai_server.respond_with(model)
    seen: dict[str, object] = {}

    async def scenario() -> None:
        await into_the_band(p, held)
        before = p.transcript_path.read_bytes()
        await asyncio.sleep(0.2)  # the fork streams in the background
        seen["unchanged"] = p.transcript_path.read_bytes() == before
        outcome = await p.compact(FIXED, instructions="keep the module list")
        seen["outcome"] = outcome
        seen["left"] = await asyncio.to_thread(held.client_left.wait, 10)

    asyncio.run(scenario())
    assert seen["unchanged"] is True  # nothing written while it was prepared
    assert seen["left"] is True  # the background fork was cancelled
    [record] = compactions(p)
    assert record.trigger == "manual" and not record.precomputed
    assert p.prepared is None and p.precompute_stats.discarded == 1
    p.close()


def test_cancel_and_close_drop_it_without_a_write(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    held = Reply(text=SUMMARY, stall_after=2)
    openai_server.respond_with(lambda body: held if is_fork(body) else None)
    p = make(tmp_path, openai_server)
    states: list[object] = []

    async def scenario() -> None:
        await into_the_band(p, held)
        before = p.transcript_path.read_bytes()
        p.cancel_compaction()  # Esc: the background summary goes too
        states.append(p.prepared)
        states.append(await asyncio.to_thread(held.client_left.wait, 10))
        await asyncio.sleep(0.05)
        states.append(p.transcript_path.read_bytes() == before)

    asyncio.run(scenario())
    assert states == [None, True, True]
    assert compactions(p) == []
    p.close()
    # Reopened, the session resumes as it was: no compaction, no summary held.
    again = make(tmp_path, openai_server)
    assert again.prepared is None and compactions(again) == []
    again.close()


# ---------------------------------------------------------------------------
# The property: generated sessions, the fork answering slowly, failing, calling tools

ForkMode = Literal["ready", "slow", "failing", "tool_call"]
#: How the property's examples ended (its last run): commits must be among them.
OUTCOMES: list[str] = []


def _fork_replies(mode: ForkMode) -> Callable[[], Reply]:
    calls = iter(range(1_000))

    def reply() -> Reply:
        n = next(calls)
        if mode == "failing" and n < 3:
            return Reply.http_error(500)
        if mode == "tool_call" and n == 0:
            return Reply(tool_calls=[ToolCallSpec("read_file", '{"path": "m0.py"}')])
        if mode == "slow":
            return Reply(text=SUMMARY, delta_chars=2, chunk_interval=0.01)
        return Reply(text=SUMMARY)

    return reply


@settings(
    max_examples=12,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    window=st.sampled_from([24_576, 32_768, 65_536]),
    mode=st.sampled_from(["ready", "ready", "slow", "failing", "tool_call"]),
    lines=st.integers(15, 60),
)
def _precomputed_or_today(
    openai_server: OpenAIServer, window: int, mode: ForkMode, lines: int
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        replies = _fork_replies(mode)
        openai_server.respond_with(lambda body: replies() if is_fork(body) else None)
        before = len(openai_server.requests)
        a = make(root, openai_server, window=window)
        snapshot: list[Message] = []

        async def scenario() -> None:
            async def started(_: int) -> None:
                snapshot.extend(a.messages[: len(a.messages) - 2])
                if mode in ("ready", "tool_call"):
                    await until(lambda: a.prepared != "preparing", "settled")

            await grow(a, on_prepare=started, lines=lines, limit=400)

        asyncio.run(scenario())
        [record] = compactions(a)
        stats = a.precompute_stats
        forks = sum(is_fork(r.body) for r in openai_server.requests[before:])
        if record.precomputed:
            OUTCOMES.append("committed")
            assert stats.committed == 1 and record.rounds_after >= 1
            assert_blocking_equivalent(a, snapshot, root / "b", openai_server)
        else:
            # Failed, or too big with the rounds since: today's path asked again.
            OUTCOMES.append("today")
            assert stats.failed + stats.rejected + stats.discarded >= 1 or stats.started == 0
            assert record.strategy in ("llm", "fallback")
        # Never a second fork for one prepared summary that was used.
        assert forks >= 1 and (not record.precomputed or stats.waited <= 1)
        a.close()


def test_generated_sessions_commit_a_prepared_summary_or_take_today_s_path(
    openai_server: OpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    OUTCOMES.clear()
    _precomputed_or_today(openai_server)
    with capsys.disabled():
        counts = {o: OUTCOMES.count(o) for o in sorted(set(OUTCOMES))}
        print(f"\ntest_precompute: {len(OUTCOMES)} generated sessions: {counts}")
    assert "committed" in OUTCOMES, OUTCOMES  # the commits were exercised, not skipped


def test_join_rounds_after_trims_the_tail_kept_at_p_never_the_rounds_since() -> None:
    from cairn.context.compactor import join_rounds_after

    def round_(n: int) -> list[Message]:
        call = ToolCall(f"c{n}", "read_file", "{}")
        return [assistant(None, [call]), tool_result(call.id, f"r{n}")]

    block, tail, after = user("summary"), [*round_(1), *round_(2)], tuple(round_(3))
    kept = {m.id for m in tail}

    def at_most(n: int) -> Callable[[Sequence[Message]], str | None]:
        return lambda joined: None if len(joined) <= n else f"{len(joined)} messages"

    whole, _ = join_rounds_after((block, *tail), kept, after, at_most(7))
    assert whole == (block, *tail, *after)
    trimmed, _ = join_rounds_after((block, *tail), kept, after, at_most(5))
    assert trimmed == (block, *tail[2:], *after)  # the oldest kept round went first
    none, why = join_rounds_after((block, *tail), kept, after, at_most(2))
    assert none is None and why == "3 messages"  # the rounds since never yield


def test_precompact_runs_when_it_starts_session_start_and_post_compact_when_it_commits(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    log = tmp_path / "order.log"

    def hook(name: str, extra: str = "") -> str:
        path = tmp_path / f"{name}.sh"
        path.write_text(
            f"#!/usr/bin/env bash\ncat > {tmp_path}/{name}.json\necho {name} >> {log}\n{extra}"
        )
        path.chmod(0o755)
        return str(path)

    settings = HooksSettings.model_validate(
        {
            event: [{"hooks": [{"type": "command", "command": command}]}]
            for event, command in (
                ("PreCompact", hook("pre", 'echo "Name every module read."\n')),
                ("SessionStart", hook("start")),
                ("PostCompact", hook("post")),
            )
        }
    )
    runner = HookRunner(
        settings, session_id="s1", transcript_path=tmp_path / "t.jsonl", cwd=tmp_path
    )
    p = make(tmp_path, openai_server, hooks=runner)
    openai_server.respond_with(lambda body: Reply(text=SUMMARY) if is_fork(body) else None)
    before_line: list[str] = []

    async def scenario() -> None:
        async def ready(_: int) -> None:
            await until(lambda: p.prepared == "ready", "ready")
            before_line.extend(log.read_text().split())

        await grow(p, on_prepare=ready)

    asyncio.run(scenario())
    [record] = compactions(p)
    assert record.precomputed
    assert before_line == ["pre"]  # at the start, with trigger "auto"
    assert log.read_text().split() == ["pre", "start", "post"]  # the rest at the commit
    assert json.loads((tmp_path / "pre.json").read_text())["trigger"] == "auto"
    [fork] = [b for b in openai_server.bodies if is_fork(b)]
    assert "Name every module read." in str(fork["messages"][-1]["content"])
    assert json.loads((tmp_path / "post.json").read_text())["trigger"] == "auto"
    p.close()


class BrokenOnce:
    """A summarizer whose first call fails with an unexpected error (not a
    ``SummarizerError``): the one prepared in the background."""

    def __init__(self, inner: Summarizer) -> None:
        self.inner = inner
        self.calls = 0

    async def summarize(self, request: SummaryRequest) -> Summary:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("a bug in the summarizer")
        return await self.inner.summarize(request)


def test_an_unexpected_error_in_the_background_never_reaches_the_turn(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(lambda body: Reply(text=SUMMARY) if is_fork(body) else None)
    model = ModelConfig(model="m", base_url=openai_server.base_url, context_window=WINDOW)
    broken = BrokenOnce(LLMSummarizer(open_provider(model), model))
    p = make(tmp_path, openai_server, summarizer=broken)

    result, _ = asyncio.run(grow(p))
    [record] = compactions(p)
    # Started once (and failed at once), then the line asked again.
    assert p.precompute_stats.started == 1 and broken.calls == 2
    assert not record.precomputed and record.strategy == "llm"  # today's path, at the line
    assert any("a bug in the summarizer" in w for w in result.warnings), result.warnings
    p.close()
