"""Following a session another process writes: its rows, then each one as it is announced."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from cairn.store.base import StoreError
from cairn.store.following import Waiting
from cairn.store.postgres.connection import cause, connect
from cairn.store.postgres.reader import decoded, page
from cairn.store.postgres.schema import CHANNEL, PAGE_ROWS
from cairn.store.records import Record

if TYPE_CHECKING:
    from cairn.store.postgres.connection import Connection

__all__ = ["follow_session"]


def follow_session(
    url: str, session_id: str, after: int, wait: Waiting
) -> Iterator[tuple[int, Record]]:
    import psycopg

    conn = connect(url)
    try:
        # Listen before reading: a record committed after the read is announced.
        conn.execute(f"LISTEN {CHANNEL}")
        last = after
        while True:
            while True:
                rows = page(conn, session_id, last)
                for seq, record in decoded(rows):
                    yield seq, record
                    wait.restart()
                if rows:
                    last = rows[-1][0]
                if len(rows) < PAGE_ROWS:
                    break
            if not _announced(conn, session_id, last, wait):
                return
    except psycopg.Error as exc:
        raise StoreError(f"cannot follow session {session_id}: {cause(exc)}") from None
    finally:
        conn.close()


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
