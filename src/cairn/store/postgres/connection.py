"""Connections to the transcript database, and the session locks they hold.

psycopg 3 is imported inside the functions that need it, so importing the
PostgreSQL store does not load it (``require_driver`` says when it is missing).
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn.store.base import StoreError
from cairn.store.postgres.schema import ensure_schema
from cairn.store.selection import mask_url

if TYPE_CHECKING:
    import psycopg
    from psycopg.rows import TupleRow

    Connection = psycopg.Connection[TupleRow]

__all__ = [
    "BACKEND_EXIT_S",
    "CONNECT_TIMEOUT_S",
    "application_name",
    "cause",
    "check_url",
    "connect",
    "lock_holder",
    "lock_key",
    "require_driver",
    "session_location",
    "try_lock",
    "until_gone",
]

#: Seconds to wait for a server before giving up, unless the URL says otherwise.
CONNECT_TIMEOUT_S = 10


#: How long a reconnecting writer waits for its lost connection's server process to end.
BACKEND_EXIT_S = 5.0


_HOLDER = """
    SELECT a.application_name FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid::bigint = %s AND l.objid::bigint = %s
"""
_APP_NAME = re.compile(r"^cairn pid (\d+) on (.*)$")


def require_driver() -> None:
    """Raise a one-line ``StoreError`` if psycopg 3 is not installed."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise StoreError(
            "the PostgreSQL transcript store needs psycopg 3, which is not installed: "
            "install cairn[postgres] (pip install 'cairn[postgres]')"
        ) from None


def cause(exc: BaseException) -> str:
    """The first line of a driver error, without psycopg's connection prefix."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = " ".join(lines[0].split()) if lines else type(exc).__name__
    for prefix in ("connection failed: ", "connection is bad: "):
        text = text.removeprefix(prefix)
    return text


def check_url(url: str) -> dict[str, Any]:
    from psycopg import conninfo

    try:
        return conninfo.conninfo_to_dict(url)
    except Exception as exc:  # psycopg raises ProgrammingError; be sure nothing escapes
        raise StoreError(f"invalid transcript database URL {mask_url(url)}: {cause(exc)}") from None


def application_name() -> str:
    # PostgreSQL keeps 63 bytes of it; the lock holder's pid comes first.
    return f"cairn pid {os.getpid()} on {socket.gethostname()}"[:63]


def connect(url: str) -> Connection:
    """A new autocommit connection, with the tables in place; one-line ``StoreError`` if not."""
    import psycopg

    params: dict[str, Any] = {}
    given = check_url(url)
    if "application_name" not in given and "PGAPPNAME" not in os.environ:
        params["application_name"] = application_name()
    if "connect_timeout" not in given and "PGCONNECT_TIMEOUT" not in os.environ:
        params["connect_timeout"] = CONNECT_TIMEOUT_S
    try:
        conn = psycopg.connect(url, autocommit=True, **params)
    except psycopg.Error as exc:
        raise StoreError(
            f"cannot connect to the transcript database {mask_url(url)}: {cause(exc)}"
        ) from None
    try:
        ensure_schema(conn)
    except psycopg.Error as exc:
        conn.close()
        raise StoreError(f"cannot create Cairn's tables in {mask_url(url)}: {cause(exc)}") from None
    return conn


def until_gone(conn: Connection, backend_pid: int) -> None:
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


def session_location(conn: Connection, session_id: str) -> Path:
    return Path("postgresql") / conn.info.dbname / session_id


def lock_key(session_id: str) -> int:
    """The session's 64-bit advisory lock key (a hash: ids are text)."""
    digest = hashlib.sha256(b"cairn-session\0" + session_id.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def try_lock(conn: Connection, key: int) -> bool:
    """Take a session's lock on ``conn`` if nobody holds it; held until ``conn`` closes."""
    return conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone() == (True,)


def lock_holder(conn: Connection, key: int) -> str:
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
    if pid == os.getpid() and host == application_name().partition(" on ")[2]:
        return f"this Cairn process (pid {pid})"
    return f"another Cairn process (pid {pid} on {host})"
