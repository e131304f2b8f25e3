"""What the last provider boundary left: the state one compaction decision reads.

A provider boundary is a response carrying usage. Between two of them the
pipeline remembers whether a compaction already ran (no second one until the
provider answers), the size the last compaction left when it could not get
under the line (``floor``: no new one until the context regrows), whether the
reactive compaction was used, and which response anchors the projection. It
is one dataclass, rebuilt from the records on resume, so a resumed session
decides exactly as the one that stopped (DESIGN §5.5a, §5.9).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from cairn.messages import Message, Usage
from cairn.store.records import CompactionRecord, ContextEditRecord, MessageRecord, Record


def floor_after(prompt_tokens: int, budget: int | None, compact_ratio: float) -> int | None:
    """The floor a compaction left: the provider's count of the first request after
    it when that was still at or over the compaction line, else ``None``."""
    under = budget is None or prompt_tokens < compact_ratio * budget
    return None if under else prompt_tokens


@dataclass
class Boundary:
    """The per-boundary state of one session's context."""

    #: A compaction ran and the provider has not answered since.
    compacted_since_response: bool = False
    #: See ``floor_after``; ``None``: the last compaction got under the line.
    floor: int | None = None
    #: The reactive compaction ran since the provider last answered.
    reactive_used: bool = False
    #: The response whose usage is the projection's baseline; ``None`` when
    #: there is none or the context was rewritten after it.
    anchor: Message | None = None

    @classmethod
    def from_records(
        cls,
        records: Iterable[Record],
        ignored: Collection[str],
        *,
        budget: int | None,
        compact_ratio: float,
    ) -> Boundary:
        """The state the records since the last valid checkpoint leave
        (``ignored``: the ids of checkpoints that did not take effect)."""
        state = cls()
        rewritten = False
        compaction: CompactionRecord | None = None
        after_compaction: Message | None = None
        for record in records:
            if isinstance(record, CompactionRecord) and record.id not in ignored:
                compaction, after_compaction, rewritten = record, None, True
            elif isinstance(record, ContextEditRecord):
                rewritten = True
            elif isinstance(record, MessageRecord):
                message = record.message
                if message.role == "assistant" and message.meta.usage is not None:
                    state.anchor, rewritten = message, False
                    if compaction is not None and after_compaction is None:
                        after_compaction = message
        if compaction is not None and after_compaction is None:
            state.compacted_since_response = True
            state.reactive_used = compaction.trigger == "reactive"
        if after_compaction is not None and after_compaction.meta.usage is not None:
            usage = after_compaction.meta.usage
            state.floor = floor_after(prompt_tokens(usage), budget, compact_ratio)
        if rewritten:
            state.anchor = None
        return state

    def responded(self, prompt: int, *, budget: int | None, compact_ratio: float) -> None:
        """The provider answered a request that counted ``prompt`` tokens."""
        if self.compacted_since_response:
            # The provider's count of the compacted context — the prompt alone:
            # a long answer is new content, not a compaction that fell short.
            self.floor = floor_after(prompt, budget, compact_ratio)
        self.compacted_since_response = False
        self.reactive_used = False

    def compacted(self) -> None:
        """A checkpoint was committed: no other compaction until the provider answers."""
        self.compacted_since_response = True


def prompt_tokens(usage: Usage) -> int:
    """A response's prompt size as the provider counted it (older servers omit
    ``prompt_tokens``: the total minus the completion)."""
    return usage.prompt_tokens or max(usage.total_tokens - usage.completion_tokens, 0)
