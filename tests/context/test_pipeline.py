"""check_and_compact: the orchestration, the seed-004 trigger scenarios, failure paths."""

from __future__ import annotations

import asyncio
import json
import math
import resource
import signal
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from cairn.context import (
    CheckpointWriteError,
    CompactionConfig,
    CompactionFailedError,
    ContextPipeline,
    FallbackSummarizer,
    FixedContext,
    NothingToCompactError,
    Summarizer,
    SummarizerError,
    Summary,
    SummaryRequest,
)
from cairn.context.budget import compaction_due
from cairn.context.effects import ToolEffect
from cairn.context.pipeline import RequestTooLargeError
from cairn.context.snip import SNIP_BATCH_SHARE, is_elided, snip_target, snip_worth_it
from cairn.messages import (
    KIND_COMPACT_SUMMARY,
    KIND_HANDOFF,
    Message,
    ToolCall,
    Usage,
    assistant,
    find_orphans,
    system,
    tool_result,
    user,
)
from cairn.provider import ModelConfig
from cairn.store import ContextEditRecord, HandoffRecord, read_transcript
from cairn.tokens import estimate_message_tokens

WINDOW = 32_768  # output reserve 8,192 → input budget 24,576
BUDGET = 24_576
COMPACT_LINE = 0.8 * BUDGET
HANDOFF_LINE = 0.7 * BUDGET
FIXED = FixedContext((system("You are a careful coding agent."),))
T = TypeVar("T")
EFFECTS: dict[str, ToolEffect] = {"read_file": "read_only", "edit_file": "write", "bash": "write"}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class FailingSummarizer:
    """A summarizer whose model never produces a usable summary."""

    def __init__(self) -> None:
        self.calls = 0

    async def summarize(self, request: SummaryRequest) -> Summary:
        self.calls += 1
        raise SummarizerError("the model returned no text after 3 rounds")


