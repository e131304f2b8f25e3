"""The PostgreSQL transcript store: session transcripts in a database several machines share.

It keeps the JSONL store's guarantees (DESIGN §6) and behaves the same way:
the same records, the same views, the same resume. psycopg 3 is imported
here only, and only when a factory is made (the ``cairn[postgres]`` extra),
so ``import cairn`` works without it.

Tables (created on first use, ``CREATE TABLE IF NOT EXISTS`` inside a
transaction that holds an advisory lock, so two processes creating them at
once do not collide):

- ``cairn_sessions``: one row per session: ``session_id`` (the key),
  ``workspace`` (the normalized workspace path,
  ``cairn.store.paths.normalize_workspace``), ``parent_id`` (NULL for a
  session, the parent session's id for a background task's transcript, whose
  ``session_id`` is then ``<parent id>/<task id>``: task ids count from 1 in
  each session),
  ``created``, ``last_activity``, and ``checkpoint_seq``: the ``seq`` of the
  last valid checkpoint, the pointer a resume starts reading from.
- ``cairn_records``: ``(session_id, seq)`` is the key; ``type`` is the
  record's type, and ``line`` exactly the JSON line ``encode_line`` produced,
  without its newline, so writing the lines out in ``seq`` order gives the
  session's JSONL file byte for byte. ``seq`` is 1 for the header and counts
  up by one: it is also the record's line number in that file, and warnings
  name it so (``line 7: …``).

Writing: the store is the session's only writer and numbers the records.
``append`` commits one record in one transaction before it returns;
``save_compaction`` inserts the checkpoint and moves the pointer to it in one
transaction, committed synchronously (flushed to the server's disk) before it
returns, so before the caller replaces its memory. Any database error is a
``TranscriptWriteError`` naming the session and the cause: the transaction is
rolled back and the store's memory is unchanged. If the connection itself is
lost (a server restart, a failover), the write that met it fails, and the
next one reconnects — only if the writer can take its session's lock again
and the rows still end at the last record it saw committed. Otherwise (another
writer wrote meanwhile, a commit under way as the connection broke may or may
not be stored, an asynchronous commit did not survive) the store refuses
writes: reopening reads whatever the server kept, so the writer's state and
storage never disagree.

Durability: a record is committed as the server's ``synchronous_commit``
says: with PostgreSQL's default (``on``) every acknowledged record survives a
crash of the server or its machine. ``fsync_every_record=True`` forces that
for the writer's connection even where the server's default is ``off``; with
``off``, ``sync()`` (called at least at every turn end) and every checkpoint
flush everything written before them.

One writer per session: the writer holds a session-level advisory lock
(``pg_try_advisory_lock``) on its own connection until ``close()``; a second
writer, in any process on any machine, gets ``TranscriptLockedError``. A
writer that crashes loses its connection, and the lock with it.

Live followers: every committed record sends ``pg_notify('cairn_records',
'<session_id> <seq>')`` in its own transaction; ``PostgresStoreFactory.follow``
yields a session's records and then waits for those notifications, so another
process (a second web worker) can follow a session as it is written.

Locations: a session is named for people (``path``, ``StoredSession.location``,
``Transcript.path``) as ``Path("postgresql") / <database name> / <session id>``;
it names no file. A session's artifacts (oversized tool outputs, plans) stay
in a local folder, the JSONL factory's: ``session_path(workspace, id, home)``
without its suffix.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from cairn.store.base import (
    NotATranscriptError,
    StoredSession,
    StoreError,
    StoreFactory,
    Transcript,
    TranscriptHeaderError,
    TranscriptLockedError,
    TranscriptStore,
    TranscriptWriteError,
)
from cairn.store.deletion import remove_artifacts
from cairn.store.following import Waiting, check_follow
from cairn.store.paths import check_session_id, normalize_workspace, session_path
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
from cairn.store.selection import mask_url
from cairn.store.views import (
    ApiView,
    Resumption,
    SessionDigest,
    UiPage,
    digest,
    first_prompt,
    ui_page,
)

if TYPE_CHECKING:
    import psycopg
    from psycopg.rows import TupleRow

    Connection = psycopg.Connection[TupleRow]

#: The channel every committed record is announced on, as ``"<session_id> <seq>"``.
CHANNEL = "cairn_records"
#: Rows read per query when streaming a session (a page of records in memory at a time).
PAGE_ROWS = 500
#: Seconds to wait for a server before giving up, unless the URL says otherwise.
CONNECT_TIMEOUT_S = 10
#: A writer that lost its connection tries a new one at most this often.
RECONNECT_EVERY_S = 5.0
#: How long a reconnecting writer waits for its lost connection's server process to end.
BACKEND_EXIT_S = 5.0
#: The advisory lock (two 32-bit keys: "CAIR", 1) taken while creating the tables.
#: Sessions use single 64-bit keys, which PostgreSQL keeps apart from two-key locks.
_SCHEMA_LOCK = (0x43414952, 1)
_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS cairn_sessions (
        session_id TEXT PRIMARY KEY,
        workspace TEXT NOT NULL,
        parent_id TEXT NULL,
        created TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
        last_activity TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
        checkpoint_seq BIGINT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS cairn_records (
        session_id TEXT NOT NULL REFERENCES cairn_sessions (session_id) ON DELETE CASCADE,
        seq BIGINT NOT NULL CHECK (seq >= 1),
        type TEXT NOT NULL,
        line TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
    )
    """,
    """
    CREATE INDEX IF NOT EXISTS cairn_sessions_by_workspace
        ON cairn_sessions (workspace, last_activity DESC) WHERE parent_id IS NULL
    """,
)
#: One record, one statement, so one transaction even on an autocommit connection:
#: the row, the session's activity time and the notification commit together.
_APPEND = """
    WITH record AS (
        INSERT INTO cairn_records (session_id, seq, type, line)
        VALUES (%(session)s, %(seq)s, %(type)s, %(line)s)
        RETURNING session_id
    )
    UPDATE cairn_sessions AS s SET last_activity = clock_timestamp()
    FROM record WHERE s.session_id = record.session_id
    RETURNING pg_notify(%(channel)s, %(payload)s)
"""
_INSERT = "INSERT INTO cairn_records (session_id, seq, type, line) VALUES (%s, %s, %s, %s)"
_POINT = (
    "UPDATE cairn_sessions SET checkpoint_seq = %s, last_activity = clock_timestamp() "
    "WHERE session_id = %s"
)
_NOTIFY = "SELECT pg_notify(%s, %s)"
_PAGE = (
    "SELECT seq, line FROM cairn_records WHERE session_id = %s AND seq > %s ORDER BY seq LIMIT %s"
)
_MESSAGES = (
    "SELECT seq, line FROM cairn_records WHERE session_id = %s AND type = 'message' AND seq > %s "
    "ORDER BY seq LIMIT %s"
)
_HOLDER = """
    SELECT a.application_name FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid::bigint = %s AND l.objid::bigint = %s
"""
_APP_NAME = re.compile(r"^cairn pid (\d+) on (.*)$")


