"""The PostgreSQL store's tables, the statements that use them, and how sessions are keyed.

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
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cairn.store.paths import check_session_id

if TYPE_CHECKING:
    from cairn.store.postgres.connection import Connection

__all__ = [
    "APPEND",
    "CHANNEL",
    "INSERT",
    "MESSAGES",
    "NOTIFY",
    "PAGE",
    "PAGE_ROWS",
    "POINT",
    "check_key",
    "ensure_schema",
    "task_key",
]

#: The channel every committed record is announced on, as ``"<session_id> <seq>"``.
CHANNEL = "cairn_records"
#: Rows read per query when streaming a session (a page of records in memory at a time).
PAGE_ROWS = 500


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
APPEND = """
    WITH record AS (
        INSERT INTO cairn_records (session_id, seq, type, line)
        VALUES (%(session)s, %(seq)s, %(type)s, %(line)s)
        RETURNING session_id
    )
    UPDATE cairn_sessions AS s SET last_activity = clock_timestamp()
    FROM record WHERE s.session_id = record.session_id
    RETURNING pg_notify(%(channel)s, %(payload)s)
"""
INSERT = "INSERT INTO cairn_records (session_id, seq, type, line) VALUES (%s, %s, %s, %s)"
POINT = (
    "UPDATE cairn_sessions SET checkpoint_seq = %s, last_activity = clock_timestamp() "
    "WHERE session_id = %s"
)
NOTIFY = "SELECT pg_notify(%s, %s)"
PAGE = (
    "SELECT seq, line FROM cairn_records WHERE session_id = %s AND seq > %s ORDER BY seq LIMIT %s"
)
MESSAGES = (
    "SELECT seq, line FROM cairn_records WHERE session_id = %s AND type = 'message' AND seq > %s "
    "ORDER BY seq LIMIT %s"
)


def ensure_schema(conn: Connection) -> None:
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


def check_key(key: str) -> str:
    """A session id, or a background task's ``<session id>/<task id>``."""
    parent, slash, task = key.partition("/")
    return task_key(parent, task) if slash else check_session_id(key)