class GatedSummarizer:
    """The fallback, but it waits for the test to open a gate (a slow model)."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.calls = 0

    async def summarize(self, request: SummaryRequest) -> Summary:
        self.calls += 1
        await self.gate.wait()
        return await FallbackSummarizer().summarize(request)


def make(
    tmp_path: Path,
    clock: Clock | None = None,
    *,
    summarizer: Summarizer | None = None,
    context_window: int | None = WINDOW,
    **config: object,
) -> ContextPipeline:
    settings = CompactionConfig.model_validate(config)
    return ContextPipeline.open(
        tmp_path / "ws",
        settings,
        model=ModelConfig(model="m", context_window=context_window),
        session_id="s1",
        home=tmp_path / "home",
        tool_effects=EFFECTS,
        clock=clock or Clock(),
        summarizer=summarizer,
    )


def respond(p: ContextPipeline, total: int, text: str = "ok") -> Message:
    """The provider answered; its usage says the context now holds ``total`` tokens."""
    message = assistant(text, usage=Usage(total - 40, 40, total))
    p.add(message)
    return message


def tool_turn(p: ContextPipeline, name: str, result: str, path: str = "a.py") -> None:
    """A tool round added as is (``add_tool_results`` would cap the output first)."""
    call = ToolCall(f"call_{len(p.messages)}", name, f'{{"path": "{path}"}}')
    p.add(assistant(None, [call], usage=None))
    p.add(tool_result(call.id, result))


def converse(p: ContextPipeline, rounds: int = 12, fixed: FixedContext | None = None) -> None:
    """Ordinary exchanges with history enough to compact (well below the handoff line
    with the default fixed context)."""
    for n in range(rounds):
        p.add(user(f"step {n}: look at module {n} and explain what it does " * 6))
        answer = f"module {n} parses the config and validates each key " * 50
        respond(p, (p.project(fixed or FIXED).tokens or 0) + len(answer) // 4, answer)


def transcript_api(p: ContextPipeline) -> list[Message]:
    path = p.transcript_path
    return read_transcript(path).api().messages


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


# ---------------------------------------------------------------------------
# Seed 004: pre-request trigger


def test_below_the_threshold_the_request_goes_out_untouched(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.add(user("fix the failing test"))
    respond(p, 5_000)
    p.add(user("and add a regression test"))
    result = run(p.check_and_compact(FIXED))
    assert result.compaction is None and result.edits == 0 and not result.handoff
    assert result.before.source == "anchored"
    assert result.before.phase == "below_handoff"


def test_estimate_is_last_total_tokens_plus_what_came_after(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.add(user("task"))
    respond(p, 6_000)
    later = [user("new message 新的消息 " * 30), user("another")]
    for m in later:
        p.add(m)
    result = run(p.check_and_compact(FIXED))
    assert result.before.tokens == 6_000 + sum(estimate_message_tokens(m) for m in later)


def test_a_huge_tool_output_triggers_compaction_before_the_next_request(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.add(user("find the bug in the parser"))
    respond(p, 8_000)
    # The next loop iteration: a tool result far over the compaction line.
    tool_turn(p, "bash", "log line\n" * 9_000)
    result = run(p.check_and_compact(FIXED))
    assert result.before.tokens is not None and result.before.tokens >= COMPACT_LINE
    assert result.compaction is not None and result.compaction.strategy == "fallback"
    assert result.after.tokens is not None and result.after.tokens < HANDOFF_LINE
    assert p.messages[0].meta.kind == KIND_COMPACT_SUMMARY
    assert not find_orphans(p.messages)
    assert transcript_api(p) == list(p.messages)


def test_no_usage_anchor_on_the_first_request_uses_the_full_estimate(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.add(user("please review this log:\n" + "trace frame\n" * 9_000))
    result = run(p.check_and_compact(FIXED))
    assert result.before.source == "estimate"
    assert result.compaction is not None


def test_fork_requests_skip_the_check(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.add(user("x" * 200_000))
    result = run(p.check_and_compact(FIXED, fork=True))
    assert result.skipped == "fork"
    assert result.compaction is None
    assert p.messages[0].text == "x" * 200_000


#: A fixed context (system prompt and tools) that takes most of the budget: no
#: compaction can bring a request under the compaction line.
HEAVY = FixedContext((system("fixed " * 12_500),))


def test_no_second_compaction_on_the_same_loop_before_a_response(tmp_path: Path) -> None:
    p = make(tmp_path)
    converse(p, rounds=6, fixed=HEAVY)
    p.add(user("and now the exporter"))
    first = run(p.check_and_compact(HEAVY))
    assert first.compaction is not None
    assert first.after.phase == "compaction_due"  # the fixed context keeps it over the line
    second = run(p.check_and_compact(HEAVY))
    assert second.compaction is None
    assert any("not compacting again" in w for w in second.warnings)


def test_a_compaction_that_cannot_get_under_the_line_is_not_repeated_until_growth(
    tmp_path: Path,
) -> None:
    """No compaction loop: the same mandatory content would land in the same place."""
    p = make(tmp_path)
    converse(p, rounds=6, fixed=HEAVY)
    p.add(user("and now the exporter"))
    first = run(p.check_and_compact(HEAVY))
    assert first.compaction is not None
    respond(p, first.after.tokens or 0)  # the provider confirms: still over the line
    p.add(user("next"))
    again = run(p.check_and_compact(HEAVY))
    assert again.compaction is None
    assert any("could not get under the compaction line" in w for w in again.warnings)
    # Once the context has grown by a tenth of the budget, compacting can help again.
    floor = first.after.tokens or 0
    n = 0
    while (p.project(HEAVY).tokens or 0) < floor + 0.1 * BUDGET:
        p.add(user(f"requirement {n}: " + "the exporter keeps every row " * 10))
        respond(p, (p.project(HEAVY).tokens or 0) + 10, "noted")
        n += 1
    assert (p.project(HEAVY).tokens or 0) <= BUDGET
    assert run(p.check_and_compact(HEAVY)).compaction is not None


def test_after_compaction_the_estimate_counts_only_the_context_after_the_boundary(
    tmp_path: Path,
) -> None:
    p = make(tmp_path)
    p.add(user("task"))
    respond(p, 3_000)
    tool_turn(p, "bash", "output\n" * 12_000)
    run(p.check_and_compact(FIXED))
    projected = p.project(FIXED)
    assert projected.source == "estimate"
    assert projected.tokens == FIXED.tokens + sum(estimate_message_tokens(m) for m in p.messages)
    ui = read_transcript(p.transcript_path).ui()
    assert len(ui) > len(p.messages)  # the old messages stay for the UI


# ---------------------------------------------------------------------------
# Seed 004: total_tokens only


def test_a_huge_cache_read_with_a_small_total_never_triggers(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.add(user("task"))
    p.add(
        assistant(
            "ok",
            usage=Usage(
                prompt_tokens=2_000,
                completion_tokens=100,
                total_tokens=2_100,
                cache_read_input_tokens=900_000,
                cache_creation_input_tokens=50_000,
            ),
        )
    )
    p.add(user("go on"))
    result = run(p.check_and_compact(FIXED))
    assert result.compaction is None
    assert result.before.phase == "below_handoff"


def test_total_under_the_line_stays_under_even_if_cache_fields_would_push_it_over(
    tmp_path: Path,
) -> None:
    p = make(tmp_path)
    p.add(user("task"))
    total = int(COMPACT_LINE) - 500
    p.add(assistant("ok", usage=Usage(total - 10, 10, total, cache_read_input_tokens=10_000)))
    result = run(p.check_and_compact(FIXED))
    assert result.compaction is None
    assert result.before.tokens == total


# ---------------------------------------------------------------------------
# Handoff, snip, micro compact


def test_handoff_is_appended_once_per_epoch_hidden_and_durable(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.add(user("task"))
    respond(p, int(HANDOFF_LINE) + 200)
    first = run(p.check_and_compact(FIXED))
    assert first.handoff and first.compaction is None
    handoffs = [m for m in p.messages if m.meta.kind == KIND_HANDOFF]
    assert len(handoffs) == 1 and handoffs[0].meta.hidden
    second = run(p.check_and_compact(FIXED))
    assert not second.handoff
    transcript = read_transcript(p.transcript_path)
    assert next(r for r in transcript.records if isinstance(r, HandoffRecord)).epoch == 0
    assert all(m.meta.kind != KIND_HANDOFF for m in transcript.ui())
    # A restart does not hand off twice in the same epoch.
    p.close()
    again = make(tmp_path)
    assert not run(again.check_and_compact(FIXED)).handoff


def test_handoff_messages_are_stripped_from_the_compaction_input(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.add(user("task"))
    respond(p, int(HANDOFF_LINE) + 200)
    assert run(p.check_and_compact(FIXED)).handoff
    tool_turn(p, "bash", "y\n" * 20_000)
    assert run(p.check_and_compact(FIXED)).compaction is not None
    assert all(m.meta.kind != KIND_HANDOFF for m in p.messages)
    assert "token-budget-handoff" not in p.messages[0].text


class ScriptedModelSummarizer:
    """Stands for the LLM's fork (the pipeline treats it as a model call); counts calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def summarize(self, request: SummaryRequest) -> Summary:
        self.calls += 1
        return await FallbackSummarizer().summarize(request)


