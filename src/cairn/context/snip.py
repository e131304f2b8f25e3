"""Snip and micro compact: elide old tool results, keep the calls (DESIGN §5.3).

Both only *plan* edits — ``ContentEdit`` values that replace a result with a
one-line stub naming the tool and its arguments. The pipeline applies them
after the rest of its check succeeded and persists them as one
``context_edit`` record, so a resumed session rebuilds the same context.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from cairn.context.effects import ToolEffects, turn_class
from cairn.messages import Message, Round, ToolCall, group_rounds
from cairn.store.records import ContentEdit

#: Tool turns at the end of the context that neither snip nor micro compact touch.
RETAINED_TOOL_TURNS = 3
STUB_PREFIX = "[tool result elided"
_MAX_STUB_ARGUMENTS = 200


def is_elided(message: Message) -> bool:
    return isinstance(message.content, str) and message.content.startswith(STUB_PREFIX)


def stub_for(call: ToolCall | None, result: Message) -> str:
    """The one line that stands in for an elided result."""
    name = call.name if call else (result.name or "tool")
    arguments = call.arguments if call else ""
    if len(arguments) > _MAX_STUB_ARGUMENTS:
        arguments = arguments[:_MAX_STUB_ARGUMENTS] + "…"
    size = len(result.text)
    return (
        f"{STUB_PREFIX} to save context: {name} {arguments} returned {size:,} characters; "
        "run the tool again if you need them]"
    )


def tool_turns(messages: Sequence[Message]) -> list[Round]:
    """Complete rounds that carry tool calls, oldest first."""
    return [r for r in group_rounds(messages) if r.complete and messages[r.start].tool_calls]


def elidable(message: Message) -> bool:
    """Whether an edit could still replace this result with a stub (text, not a stub yet)."""
    return not is_elided(message) and isinstance(message.content, str | None)


def turn_edits(messages: Sequence[Message], turn: Round, reason: str) -> list[ContentEdit]:
    """The edits that elide every result of ``turn`` not elided yet, in order."""
    calls = {c.id: c for c in messages[turn.start].tool_calls}
    edits = []
    for result in messages[turn.start + 1 : turn.end]:
        if not elidable(result):
            continue
        stub = stub_for(calls.get(result.tool_call_id or ""), result)
        edits.append(ContentEdit(result.id, stub, reason))
    return edits


def elision_gain(message: Message, stub: str, count: Callable[[Message], int]) -> int:
    """Tokens saved by replacing ``message``'s content with ``stub`` (≤ 0 for a tiny result)."""
    return count(message) - count(message.with_content(stub))


def micro_compact_edits(
    messages: Sequence[Message], keep_turns: int = RETAINED_TOOL_TURNS
) -> list[ContentEdit]:
    """Elide every tool result except the last ``keep_turns`` turns'.

    Used when the provider's prompt cache has expired anyway (idle past the
    threshold), so rewriting old turns costs no cache hit.
    """
    turns = tool_turns(messages)
    old = turns[: max(len(turns) - keep_turns, 0)]
    return [edit for turn in old for edit in turn_edits(messages, turn, "micro_compact")]


def snip_edits(
    messages: Sequence[Message],
    *,
    excess: int,
    effects: ToolEffects,
    count: Callable[[Message], int],
    keep_turns: int = RETAINED_TOOL_TURNS,
) -> tuple[list[ContentEdit], int]:
    """Elide old tool results until ``excess`` tokens are saved; return edits and tokens saved.

    Candidates are the turns before the retained window, taken read-only
    first, then writes, then errors (side effects and failures are the
    evidence worth keeping longest), oldest first within a class.
    """
    if excess <= 0:
        return [], 0
    turns = tool_turns(messages)
    candidates = turns[: max(len(turns) - keep_turns, 0)]
    ordered = sorted(
        enumerate(candidates),
        key=lambda item: (turn_class(messages[item[1].start : item[1].end], effects), item[0]),
    )
    edits: list[ContentEdit] = []
    saved = 0
    by_id = {m.id: m for turn in candidates for m in messages[turn.start : turn.end]}
    for _, turn in ordered:
        for edit in turn_edits(messages, turn, "snip"):
            gain = elision_gain(by_id[edit.message_id], edit.content, count)
            if gain <= 0:
                continue
            edits.append(edit)
            saved += gain
        if saved >= excess:
            break
    return edits, saved


#: A snip aims this share of the input budget below the handoff line, so the
#: next one is many requests away: each snip rewrites an old message, and the
#: provider's prompt cache is lost from there on.
SNIP_BATCH_SHARE = 0.25


def snip_target(budget: int, handoff_line: int) -> int:
    """The size a snip aims for: well below the handoff line (a batch, not a trickle)."""
    return max(handoff_line - int(SNIP_BATCH_SHARE * budget), 0)


def snip_worth_it(saved: int, tokens: int, handoff_line: float, saves_model_call: bool) -> bool:
    """Whether a snip planned at the compaction line pays for the cache miss it causes.

    A snip rewrites everything after the oldest result it elides — most of
    the context — so its cache miss is about as big as a compaction's, and
    it buys less room (down to the handoff line, where a compaction goes to
    half the budget). It is worth it only in place of a compaction that
    would call the model (the LLM's fork: a pause and a whole-context
    request), and only if it takes the context back under the handoff line;
    against the model-free fallback it is not. In the handoff band it is
    never planned: the compaction comes anyway and rewrites everything. When
    no compaction can run, the pipeline applies it anyway.
    """
    return saves_model_call and saved > 0 and tokens - saved <= handoff_line


def apply_edits(messages: Iterable[Message], edits: Sequence[ContentEdit]) -> list[Message]:
    """The messages with every edit applied (edits of absent ids are ignored)."""
    if not edits:
        return list(messages)
    contents = {e.message_id: e.content for e in edits}
    return [m.with_content(contents[m.id]) if m.id in contents else m for m in messages]


def tokens_saved(
    messages: Sequence[Message], edits: Sequence[ContentEdit], count: Callable[[Message], int]
) -> int:
    """How many tokens ``messages`` lose when ``edits`` are applied (what a projection drops)."""
    if not edits:
        return 0
    view = apply_edits(messages, edits)
    return sum(count(a) - count(b) for a, b in zip(messages, view, strict=True) if a is not b)
