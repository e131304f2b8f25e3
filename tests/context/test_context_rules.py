"""The pipeline's rules, one pure function or small class at a time."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from pydantic import ValidationError

from cairn.context.breaker import CompactionBreaker, breaker_key
from cairn.context.budget import handoff_line, input_budget, output_reserve, phase_for
from cairn.context.config import CompactionConfig
from cairn.context.effects import (
    CLASS_ERROR,
    CLASS_READ_ONLY,
    CLASS_WRITE,
    ToolEffect,
    call_path,
    turn_class,
    written_files,
)
from cairn.context.handoff import (
    HANDOFF_OPEN,
    HandoffLedger,
    build_handoff_message,
    is_strict_handoff,
)
from cairn.context.snip import (
    STUB_PREFIX,
    apply_edits,
    is_elided,
    micro_compact_edits,
    snip_edits,
)
from cairn.context.tracker import ContextTokenTracker, FixedContext, TokenSnapshot
from cairn.messages import (
    KIND_HANDOFF,
    JSONObject,
    Message,
    MessageMeta,
    ToolCall,
    Usage,
    assistant,
    find_orphans,
    system,
    tool_result,
    user,
)
from cairn.provider import ModelConfig
from cairn.store.records import ContentEdit, HandoffRecord
from cairn.tokens import estimate_message_tokens, estimate_tokens

EFFECTS: dict[str, ToolEffect] = {
    "read_file": "read_only",
    "grep": "read_only",
    "edit_file": "write",
    "bash": "write",
}


def turn(name: str, args: str, result: str, *, error: bool = False) -> list[Message]:
    call = ToolCall(f"call_{name}_{abs(hash((args, result))) % 10**8}", name, args)
    return [assistant(None, [call]), tool_result(call.id, result, error=error)]


# ---------------------------------------------------------------------------
# Budget


@pytest.mark.parametrize(
    ("window", "max_output", "reserve"),
    [
        (128_000, None, 12_800),  # 10 %
        (32_000, None, 8_192),  # clamped up to 8k
        (1_000_000, None, 32_768),  # clamped down to 32k
        (10_000, None, 5_000),  # never more than half the window
        (128_000, 4_096, 4_096),  # a configured cap is the reserve
        (8_192, 16_000, 4_096),  # ... still at most half the window
    ],
)
def test_output_reserve(window: int, max_output: int | None, reserve: int) -> None:
    assert output_reserve(window, max_output) == reserve
    assert input_budget(window, max_output) == window - reserve


def test_phases_split_at_70_and_80_percent_of_the_input_budget() -> None:
    assert phase_for(6_999, 10_000, 0.7, 0.8) == "below_handoff"
    assert phase_for(7_000, 10_000, 0.7, 0.8) == "handoff_band"
    assert phase_for(7_999, 10_000, 0.7, 0.8) == "handoff_band"
    assert phase_for(8_000, 10_000, 0.7, 0.8) == "compaction_due"
    assert handoff_line(10_000, 0.7) == 6_999
    assert phase_for(handoff_line(12_345, 0.7), 12_345, 0.7, 0.8) == "below_handoff"


def test_compact_ratio_one_reproduces_seed_004_max_input_tokens() -> None:
    assert phase_for(9_999, 10_000, 1.0, 1.0) == "below_handoff"
    assert phase_for(10_000, 10_000, 1.0, 1.0) == "compaction_due"


# ---------------------------------------------------------------------------
# Config


def test_config_defaults_follow_the_design() -> None:
    config = CompactionConfig()
    assert (config.handoff_ratio, config.compact_ratio, config.keep_rounds) == (0.7, 0.8, 2)
    assert (config.on_failure, config.micro_compact_idle_s, config.breaker_threshold) == (
        "fallback",
        60.0,
        3,
    )


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"handoff_ratio": 1.5}, "handoff_ratio"),
        ({"compact_ratio": 0}, "compact_ratio"),
        ({"on_failure": "retry"}, "on_failure"),
        ({"checkpoint_share": 0.9}, "checkpoint_share"),
        ({"context_window": 32_768}, "context_window"),  # a model setting, not a policy
        ({"handoff_ratio": 0.9, "compact_ratio": 0.8}, "must not exceed"),
        ({"compact_ration": 0.8}, "compact_ration"),
    ],
)
def test_bad_config_values_are_errors_naming_the_key(values: dict[str, object], named: str) -> None:
    with pytest.raises(ValidationError, match=named):
        CompactionConfig.model_validate(values)


# ---------------------------------------------------------------------------
# Tracker


def tracker(window: int | None = 100_000) -> ContextTokenTracker:
    return ContextTokenTracker(CompactionConfig(), ModelConfig(model="m", context_window=window))


def test_no_usage_yet_means_a_full_local_estimate() -> None:
    messages = [user("hello " * 100), user("你好" * 50)]
    snap = tracker().project(messages, 40, 0)
    assert snap.source == "estimate"
    assert snap.tokens == 40 + sum(estimate_message_tokens(m) for m in messages)


def test_projection_is_baseline_plus_what_came_after_the_response() -> None:
    t = tracker()
    history = [user("task"), assistant("ok", usage=Usage(5_000, 200, 5_200))]
    t.observe(history, fixed_tokens=300, revision=0)
    later = [*history, user("next step " * 40), user("中文" * 10)]
    snap = t.project(later, 300, 0)
    assert snap.source == "anchored"
    # The response itself is inside the baseline: never added again.
    assert snap.tokens == 5_200 + sum(estimate_message_tokens(m) for m in later[2:])


def test_baseline_is_max_of_total_and_prompt_plus_completion() -> None:
    t = tracker()
    history = [
        assistant("ok", usage=Usage(prompt_tokens=900, completion_tokens=200, total_tokens=0))
    ]
    t.observe(history, 0, 0)
    assert t.project(history, 0, 0).tokens == 1_100


def test_cache_fields_never_count() -> None:
    """Seed 004: a huge cache_read_input_tokens with a small total never triggers."""
    t = tracker(100_000)
    usage = Usage(
        prompt_tokens=10_000,
        completion_tokens=100,
        total_tokens=10_100,
        cached_tokens=9_000,
        cache_read_input_tokens=500_000,
        cache_creation_input_tokens=80_000,
    )
    history = [assistant("ok", usage=usage)]
    t.observe(history, 0, 0)
    snap = t.project(history, 0, 0)
    assert snap.tokens == 10_100
    assert snap.phase == "below_handoff"


def test_fixed_context_growth_is_added_but_shrinking_is_not_subtracted() -> None:
    t = tracker()
    history = [assistant("ok", usage=Usage(1_000, 10, 1_010))]
    t.observe(history, fixed_tokens=500, revision=0)
    assert t.project(history, 800, 0).tokens == 1_310
    assert t.project(history, 100, 0).tokens == 1_010


@pytest.mark.parametrize("change", ["revision", "rewrite", "first_appended_not_anchor"])
def test_untrustworthy_baselines_fall_back_to_a_full_estimate(change: str) -> None:
    t = tracker()
    response = assistant("ok", usage=Usage(50_000, 10, 50_010))
    history = [user("task"), response]
    t.observe(history, 0, 0)
    revision = 0
    if change == "revision":
        revision = 1
    elif change == "rewrite":
        history = [user("task"), Message(role="assistant", content="other")]
    else:
        history = [user("task"), user("inserted"), response]
    snap = t.project(history, 0, revision)
    assert snap.source == "estimate"
    assert snap.tokens == sum(estimate_message_tokens(m) for m in history)


def test_unknown_window_gives_an_unknown_snapshot() -> None:
    snap = tracker(None).project([user("x")], 0, 0)
    assert snap == TokenSnapshot(None, "unknown", None, "unknown")
    assert snap.ratio is None


def test_fixed_context_counts_system_prompt_and_tool_schemas_once() -> None:
    tools: tuple[JSONObject, ...] = (
        {"type": "function", "function": {"name": "read_file", "parameters": {}}},
    )
    fixed = FixedContext((system("You are Cairn."),), tools)
    # Schemas at the prose rate: mostly descriptions (the JSON rate counted them 2.2×).
    assert fixed.tokens == estimate_message_tokens(system("You are Cairn.")) + estimate_tokens(
        '[{"type":"function","function":{"name":"read_file","parameters":{}}}]'
    )
    assert FixedContext().tokens == 0


# ---------------------------------------------------------------------------
# Handoff


def snapshot_at(tokens: int) -> TokenSnapshot:
    return TokenSnapshot(tokens, "anchored", 10_000, "handoff_band")


def test_handoff_message_is_hidden_synthetic_and_strict_v1() -> None:
    message = build_handoff_message(snapshot_at(7_300))
    assert message.meta == MessageMeta(kind=KIND_HANDOFF, hidden=True, synthetic=True)
    assert message.role == "user"
    assert message.text.startswith(HANDOFF_OPEN)
    assert "73%" in message.text and "7,300 of 10,000" in message.text
    assert is_strict_handoff(HandoffRecord(message, epoch=0))


def test_one_handoff_per_epoch() -> None:
    ledger = HandoffLedger()
    assert ledger.status(0) == "open"
    ledger.observe(HandoffRecord(build_handoff_message(snapshot_at(7_100)), epoch=0))
    assert ledger.status(0) == "done"
    assert ledger.status(1) == "open"


def test_a_duplicate_handoff_record_suppresses_the_epoch() -> None:
    record = HandoffRecord(build_handoff_message(snapshot_at(7_100)), epoch=2)
    ledger = HandoffLedger.from_records([record, record])
    assert ledger.status(2) == "suppressed"


@pytest.mark.parametrize(
    "bad",
    [
        HandoffRecord(build_handoff_message(snapshot_at(7_100)), epoch=0, version=2),
        HandoffRecord(user('<token-budget-handoff version="1">x</token-budget-handoff>'), 0),
        HandoffRecord(
            Message(
                role="user", content="no tag", meta=MessageMeta(kind=KIND_HANDOFF, hidden=True)
            ),
            0,
        ),
    ],
)
def test_a_malformed_handoff_record_suppresses_the_epoch(bad: HandoffRecord) -> None:
    assert not is_strict_handoff(bad)
    assert HandoffLedger.from_records([bad]).status(0) == "suppressed"


# ---------------------------------------------------------------------------
# Tool effects and turn classes


def test_turn_classes_are_declared_by_tools_not_guessed() -> None:
    assert turn_class(turn("read_file", '{"path": "a"}', "x"), EFFECTS) == CLASS_READ_ONLY
    assert turn_class(turn("edit_file", '{"path": "a"}', "ok"), EFFECTS) == CLASS_WRITE
    assert turn_class(turn("read_file", "{}", "boom", error=True), EFFECTS) == CLASS_ERROR
    # A tool named like a reader but not declared read-only counts as writing.
    assert turn_class(turn("read_everything", "{}", "x"), EFFECTS) == CLASS_WRITE


def test_written_files_come_from_writing_calls_in_order_once() -> None:
    history = [
        *turn("edit_file", '{"path": "b.py"}', "ok"),
        *turn("read_file", '{"path": "r.py"}', "x"),
        *turn("edit_file", '{"file_path": "a.py"}', "ok"),
        *turn("edit_file", '{"path": "b.py"}', "ok"),
    ]
    assert written_files(history, EFFECTS) == ["b.py", "a.py"]
    assert call_path("not json") is None
    assert call_path('["a"]') is None


# ---------------------------------------------------------------------------
# Snip and micro compact


def history_of_turns() -> list[Message]:
    return [
        user("task"),
        *turn("edit_file", '{"path": "w.py"}', "W" * 4_000),  # write
        *turn("read_file", '{"path": "r1.py"}', "R" * 4_000),  # read-only
        *turn("bash", '{"command": "pytest"}', "E" * 4_000, error=True),  # error
        *turn("read_file", '{"path": "r2.py"}', "S" * 4_000),  # read-only
        *turn("grep", '{"q": "x"}', "1"),  # retained window: last 3 turns
        *turn("grep", '{"q": "y"}', "2"),
        *turn("grep", '{"q": "z"}', "3"),
    ]


def elided_results(messages: list[Message], edits: Sequence[ContentEdit]) -> list[str]:
    edited = apply_edits(messages, edits)
    return [m.tool_call_id or "" for m in edited if m.role == "tool" and is_elided(m)]


def test_snip_elides_read_only_then_writes_then_errors_oldest_first() -> None:
    messages = history_of_turns()
    every, saved = snip_edits(
        messages, excess=10**9, effects=EFFECTS, count=estimate_message_tokens
    )
    # Read-only first (r1, then r2), then the write, then the error.
    assert [e.message_id for e in every] == [messages[i].id for i in (4, 8, 2, 6)]
    by_id = {m.id: m for m in messages}
    gains = [
        estimate_message_tokens(by_id[e.message_id])
        - estimate_message_tokens(by_id[e.message_id].with_content(e.content))
        for e in every
    ]
    assert saved == sum(gains)
    # Snip stops as soon as the excess is covered.
    for n in range(1, 5):
        edits, got = snip_edits(
            messages, excess=sum(gains[: n - 1]) + 1, effects=EFFECTS, count=estimate_message_tokens
        )
        assert edits == every[:n]
        assert got == sum(gains[:n])


def test_snip_never_touches_the_retained_window_and_keeps_the_calls() -> None:
    messages = history_of_turns()
    edits, _ = snip_edits(messages, excess=10**9, effects=EFFECTS, count=estimate_message_tokens)
    edited = apply_edits(messages, edits)
    assert [m.text for m in edited[-6:]] == [m.text for m in messages[-6:]]
    assert [m.tool_calls for m in edited] == [m.tool_calls for m in messages]
    assert not find_orphans(edited)


def test_the_stub_names_the_tool_and_its_arguments() -> None:
    messages = history_of_turns()
    edits, _ = snip_edits(messages, excess=1, effects=EFFECTS, count=estimate_message_tokens)
    assert edits[0].content.startswith(STUB_PREFIX)
    assert 'read_file {"path": "r1.py"} returned 4,000 characters' in edits[0].content


def test_snip_does_nothing_without_excess() -> None:
    assert snip_edits(
        history_of_turns(), excess=0, effects=EFFECTS, count=estimate_message_tokens
    ) == ([], 0)


def test_micro_compact_keeps_only_the_last_three_tool_turns() -> None:
    messages = history_of_turns()
    edits = micro_compact_edits(messages)
    assert len(edits) == 4
    assert {e.reason for e in edits} == {"micro_compact"}
    edited = apply_edits(messages, edits)
    assert [m.text for m in edited[-6:]] == ["", "1", "", "2", "", "3"]
    # Already-elided results are not edited twice.
    assert micro_compact_edits(edited) == []


# ---------------------------------------------------------------------------
# Breaker


def test_breaker_opens_after_three_consecutive_failures_and_closes_on_success() -> None:
    breaker = CompactionBreaker(threshold=3)
    key = breaker_key("/ws", "s1")
    for expected in (1, 2):
        assert breaker.record_failure(key) == expected
        assert not breaker.is_open(key)
    breaker.record_failure(key)
    assert breaker.is_open(key)
    breaker.record_success(key)
    assert breaker.failures(key) == 0 and not breaker.is_open(key)


def test_breaker_keys_isolate_sessions_and_normalize_workspaces(tmp_path: object) -> None:
    breaker = CompactionBreaker(threshold=1)
    breaker.record_failure(breaker_key("/ws/../ws", "s1"))
    assert breaker.is_open(breaker_key("/ws", "s1"))
    assert not breaker.is_open(breaker_key("/ws", "s2"))
    assert not breaker.is_open(breaker_key("/other", "s1"))


def test_compaction_would_help_only_after_regrowth() -> None:
    from cairn.context.budget import compaction_would_help

    assert compaction_would_help(9_000, None, 10_000)
    assert not compaction_would_help(9_000, 8_500, 10_000)
    assert not compaction_would_help(9_499, 8_500, 10_000)
    assert compaction_would_help(9_500, 8_500, 10_000)


# ---------------------------------------------------------------------------
# The three decisions, as named rules (issue 28)


@pytest.mark.parametrize(
    ("tokens", "estimated", "expected"),
    [
        (10_000, 0, True),  # all counted by the provider: exactly the budget fits
        (10_001, 0, False),
        (9_000, 2_000, True),  # 9,000 + 35 % of 2,000 = 9,700
        (9_000, 3_000, False),  # 9,000 + 1,050 > 10,000
    ],
)
def test_may_send_puts_the_margin_on_the_estimated_part_only(
    tokens: int, estimated: int, expected: bool
) -> None:
    from cairn.context.budget import may_send

    assert may_send(tokens, estimated, 10_000) is expected


def test_a_compaction_waits_for_a_response_then_for_regrowth() -> None:
    from cairn.context.budget import compaction_hold, may_compact_now

    def hold(tokens: int, *, since: bool = False, floor: int | None = None) -> object:
        return compaction_hold(tokens, 10_000, compacted_since_response=since, floor=floor)

    assert hold(9_000) is None
    assert hold(9_000, since=True) == "awaiting_response"
    assert hold(9_000, floor=8_500) == "no_regrowth"  # grew less than 10 % of the budget
    assert hold(9_500, floor=8_500) is None
    assert hold(9_500, since=True, floor=8_500) == "awaiting_response"
    assert may_compact_now(9_500, 10_000, compacted_since_response=False, floor=8_500)
    assert not may_compact_now(9_000, 10_000, compacted_since_response=True, floor=None)


@pytest.mark.parametrize(
    ("output_started", "reactive_used", "expected"),
    [(False, False, True), (True, False, False), (False, True, False), (True, True, False)],
)
def test_a_reactive_compaction_only_before_output_and_once_per_boundary(
    output_started: bool, reactive_used: bool, expected: bool
) -> None:
    from cairn.context.budget import reactive_allowed

    allowed = reactive_allowed(output_started=output_started, reactive_used=reactive_used)
    assert allowed is expected