def reads(p: ContextPipeline, turns: int) -> None:
    p.add(user("survey the code"))
    for i in range(turns):
        tool_turn(p, "read_file", "def f():\n    pass\n" * 180, path=f"m{i}.py")


def test_over_the_compaction_line_a_snip_stands_in_for_a_model_compaction(
    tmp_path: Path,
) -> None:
    """One rewrite instead of a fork: the snip takes the context under the handoff line."""
    summarizer = ScriptedModelSummarizer()
    p = make(tmp_path, summarizer=summarizer)
    reads(p, 14)
    respond(p, int(COMPACT_LINE) + 500)
    result = run(p.check_and_compact(FIXED))
    assert result.before.phase == "compaction_due"
    assert result.compaction is None and result.edits > 0 and summarizer.calls == 0
    assert result.after.tokens is not None and result.after.tokens <= HANDOFF_LINE
    assert sum(is_elided(m) for m in p.messages) == result.edits
    edits = [
        r for r in read_transcript(p.transcript_path).records if isinstance(r, ContextEditRecord)
    ]
    assert len(edits) == 1
    assert transcript_api(p) == list(p.messages)


def test_over_the_compaction_line_the_fallback_compacts_rather_than_snips(
    tmp_path: Path,
) -> None:
    """Against the model-free fallback a snip is a cache miss as big as the compaction's
    that buys less room: the compaction runs, and nothing is snipped."""
    p = make(tmp_path)
    reads(p, 14)
    respond(p, int(COMPACT_LINE) + 500)
    result = run(p.check_and_compact(FIXED))
    assert result.compaction is not None and result.compaction.strategy == "fallback"
    assert result.edits == 0
    assert not any(
        isinstance(r, ContextEditRecord) for r in read_transcript(p.transcript_path).records
    )


