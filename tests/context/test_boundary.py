"""The per-boundary state, rebuilt from the records (``cairn.context.boundary``, issue 28)."""

from __future__ import annotations

from cairn.context.boundary import Boundary, floor_after
from cairn.messages import Usage, assistant, user
from cairn.store import CompactionRecord, ContextEditRecord, MessageRecord, Record
from cairn.store.records import Trigger


def compaction(trigger: Trigger = "auto") -> CompactionRecord:
    return CompactionRecord(
        trigger=trigger,
        strategy="llm",
        pre_tokens=9_000,
        post_tokens=3_000,
        summary="s",
        replacement_messages=(user("summary"),),
    )


def answered(prompt: int) -> MessageRecord:
    return MessageRecord(assistant("ok", usage=Usage(prompt, 10, prompt + 10)))


def rebuilt(*records: Record, ignored: frozenset[str] = frozenset()) -> Boundary:
    return Boundary.from_records(records, ignored, budget=10_000, compact_ratio=0.8)


def test_floor_after_is_set_only_at_or_over_the_line() -> None:
    assert floor_after(7_999, 10_000, 0.8) is None
    assert floor_after(8_000, 10_000, 0.8) == 8_000
    assert floor_after(50_000, None, 0.8) is None


def test_a_compaction_not_yet_answered_holds_the_next_one() -> None:
    state = rebuilt(answered(9_000), compaction())
    assert state.compacted_since_response and not state.reactive_used
    assert state.anchor is None  # rewritten after the last response
    assert rebuilt(answered(9_000), compaction("reactive")).reactive_used


def test_the_first_answer_after_a_compaction_sets_the_floor() -> None:
    over = rebuilt(compaction(), answered(8_500))
    assert not over.compacted_since_response and over.floor == 8_500
    under = rebuilt(compaction(), answered(4_000), answered(9_000))
    assert under.floor is None  # the first answer after it, not a later one


def test_the_anchor_is_the_last_answer_unless_an_edit_came_after_it() -> None:
    last = answered(5_000)
    assert rebuilt(answered(4_000), last).anchor == last.message
    assert rebuilt(last, ContextEditRecord(())).anchor is None


def test_an_ignored_checkpoint_does_not_count() -> None:
    record = compaction()
    state = rebuilt(answered(9_000), record, ignored=frozenset({record.id}))
    assert not state.compacted_since_response and state.anchor is not None


def test_a_response_clears_the_flags_and_measures_the_floor() -> None:
    state = Boundary(compacted_since_response=True, reactive_used=True)
    state.responded(9_000, budget=10_000, compact_ratio=0.8)
    assert (state.compacted_since_response, state.reactive_used, state.floor) == (
        False,
        False,
        9_000,
    )
    state.responded(9_500, budget=10_000, compact_ratio=0.8)
    assert state.floor == 9_000  # only the first response after a compaction measures it
