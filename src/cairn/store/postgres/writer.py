"""The single writer of one session in the database: its commits, and reconnecting after a loss."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from cairn.store.base import (
    NotATranscriptError,
    StoreError,
    Transcript,
    TranscriptLockedError,
    TranscriptStore,
    TranscriptWriteError,
    TranscriptWriter,
    encode_for_writing,
)
from cairn.store.paths import check_session_id, normalize_workspace
from cairn.store.postgres.connection import (
    cause,
    connect,
    lock_holder,
    lock_key,
    require_driver,
    session_location,
    try_lock,
    until_gone,
)
from cairn.store.postgres.reader import decoded, is_trusted, load, page, transcript_of
from cairn.store.postgres.schema import (
    APPEND,
    CHANNEL,
    INSERT,
    NOTIFY,
    PAGE_ROWS,
    POINT,
    check_key,
    task_key,
)
from cairn.store.records import CompactionRecord, Record, SessionRecord
from cairn.store.views import Resumption, UiPage, ui_page

if TYPE_CHECKING:
    from cairn.store.postgres.connection import Connection

__all__ = ["RECONNECT_EVERY_S", "PostgresTranscriptStore"]

#: A writer that lost its connection tries a new one at most this often.
RECONNECT_EVERY_S = 5.0


class PostgresTranscriptStore(TranscriptWriter):
    """The single writer of one session in the database. Use ``create`` or ``open``."""

    def __init__(
        self,
        conn: Connection,
        url: str,
        session_id: str,
        resumption: Resumption,
        last_seq: int,
        *,
        warnings: Iterable[str] = (),
        fsync_every_record: bool = False,
    ) -> None:
        self._conn: Connection | None = conn
        self._url = url
        self._session_id = session_id
        self._location = session_location(conn, session_id)
        self._key = lock_key(session_id)
        # Only what a resume needs stays in memory; every record is in the database.
        self._resumption = resumption
        self._seq = last_seq
        self._warnings = list(warnings)
        #: Why the connection was lost, once it was: writing waits for a reconnection.
        self._lost: str | None = None
        #: When a failed reconnection may be tried again (``time.monotonic``).
        self._retry_at = 0.0
        # One writer, but maybe several threads (a surface reading pages while
        # the agent appends): one statement or transaction at a time.
        self._lock = threading.Lock()
        self._fsync_every_record = fsync_every_record
        #: Whether each commit is flushed before it returns (any setting but ``off``).
        self._durable_commits = self._prepare(conn)
        #: The server process of the connection (a lost one's, once it is lost).
        self._backend_pid = conn.info.backend_pid

    # -- opening ---------------------------------------------------------

    @classmethod
    def create(
        cls,
        url: str,
        workspace: str | Path,
        header: SessionRecord,
        *,
        parent_id: str | None = None,
        fsync_every_record: bool = False,
    ) -> PostgresTranscriptStore:
        """A new session holding ``header`` (a subagent's transcript when ``parent_id`` is set).

        The session appears whole (its row and its header, one transaction)
        or not at all. Raises ``TranscriptWriteError`` if it exists or cannot
        be written, ``StoreError`` if the database cannot be reached.
        """
        name = check_session_id(header.session_id)
        # A background task's id is numbered per session (task_1, ...): its row
        # is keyed under its parent's id, as the JSONL store files it in the
        # parent's folder.
        session_id = name if parent_id is None else task_key(parent_id, name)
        require_driver()
        import psycopg

        conn = connect(url)
        location = session_location(conn, session_id)
        where = f"cannot create {location}"
        try:
            line, stored = encode_for_writing(header, where)
            exists = TranscriptWriteError(f"{where}: it already exists; open it to resume")
            key = lock_key(session_id)
            if not try_lock(conn, key):
                raise exists  # its writer has it open
            with conn.transaction():
                added = conn.execute(
                    "INSERT INTO cairn_sessions (session_id, workspace, parent_id) "
                    "VALUES (%s, %s, %s) ON CONFLICT (session_id) DO NOTHING",
                    (session_id, normalize_workspace(workspace), parent_id),
                ).rowcount
                if added != 1:
                    raise exists
                conn.execute(INSERT, (session_id, 1, stored.TYPE, line[:-1].decode()))
                conn.execute(NOTIFY, (CHANNEL, f"{session_id} 1"))
            store = cls(
                conn, url, session_id, Resumption(), 0, fsync_every_record=fsync_every_record
            )
        except psycopg.Error as exc:
            conn.close()
            raise TranscriptWriteError(f"{where}: {cause(exc)}") from None
        except BaseException:
            conn.close()
            raise
        store._seq = 1
        store._resumption.apply(stored)
        return store

    @classmethod
    def open(
        cls, url: str, workspace: str | Path, session_id: str, *, fsync_every_record: bool = False
    ) -> PostgresTranscriptStore:
        """Open a session of ``workspace`` for appending.

        Reads the header and the records from the last valid checkpoint on (the
        pointer), or the whole session when the pointer names no checkpoint
        that ``check_checkpoint`` accepts and that carries its history.
        Raises ``NotATranscriptError`` (no such session here, unreadable),
        ``TranscriptHeaderError`` (no usable header), ``TranscriptLockedError``
        (another writer has it) or ``StoreError`` (the database cannot be reached).
        """
        check_key(session_id)  # a task's key is refused below, by name
        require_driver()
        import psycopg

        conn = connect(url)
        location = session_location(conn, session_id)
        where = f"cannot resume {location}"
        try:
            row = conn.execute(
                "SELECT workspace, parent_id FROM cairn_sessions WHERE session_id = %s",
                (session_id,),
            ).fetchone()
            if row is None:
                raise NotATranscriptError(f"{where}: no such session")
            if row[1] is not None:
                raise NotATranscriptError(
                    f"{where}: it is the transcript of a background task of session {row[1]}, "
                    "not a session"
                )
            if row[0] != normalize_workspace(workspace):
                raise NotATranscriptError(
                    f"{where}: no such session in {normalize_workspace(workspace)} "
                    f"(it belongs to {row[0]})"
                )
            key = lock_key(session_id)
            if not try_lock(conn, key):
                raise TranscriptLockedError(
                    f"{where}: it is already open for writing by {lock_holder(conn, key)}; "
                    "close it there first (one writer per session)"
                )
            # Read only once the lock is held: a writer that closed a moment ago
            # may have moved the pointer, and nobody can append from now on.
            found = conn.execute(
                "SELECT checkpoint_seq FROM cairn_sessions WHERE session_id = %s", (session_id,)
            ).fetchone()
            pointer = None if found is None or found[0] is None else int(found[0])
            state, warnings, last_seq = load(conn, session_id, pointer, where)
            return cls(
                conn,
                url,
                session_id,
                state,
                last_seq,
                warnings=warnings,
                fsync_every_record=fsync_every_record,
            )
        except psycopg.Error as exc:
            conn.close()
            raise NotATranscriptError(f"{where}: cannot read it ({cause(exc)})") from None
        except BaseException:
            conn.close()
            raise

    # -- writing ---------------------------------------------------------

    @property
    def path(self) -> Path:
        """``postgresql/<database>/<session id>``: names the session for people, not a file."""
        return self._location

    def on_warning(self, handler: Callable[[str], None] | None) -> None:
        """Nothing to call it with: a row cannot be replaced under the writer's lock."""

    @property
    def last_seq(self) -> int:
        """The ``seq`` of the last record written (a follower starts after it)."""
        return self._seq

    def _commit(self, record: Record, line: bytes, *, checkpoint: bool) -> None:
        # A checkpoint that a resume may start from moves the pointer with it,
        # however it arrives: the pointer always names the last one.
        pointer = checkpoint or (isinstance(record, CompactionRecord) and is_trusted(record))
        self._write(record, line, checkpoint=pointer)
        self._resumption.apply(record)

    def sync(self) -> None:
        with self._lock:
            conn = self._writable()
            if self._durable_commits:
                return  # every commit so far was flushed before it returned
            self._flush(conn)

    def _flush(self, conn: Connection) -> None:
        """Make every commit so far durable: a synchronous commit flushes the log up to it."""
        import psycopg

        try:
            with conn.transaction():
                conn.execute("SET LOCAL synchronous_commit TO on")
                conn.execute(
                    "UPDATE cairn_sessions SET last_activity = clock_timestamp() "
                    "WHERE session_id = %s",
                    (self._session_id,),
                )
        except psycopg.Error as exc:
            self._note_loss(conn, exc)
            raise TranscriptWriteError(
                f"{self._location}: could not make its records durable ({cause(exc)})"
            ) from None

    def _write(self, record: Record, line: bytes, *, checkpoint: bool) -> None:
        import psycopg

        with self._lock:
            conn = self._writable()
            seq = self._seq + 1
            text = line[:-1].decode()  # orjson writes UTF-8; the row holds the line unchanged
            payload = f"{self._session_id} {seq}"
            try:
                if checkpoint:
                    # The checkpoint and the pointer to it commit together, or neither does.
                    with conn.transaction():
                        if not self._durable_commits:
                            conn.execute("SET LOCAL synchronous_commit TO on")
                        conn.execute(INSERT, (self._session_id, seq, record.TYPE, text))
                        conn.execute(POINT, (seq, self._session_id))
                        conn.execute(NOTIFY, (CHANNEL, payload))
                else:
                    params = {
                        "session": self._session_id,
                        "seq": seq,
                        "type": record.TYPE,
                        "line": text,
                        "channel": CHANNEL,
                        "payload": payload,
                    }
                    if conn.execute(APPEND, params).rowcount != 1:
                        raise TranscriptWriteError(
                            f"{self._location}: could not write record (its session row is gone)"
                        )
            except psycopg.Error as exc:
                self._note_loss(conn, exc)
                what = "checkpoint" if checkpoint else "record"
                raise TranscriptWriteError(
                    f"{self._location}: could not write {what} ({cause(exc)})"
                ) from None
            self._seq = seq

    def _prepare(self, conn: Connection) -> bool:
        """Set a writer's connection up; whether its commits are durable when they return."""
        if self._fsync_every_record:
            conn.execute("SET synchronous_commit TO on")
        row = conn.execute("SHOW synchronous_commit").fetchone()
        return row is not None and row[0] != "off"

    def _note_loss(self, conn: Connection, exc: BaseException) -> None:
        if conn.broken or conn.closed:
            self._lost = cause(exc)

    def _writable(self) -> Connection:
        if self._conn is None:
            raise TranscriptWriteError(f"{self._location}: the store is closed")
        if self._lost is not None:
            self._reconnect(self._conn, self._lost)
        return self._conn

    def _reconnect(self, old: Connection, lost: str) -> None:
        """Carry on over a new connection after losing one (a server restart, a failover).

        Only if nothing can have changed meanwhile: the session's lock, which
        went with the old connection, is taken again, and its rows must end
        exactly at the last record this writer saw committed. Otherwise another
        writer wrote, or a commit's outcome never came back (or was not yet
        durable when the server went down), and only reopening the session can
        say what it holds. Tried at most every ``RECONNECT_EVERY_S`` seconds.
        """
        import psycopg

        refused = f"{self._location}: the connection to the database was lost ({lost})"
        if time.monotonic() < self._retry_at:
            raise TranscriptWriteError(f"{refused}; reconnecting failed, will retry shortly")
        self._retry_at = time.monotonic() + RECONNECT_EVERY_S
        try:
            conn = connect(self._url)
        except StoreError as exc:
            raise TranscriptWriteError(f"{refused}; {exc}") from None
        try:
            until_gone(conn, self._backend_pid)
            if not try_lock(conn, self._key):
                raise TranscriptWriteError(
                    f"{refused}, and {lock_holder(conn, self._key)} has opened it since; "
                    "reopen the session"
                )
            row = conn.execute(
                "SELECT coalesce(max(seq), 0) FROM cairn_records WHERE session_id = %s",
                (self._session_id,),
            ).fetchone()
            stored = int(row[0]) if row is not None else 0
            if stored != self._seq:
                raise TranscriptWriteError(
                    f"{refused}, and it now ends at line {stored}, not at line {self._seq} "
                    "where this writer left it; reopen the session"
                )
            durable = self._prepare(conn)
        except psycopg.Error as exc:
            conn.close()
            raise TranscriptWriteError(f"{refused}; reconnecting failed ({cause(exc)})") from None
        except BaseException:
            conn.close()
            raise
        old.close()
        self._conn, self._lost, self._durable_commits = conn, None, durable
        self._backend_pid = conn.info.backend_pid

    # -- reading ---------------------------------------------------------

    def transcript(self) -> Transcript:
        return transcript_of(self._location, self._lines())

    def ui_page(self, before: int | None = None, limit: int | None = None) -> UiPage:
        # The newest entries are in memory (the page a surface opens with);
        # an older page streams the session's rows.
        page = self._resumption.tail_page(before, limit)
        if page is not None:
            return page
        records = (record for _, record in decoded(self._lines()))
        return ui_page(records, before=before, limit=limit)

    def _lines(self) -> Iterator[tuple[int, bytes]]:
        """Every row of the session in order, a page at a time.

        Read on the writer's connection, or on a connection of its own once
        the store is closed or its connection was lost.
        """
        import psycopg

        own: Connection | None = None
        after = 0
        try:
            while True:
                with self._lock:
                    conn = self._conn if self._conn is not None and self._lost is None else None
                    if conn is None:
                        if own is None:
                            own = connect(self._url)
                        conn = own
                    rows = page(conn, self._session_id, after)
                yield from rows
                if len(rows) < PAGE_ROWS:
                    return
                after = rows[-1][0]
        except psycopg.Error as exc:
            raise StoreError(f"{self._location}: cannot read it ({cause(exc)})") from None
        finally:
            if own is not None:
                own.close()

    # -- closing ---------------------------------------------------------

    def close(self) -> None:
        import psycopg

        with self._lock:
            conn, self._conn = self._conn, None
            if conn is None:
                return
            try:
                if self._lost is None:
                    if not self._durable_commits:
                        self._flush(conn)
                    conn.execute("SELECT pg_advisory_unlock(%s)", (self._key,))
                elif not self._durable_commits:
                    raise TranscriptWriteError(
                        f"{self._location}: its last records may not be durable: the connection "
                        f"to the database was lost ({self._lost})"
                    )
            except psycopg.Error:
                pass  # closing the connection below releases the lock all the same
            finally:
                conn.close()


def _conforms(store: PostgresTranscriptStore) -> TranscriptStore:
    """Static proof (checked by mypy) that the PostgreSQL store implements the interface."""
    return store