# ---------------------------------------------------------------------------
# Connections


def _require_driver() -> None:
    """Raise a one-line ``StoreError`` if psycopg 3 is not installed."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise StoreError(
            "the PostgreSQL transcript store needs psycopg 3, which is not installed: "
            "install cairn[postgres] (pip install 'cairn[postgres]')"
        ) from None


def _cause(exc: BaseException) -> str:
    """The first line of a driver error, without psycopg's connection prefix."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = " ".join(lines[0].split()) if lines else type(exc).__name__
    for prefix in ("connection failed: ", "connection is bad: "):
        text = text.removeprefix(prefix)
    return text


def _check_url(url: str) -> dict[str, Any]:
    from psycopg import conninfo

    try:
        return conninfo.conninfo_to_dict(url)
    except Exception as exc:  # psycopg raises ProgrammingError; be sure nothing escapes
        raise StoreError(
            f"invalid transcript database URL {mask_url(url)}: {_cause(exc)}"
        ) from None


def _application_name() -> str:
    # PostgreSQL keeps 63 bytes of it; the lock holder's pid comes first.
    return f"cairn pid {os.getpid()} on {socket.gethostname()}"[:63]


def _connect(url: str) -> Connection:
    """A new autocommit connection, with the tables in place; one-line ``StoreError`` if not."""
    import psycopg

    params: dict[str, Any] = {}
    given = _check_url(url)
    if "application_name" not in given and "PGAPPNAME" not in os.environ:
        params["application_name"] = _application_name()
    if "connect_timeout" not in given and "PGCONNECT_TIMEOUT" not in os.environ:
        params["connect_timeout"] = CONNECT_TIMEOUT_S
    try:
        conn = psycopg.connect(url, autocommit=True, **params)
    except psycopg.Error as exc:
        raise StoreError(
            f"cannot connect to the transcript database {mask_url(url)}: {_cause(exc)}"
        ) from None
    try:
        _ensure_schema(conn)
    except psycopg.Error as exc:
        conn.close()
        raise StoreError(
            f"cannot create Cairn's tables in {mask_url(url)}: {_cause(exc)}"
        ) from None
    return conn


