"""The two views of a transcript, rebuilt from its records in file order.

- The **UI view** shows everything a person saw: every visible message, every
  compact block and every error block, across any number of compactions.
- The **API view** is what the model gets next: the last valid checkpoint's
  replacement messages, then every later message, with context edits applied.

Both are pure functions of the record list, so the same code serves a live
session and a reload after a crash.

A writer keeps only a ``Resumption``: the API view and the records since the
last valid checkpoint, which is all that reopening the session needs. The UI
view is read back from storage when asked, a page at a time (``ui_page``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field

from cairn.messages import KIND_COMPACT_SUMMARY, KIND_ERROR, JSONValue, Message, MessageMeta
from cairn.store.records import (
    CheckpointFormatError,
    CheckpointHistory,
    CompactionRecord,
    ContentEdit,
    ContextEditRecord,
    ErrorRecord,
    HandoffRecord,
    MessageRecord,
    Record,
    SessionRecord,
    StateRecord,
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
    #: How many of ``messages`` the checkpoint put there (its replacement); the
    #: rest came after it. ``/context`` tells the two apart.
    checkpoint_messages: int = 0
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
                except CheckpointFormatError as exc:
                    # Never crash and never drop messages: keep the context built
                    # so far, which already holds every message since the last
                    # valid checkpoint.
                    self.ignored_checkpoints.add(record.id)
                    self.warnings.append(f"ignored checkpoint {record.id}: {exc}")
                    return
                self.valid_checkpoints += 1
                self.checkpoint_id = record.id
                self.messages = list(record.replacement_messages)
                self.checkpoint_messages = len(self.messages)
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


@dataclass(slots=True)
class Resumption:
    """What reopening a session needs, kept incrementally as records arrive.

    Its size is bounded by the API view: ``records`` restarts at every valid
    checkpoint, and what came before survives only as that checkpoint's
    ``CheckpointHistory`` (the epoch, the newest state of each key, the last
    response time).
    """

    header: SessionRecord | None = None
    api: ApiView = field(default_factory=ApiView)
    #: The last valid checkpoint and every record after it, in file order
    #: (every record but the header while there is no valid checkpoint).
    records: list[Record] = field(default_factory=list)
    #: The newest value of each state key, across the whole history.
    state: dict[str, JSONValue] = field(default_factory=dict)
    #: When the provider last answered, across the whole history.
    last_response_ts: str | None = None
    #: Entries in the whole UI view (``None``: unknown, resumed from a checkpoint
    #: whose history does not count them).
    ui_entries: int | None = 0

    @classmethod
    def starting_at(cls, header: SessionRecord, checkpoint: CompactionRecord) -> Resumption:
        """Resume from a valid checkpoint that carries its history (``checkpoint.history``)."""
        history = checkpoint.history
        if history is None:
            raise ValueError(f"checkpoint {checkpoint.id} carries no history")
        resumption = cls(
            header,
            ApiView(valid_checkpoints=history.checkpoints - 1),
            state=dict(history.state),
            last_response_ts=history.last_response_ts,
            ui_entries=None if history.ui_entries is None else history.ui_entries - 1,
        )
        resumption.apply(checkpoint)
        return resumption

    def apply(self, record: Record) -> None:
        self.api.apply(record)
        if self.ui_entries is not None and _is_ui_entry(record, self.api.ignored_checkpoints):
            self.ui_entries += 1
        match record:
            case SessionRecord() if self.header is None:
                self.header = record
                return
            case CompactionRecord() if record.id not in self.api.ignored_checkpoints:
                self.records = [record]
                return
            case StateRecord():
                self.state[record.key] = record.value
            case MessageRecord() if record.message.role == "assistant" and (
                record.message.meta.usage is not None
            ):
                self.last_response_ts = record.ts
            case _:
                pass
        self.records.append(record)

    def history(self) -> CheckpointHistory:
        """The history a checkpoint saved now carries."""
        return CheckpointHistory(
            self.api.valid_checkpoints + 1,
            dict(self.state),
            self.last_response_ts,
            None if self.ui_entries is None else self.ui_entries + 1,
        )

    def tail_page(self, before: int | None, limit: int | None) -> UiPage | None:
        """The UI page from the records kept in memory, or ``None`` if it reaches before them.

        The kept records are the newest part of the UI view; the page a
        surface opens with (the last entries) usually lies within them, and
        is then served without reading the transcript.
        """
        total = self.ui_entries
        if total is None or limit is None:
            return None
        end = total if before is None else min(before, total)
        start = max(0, end - limit)
        entries = ui_view(self.records, self.api.ignored_checkpoints)
        first = total - len(entries)  # the position of the first kept entry
        if start < first:
            return None
        return UiPage(entries[start - first : end - first] if end > start else [], start, total)


def resumption(records: Iterable[Record]) -> Resumption:
    """The ``Resumption`` after ``records`` (a whole session, from its header)."""
    state = Resumption()
    for record in records:
        state.apply(record)
    return state


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

    ``ignored_checkpoints`` (from an ``ApiView`` of the same records, from
    their start) saves re-checking each checkpoint.
    """
    return list(ui_entries(records, ignored_checkpoints))


