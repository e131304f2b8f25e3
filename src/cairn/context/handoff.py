"""The durable, hidden token-budget handoff (DESIGN §5.2).

In the band between the handoff and the compaction line, once per compaction
epoch, the host appends a hidden user message asking the model to write down
its execution frontier, so the coming summary has it in the model's own
words. The record is strict: exactly one well-formed v1 record per epoch.
A duplicate or malformed one suppresses the handoff for that epoch instead of
picking one — a damaged file must not make the model see two reminders.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from cairn.context.tracker import TokenSnapshot
from cairn.messages import KIND_HANDOFF, Message, MessageMeta
from cairn.prompts import load_prompt
from cairn.store.records import HandoffRecord

HANDOFF_VERSION = 1
HANDOFF_OPEN = f'<token-budget-handoff version="{HANDOFF_VERSION}">'
HANDOFF_CLOSE = "</token-budget-handoff>"

HandoffStatus: TypeAlias = Literal["open", "done", "suppressed"]


def build_handoff_message(snapshot: TokenSnapshot) -> Message:
    tokens, budget = snapshot.tokens or 0, snapshot.input_budget or 0
    percent = round(100 * tokens / budget) if budget else 0
    text = load_prompt("handoff").format(
        percent=percent, tokens=f"{tokens:,}", budget=f"{budget:,}"
    )
    return Message(
        role="user",
        content=text,
        meta=MessageMeta(kind=KIND_HANDOFF, hidden=True, synthetic=True),
    )


def is_strict_handoff(record: HandoffRecord) -> bool:
    """A v1 record holding a hidden, host-written handoff message in the tagged form."""
    message = record.message
    text = message.content if isinstance(message.content, str) else None
    return (
        record.version == HANDOFF_VERSION
        and record.epoch >= 0
        and message.role == "user"
        and message.meta.kind == KIND_HANDOFF
        and message.meta.hidden
        and text is not None
        and text.startswith(HANDOFF_OPEN)
        and text.rstrip().endswith(HANDOFF_CLOSE)
    )


@dataclass
class HandoffLedger:
    """Which epochs already have their handoff, and which are suppressed."""

    _done: set[int] = field(default_factory=set)
    _suppressed: set[int] = field(default_factory=set)

    @classmethod
    def from_records(cls, records: Iterable[HandoffRecord]) -> HandoffLedger:
        ledger = cls()
        for record in records:
            ledger.observe(record)
        return ledger

    def observe(self, record: HandoffRecord) -> None:
        epoch = record.epoch
        if not is_strict_handoff(record) or epoch in self._done:
            self._suppressed.add(epoch)
        self._done.add(epoch)

    def status(self, epoch: int) -> HandoffStatus:
        if epoch in self._suppressed:
            return "suppressed"
        return "done" if epoch in self._done else "open"


def handoff_answered(messages: Sequence[Message]) -> bool:
    """Whether the model has answered the last handoff reminder in ``messages``:
    an assistant message comes after it, so its execution frontier is written down."""
    answered = False
    for message in reversed(messages):
        if message.meta.kind == KIND_HANDOFF:
            return answered
        answered = answered or message.role == "assistant"
    return False