def test_in_the_handoff_band_nothing_is_snipped(tmp_path: Path) -> None:
    """Regression: snips in the band rewrote the cached prefix for a compaction that
    came a few requests later anyway (8k replay: 134 snip requests, 11 % of the misses)."""
    p = make(tmp_path, summarizer=ScriptedModelSummarizer())
    reads(p, 14)
    respond(p, int(HANDOFF_LINE) + 1_000)
    result = run(p.check_and_compact(FIXED))
    assert result.before.phase == "handoff_band"
    assert result.compaction is None and result.edits == 0 and result.handoff


def test_a_held_back_snip_is_applied_when_no_compaction_can_run(tmp_path: Path) -> None:
    """Too small to replace a compaction, it is still better than nothing when the
    compaction fails and the policy is to skip."""
    summarizer = FailingSummarizer()
    p = make(tmp_path, summarizer=summarizer, on_failure="skip")
    reads(p, 4)
    respond(p, int(COMPACT_LINE) + 500)
    result = run(p.check_and_compact(FIXED))
    assert summarizer.calls == 1 and result.compaction is None
    assert result.edits == 1 and sum(is_elided(m) for m in p.messages) == 1
    assert result.before.tokens is not None and result.after.tokens is not None
    assert result.after.tokens < result.before.tokens
    assert transcript_api(p) == list(p.messages)


def test_snip_batching_rules() -> None:
    assert snip_target(10_000, 7_000) == 7_000 - int(SNIP_BATCH_SHARE * 10_000)
    # Only in place of a model compaction, and only one that buys real room (back
    # under the handoff line): repeated small snips are one cache miss each.
    assert snip_worth_it(1_600, 8_500, 7_000, saves_model_call=True)
    assert not snip_worth_it(1_400, 8_500, 7_000, saves_model_call=True)
    assert not snip_worth_it(0, 6_900, 7_000, saves_model_call=True)
    # Against the model-free fallback, never.
    assert not snip_worth_it(5_000, 8_500, 7_000, saves_model_call=False)


