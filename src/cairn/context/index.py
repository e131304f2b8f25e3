"""The context index: what every check needs about the history, kept incrementally (issue 17).

``check_and_compact`` runs before every request. It needs each message's
token count, the complete tool turns that snip and micro compact choose from,
and which of those turns still hold a result worth eliding. Recomputed, each
is a walk over the whole history; kept here, a check touches only what
changed since the last one: the messages appended since, the results edited.

The index mirrors the store's API view (``source``) and follows its three
kinds of change:

* appends — the view is the same list, longer than last seen (``sync``);
* edits — the pipeline says which, once the store applied them (``edited``);
* a new view — a compaction, a resumed session: another list, a shorter one,
  or another last message (``sync``), or the pipeline says so (``reset``).
  The index is then rebuilt, at the cost of the new view's length.

Its answers are exactly those of the pure rules in ``cairn.context.snip`` on
the same messages. Where that is not cheap to guarantee — two messages with
the same id, a planned edit that is not an elision — it asks the rules.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cairn.context.effects import ToolEffects, turn_class
from cairn.context.snip import (
    RETAINED_TOOL_TURNS,
    STUB_PREFIX,
    apply_edits,
    elidable,
    micro_compact_edits,
    snip_edits,
    stub_for,
    tokens_saved,
    turn_edits,
)
from cairn.messages import Message, Round, group_rounds
from cairn.store.records import ContentEdit


@dataclass(slots=True)
class _Turn:
    """One complete tool turn (``snip.tool_turns``) and its results still elidable."""

    round: Round
    #: ``effects.turn_class``: edits change contents only, never what decides it.
    klass: int
    #: Positions (in the view) of the results an edit could still elide, in order.
    open: list[int]


class ContextIndex:
    """Token counts, tool turns and elision candidates of one API view, kept up to date."""

    _messages: Sequence[Message] | None
    _n: int
    _last: Message | None
    _counts: list[int]
    _total: int
    _positions: dict[str, int]
    _unique: bool
    _turns: list[_Turn]
    _starts: list[int]
    _tail: int
    _micro: dict[int, None]
    _snip: dict[int, dict[int, None]]
    _gains: dict[int, int]

    def __init__(
        self,
        source: Callable[[], Sequence[Message]],
        count: Callable[[Message], int],
        effects: ToolEffects,
    ) -> None:
        self._source = source
        self._count = count
        self._effects = effects
        self._clear(None)

    def _clear(self, messages: Sequence[Message] | None) -> None:
        self._messages = messages
        #: How many messages of ``_messages`` are indexed, and the last of them.
        self._n = 0
        self._last = None
        self._counts = []
        self._total = 0
        #: Message id → position; the last one wins, as in the store's view.
        self._positions = {}
        self._unique = True
        self._turns = []
        #: ``_turns[i].round.start``, for bisecting a position to its turn.
        self._starts = []
        #: Where grouping resumes: the start of a last round still waiting for results.
        self._tail = 0
        #: Ordinals (in ``_turns``, ascending) of turns with a result still elidable.
        self._micro = {}
        #: The same by turn class, less the turns found to have nothing that saves tokens.
        self._snip = {}
        #: Position → tokens its stub saves (a stub is as fixed as the result it replaces).
        self._gains = {}

    # -- following the view ------------------------------------------------

    def sync(self) -> Sequence[Message]:
        """Catch up with the view (index what was appended, or rebuild); return it."""
        messages = self._source()
        n, seen = len(messages), self._n
        if (
            messages is not self._messages
            or n < seen
            or (seen and messages[seen - 1] is not self._last)
        ):
            self._clear(messages)
            seen = 0
        if n > seen:
            self._extend(messages, seen)
        return messages

    def reset(self) -> None:
        """Forget everything: the next use rebuilds from the view (after a compaction)."""
        self._clear(None)

    def edited(self, edits: Sequence[ContentEdit]) -> None:
        """Re-read the messages ``edits`` name: the store has applied them, or failed to.

        Either way the index then holds what the view holds.
        """
        messages = self._source()
        if messages is not self._messages or len(messages) < self._n:
            self.sync()
            return
        touched: set[int] = set()
        for edit in edits:
            position = self._positions.get(edit.message_id)
            if position is None:
                # Gone with an earlier view, or appended since the last sync (read then).
                continue
            message = messages[position]
            tokens = self._count(message)
            self._total += tokens - self._counts[position]
            self._counts[position] = tokens
            self._gains.pop(position, None)
            if position == self._n - 1:
                self._last = message
            ordinal = bisect_right(self._starts, position) - 1
            if ordinal >= 0 and position < self._turns[ordinal].round.end:
                touched.add(ordinal)
        for ordinal in sorted(touched):
            self._refresh(messages, ordinal)
        self.sync()

    def _extend(self, messages: Sequence[Message], start: int) -> None:
        counts, positions, count = self._counts, self._positions, self._count
        for i in range(start, len(messages)):
            message = messages[i]
            tokens = count(message)
            counts.append(tokens)
            self._total += tokens
            if message.id in positions:
                self._unique = False
            positions[message.id] = i
        self._n = len(messages)
        self._last = messages[-1]
        self._group(messages)

    def _group(self, messages: Sequence[Message]) -> None:
        """Group what came after the last closed round; register the tool turns it closes.

        Only the last round can still change — an assistant message whose
        calls are not all answered yet, at the end — so every round before it
        is final and grouped once.
        """
        n, tail = len(messages), self._tail
        self._tail = n
        for r in group_rounds(messages[tail:]):
            start, end = tail + r.start, tail + r.end
            if r.missing and end == n:
                self._tail = start
                break
            if r.complete and messages[start].tool_calls:
                self._add_turn(messages, Round(start, end))

    def _add_turn(self, messages: Sequence[Message], whole: Round) -> None:
        ordinal = len(self._turns)
        klass = turn_class(messages[whole.start : whole.end], self._effects)
        pending = [p for p in range(whole.start + 1, whole.end) if elidable(messages[p])]
        self._turns.append(_Turn(whole, klass, pending))
        self._starts.append(whole.start)
        if pending:
            # The newest turn has the highest ordinal: appending keeps the order.
            self._micro[ordinal] = None
            self._snip.setdefault(klass, {})[ordinal] = None

    def _refresh(self, messages: Sequence[Message], ordinal: int) -> None:
        turn = self._turns[ordinal]
        whole = turn.round
        turn.open = [p for p in range(whole.start + 1, whole.end) if elidable(messages[p])]
        by_class = self._snip.setdefault(turn.klass, {})
        if turn.open:
            _insert(self._micro, ordinal)
            _insert(by_class, ordinal)
        else:
            self._micro.pop(ordinal, None)
            by_class.pop(ordinal, None)

    # -- what the check asks ---------------------------------------------

    @property
    def total(self) -> int:
        """Σ count(m) over the view."""
        self.sync()
        return self._total

    def counts(self) -> list[int]:
        """Each message's token count, in view order (a copy)."""
        self.sync()
        return list(self._counts)

    def tool_turns(self) -> list[Round]:
        """``snip.tool_turns`` of the view."""
        self.sync()
        return [t.round for t in self._turns]

    def tokens_from(self, start: int) -> int:
        """Σ count(m) over ``view[start:]``: the tracker's appended share, or the whole view."""
        self.sync()
        if start <= 0:
            return self._total
        return sum(self._counts[start:])

    def tokens_saved(self, edits: Sequence[ContentEdit]) -> int:
        """``snip.tokens_saved`` on the view, from the cached counts."""
        messages = self.sync()
        if not edits:
            return 0
        if not self._unique:
            return tokens_saved(messages, edits, self._count)
        # ``apply_edits`` applies the last edit of an id.
        contents = {e.message_id: e.content for e in edits}
        saved = 0
        for message_id, content in contents.items():
            position = self._positions.get(message_id)
            if position is not None:
                message = messages[position]
                saved += self._counts[position] - self._count(message.with_content(content))
        return saved

    def micro_compact_edits(self, keep_turns: int = RETAINED_TOOL_TURNS) -> list[ContentEdit]:
        """``snip.micro_compact_edits`` on the view, visiting only turns with results left."""
        messages = self.sync()
        if not self._unique:
            return micro_compact_edits(messages, keep_turns)
        cutoff = len(self._turns) - keep_turns
        edits: list[ContentEdit] = []
        for ordinal in self._micro:
            if ordinal >= cutoff:
                break
            edits += turn_edits(messages, self._turns[ordinal].round, "micro_compact")
        return edits

    def snip_edits(
        self,
        *,
        excess: int,
        after: Sequence[ContentEdit] = (),
        keep_turns: int = RETAINED_TOOL_TURNS,
    ) -> tuple[list[ContentEdit], int]:
        """``snip.snip_edits`` on the view with ``after`` applied (this check's micro compact).

        Visits the candidate turns in the rule's order — class, then age —
        skipping those already elided, and drops for good a turn whose every
        stub would cost more than its result.
        """
        if excess <= 0:
            return [], 0
        messages = self.sync()
        if not self._unique or not all(e.content.startswith(STUB_PREFIX) for e in after):
            return snip_edits(
                apply_edits(messages, after),
                excess=excess,
                effects=self._effects,
                count=self._count,
                keep_turns=keep_turns,
            )
        # An elision planned earlier in this check: in the rule's view it is a stub already.
        skip = {e.message_id for e in after}
        cutoff = len(self._turns) - keep_turns
        edits: list[ContentEdit] = []
        saved = 0
        for klass in sorted(self._snip):
            candidates = self._snip[klass]
            spent: list[int] = []
            for ordinal in candidates:
                if ordinal >= cutoff:
                    break
                turn = self._turns[ordinal]
                calls = {c.id: c for c in messages[turn.round.start].tool_calls}
                worth = False
                for position in turn.open:
                    gain = self._gains.get(position)
                    if gain is not None and gain <= 0:
                        continue
                    result = messages[position]
                    stub = stub_for(calls.get(result.tool_call_id or ""), result)
                    if gain is None:
                        # ``snip.elision_gain``, with the result's count from the cache.
                        gain = self._counts[position] - self._count(result.with_content(stub))
                        self._gains[position] = gain
                        if gain <= 0:
                            continue
                    worth = True
                    if result.id not in skip:
                        edits.append(ContentEdit(result.id, stub, "snip"))
                        saved += gain
                if not worth:
                    spent.append(ordinal)
                if saved >= excess:
                    break
            for ordinal in spent:
                del candidates[ordinal]
            if saved >= excess:
                break
        return edits, saved


def _insert(ordered: dict[int, None], key: int) -> None:
    """Add ``key`` to an ascending dict of keys, keeping it ascending."""
    if key in ordered:
        return
    if ordered and key < next(reversed(ordered)):
        # Only a turn that became elidable again lands behind newer ones: rare, small.
        keys = sorted([*ordered, key])
        ordered.clear()
        ordered.update(dict.fromkeys(keys))
    else:
        ordered[key] = None
