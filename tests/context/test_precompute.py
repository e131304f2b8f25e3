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
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from cairn.agent.hooks import HookRunner
from cairn.agent.settings import HooksSettings
from cairn.context import CompactionConfig, ContextPipeline, FixedContext
from cairn.context.budget import input_budget
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
from support.openai_server import (
    OpenAIServer,
    Reply,
    ToolCallSpec,
)
from support.recording_listener import Events

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
    current_session: Callable[[], str] | None = None,
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
        current_session=current_session,
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


class SwitchesAway(Events):
    """A host that shows another session as soon as the line starts to compact:
    the switch lands while the line waits (or after a commit that needed no wait)."""

    def __init__(self, shown: list[str]) -> None:
        super().__init__()
        self.shown = shown
        self.armed = False

    def compaction_state_changed(self, is_compacting: bool) -> None:
        super().compaction_state_changed(is_compacting)
        if is_compacting and self.armed:
            self.armed = False
            asyncio.get_running_loop().call_soon(self.shown.__setitem__, 0, "other")


# ---------------------------------------------------------------------------


async def test_a_summary_prepared_in_the_band_is_committed_at_the_line_without_a_model_call(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    events = Events()
    p = make(tmp_path, openai_server, events=events)
    openai_server.respond_with(lambda body: Reply(text=SUMMARY) if is_fork(body) else None)

    async def ready(_: int) -> None:
        await until(lambda: p.prepared == "ready", "ready")

    result, started = await grow(p, on_prepare=ready)

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


async def test_not_ready_at_the_line_the_check_waits_for_it_with_the_hint_and_tail(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    events = Events()
    p = make(tmp_path, openai_server, events=events)
    release = threading.Event()
    fork = Reply(text=SUMMARY, hold=release, hold_after=6)  # a slow summary

    def model(body: dict[str, Any]) -> Reply | None:
        return fork if is_fork(body) else None

    openai_server.respond_with(model)

    async def slow(_: int) -> None:
        # Released only once the line waits for it (the hint is up).
        async def later() -> None:
            await until(lambda: ("state", True) in events.log, "waited")
            release.set()

        asyncio.get_running_loop().create_task(later())

    _, started = await grow(p, on_prepare=slow)

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


def test_a_switch_while_the_line_waits_for_it_writes_nothing_and_sends_no_second_fork(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """The session guard (seed 004) for a waited-for summary: the host shows another
    session when it arrives, so the whole write phase is abandoned — and the check
    does not go on to ask again for the session it left, nor edit it."""
    shown = ["s1"]
    events = SwitchesAway(shown)
    p = make(tmp_path, openai_server, events=events, current_session=lambda: shown[0])
    release = threading.Event()
    fork = Reply(text=SUMMARY, hold=release, hold_after=6)
    openai_server.respond_with(lambda body: fork if is_fork(body) else None)
    seen: dict[str, object] = {}

    async def scenario() -> None:
        await into_the_band(p, fork)
        events.armed = True  # the host switches as soon as the line starts to wait

        async def later() -> None:
            await until(lambda: shown[0] == "other", "switched")
            release.set()

        asyncio.get_running_loop().create_task(later())
        for i in range(100, 200):
            before = p.transcript_path.read_bytes()
            result = await p.check_and_compact(FIXED)
            if shown[0] == "other":
                seen["result"] = result
                seen["unchanged"] = p.transcript_path.read_bytes() == before
                return
            call = ToolCall(f"call_{i}", "read_file", f'{{"path": "m{i}.py"}}')
            prompt = result.after.tokens or 0
            p.add(assistant("Reading.", [call], usage=Usage(prompt, 20, prompt + 20)))
            p.add(tool_result(call.id, module(i)))

    asyncio.run(scenario())
    result = seen["result"]
    assert isinstance(result, CheckResult)
    assert result.skipped == "session changed" and result.compaction is None
    assert seen["unchanged"] is True and compactions(p) == []
    assert sum(is_fork(b) for b in openai_server.bodies) == 1  # no second fork
    assert "block" not in events.kinds() and events.log[-2:] == [
        ("state", False),
        ("prepared", None),
    ]
    assert any("session changed" in w for w in result.warnings)
    p.close()


async def test_a_failed_summary_in_the_background_leaves_today_s_path_at_the_line(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    p = make(tmp_path, openai_server)
    forks = iter([Reply.http_error(500), Reply.http_error(500), Reply.http_error(500)])

    def model(body: dict[str, Any]) -> Reply | None:
        return next(forks, Reply(text=SUMMARY)) if is_fork(body) else None

    openai_server.respond_with(model)

    async def settled(_: int) -> None:
        await until(lambda: p.prepared is None, "settled")

    _, started = await grow(p, on_prepare=settled)

    [record] = compactions(p)
    # The line asked again (today's path) and got its summary.
    assert not record.precomputed and record.strategy == "llm"
    assert started is not None and p.precompute_stats.failed + p.precompute_stats.discarded >= 1
    p.close()


async def test_nothing_is_written_before_the_line_and_a_manual_compact_cancels_it(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    p = make(tmp_path, openai_server)
    held = Reply(text=SUMMARY, stall_after=2)  # streams, then goes silent until cancelled
    replies = iter([held])

    def model(body: dict[str, Any]) -> Reply | None:
        return next(replies, Reply(text=SUMMARY)) if is_fork(body) else None

    openai_server.respond_with(model)
    seen: dict[str, object] = {}

    await into_the_band(p, held)
    before = p.transcript_path.read_bytes()
    await asyncio.sleep(0.2)  # the fork streams in the background
    seen["unchanged"] = p.transcript_path.read_bytes() == before
    outcome = await p.compact(FIXED, instructions="keep the module list")
    seen["outcome"] = outcome
    seen["left"] = await asyncio.to_thread(held.client_left.wait, 10)

    assert seen["unchanged"] is True  # nothing written while it was prepared
    assert seen["left"] is True  # the background fork was cancelled
    [record] = compactions(p)
    assert record.trigger == "manual" and not record.precomputed
    assert p.prepared is None and p.precompute_stats.discarded == 1
    p.close()


async def test_cancel_and_close_drop_it_without_a_write(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    held = Reply(text=SUMMARY, stall_after=2)
    openai_server.respond_with(lambda body: held if is_fork(body) else None)
    p = make(tmp_path, openai_server)
    states: list[object] = []

    await into_the_band(p, held)
    before = p.transcript_path.read_bytes()
    p.cancel_compaction()  # Esc: the background summary goes too
    states.append(p.prepared)
    states.append(await asyncio.to_thread(held.client_left.wait, 10))
    await asyncio.sleep(0.05)
    states.append(p.transcript_path.read_bytes() == before)

    assert states == [None, True, True]
    assert compactions(p) == []
    p.close()
    # Reopened, the session resumes as it was: no compaction, no summary held.
    again = make(tmp_path, openai_server)
    assert again.prepared is None and compactions(again) == []
    again.close()


# ---------------------------------------------------------------------------
# The property: generated sessions, the fork answering slowly, failing, calling
# tools, and the user interrupting it — played beside a twin session without
# the precompute (its own server), which must be the same until the line

ForkMode = Literal["ready", "slow", "failing", "tool_call"]
#: What interrupts the summary prepared in the background: Esc, ``/compact``,
#: ``/clear`` or a switch (the runtime closes the pipeline), or the host showing
#: another session when the line takes it (the SDK write guard).
Interruption = Literal["none", "cancel", "manual", "close", "switch"]
#: How the property's examples ended (its last run): each must be among them.
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


def records(p: ContextPipeline) -> list[tuple[object, ...]]:
    """The transcript as a resume and the model see it (ids and times aside)."""
    seen: list[tuple[object, ...]] = []
    for r in read_transcript(p.transcript_path).records:
        if isinstance(r, MessageRecord):
            seen.append(("message", *shape([r.message])[0]))
        elif isinstance(r, CompactionRecord):
            kept = shape(r.replacement_messages)
            seen.append(("compaction", r.trigger, r.strategy, r.summary, r.precomputed, kept))
        else:
            seen.append((type(r).__name__,))
    return seen


def assert_same(a: ContextPipeline, twin: ContextPipeline, when: str) -> None:
    assert shape(a.messages) == shape(twin.messages), when
    assert records(a) == records(twin), when


async def _play(
    a: ContextPipeline,
    twin: ContextPipeline,
    *,
    window: int,
    mode: ForkMode,
    lines: int,
    interrupt: Interruption,
    delay: int,
    reopen: Callable[[], ContextPipeline],
    forks_plain: threading.Event,
    snapshot: list[Message],
) -> str:
    """Rounds on ``a`` and its twin until ``a`` compacts (or the interruption ends it)."""
    budget = input_budget(window)
    events = a._listener
    assert isinstance(events, SwitchesAway)
    first = user("Survey the modules m0.py … and summarise each; change nothing.")
    a.add(first)
    twin.add(first)
    started: int | None = None
    mirrored: ContextPipeline | None = twin  # the twin follows until the line or a switch
    interrupted = False
    cancelled = 0
    for i in range(400):
        if (
            interrupt != "none"
            and started is not None
            and not interrupted
            and i == started + 1 + delay
        ):
            interrupted = True
            if interrupt in ("cancel", "manual", "close"):
                forks_plain.set()  # from now on both sessions get the same answers
            before = a.transcript_path.read_bytes()
            if interrupt == "cancel":
                cancelled = i
                a.cancel_compaction()
                assert a.prepared is None
                await asyncio.sleep(0.05)
                assert a.transcript_path.read_bytes() == before  # Esc wrote nothing
            elif interrupt == "manual":
                instructions = "keep the module list"
                done = await a.compact(FIXED, instructions=instructions)
                again = await twin.compact(FIXED, instructions=instructions)
                assert done is not None and again is not None
                assert_same(a, twin, "a /compact during a precompute")
                [record] = compactions(a)
                assert record.trigger == "manual" and not record.precomputed
                assert a.prepared is None
                return "manual"
            elif interrupt == "close":
                view = shape(a.messages)
                a.close()
                assert a.transcript_path.read_bytes() == before  # /clear or a switch
                resumed = reopen()
                try:
                    assert shape(resumed.messages) == view and resumed.prepared is None
                    assert compactions(resumed) == []
                    assert_same(resumed, twin, "resumed after a close during a precompute")
                finally:
                    resumed.close()
                return "close"
            elif interrupt == "switch":
                events.armed = True
                mirrored = None
        before = a.transcript_path.read_bytes()
        logged = len(events.log)
        result = await a.check_and_compact(FIXED)
        # Never a request known to be over the input budget.
        assert (result.after.tokens or 0) <= budget, (result.after.tokens, budget)
        if interrupt == "switch" and events.shown[0] == "other":
            # The host moved on while the line took the summary: all or nothing.
            states = [s for k, s in events.log[logged:] if k == "state"]
            assert states and states[-1] is False  # the compaction state still ends
            if result.compaction is None:
                written = a.transcript_path.read_bytes()[len(before) :].decode()
                assert not written, f"a write for a session left: {written[:600]}"
                assert "block" not in [k for k, _ in events.log[logged:]]
                assert a.prepared is None
                # Back: the session goes on today's way (a compaction or a snip).
                events.shown[0] = "s1"
                result = await a.check_and_compact(FIXED)
                assert (result.after.tokens or 0) <= budget
                assert result.compaction is not None or result.edits
                assert not any(r.precomputed for r in compactions(a))
                return "switch: abandoned"
            [record] = compactions(a)
            assert "block" in [k for k, _ in events.log[logged:]]
            return "switch: committed before it"
        if (
            interrupt == "cancel"
            and interrupted
            and result.compaction is None
            and i > cancelled + 8
        ):
            # Eight rounds on, mirrored and the same: (snips may hold the line off).
            return "cancel"
        if result.compaction is not None:
            if mirrored is not None and interrupted:
                # After Esc the session is as if the precompute had never run.
                await twin.check_and_compact(FIXED)
                assert_same(a, twin, "the line after a cancelled precompute")
                [record] = compactions(a)
                assert not record.precomputed
                return "cancel"
            return "line"
        if mirrored is not None:
            await mirrored.check_and_compact(FIXED)
            # Nothing is written or changed while the summary is prepared.
            assert_same(a, mirrored, f"round {i}, before the line")
        prompt = result.after.tokens or 0
        call = ToolCall(f"call_{i}", "read_file", f'{{"path": "m{i}.py"}}')
        answer = assistant(f"Reading module {i}.", [call], usage=Usage(prompt, 20, prompt + 20))
        output = tool_result(call.id, module(i, lines))
        for p in (a, mirrored) if mirrored is not None else (a,):
            p.add(answer)
            p.add(output)
        await asyncio.sleep(0)  # the loop's turn: what the main request's stream gives it
        if started is None and a.prepared is not None:
            started = i
            snapshot.extend(a.messages[: len(a.messages) - 2])  # the view the fork took
            if mode in ("ready", "tool_call"):
                await until(lambda: a.prepared != "preparing", "settled")
    raise AssertionError("the session never compacted")


@settings(
    max_examples=30,
    deadline=None,
    database=None,
    # A failure names the round and what differed; shrinking would take minutes.
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    window=st.sampled_from([24_576, 32_768, 65_536]),
    mode=st.sampled_from(["ready", "ready", "slow", "failing", "tool_call"]),
    lines=st.integers(15, 60),
    interrupt=st.sampled_from(["none", "none", "none", "cancel", "manual", "close", "switch"]),
    delay=st.integers(0, 3),
)
# Each way an example can end, at least once whatever is generated.
@example(window=32_768, mode="ready", lines=30, interrupt="none", delay=0)
@example(window=32_768, mode="slow", lines=30, interrupt="cancel", delay=0)
@example(window=32_768, mode="failing", lines=30, interrupt="manual", delay=0)
@example(window=32_768, mode="slow", lines=30, interrupt="close", delay=0)
@example(window=32_768, mode="slow", lines=60, interrupt="switch", delay=0)
@example(window=32_768, mode="ready", lines=30, interrupt="switch", delay=0)
def _precompute_property(
    openai_server: OpenAIServer,
    window: int,
    mode: ForkMode,
    lines: int,
    interrupt: Interruption,
    delay: int,
) -> None:
    with tempfile.TemporaryDirectory() as folder, OpenAIServer() as twin_server:
        root = Path(folder)
        replies = _fork_replies(mode)
        forks_plain = threading.Event()

        def model(body: dict[str, Any]) -> Reply | None:
            if not is_fork(body):
                return None
            return Reply(text=SUMMARY) if forks_plain.is_set() else replies()

        openai_server.respond_with(model)
        twin_server.respond_with(lambda body: Reply(text=SUMMARY) if is_fork(body) else None)
        before = len(openai_server.requests)
        shown = ["s1"]

        def open_a(events: Events | None = None) -> ContextPipeline:
            return make(
                root / "a",
                openai_server,
                window=window,
                events=events,
                current_session=lambda: shown[0],
            )

        a = open_a(SwitchesAway(shown))
        twin = make(root / "twin", twin_server, window=window, precompute=False)
        snapshot: list[Message] = []
        try:
            outcome = asyncio.run(
                _play(
                    a,
                    twin,
                    window=window,
                    mode=mode,
                    lines=lines,
                    interrupt=interrupt,
                    delay=delay,
                    reopen=open_a,
                    forks_plain=forks_plain,
                    snapshot=snapshot,
                )
            )
        finally:
            a.close()
            twin.close()
        stats = a.precompute_stats
        if outcome == "line":
            [record] = compactions(a)
            if record.precomputed:
                outcome = "committed"
                assert stats.committed == 1 and record.rounds_after >= 1
                assert_blocking_equivalent(a, snapshot, root / "b", openai_server)
            else:
                # Failed, or too big with the rounds since: today's path asked again.
                outcome = "today"
                assert stats.failed + stats.rejected + stats.discarded >= 1 or stats.started == 0
                assert record.strategy in ("llm", "fallback")
            forks = sum(is_fork(r.body) for r in openai_server.requests[before:])
            # Never a second fork for one prepared summary that was used.
            assert forks >= 1 and (not record.precomputed or stats.waited <= 1)
        OUTCOMES.append(outcome if interrupt == "none" or outcome != "line" else "line first")


def test_generated_sessions_commit_a_prepared_summary_or_leave_it_as_if_it_never_ran(
    openai_server: OpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    OUTCOMES.clear()
    _precompute_property(openai_server)
    with capsys.disabled():
        counts = {o: OUTCOMES.count(o) for o in sorted(set(OUTCOMES))}
        print(f"\ntest_precompute: {len(OUTCOMES)} generated sessions: {counts}")
    # Every way was exercised, not skipped: a commit, and each interruption.
    for outcome in ("committed", "cancel", "manual", "close", "switch: abandoned"):
        assert outcome in OUTCOMES, (outcome, OUTCOMES)


def test_join_rounds_after_trims_the_tail_kept_at_p_never_the_rounds_since() -> None:
    from cairn.context.precompute import join_rounds_after

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


async def test_precompact_runs_when_it_starts_session_start_and_post_compact_when_it_commits(
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

    async def ready(_: int) -> None:
        await until(lambda: p.prepared == "ready", "ready")
        before_line.extend(log.read_text().split())

    await grow(p, on_prepare=ready)

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