def ui_entries(
    records: Iterable[Record], ignored_checkpoints: Collection[str] | None = None
) -> Iterator[Message]:
    """``ui_view`` as a stream: each entry as soon as its record is read (a follower's view)."""
    for record in records:
        match record:
            case MessageRecord() if not record.message.meta.hidden:
                yield record.message
            case CompactionRecord():
                if _is_valid(record, ignored_checkpoints):
                    yield compact_block(record)
            case ErrorRecord():
                yield error_block(record)
            case _:
                pass


@dataclass(frozen=True, slots=True)
class UiPage:
    """A run of consecutive UI view entries."""

    messages: list[Message]
    #: Position of ``messages[0]`` in the whole UI view.
    start: int
    #: Entries in the whole UI view.
    total: int

    @property
    def earlier(self) -> int:
        """How many entries come before this page."""
        return self.start


def ui_page(
    records: Iterable[Record],
    *,
    before: int | None = None,
    limit: int | None = None,
    ignored_checkpoints: Collection[str] | None = None,
) -> UiPage:
    """The ``limit`` UI entries just before position ``before`` (default: the end).

    ``records`` is consumed as a stream, and only the page is held: reading
    the last 200 entries of a 100,000-message session keeps 200 in memory.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be at least 0, not {limit}")
    if before is not None and before < 0:
        raise ValueError(f"before must be at least 0, not {before}")
    page: deque[Message] = deque(maxlen=limit)
    total = 0
    for message in ui_entries(records, ignored_checkpoints):
        if before is None or total < before:
            page.append(message)
        total += 1
    end = total if before is None else min(before, total)
    return UiPage(list(page), end - len(page), total)


@dataclass(frozen=True, slots=True)
class SessionDigest:
    """What a session picker shows of a session, read without its whole history."""

    #: The first message the user typed ("" if there is none).
    first_prompt: str
    #: Messages of the UI view, compact blocks not counted.
    messages: int


def first_prompt(records: Iterable[Record]) -> str:
    """The first message the user typed; ``records`` is consumed only that far."""
    for record in records:
        if isinstance(record, MessageRecord):
            message = record.message
            if message.role == "user" and not (message.meta.synthetic or message.meta.hidden):
                return message.text
    return ""


def digest(prompt: str, resumption: Resumption) -> SessionDigest | None:
    """The digest of a session, from its first prompt and its resumption.

    ``None`` when the resumption does not count the UI entries (resumed from a
    checkpoint written before checkpoints counted them).
    """
    if resumption.ui_entries is None:
        return None
    # Every valid checkpoint is one compact block in the UI view, and nothing else is.
    return SessionDigest(prompt, resumption.ui_entries - resumption.api.valid_checkpoints)


def _is_ui_entry(record: Record, ignored: Collection[str]) -> bool:
    match record:
        case MessageRecord():
            return not record.message.meta.hidden
        case CompactionRecord():
            return record.id not in ignored
        case ErrorRecord():
            return True
        case _:
            return False


def _is_valid(record: CompactionRecord, ignored: Collection[str] | None) -> bool:
    if ignored is not None:
        return record.id not in ignored
    try:
        check_checkpoint(record)
    except CheckpointFormatError:
        return False
    return True
