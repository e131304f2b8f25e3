"""The PostgreSQL store's sessions: writers opened, sessions listed, read, followed, deleted."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cairn.store.base import (
    NotATranscriptError,
    StoredSession,
    StoreError,
    StoreFactory,
    Transcript,
    TranscriptLockedError,
    TranscriptWriteError,
    encode_for_writing,
)
from cairn.store.deletion import remove_artifacts
from cairn.store.following import Waiting, check_follow
from cairn.store.paths import check_session_id, normalize_workspace, session_path
from cairn.store.postgres.connection import (
    cause,
    check_url,
    connect,
    lock_holder,
    lock_key,
    require_driver,
    session_location,
    try_lock,
)
from cairn.store.postgres.follower import follow_session
from cairn.store.postgres.reader import (
    check_belongs,
    decoded,
    is_trusted,
    load,
    message_lines,
    page,
    transcript_of,
)
from cairn.store.postgres.schema import CHANNEL, INSERT, NOTIFY, PAGE_ROWS, check_key, task_key
from cairn.store.postgres.writer import PostgresTranscriptStore
from cairn.store.records import CompactionRecord, Record, SessionRecord
from cairn.store.selection import mask_url
from cairn.store.views import SessionDigest, digest, first_prompt

if TYPE_CHECKING:
    from cairn.store.postgres.connection import Connection

__all__ = ["PostgresStoreFactory"]


class PostgresStoreFactory:
    """Sessions in the PostgreSQL database at ``url``; artifacts in local folders under ``home``.

    ``url`` is a libpq connection string or URI (``postgresql://user@host/db``,
    ``postgresql:///db?host=/run/postgresql``). Nothing connects until the
    first call; a bad URL is refused here, with a one-line ``StoreError``, as
    is a missing psycopg. Writers get connections of their own (each holds its
    session's lock); listing and reading share one, made on first use.
    """

    def __init__(
        self, url: str, home: Path | None = None, *, fsync_every_record: bool = False
    ) -> None:
        require_driver()
        check_url(url)
        self._url = url
        self._home = home
        self._fsync_every_record = fsync_every_record
        self._conn: Connection | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        """The database URL, its password masked (fit to show)."""
        return mask_url(self._url)

    # -- writers ---------------------------------------------------------

    def create(self, workspace: Path, header: SessionRecord) -> PostgresTranscriptStore:
        return PostgresTranscriptStore.create(
            self._url, workspace, header, fsync_every_record=self._fsync_every_record
        )

    def open(self, workspace: Path, session_id: str) -> PostgresTranscriptStore:
        return PostgresTranscriptStore.open(
            self._url, workspace, session_id, fsync_every_record=self._fsync_every_record
        )

    def create_from_records(self, workspace: Path, records: Sequence[Record]) -> None:
        """A new session holding ``records``: its row, every record and the checkpoint
        pointer commit in one synchronous transaction, so it is stored whole or not at all."""
        header = records[0] if records else None
        if not isinstance(header, SessionRecord):
            raise TranscriptWriteError("cannot create a session without its header record first")
        session_id = check_session_id(header.session_id)
        import psycopg

        conn = connect(self._url)
        where = f"cannot create {session_location(conn, session_id)}"
        try:
            encoded = [encode_for_writing(record, where) for record in records]
            pointer = None
            for seq, (_, stored) in enumerate(encoded, 1):
                if isinstance(stored, CompactionRecord) and is_trusted(stored):
                    pointer = seq  # where a resume starts reading, as ``append`` moves it
            exists = TranscriptWriteError(f"{where}: it already exists")
            with conn.transaction():
                conn.execute("SET LOCAL synchronous_commit TO on")
                added = conn.execute(
                    "INSERT INTO cairn_sessions (session_id, workspace, checkpoint_seq) "
                    "VALUES (%s, %s, %s) ON CONFLICT (session_id) DO NOTHING",
                    (session_id, normalize_workspace(workspace), pointer),
                ).rowcount
                if added != 1:
                    raise exists
                with conn.cursor() as cursor:
                    cursor.executemany(
                        INSERT,
                        [
                            (session_id, seq, stored.TYPE, line[:-1].decode())
                            for seq, (line, stored) in enumerate(encoded, 1)
                        ],
                    )
                conn.execute(NOTIFY, (CHANNEL, f"{session_id} {len(encoded)}"))
        except psycopg.Error as exc:
            raise TranscriptWriteError(f"{where}: {cause(exc)}") from None
        finally:
            conn.close()

    def create_subagent(
        self, workspace: Path, parent_id: str, header: SessionRecord
    ) -> PostgresTranscriptStore:
        return PostgresTranscriptStore.create(
            self._url,
            workspace,
            header,
            parent_id=parent_id,
            fsync_every_record=self._fsync_every_record,
        )

    # -- reading ---------------------------------------------------------

    def exists(self, workspace: Path, session_id: str) -> bool:
        check_session_id(session_id)
        with self._shared("cannot look up sessions") as conn:
            row = conn.execute(
                "SELECT 1 FROM cairn_sessions WHERE session_id = %s AND workspace = %s "
                "AND parent_id IS NULL",
                (session_id, normalize_workspace(workspace)),
            ).fetchone()
        return row is not None

    def sessions(self, workspace: Path) -> list[StoredSession]:
        """The workspace's sessions (not background tasks' transcripts), newest first."""
        with self._shared("cannot list sessions") as conn:
            rows = conn.execute(
                "SELECT session_id, extract(epoch FROM last_activity)::float8 "
                "FROM cairn_sessions WHERE workspace = %s AND parent_id IS NULL "
                "ORDER BY last_activity DESC, session_id",
                (normalize_workspace(workspace),),
            ).fetchall()
            return [
                StoredSession(str(sid), session_location(conn, str(sid)), float(when))
                for sid, when in rows
            ]

    def find(self, session_id: str) -> str | None:
        """The workspace of session ``session_id`` (``None`` if there is none): for a command
        line that is given only an id."""
        check_session_id(session_id)
        with self._shared("cannot look up sessions") as conn:
            row = conn.execute(
                "SELECT workspace FROM cairn_sessions WHERE session_id = %s AND parent_id IS NULL",
                (session_id,),
            ).fetchone()
        return str(row[0]) if row is not None else None

    def read(self, workspace: Path, session_id: str) -> Transcript:
        """A session of ``workspace``, read-only (its writer may be appending meanwhile)."""
        return self._read(check_session_id(session_id), normalize_workspace(workspace))

    def describe(self, workspace: Path, session_id: str) -> SessionDigest:
        """A session's first prompt and message count, read from its last checkpoint on."""
        check_session_id(session_id)
        with self._shared("cannot read sessions") as conn:
            location = session_location(conn, session_id)
            row = conn.execute(
                "SELECT checkpoint_seq FROM cairn_sessions WHERE session_id = %s "
                "AND workspace = %s AND parent_id IS NULL",
                (session_id, normalize_workspace(workspace)),
            ).fetchone()
            if row is None:
                raise NotATranscriptError(f"{location}: no such session")
            where = f"cannot read {location}"
            messages = decoded(message_lines(conn, session_id))
            prompt = first_prompt(record for _, record in messages)
            # A checkpoint that does not count the UI entries before it: read from the start.
            found = digest(prompt, load(conn, session_id, row[0], where)[0]) or digest(
                prompt, load(conn, session_id, None, where)[0]
            )
        if found is None:
            raise StoreError(f"{where}: its messages cannot be counted")
        return found

    def subagents(self, workspace: Path, session_id: str) -> list[str]:
        check_session_id(session_id)
        with self._shared("cannot list background tasks") as conn:
            rows = conn.execute(
                "SELECT session_id FROM cairn_sessions WHERE parent_id = %s AND workspace = %s",
                (session_id, normalize_workspace(workspace)),
            ).fetchall()
        return sorted(str(key).partition("/")[2] for (key,) in rows)

    def read_subagent(self, workspace: Path, session_id: str, task_id: str) -> Transcript:
        return self._read(task_key(session_id, task_id), None)

    def read_session(self, session_id: str) -> Transcript:
        """Any session by its id alone, or a background task's transcript by ``task_key``."""
        return self._read(check_key(session_id), None)

    def _read(self, session_id: str, workspace: str | None) -> Transcript:
        with self._shared("cannot read sessions") as conn:
            location = check_belongs(conn, session_id, workspace)

        def lines() -> Iterator[tuple[int, bytes]]:
            after = 0
            while True:
                with self._shared("cannot read sessions") as conn:
                    rows = page(conn, session_id, after)
                yield from rows
                if len(rows) < PAGE_ROWS:
                    return
                after = rows[-1][0]

        transcript = transcript_of(location, lines())
        if transcript.bad_lines and not transcript.records:
            raise NotATranscriptError(
                f"{location} is not a Cairn transcript (no valid record found)"
            )
        return transcript

    def follow(
        self,
        workspace: Path,
        session_id: str,
        after: int = 0,
        *,
        timeout: float | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[tuple[int, Record]]:
        """``(seq, record)`` for each record of the session past ``after``, as it is committed.

        Yields what is stored first, then waits (LISTEN) for new records, on a
        connection of its own; ends after ``timeout`` seconds without a new
        record when given, soon after ``stop`` is set, else when the caller
        stops iterating. Rows that are not valid records are skipped, as
        ``ui_page`` skips them.
        """
        check_session_id(session_id)
        check_follow(after, timeout)
        with self._shared("cannot read sessions") as conn:
            check_belongs(conn, session_id, normalize_workspace(workspace))
        return follow_session(self._url, session_id, after, Waiting(timeout, stop))

    def delete(self, workspace: Path, session_id: str) -> bool:
        """The session's row, its records and its tasks' transcripts in one transaction,
        under the session's lock; then its local artifact files."""
        import psycopg

        check_session_id(session_id)
        conn = connect(self._url)
        where = f"cannot delete {session_location(conn, session_id)}"
        try:
            row = conn.execute(
                "SELECT workspace FROM cairn_sessions WHERE session_id = %s AND parent_id IS NULL",
                (session_id,),
            ).fetchone()
            found = row is not None and row[0] == normalize_workspace(workspace)
            if found:
                key = lock_key(session_id)
                if not try_lock(conn, key):
                    raise TranscriptLockedError(
                        f"{where}: it is open for writing by {lock_holder(conn, key)}; "
                        "close it there first"
                    )
                with conn.transaction():  # the records go with their rows (ON DELETE CASCADE)
                    conn.execute("DELETE FROM cairn_sessions WHERE parent_id = %s", (session_id,))
                    conn.execute("DELETE FROM cairn_sessions WHERE session_id = %s", (session_id,))
        except psycopg.Error as exc:
            raise StoreError(f"{where}: {cause(exc)}") from None
        finally:
            conn.close()  # releases the lock
        if found:
            remove_artifacts(self.artifacts_dir(workspace, session_id))
        return found

    def artifacts_dir(self, workspace: Path, session_id: str) -> Path:
        # Saved outputs are files, read by tools: local, where the JSONL factory keeps them.
        return session_path(workspace, session_id, self._home).with_suffix("")

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def __enter__(self) -> PostgresStoreFactory:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _shared(self, what: str) -> Iterator[Connection]:
        """The shared reading connection (made again if the last one broke), one user at a time."""
        import psycopg

        with self._lock:
            conn = self._conn
            if conn is None or conn.closed or conn.broken:
                if conn is not None:
                    conn.close()
                self._conn = conn = connect(self._url)
            try:
                yield conn
            except psycopg.Error as exc:
                raise StoreError(f"{what} in {mask_url(self._url)}: {cause(exc)}") from None


def _factory_conforms(factory: PostgresStoreFactory) -> StoreFactory:
    """Static proof (checked by mypy) that the PostgreSQL factory implements the interface."""
    return factory
