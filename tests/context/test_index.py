"""ContextIndex: the check's counts and snip candidates, kept as the view changes (issue 17)."""

from __future__ import annotations

from collections.abc import Sequence

from cairn.context.effects import ToolEffect
from cairn.context.index import ContextIndex
from cairn.context.snip import (
    STUB_PREFIX,
    apply_edits,
    elision_gain,
    micro_compact_edits,
    snip_edits,
    tokens_saved,
    tool_turns,
)
from cairn.messages import Message, ToolCall, assistant, tool_result, user
from cairn.store.records import ContentEdit
from cairn.tokens import estimate_message_tokens

EFFECTS: dict[str, ToolEffect] = {"read_file": "read_only", "bash": "write"}


class Counting:
    """``estimate_message_tokens``, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, message: Message) -> int:
        self.calls += 1
        return estimate_message_tokens(message)


def read_turn(n: int, size: int = 4_000) -> list[Message]:
    call = ToolCall(f"c{n}", "read_file", f'{{"path": "m{n}.py"}}')
    return [assistant(None, [call]), tool_result(call.id, "x" * size, name="read_file")]


class View:
    """Stands for the store's API view: a list that grows, is edited in place, or is replaced."""

    def __init__(self, messages: list[Message]) -> None:
        self.messages = messages

    def __call__(self) -> Sequence[Message]:
        return self.messages

    def edit(self, edits: Sequence[ContentEdit]) -> None:
        self.messages[:] = apply_edits(self.messages, edits)


def indexed(messages: list[Message]) -> tuple[View, ContextIndex, Counting]:
    view, count = View(messages), Counting()
    index = ContextIndex(view, count, EFFECTS)
    index.sync()
    return view, index, count


def test_a_sync_counts_only_what_was_appended_since_the_last() -> None:
    view, index, count = indexed([user("task"), *(m for n in range(50) for m in read_turn(n))])
    assert count.calls == 101
    index.sync()
    assert count.calls == 101
    view.messages.append(user("and now?"))
    assert index.total == sum(estimate_message_tokens(m) for m in view.messages)
    assert count.calls == 102
    assert index.tokens_from(100) == sum(estimate_message_tokens(m) for m in view.messages[100:])


def test_with_everything_elided_a_snip_plan_touches_no_message() -> None:
    view, index, count = indexed([user("task"), *(m for n in range(50) for m in read_turn(n))])
    edits, _ = index.snip_edits(excess=10**9)
    assert len(edits) == 47  # all but the last three turns
    view.edit(edits)
    index.edited(edits)
    calls = count.calls
    assert index.snip_edits(excess=10**9) == ([], 0)
    assert index.micro_compact_edits() == []
    assert count.calls == calls


def test_a_round_waiting_for_results_becomes_a_turn_when_they_arrive() -> None:
    calls = [ToolCall("a", "read_file", "{}"), ToolCall("b", "bash", "{}")]
    view, index, _ = indexed([user("task"), assistant(None, calls), tool_result("a", "1" * 900)])
    assert index.tool_turns() == [] == tool_turns(view.messages)
    view.messages.append(tool_result("b", "2" * 900))
    assert index.tool_turns() == tool_turns(view.messages) != []
    for n in range(3):
        view.messages.extend(read_turn(n))
    assert index.snip_edits(excess=1) == snip_edits(
        view.messages, excess=1, effects=EFFECTS, count=estimate_message_tokens
    )


def test_a_new_view_is_indexed_from_scratch() -> None:
    history = [user("task"), *(m for n in range(8) for m in read_turn(n))]
    view, index, _ = indexed(history)
    # A compaction: the store's view becomes another, shorter list.
    view.messages = [user("summary"), *history[-6:]]
    assert index.counts() == [estimate_message_tokens(m) for m in view.messages]
    assert index.micro_compact_edits() == []
    # The same list object rewritten in place at the same length: the last message tells.
    view.messages[:] = [user("other"), *history[-6:-1], user("replaced")]
    assert index.counts() == [estimate_message_tokens(m) for m in view.messages]


def test_micro_compact_and_snip_in_one_check_agree_with_the_rules() -> None:
    view, index, _ = indexed([user("task"), *(m for n in range(8) for m in read_turn(n))])
    micro = index.micro_compact_edits()
    assert micro == micro_compact_edits(view.messages)
    assert index.tokens_saved(micro) == tokens_saved(view.messages, micro, estimate_message_tokens)
    # Planned after the micro compact of the same check: nothing is left to snip.
    assert index.snip_edits(excess=10**9, after=micro) == ([], 0)


def test_duplicate_ids_are_answered_by_the_rules_themselves() -> None:
    first = read_turn(0)
    messages = [user("task"), *first, *(m for n in range(1, 6) for m in read_turn(n))]
    messages.append(first[1])  # the same result message twice: an orphan with a known id
    _, index, _ = indexed(messages)
    expected = snip_edits(messages, excess=10**9, effects=EFFECTS, count=estimate_message_tokens)
    assert index.snip_edits(excess=10**9) == expected
    assert index.micro_compact_edits() == micro_compact_edits(messages)


def test_a_result_whose_stub_is_longer_is_never_planned_and_never_revisited() -> None:
    tiny = [m for n in range(6) for m in read_turn(n, size=3)]
    _, index, count = indexed([user("task"), *tiny])
    assert index.snip_edits(excess=10**9) == ([], 0)
    calls = count.calls
    assert index.snip_edits(excess=10**9) == ([], 0)
    assert count.calls == calls
    # Micro compact elides them all the same.
    assert len(index.micro_compact_edits()) == 3


def test_elision_gain_and_tokens_saved_rules() -> None:
    result = tool_result("c", "y" * 4_000)
    stub = f"{STUB_PREFIX}: …]"
    gain = elision_gain(result, stub, estimate_message_tokens)
    assert gain == estimate_message_tokens(result) - estimate_message_tokens(
        result.with_content(stub)
    )
    assert gain > 900
    assert elision_gain(tool_result("c", "y"), stub, estimate_message_tokens) < 0
    messages = [user("task"), result]
    edits = [ContentEdit(result.id, stub), ContentEdit("absent", stub)]
    assert tokens_saved(messages, edits, estimate_message_tokens) == gain
    assert tokens_saved(messages, [], estimate_message_tokens) == 0
