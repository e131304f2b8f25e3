"""The two views of a transcript, rebuilt from its records in file order.

- The **UI view** shows everything a person saw: every visible message, every
  compact block and every error block, across any number of compactions.
- The **API view** is what the model gets next: the last valid checkpoint's
  replacement messages, then every later message, with context edits applied.

Both are pure functions of the record list, so the same code serves a live
session and a reload after a crash.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from cairn.messages import KIND_COMPACT_SUMMARY, KIND_ERROR, Message, MessageMeta
from cairn.store.records import (
    CheckpointError,
    CompactionRecord,
    ContentEdit,
    ContextEditRecord,
    ErrorRecord,
    HandoffRecord,
    MessageRecord,
    Record,
    check_checkpoint,
)


@dataclass(slots=True)
class ApiView:
    """The model's context, kept incrementally as records arrive."""

    messages: list[Message] = field(default_factory=list)
    #: Id of the checkpoint record the view starts from (``None``: the file start).
    checkpoint_id: str | None = None
    warnings: list[str] = field(default_factory=list)
    valid_checkpoints: int = 0
    #: Ids of checkpoints that broke a limit and were skipped.
    ignored_checkpoints: set[str] = field(default_factory=set)
    _index: dict[str, int] = field(default_factory=dict)

    def apply(self, record: Record) -> None:
        match record:
            case MessageRecord() | HandoffRecord():
                self._index[record.message.id] = len(self.messages)
                self.messages.append(record.message)
            case CompactionRecord():
                try:
                    check_checkpoint(record)
                except CheckpointError as exc:
                    # Never crash and never drop messages: keep the context built
                    # so far, which already holds every message since the last
                    # valid checkpoint.
                    self.ignored_checkpoints.add(record.id)
                    self.warnings.append(f"ignored checkpoint {record.id}: {exc}")
                    return
                self.valid_checkpoints += 1
                self.checkpoint_id = record.id
                self.messages = list(record.replacement_messages)
                self._index = {m.id: i for i, m in enumerate(self.messages)}
            case ContextEditRecord():
                for edit in record.edits:
                    self._edit(edit)
            case _:
                pass

    def _edit(self, edit: ContentEdit) -> None:
        position = self._index.get(edit.message_id)
        if position is None:
            # An edit of a message that a later checkpoint replaced is moot.
            return
        self.messages[position] = self.messages[position].with_content(edit.content)


def api_view(records: Iterable[Record]) -> ApiView:
    view = ApiView()
    for record in records:
        view.apply(record)
    return view


def compact_block(record: CompactionRecord) -> Message:
    """The block a UI shows where a compaction happened."""
    return Message(
        role="user",
        content=record.summary,
        id=record.id,
        meta=MessageMeta(
            kind=KIND_COMPACT_SUMMARY,
            synthetic=True,
            extra={
                "trigger": record.trigger,
                "strategy": record.strategy,
                "pre_tokens": record.pre_tokens,
                "post_tokens": record.post_tokens,
                "ts": record.ts,
            },
        ),
    )


def error_block(record: ErrorRecord) -> Message:
    return Message(
        role="assistant",
        content=record.text,
        id=record.id,
        meta=MessageMeta(kind=KIND_ERROR, synthetic=True, extra={"source": record.source}),
    )


def ui_view(
    records: Iterable[Record], ignored_checkpoints: Collection[str] | None = None
) -> list[Message]:
    """Every message a client renders, in file order; hidden messages never appear.

    ``ignored_checkpoints`` (from ``ApiView``) saves re-checking each checkpoint.
    """
    items: list[Message] = []
    for record in records:
        match record:
            case MessageRecord() if not record.message.meta.hidden:
                items.append(record.message)
            case CompactionRecord():
                if _is_valid(record, ignored_checkpoints):
                    items.append(compact_block(record))
            case ErrorRecord():
                items.append(error_block(record))
            case _:
                pass
    return items


def _is_valid(record: CompactionRecord, ignored: Collection[str] | None) -> bool:
    if ignored is not None:
        return record.id not in ignored
    try:
        check_checkpoint(record)
    except CheckpointError:
        return False
    return True
