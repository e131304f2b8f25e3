"""What the next request holds, source by source (``/context``, DESIGN §7).

The pipeline decides on one number, the projection: the provider's last
count plus the estimate of what came after it. A breakdown that did not add
up to it would show the user a different context from the one compaction
acts on, so the rows are the sources' estimates scaled to the two measured
totals — the fixed context as calibrated, the conversation as projected —
and rounded so that they add up exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cairn.messages import KIND_COMPACT_SUMMARY, KIND_RESTORATION, Message

#: The conversation's rows, in the order a request carries them.
SUMMARY, RESTORED, KEPT, SINCE = (
    "summary block",
    "restored files",
    "kept from before the compaction",
    "messages since",
)
#: Before any compaction the conversation is one row.
CONVERSATION = "conversation"


@dataclass(frozen=True, slots=True)
class ContextRow:
    label: str
    tokens: int
    #: ``True`` for the system prompt, instructions and tool schemas.
    fixed: bool


@dataclass(frozen=True, slots=True)
class ContextBreakdown:
    rows: tuple[ContextRow, ...]
    #: The projection the rows add up to.
    total: int
    input_budget: int | None

    def share(self, tokens: int) -> float | None:
        """``tokens`` as a share of the input budget (``None`` without a window)."""
        return tokens / self.input_budget if self.input_budget else None


def apportion(total: int, weights: Sequence[int]) -> list[int]:
    """``total`` split in proportion to ``weights``, in whole tokens that add up to it.

    Largest remainder: each part is its exact share rounded down, and the
    tokens left go to the largest remainders (ties to the earlier part). All
    weights zero: the parts are as equal as whole tokens allow.
    """
    if not weights:
        return []
    weight = sum(weights)
    if weight <= 0:
        weights, weight = [1] * len(weights), len(weights)
    shares = [total * w for w in weights]
    parts = [s // weight for s in shares]
    left = total - sum(parts)
    order = sorted(range(len(weights)), key=lambda i: -(shares[i] % weight))
    for i in order[:left]:
        parts[i] += 1
    return parts


def conversation_parts(
    messages: Sequence[Message], checkpoint_messages: int, count: Callable[[Message], int]
) -> list[tuple[str, int]]:
    """The conversation's estimated rows: what the last compaction put there (its
    summary, the files it restored, what it kept) and what came after it."""
    if checkpoint_messages <= 0:
        return [(CONVERSATION, sum(count(m) for m in messages))]
    sizes = {SUMMARY: 0, RESTORED: 0, KEPT: 0}
    for message in messages[:checkpoint_messages]:
        kind = message.meta.kind
        label = (
            SUMMARY
            if kind == KIND_COMPACT_SUMMARY
            else RESTORED
            if kind == KIND_RESTORATION
            else KEPT
        )
        sizes[label] += count(message)
    since = sum(count(m) for m in messages[checkpoint_messages:])
    return [*sizes.items(), (SINCE, since)]


def breakdown(
    fixed: Sequence[tuple[str, int]],
    fixed_tokens: int,
    conversation: Sequence[tuple[str, int]],
    projected: int | None,
    input_budget: int | None,
) -> ContextBreakdown:
    """The rows scaled to the measured totals.

    ``fixed`` and ``conversation`` are ``(label, estimate)`` pairs;
    ``fixed_tokens`` is the fixed context as the pipeline counts it
    (calibrated), ``projected`` the whole projection (``None``: unknown, then
    the conversation keeps its estimates).
    """
    conversation_tokens = (
        max(0, projected - fixed_tokens)
        if projected is not None
        else sum(tokens for _, tokens in conversation)
    )
    fixed_sizes = apportion(fixed_tokens, [tokens for _, tokens in fixed])
    conversation_sizes = apportion(conversation_tokens, [tokens for _, tokens in conversation])
    rows = [
        *(ContextRow(label, n, True) for (label, _), n in zip(fixed, fixed_sizes, strict=True)),
        *(
            ContextRow(label, n, False)
            for (label, _), n in zip(conversation, conversation_sizes, strict=True)
        ),
    ]
    return ContextBreakdown(tuple(rows), fixed_tokens + conversation_tokens, input_budget)