def _ensure_schema(conn: Connection) -> None:
    row = conn.execute(
        "SELECT to_regclass('cairn_sessions') IS NOT NULL AND to_regclass('cairn_records') "
        "IS NOT NULL"
    ).fetchone()
    if row is not None and row[0]:
        return
    with conn.transaction():
        # Concurrent CREATE TABLE IF NOT EXISTS can still fail on the catalog's
        # unique index; the lock makes the second creator wait, then skip.
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", _SCHEMA_LOCK)
        for statement in _SCHEMA:
            conn.execute(statement)


def task_key(parent_id: str, task_id: str) -> str:
    """The key of a background task's transcript: ``<session id>/<task id>``.

    A ``/`` is in no session id, so no key of a task is ever a session's.
    """
    return f"{check_session_id(parent_id)}/{check_session_id(task_id)}"


def _check_key(key: str) -> str:
    """A session id, or a background task's ``<session id>/<task id>``."""
    parent, slash, task = key.partition("/")
    return task_key(parent, task) if slash else check_session_id(key)


def _until_gone(conn: Connection, backend_pid: int) -> None:
    """Wait (a bounded while) for a lost connection's server process to end.

    A terminated backend holds its session's lock until its process exits:
    the writer reconnecting must not take its own dying lock for another's.
    """
    deadline = time.monotonic() + BACKEND_EXIT_S
    while time.monotonic() < deadline:
        row = conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (backend_pid,))
        if row.fetchone() is None:
            return
        time.sleep(0.01)


def _location(conn: Connection, session_id: str) -> Path:
    return Path("postgresql") / conn.info.dbname / session_id


