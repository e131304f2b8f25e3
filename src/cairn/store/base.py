"""The transcript store interface, its errors, and what both stores' writers share.

The pipeline talks to a ``TranscriptStore``; the append-only JSONL file is the
embedded default, and a server-backed store can stand in without the
pipeline noticing. ``TranscriptWriter`` holds the part of a writer the two
stores have in common: the accessors, and how a record or a checkpoint is
encoded and checked before the store commits it.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Protocol, Self

from cairn.errors import CairnError
from cairn.messages import Message
from cairn.store.records import (
    CheckpointFormatError,
    CompactionRecord,
    Record,
    RecordFormatError,
    SessionRecord,
    check_checkpoint,
    decode_line,
    encode_line,
)
from cairn.store.views import ApiView, Resumption, SessionDigest, UiPage, api_view, ui_view


class StoreError(CairnError, RuntimeError):
    """Base class of every transcript store failure.

    The message is one line meant for a user: it names the file and the
    problem, so a surface can print ``str(exc)`` as it is.
    """


class TranscriptLockedError(StoreError):
    """Another writer holds the session file."""


class TranscriptWriteError(StoreError):
    """A record could not be made durable; nothing of it stays in the file."""


class NotATranscriptError(StoreError):
    """The path is missing, is a directory, or holds no Cairn records."""


class TranscriptHeaderError(NotATranscriptError):
    """The file has no usable session header (empty, torn or damaged): it cannot be resumed.

    The file is left as it is; reading it (``read_transcript``) still works.
    """


@dataclass(slots=True)
class Transcript:
    """Everything a session file holds, as loaded."""

    path: Path
    records: list[Record]
    warnings: list[str] = field(default_factory=list)
    bad_lines: int = 0

    @property
    def header(self) -> SessionRecord | None:
        first = self.records[0] if self.records else None
        return first if isinstance(first, SessionRecord) else None

    @property
    def session_id(self) -> str | None:
        header = self.header
        return header.session_id if header else None

    def api(self) -> ApiView:
        return api_view(self.records)

    def ui(self, view: ApiView | None = None) -> list[Message]:
        ignored = view.ignored_checkpoints if view is not None else None
        return ui_view(self.records, ignored)


class TranscriptStore(Protocol):
    """Durable, append-only storage of one session's records.

    A writer's memory is bounded by the API view: it keeps a ``Resumption``
    (the API view and the records since the last valid checkpoint) and reads
    everything else back from storage when asked (``transcript``, ``ui_page``).
    """

    @property
    def path(self) -> Path:
        """The session file (``Transcript.path`` of what ``transcript()`` returns)."""
        ...

    @property
    def session_id(self) -> str: ...

    @property
    def api_view(self) -> ApiView:
        """The model's context as of the last appended record (``resumption.api``)."""
        ...

    @property
    def resumption(self) -> Resumption:
        """What reopening the session needs, as of the last appended record."""
        ...

    def append(self, record: Record) -> None:
        """Write one record; it reaches the OS before this returns."""
        ...

    def save_compaction(self, record: CompactionRecord) -> None:
        """Check the checkpoint limits, write it and fsync it before returning.

        Raises ``CheckpointFormatError`` (nothing written) or ``TranscriptWriteError``
        (nothing stays written). Only after a normal return may the caller
        replace its in-memory context.
        """
        ...

    def sync(self) -> None:
        """Make every record so far durable (called at least at each turn end)."""
        ...

    def transcript(self) -> Transcript:
        """Every record so far, read back from storage (not kept by the writer)."""
        ...

    def ui_page(self, before: int | None = None, limit: int | None = None) -> UiPage:
        """The ``limit`` UI view entries before position ``before`` (default: the last ones).

        Read back from storage, holding only the page.
        """
        ...

    def on_warning(self, handler: Callable[[str], None] | None) -> None:
        """Call ``handler`` with each one-line warning met while writing (``None``: log it).

        A warning is something the user must know that did not stop the write:
        the JSONL store's file replaced or deleted under it, and where the
        session went instead.
        """
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class StoredSession:
    """One session a store holds for a workspace, as a picker lists it."""

    session_id: str
    #: Where it lives (the file for the JSONL store); shown to the user.
    location: Path
    last_activity: float