def test_the_handoff_reminder_does_not_make_the_compaction_due(tmp_path: Path) -> None:
    """Regression: the reminder's own weight pushed the context over the compaction
    line, so the compaction came a request early (in an 8k window the reminder is a
    fifth of the band). Whether a request fits still counts every token."""
    p = make(tmp_path)
    reads(p, 6)
    respond(p, int(HANDOFF_LINE) + 100)
    first = run(p.check_and_compact(FIXED))
    assert first.handoff
    reminder = p.messages[-1]
    cost = p._count(reminder)
    assert cost > 20
    # The provider counted the reminder: with it the context is over the line, without not.
    respond(p, math.ceil(COMPACT_LINE) + cost // 2)
    second = run(p.check_and_compact(FIXED))
    assert second.before.phase == "compaction_due"
    assert second.compaction is None
    p.close()
    # The same decision after a resume: the reminder is found in the reopened context.
    again = make(tmp_path)
    assert run(again.check_and_compact(FIXED)).compaction is None
    # Real growth still compacts.
    respond(again, math.ceil(COMPACT_LINE) + cost + 10)
    assert run(again.check_and_compact(FIXED)).compaction is not None


def test_compaction_due_rule() -> None:
    assert compaction_due(8_000, 0, 10_000, 0.8)
    assert not compaction_due(8_050, 100, 10_000, 0.8)
    assert compaction_due(8_100, 100, 10_000, 0.8)


def test_micro_compact_after_an_idle_minute_keeps_the_last_three_tool_turns(
    tmp_path: Path,
) -> None:
    clock = Clock()
    p = make(tmp_path, clock)
    p.add(user("task"))
    for i in range(5):
        tool_turn(p, "read_file", f"content {i}\n" * 50, path=f"f{i}.py")
    respond(p, 3_000)
    clock.now += 59
    assert run(p.check_and_compact(FIXED)).edits == 0
    clock.now += 2
    result = run(p.check_and_compact(FIXED))
    assert result.edits == 2
    results = [m for m in p.messages if m.role == "tool"]
    assert [is_elided(m) for m in results] == [True, True, False, False, False]
    assert transcript_api(p) == list(p.messages)


def test_micro_compact_runs_even_when_the_window_is_unknown(tmp_path: Path) -> None:
    clock = Clock()
    p = make(tmp_path, clock, context_window=None)
    for i in range(5):
        tool_turn(p, "read_file", "z" * 500, path=f"f{i}.py")
    respond(p, 1_000)
    clock.now += 120
    result = run(p.check_and_compact(FIXED))
    assert result.before.phase == "unknown"
    assert result.edits == 2 and result.compaction is None and not result.handoff


# ---------------------------------------------------------------------------
# Breaker and failure policies


def grow(p: ContextPipeline) -> None:
    tool_turn(p, "bash", "noise\n" * 14_000)


def due_and_anchored(p: ContextPipeline) -> None:
    """Over the compaction line by the provider's own count; only the newest result is
    still an estimate, so the request may go out if compaction is skipped."""
    p.add(user("task"))
    n = 0
    while (p.project(FIXED).tokens or 0) < COMPACT_LINE + 800:
        answer = f"finding {n}: the build spends its time linking the modules " * 60
        respond(p, (p.project(FIXED).tokens or 0) + len(answer) // 4, answer)
        p.add(user(f"and what about step {n}?"))
        n += 1


def test_failures_fall_back_and_the_breaker_stops_asking_after_three(tmp_path: Path) -> None:
    summarizer = FailingSummarizer()
    p = make(tmp_path, summarizer=summarizer)
    p.add(user("task"))
    strategies = []
    for _ in range(5):
        grow(p)
        result = run(p.check_and_compact(FIXED))
        assert result.compaction is not None
        strategies.append(result.compaction.strategy)
        respond(p, result.after.tokens or 0)
    assert strategies == ["fallback"] * 5
    assert summarizer.calls == 3  # the fourth and fifth never asked the model


def test_on_failure_skip_skips_the_fourth_compaction_with_a_warning(tmp_path: Path) -> None:
    """Seed 004 breaker: 3 consecutive failures, then the next high-token turn skips."""
    summarizer = FailingSummarizer()
    p = make(tmp_path, on_failure="skip", summarizer=summarizer)
    due_and_anchored(p)
    for attempt in range(1, 4):
        result = run(p.check_and_compact(FIXED))
        assert result.compaction is None
        assert any(f"({attempt} in a row)" in w for w in result.warnings)
    fourth = run(p.check_and_compact(FIXED))
    assert summarizer.calls == 3
    assert fourth.compaction is None
    assert any("compaction skipped" in w for w in fourth.warnings)


def test_a_success_resets_the_failure_count(tmp_path: Path) -> None:
    class FlakySummarizer:
        def __init__(self) -> None:
            self.calls = 0

        async def summarize(self, request: SummaryRequest) -> Summary:
            self.calls += 1
            if self.calls in (1, 2, 4, 5):
                raise SummarizerError("flaky")
            return await FallbackSummarizer().summarize(request)

    summarizer = FlakySummarizer()
    p = make(tmp_path, on_failure="skip", summarizer=summarizer)
    due_and_anchored(p)
    compacted = [run(p.check_and_compact(FIXED)).compaction is not None for _ in range(3)]
    assert compacted == [False, False, True]  # failed, failed, succeeded
    respond(p, p.project(FIXED).tokens or 0)
    refused = 0
    for _ in range(3):
        grow(p)
        try:
            run(p.check_and_compact(FIXED))
        except RequestTooLargeError:
            refused += 1  # skipped, and over the budget: the turn fails, nothing is sent
    # Two more failures did not open the breaker: the count restarted at the success.
    assert summarizer.calls == 6
    assert p.epoch == 2
    assert refused == 2


SMALL_WINDOW = 16_384  # output reserve 8,192 → input budget 8,192


def raised_fallback_history(p: ContextPipeline) -> None:
    """A history whose fallback block alone is ~6,470 estimated tokens: 30 exact records
    and a 100-item todo list, never cut, raise it past its target (4,090). With the
    system prompt it fits the 8,192-token budget as estimated (~6,480), not with the
    margin every request is checked with (~8,750)."""
    records = "\n".join(
        f"EXACT CONTINUATION RECORD [Decisions and rationale] :: decision {i}: "
        + "keep the public API stable " * 18
        for i in range(30)
    )
    p.add(user("fix the export\n" + records))
    todos = [
        {
            "content": f"step {i}: migrate the export module and rerun the whole suite",
            "status": "pending",
        }
        for i in range(100)
    ]
    call = ToolCall("call_todo", "todo_write", json.dumps({"todos": todos}))
    p.add(assistant(None, [call], usage=Usage(3_000, 40, 3_040)))
    p.add(tool_result(call.id, "ok"))


def test_a_fallback_whose_next_request_would_be_refused_is_not_committed(
    tmp_path: Path,
) -> None:
    """Regression (a property example): the fallback was committed, then the same
    check refused the request as over the budget — a refusal that changed the context."""
    p = make(tmp_path, summarizer=FailingSummarizer(), context_window=SMALL_WINDOW)
    raised_fallback_history(p)
    grow(p)
    before = list(p.messages)
    with pytest.raises(RequestTooLargeError) as refused:
        run(p.check_and_compact(FIXED))
    # Not sent, and nothing changed: in memory, on disk, no checkpoint.
    assert list(p.messages) == before
    assert transcript_api(p) == before
    assert p.epoch == 0
    assert refused.value.tokens > refused.value.budget
    assert "compaction not applied" in str(refused.value)


def test_a_due_fallback_that_would_not_fit_leaves_the_request_as_it_was(
    tmp_path: Path,
) -> None:
    """Due but still within the budget, the request goes out uncompacted rather than
    compacted into one the check refuses; a notice says why."""
    p = make(tmp_path, summarizer=FailingSummarizer(), context_window=SMALL_WINDOW)
    raised_fallback_history(p)
    grow(p)
    respond(p, 7_000)  # the provider counted the noise: due (6,554), not over
    before = list(p.messages)
    result = run(p.check_and_compact(FIXED))
    assert result.compaction is None
    assert any(w.startswith("compaction not applied") for w in result.warnings)
    assert (result.after.tokens or 0) <= SMALL_WINDOW // 2
    assert list(p.messages) == before
    assert transcript_api(p) == before


# ---------------------------------------------------------------------------
# Manual /compact


def test_manual_compact_runs_whatever_the_token_count(tmp_path: Path) -> None:
    p = make(tmp_path)
    converse(p)
    assert p.project(FIXED).phase == "below_handoff"
    outcome = run(p.compact(FIXED))
    assert outcome is not None and outcome.trigger == "manual"
    assert p.messages[0].meta.kind == KIND_COMPACT_SUMMARY
    assert outcome.post_tokens < outcome.pre_tokens


def test_a_manual_compact_of_one_exchange_is_a_notice_never_an_error(tmp_path: Path) -> None:
    """Issue 25 item 4 (was issue 9's 'compacted into a bigger context'): a one-exchange
    session is compacted with no kept tail, or refused as not smaller — a notice, with
    no error block, and the context unchanged."""
    p = make(tmp_path)
    p.add(user("small task"))
    respond(p, 500)
    before = list(p.messages)
    with pytest.raises(NothingToCompactError, match="not smaller"):
        run(p.compact(FIXED))
    assert list(p.messages) == before and p.epoch == 0
    ui = read_transcript(p.transcript_path).ui()
    assert all(m.meta.kind != "error" for m in ui)
    # An empty conversation has nothing at all to compact.
    empty = make(tmp_path / "empty")
    with pytest.raises(NothingToCompactError, match="nothing to compact"):
        run(empty.compact(FIXED))


def test_a_manual_compact_without_a_known_window_works(tmp_path: Path) -> None:
    """Regression: with no window every summary failed its own 'half the window (0)' gate."""
    p = make(tmp_path, context_window=None)
    converse(p)
    outcome = run(p.compact(FIXED))
    assert outcome is not None and outcome.post_tokens < outcome.pre_tokens


def test_a_failed_manual_compact_writes_an_error_block_and_keeps_the_context(
    tmp_path: Path,
) -> None:
    p = make(tmp_path, summarizer=FailingSummarizer())
    converse(p)
    before = list(p.messages)
    with pytest.raises(CompactionFailedError, match="no text after 3 rounds"):
        run(p.compact(FIXED))
    assert list(p.messages) == before
    ui = read_transcript(p.transcript_path).ui()
    assert ui[-1].meta.kind == "error"
    assert "Compaction failed" in ui[-1].text


def test_a_second_compact_while_one_runs_is_skipped(tmp_path: Path) -> None:
    summarizer = GatedSummarizer()
    p = make(tmp_path, summarizer=summarizer)
    converse(p)

    async def scenario() -> tuple[object, object]:
        first = asyncio.create_task(p.compact(FIXED))
        await asyncio.sleep(0)
        assert p.compacting
        second = await p.compact(FIXED)
        summarizer.gate.set()
        return await first, second

    first, second = run(scenario())
    assert first is not None and second is None
    assert summarizer.calls == 1 and not p.compacting


def test_manual_compact_resets_an_open_breaker(tmp_path: Path) -> None:
    summarizer = FailingSummarizer()
    p = make(tmp_path, on_failure="skip", summarizer=summarizer)
    due_and_anchored(p)
    for _ in range(4):
        run(p.check_and_compact(FIXED))
    assert summarizer.calls == 3
    with pytest.raises(CompactionFailedError):
        run(p.compact(FIXED))
    assert summarizer.calls == 4  # the manual compact asked the model again


# ---------------------------------------------------------------------------
# Durability: the checkpoint is saved before memory changes


@contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """A real write failure: the kernel refuses to grow files past ``limit`` (EFBIG)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def test_a_failed_checkpoint_save_fails_the_check_and_leaves_memory_untouched(
    tmp_path: Path,
) -> None:
    p = make(tmp_path)
    p.add(user("task"))
    for i in range(4):
        tool_turn(p, "read_file", "text\n" * 500, path=f"f{i}.py")
    grow(p)
    p.end_turn()
    path = p.transcript_path
    before_bytes = path.read_bytes()
    before_messages = list(p.messages)
    with file_size_limit(len(before_bytes) + 100), pytest.raises(CheckpointWriteError) as info:
        run(p.check_and_compact(FIXED))
    assert info.value.phase == "checkpoint"
    assert list(p.messages) == before_messages
    # Neither the checkpoint nor the deferred snip edits reached the file.
    assert path.read_bytes() == before_bytes
    # Once the disk has room again the same check succeeds.
    assert run(p.check_and_compact(FIXED)).compaction is not None
    assert transcript_api(p) == list(p.messages)


def test_a_resumed_pipeline_has_exactly_the_same_context(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.add(user("task"))
    respond(p, 2_000)
    grow(p)
    run(p.check_and_compact(FIXED))
    p.add(user("after the compaction"))
    p.end_turn()
    expected = list(p.messages)
    p.close()
    again = make(tmp_path)
    assert list(again.messages) == expected
    assert again.epoch == 1


def test_oversized_tool_results_are_saved_to_a_file_before_they_enter_the_context(
    tmp_path: Path,
) -> None:
    p = make(tmp_path)
    call = ToolCall("call_big", "bash", '{"command": "cat big.log"}')
    p.add(assistant(None, [call]))
    full = "".join(f"line {i}\n" for i in range(20_000))
    [stored] = p.add_tool_results([tool_result(call.id, full)])
    assert len(stored.text) < len(full)
    saved = Path(str(stored.meta.extra["full_output_path"]))
    assert saved.read_text(encoding="utf-8") == full
    assert saved.is_relative_to(tmp_path / "home")