def _lock_key(session_id: str) -> int:
    """The session's 64-bit advisory lock key (a hash: ids are text)."""
    digest = hashlib.sha256(b"cairn-session\0" + session_id.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _try_lock(conn: Connection, key: int) -> bool:
    """Take a session's lock on ``conn`` if nobody holds it; held until ``conn`` closes."""
    return conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone() == (True,)


def _holder(conn: Connection, key: int) -> str:
    """Who holds a session's lock, as far as the server tells."""
    unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
    try:
        row = conn.execute(_HOLDER, (unsigned >> 32, unsigned & 0xFFFF_FFFF)).fetchone()
    except Exception:  # only a nicer message is at stake
        return "another Cairn process"
    match = _APP_NAME.match(str(row[0])) if row is not None else None
    if match is None:
        return "another Cairn process"
    pid, host = int(match[1]), match[2]
    if pid == os.getpid() and host == _application_name().partition(" on ")[2]:
        return f"this Cairn process (pid {pid})"
    return f"another Cairn process (pid {pid} on {host})"


def _page(conn: Connection, session_id: str, after: int) -> list[tuple[int, bytes]]:
    rows = conn.execute(_PAGE, (session_id, after, PAGE_ROWS)).fetchall()
    return [(int(seq), str(line).encode()) for seq, line in rows]


def _message_lines(conn: Connection, session_id: str) -> Iterator[tuple[int, bytes]]:
    """The session's message rows in order, a page at a time, read only as far as wanted."""
    after = 0
    while True:
        rows = conn.execute(_MESSAGES, (session_id, after, PAGE_ROWS)).fetchall()
        yield from ((int(seq), str(line).encode()) for seq, line in rows)
        if len(rows) < PAGE_ROWS:
            return
        after = int(rows[-1][0])


def _check_belongs(conn: Connection, session_id: str, workspace: str | None) -> Path:
    """The session's location; ``NotATranscriptError`` unless it is stored (in ``workspace``).

    With a workspace, only a top-level session of it: a task's transcript is
    read through its parent.
    """
    location = _location(conn, session_id)
    row = conn.execute(
        "SELECT workspace, parent_id FROM cairn_sessions WHERE session_id = %s", (session_id,)
    ).fetchone()
    if row is None or (workspace is not None and (row[0] != workspace or row[1] is not None)):
        raise NotATranscriptError(f"{location}: no such session")
    return location


def _decoded(lines: Iterable[tuple[int, bytes]]) -> Iterator[tuple[int, Record]]:
    """The readable records among ``lines``; bad ones are skipped (``_transcript`` reports them)."""
    for seq, line in lines:
        try:
            yield seq, decode_line(line)
        except RecordFormatError:
            continue


def _transcript(location: Path, lines: Iterable[tuple[int, bytes]]) -> Transcript:
    """A ``Transcript`` of a session's rows, with warnings worded as the JSONL loader's."""
    records: list[Record] = []
    warnings: list[str] = []
    bad = 0
    for seq, line in lines:
        try:
            records.append(decode_line(line))
        except RecordFormatError as exc:
            bad += 1
            warnings.append(f"line {seq}: {exc}; skipped")
    if not records and not bad:
        warnings.append("the session is empty: no session header")
    elif records and not isinstance(records[0], SessionRecord):
        warnings.append("the session does not start with a session header")
    return Transcript(location, records, warnings, bad)


def _trusted_checkpoint(line: bytes | None) -> CompactionRecord | None:
    """The checkpoint ``line`` holds, if a resume may start from it (valid, with history)."""
    if line is None:
        return None
    try:
        record = decode_line(line)
        if not isinstance(record, CompactionRecord):
            return None
        check_checkpoint(record)
    except (RecordFormatError, CheckpointFormatError):
        return None
    return record if record.history is not None else None


def _is_trusted(record: CompactionRecord) -> bool:
    try:
        check_checkpoint(record)
    except CheckpointFormatError:
        return False
    return record.history is not None


# ---------------------------------------------------------------------------
# The writer


class PostgresTranscriptStore:
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
        self._location = _location(conn, session_id)
        self._key = _lock_key(session_id)
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
        _require_driver()
        import psycopg

        conn = _connect(url)
        location = _location(conn, session_id)
        where = f"cannot create {location}"
        try:
            line, stored = _encode(header, where)
            exists = TranscriptWriteError(f"{where}: it already exists; open it to resume")
            key = _lock_key(session_id)
            if not _try_lock(conn, key):
                raise exists  # its writer has it open
            with conn.transaction():
                added = conn.execute(
                    "INSERT INTO cairn_sessions (session_id, workspace, parent_id) "
                    "VALUES (%s, %s, %s) ON CONFLICT (session_id) DO NOTHING",
                    (session_id, normalize_workspace(workspace), parent_id),
                ).rowcount
                if added != 1:
                    raise exists
                conn.execute(_INSERT, (session_id, 1, stored.TYPE, line[:-1].decode()))
                conn.execute(_NOTIFY, (CHANNEL, f"{session_id} 1"))
            store = cls(
                conn, url, session_id, Resumption(), 0, fsync_every_record=fsync_every_record
            )
        except psycopg.Error as exc:
            conn.close()
            raise TranscriptWriteError(f"{where}: {_cause(exc)}") from None
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
        _check_key(session_id)  # a task's key is refused below, by name
        _require_driver()
        import psycopg

        conn = _connect(url)
        location = _location(conn, session_id)
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
            key = _lock_key(session_id)
            if not _try_lock(conn, key):
                raise TranscriptLockedError(
                    f"{where}: it is already open for writing by {_holder(conn, key)}; "
                    "close it there first (one writer per session)"
                )
            # Read only once the lock is held: a writer that closed a moment ago
            # may have moved the pointer, and nobody can append from now on.
            found = conn.execute(
                "SELECT checkpoint_seq FROM cairn_sessions WHERE session_id = %s", (session_id,)
            ).fetchone()
            pointer = None if found is None or found[0] is None else int(found[0])
            state, warnings, last_seq = _load(conn, session_id, pointer, where)
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
            raise NotATranscriptError(f"{where}: cannot read it ({_cause(exc)})") from None
        except BaseException:
            conn.close()
            raise

    # -- writing ---------------------------------------------------------

    @property
    def path(self) -> Path:
        """``postgresql/<database>/<session id>``: names the session for people, not a file."""
        return self._location

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
        """What opening the session reported (bad rows after the checkpoint, a bad pointer)."""
        return list(self._warnings)

    def on_warning(self, handler: Callable[[str], None] | None) -> None:
        """Nothing to call it with: a row cannot be replaced under the writer's lock."""

    @property
    def last_seq(self) -> int:
        """The ``seq`` of the last record written (a follower starts after it)."""
        return self._seq

    def append(self, record: Record) -> None:
        line, stored = _encode(record, str(self._location))
        # A checkpoint that a resume may start from moves the pointer with it,
        # however it arrives: the pointer always names the last one.
        pointer = isinstance(stored, CompactionRecord) and _is_trusted(stored)
        self._write(stored, line, checkpoint=pointer)
        self._resumption.apply(stored)

    def save_compaction(self, record: CompactionRecord) -> None:
        record = replace(record, history=self._resumption.history())
        check_checkpoint(record)
        line, stored = _encode(record, str(self._location))
        self._write(stored, line, checkpoint=True)
        self._resumption.apply(stored)

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
                f"{self._location}: could not make its records durable ({_cause(exc)})"
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
                        conn.execute(_INSERT, (self._session_id, seq, record.TYPE, text))
                        conn.execute(_POINT, (seq, self._session_id))
                        conn.execute(_NOTIFY, (CHANNEL, payload))
                else:
                    params = {
                        "session": self._session_id,
                        "seq": seq,
                        "type": record.TYPE,
                        "line": text,
                        "channel": CHANNEL,
                        "payload": payload,
                    }
                    if conn.execute(_APPEND, params).rowcount != 1:
                        raise TranscriptWriteError(
                            f"{self._location}: could not write record (its session row is gone)"
                        )
            except psycopg.Error as exc:
                self._note_loss(conn, exc)
                what = "checkpoint" if checkpoint else "record"
                raise TranscriptWriteError(
                    f"{self._location}: could not write {what} ({_cause(exc)})"
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
            self._lost = _cause(exc)

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
            conn = _connect(self._url)
        except StoreError as exc:
            raise TranscriptWriteError(f"{refused}; {exc}") from None
        try:
            _until_gone(conn, self._backend_pid)
            if not _try_lock(conn, self._key):
                raise TranscriptWriteError(
                    f"{refused}, and {_holder(conn, self._key)} has opened it since; "
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
            raise TranscriptWriteError(f"{refused}; reconnecting failed ({_cause(exc)})") from None
        except BaseException:
            conn.close()
            raise
        old.close()
        self._conn, self._lost, self._durable_commits = conn, None, durable
        self._backend_pid = conn.info.backend_pid

    # -- reading ---------------------------------------------------------

    def transcript(self) -> Transcript:
        return _transcript(self._location, self._lines())

    def ui_page(self, before: int | None = None, limit: int | None = None) -> UiPage:
        # The newest entries are in memory (the page a surface opens with);
        # an older page streams the session's rows.
        page = self._resumption.tail_page(before, limit)
        if page is not None:
            return page
        records = (record for _, record in _decoded(self._lines()))
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
                            own = _connect(self._url)
                        conn = own
                    rows = _page(conn, self._session_id, after)
                yield from rows
                if len(rows) < PAGE_ROWS:
                    return
                after = rows[-1][0]
        except psycopg.Error as exc:
            raise StoreError(f"{self._location}: cannot read it ({_cause(exc)})") from None
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

    def __enter__(self) -> PostgresTranscriptStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


#: The resumption, the warnings of the rows read, and the last ``seq``.
_Loaded = tuple[Resumption, list[str], int]


def _load(conn: Connection, session_id: str, pointer: int | None, where: str) -> _Loaded:
    """The session's resumption, read from the pointer's checkpoint on when it can be trusted."""
    first = conn.execute(
        "SELECT seq, line FROM cairn_records WHERE session_id = %s ORDER BY seq LIMIT 1",
        (session_id,),
    ).fetchone()
    if first is None:
        raise TranscriptHeaderError(
            f"{where}: it holds no records, not even its session header; delete it to start over"
        )
    header_seq = int(first[0])
    try:
        header = decode_line(str(first[1]).encode())
    except RecordFormatError as exc:
        reason = str(exc)
    else:
        reason = f"it is a {header.TYPE} record"
    if not isinstance(header, SessionRecord):
        raise TranscriptHeaderError(
            f"{where}: it is not a Cairn transcript (no session header on line {header_seq}: "
            f"{reason})"
        )
    warnings: list[str] = []
    checkpoint = None
    if pointer is not None:
        row = conn.execute(
            "SELECT line FROM cairn_records WHERE session_id = %s AND seq = %s",
            (session_id, pointer),
        ).fetchone()
        checkpoint = _trusted_checkpoint(str(row[0]).encode() if row is not None else None)
        if checkpoint is None:
            warnings.append(
                f"the checkpoint pointer names line {pointer}, which holds no valid checkpoint "
                "with its history; the whole session was read"
            )
    if checkpoint is not None and pointer is not None:
        state = Resumption.starting_at(header, checkpoint)
        last = pointer
    else:
        state = Resumption()
        state.apply(header)
        last = header_seq
    while True:
        rows = _page(conn, session_id, last)
        for seq, line in rows:
            try:
                state.apply(decode_line(line))
            except RecordFormatError as exc:
                warnings.append(f"line {seq}: {exc}; skipped")
        if rows:
            last = rows[-1][0]
        if len(rows) < PAGE_ROWS:
            break
    return state, warnings, last


def _encode(record: Record, where: str) -> tuple[bytes, Record]:
    """The line to write and the record as a reload will see it (kept in memory)."""
    try:
        return encode_line(record)
    except RecordFormatError as exc:
        raise TranscriptWriteError(f"{where}: record not written: {exc}") from None


def _conforms(store: PostgresTranscriptStore) -> TranscriptStore:
    """Static proof (checked by mypy) that the PostgreSQL store implements the interface."""
    return store


# ---------------------------------------------------------------------------
# The factory


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
        _require_driver()
        _check_url(url)
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

        conn = _connect(self._url)
        where = f"cannot create {_location(conn, session_id)}"
        try:
            encoded = [_encode(record, where) for record in records]
            pointer = None
            for seq, (_, stored) in enumerate(encoded, 1):
                if isinstance(stored, CompactionRecord) and _is_trusted(stored):
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
                        _INSERT,
                        [
                            (session_id, seq, stored.TYPE, line[:-1].decode())
                            for seq, (line, stored) in enumerate(encoded, 1)
                        ],
                    )
                conn.execute(_NOTIFY, (CHANNEL, f"{session_id} {len(encoded)}"))
        except psycopg.Error as exc:
            raise TranscriptWriteError(f"{where}: {_cause(exc)}") from None
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
                StoredSession(str(sid), _location(conn, str(sid)), float(when))
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
            location = _location(conn, session_id)
            row = conn.execute(
                "SELECT checkpoint_seq FROM cairn_sessions WHERE session_id = %s "
                "AND workspace = %s AND parent_id IS NULL",
                (session_id, normalize_workspace(workspace)),
            ).fetchone()
            if row is None:
                raise NotATranscriptError(f"{location}: no such session")
            where = f"cannot read {location}"
            messages = _decoded(_message_lines(conn, session_id))
            prompt = first_prompt(record for _, record in messages)
            # A checkpoint that does not count the UI entries before it: read from the start.
            found = digest(prompt, _load(conn, session_id, row[0], where)[0]) or digest(
                prompt, _load(conn, session_id, None, where)[0]
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
        return self._read(_check_key(session_id), None)

    def _read(self, session_id: str, workspace: str | None) -> Transcript:
        with self._shared("cannot read sessions") as conn:
            location = _check_belongs(conn, session_id, workspace)

        def lines() -> Iterator[tuple[int, bytes]]:
            after = 0
            while True:
                with self._shared("cannot read sessions") as conn:
                    rows = _page(conn, session_id, after)
                yield from rows
                if len(rows) < PAGE_ROWS:
                    return
                after = rows[-1][0]

        transcript = _transcript(location, lines())
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
            _check_belongs(conn, session_id, normalize_workspace(workspace))
        return self._follow(session_id, after, Waiting(timeout, stop))

    def _follow(self, session_id: str, after: int, wait: Waiting) -> Iterator[tuple[int, Record]]:
        import psycopg

        conn = _connect(self._url)
        try:
            # Listen before reading: a record committed after the read is announced.
            conn.execute(f"LISTEN {CHANNEL}")
            last = after
            while True:
                while True:
                    rows = _page(conn, session_id, last)
                    for seq, record in _decoded(rows):
                        yield seq, record
                        wait.restart()
                    if rows:
                        last = rows[-1][0]
                    if len(rows) < PAGE_ROWS:
                        break
                if not self._announced(conn, session_id, last, wait):
                    return
        except psycopg.Error as exc:
            raise StoreError(f"cannot follow session {session_id}: {_cause(exc)}") from None
        finally:
            conn.close()

    @staticmethod
    def _announced(conn: Connection, session_id: str, last: int, wait: Waiting) -> bool:
        """Wait for news of a record past ``last``; ``False`` once the wait is over."""
        while True:
            slice_s = wait.next_slice()
            if slice_s is not None and slice_s <= 0:
                return False
            announced = False
            # Run the generator to its end: it holds the connection's lock meanwhile.
            for note in conn.notifies(timeout=slice_s, stop_after=1):
                sid, _, seq = note.payload.partition(" ")
                announced |= sid == session_id and seq.isdigit() and int(seq) > last
            if announced:
                return True

    def delete(self, workspace: Path, session_id: str) -> bool:
        """The session's row, its records and its tasks' transcripts in one transaction,
        under the session's lock; then its local artifact files."""
        import psycopg

        check_session_id(session_id)
        conn = _connect(self._url)
        where = f"cannot delete {_location(conn, session_id)}"
        try:
            row = conn.execute(
                "SELECT workspace FROM cairn_sessions WHERE session_id = %s AND parent_id IS NULL",
                (session_id,),
            ).fetchone()
            found = row is not None and row[0] == normalize_workspace(workspace)
            if found:
                key = _lock_key(session_id)
                if not _try_lock(conn, key):
                    raise TranscriptLockedError(
                        f"{where}: it is open for writing by {_holder(conn, key)}; "
                        "close it there first"
                    )
                with conn.transaction():  # the records go with their rows (ON DELETE CASCADE)
                    conn.execute("DELETE FROM cairn_sessions WHERE parent_id = %s", (session_id,))
                    conn.execute("DELETE FROM cairn_sessions WHERE session_id = %s", (session_id,))
        except psycopg.Error as exc:
            raise StoreError(f"{where}: {_cause(exc)}") from None
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
                self._conn = conn = _connect(self._url)
            try:
                yield conn
            except psycopg.Error as exc:
                raise StoreError(f"{what} in {mask_url(self._url)}: {_cause(exc)}") from None


def _factory_conforms(factory: PostgresStoreFactory) -> StoreFactory:
    """Static proof (checked by mypy) that the PostgreSQL factory implements the interface."""
    return factory