class StoreFactory(Protocol):
    """Opens the sessions of a workspace: the runtime never names a store class.

    ``cairn.store.JsonlStoreFactory`` is the embedded default; another store
    (a database shared by several machines) plugs in by implementing this.
    """

    def create(self, workspace: Path, header: SessionRecord) -> TranscriptStore:
        """A new session (``header.session_id``); ``TranscriptWriteError`` if it exists."""
        ...

    def open(self, workspace: Path, session_id: str) -> TranscriptStore:
        """An existing session, for writing; ``NotATranscriptError`` if there is none."""
        ...

    def create_from_records(self, workspace: Path, records: Sequence[Record]) -> None:
        """A new session holding ``records`` (its header first), whole or not at all.

        For a branch of a session (rewind, fork): the records are stored as
        they are, ids and times kept, so its views are those of the records.
        A crash leaves the session complete or absent, never a part of it.
        ``TranscriptWriteError`` if it exists or cannot be written.
        """
        ...

    def create_subagent(
        self, workspace: Path, parent_id: str, header: SessionRecord
    ) -> TranscriptStore:
        """A background task's own transcript (``header.session_id`` is the task's id).

        It belongs to the parent session: kept with it, never listed among
        the workspace's sessions nor resumed on its own.
        """
        ...

    def exists(self, workspace: Path, session_id: str) -> bool: ...

    def sessions(self, workspace: Path) -> list[StoredSession]:
        """This workspace's sessions, newest first."""
        ...

    def read(self, workspace: Path, session_id: str) -> Transcript:
        """A session's records, read-only (another process may be writing it)."""
        ...

    def subagents(self, workspace: Path, session_id: str) -> list[str]:
        """The ids of a session's background-task transcripts (``create_subagent``), sorted."""
        ...

    def read_subagent(self, workspace: Path, session_id: str, task_id: str) -> Transcript:
        """One of them, read-only; ``NotATranscriptError`` if the session has no such task."""
        ...

    def describe(self, workspace: Path, session_id: str) -> SessionDigest:
        """A session's first prompt and message count, read-only and without its history.

        Raises what ``read`` raises; costs what follows its last checkpoint.
        """
        ...

    def follow(
        self,
        workspace: Path,
        session_id: str,
        after: int = 0,
        *,
        timeout: float | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[tuple[int, Record]]:
        """``(seq, record)`` for each record of a session past ``after``, as it is committed.

        Records are numbered from 1 in order (the JSONL file's lines, the
        database's rows). What is stored comes first, then each new record as
        another process commits it; the iterator ends after ``timeout``
        seconds without a new record when given (0: once what is stored is
        read), soon after ``stop`` is set (from another thread), else when
        the caller stops. Unreadable records are skipped.
        Raises ``NotATranscriptError`` (no such session) before it yields.
        """
        ...

    def artifacts_dir(self, workspace: Path, session_id: str) -> Path:
        """The local folder for a session's saved outputs (oversized tool results, plans)."""
        ...

    def find(self, session_id: str) -> str | None:
        """The workspace of a top-level session known only by its id (``None``: no such one)."""
        ...

    def delete(self, workspace: Path, session_id: str) -> bool:
        """Remove a session for good: its records, its background tasks' transcripts and
        its artifact files; false when there was no such session (nothing to do).

        Refuses (``TranscriptLockedError``) a session another writer holds open:
        the caller closes its own writer first.
        """
        ...

    def close(self) -> None:
        """Release what the factory holds (connections); the stores it opened stay open."""
        ...


def encode_for_writing(record: Record, where: str) -> tuple[bytes, Record]:
    """The line to write and the record as a reload will see it (kept in memory).

    A record that cannot be encoded is a ``TranscriptWriteError`` naming ``where``.
    """
    try:
        return encode_line(record)
    except RecordFormatError as exc:
        raise TranscriptWriteError(f"{where}: record not written: {exc}") from None


def valid_checkpoint(line: bytes) -> CompactionRecord | None:
    """The checkpoint ``line`` holds if ``check_checkpoint`` accepts it; else ``None``."""
    try:
        record = decode_line(line)
        if not isinstance(record, CompactionRecord):
            return None
        check_checkpoint(record)
    except (RecordFormatError, CheckpointFormatError):
        return None
    return record


class TranscriptWriter(ABC):
    """What the JSONL and PostgreSQL writers share of ``TranscriptStore``.

    A subclass sets ``_session_id``, ``_resumption`` and ``_warnings``, and
    commits each encoded record in ``_commit``: durably, and into its
    resumption, before it returns.
    """

    _session_id: str
    _resumption: Resumption
    _warnings: list[str]

    @property
    @abstractmethod
    def path(self) -> Path:
        """Where the session lives (``Transcript.path`` of what ``transcript()`` returns)."""

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def api_view(self) -> ApiView:
        return self._resumption.api

    @property
    def resumption(self) -> Resumption:
        return self._resumption

    @property
    def warnings(self) -> list[str]:
        """What opening reported (bad lines, repairs, a checkpoint pointer that names no
        checkpoint), and what went wrong while writing (a JSONL file replaced under it)."""
        return list(self._warnings)

    def append(self, record: Record) -> None:
        line, stored = encode_for_writing(record, str(self.path))
        self._commit(stored, line, checkpoint=False)

    def save_compaction(self, record: CompactionRecord) -> None:
        record = replace(record, history=self._resumption.history())
        check_checkpoint(record)
        line, stored = encode_for_writing(record, str(self.path))
        self._commit(stored, line, checkpoint=True)

    @abstractmethod
    def _commit(self, record: Record, line: bytes, *, checkpoint: bool) -> None:
        """Store ``line`` (``record`` encoded) and fold ``record`` into the resumption.

        ``checkpoint``: a checkpoint ``save_compaction`` checked, to be made
        durable before this returns. Raises ``TranscriptWriteError`` with
        nothing stored and the resumption unchanged.
        """

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
