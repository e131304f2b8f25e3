"""The PostgreSQL transcript store: session transcripts in a database several machines share.

It keeps the JSONL store's guarantees (DESIGN §6) and behaves the same way:
the same records, the same views, the same resume. psycopg 3 is imported
in this package only, and only when a factory is made (the
``cairn[postgres]`` extra), so ``import cairn`` works without it. The tables
are described in ``cairn.store.postgres.schema``.

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

The modules: ``schema`` (tables, statements, keys), ``connection``
(connections and session locks), ``reader`` (rows read and folded),
``follower``, ``writer`` (the one writer) and ``factory``.
"""

from cairn.store.postgres.connection import BACKEND_EXIT_S, CONNECT_TIMEOUT_S
from cairn.store.postgres.factory import PostgresStoreFactory
from cairn.store.postgres.schema import CHANNEL, PAGE_ROWS, task_key
from cairn.store.postgres.writer import RECONNECT_EVERY_S, PostgresTranscriptStore

__all__ = [
    "BACKEND_EXIT_S",
    "CHANNEL",
    "CONNECT_TIMEOUT_S",
    "PAGE_ROWS",
    "RECONNECT_EVERY_S",
    "PostgresStoreFactory",
    "PostgresTranscriptStore",
    "task_key",
]
