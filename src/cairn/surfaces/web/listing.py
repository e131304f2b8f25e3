"""The sidebar's list of sessions: read off the event loop, shared by every page of a server.

Describing a session reads its transcript (its first prompt, its message
count), so a workspace with hundreds of sessions takes a while to list; on the
event loop that froze every pane of every page. Here the store is read on a
worker thread, one listing at a time: callers that ask while one is being
read share the next one, so a page that sends 2,000 ``list`` frames costs at
most two reads. A session's digest is kept while its last activity stays the
same, so a listing describes only the sessions that changed since the last.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from cairn.agent import Runtime
from cairn.errors import CairnError
from cairn.messages import JSONValue
from cairn.store import SessionDigest

__all__ = ["SessionList"]

#: A digest is kept only once its session has been quiet this long (seconds): a file
#: system stamps a write to a clock tick, so two writes within one tick share their
#: time, and a digest read between them would otherwise be kept though stale.
SETTLED_S = 2.0

Listing = asyncio.Future[list[JSONValue]]


class SessionList:
    """The workspace's sessions as the ``sessions`` frame carries them."""

    def __init__(self, runtime: Callable[[], Runtime]) -> None:
        self._runtime = runtime
        #: session id -> (its last activity when described, the digest)
        self._digests: dict[str, tuple[float, SessionDigest]] = {}
        #: Sessions forgotten while a read runs: that read must not keep their digests.
        self._forgotten: set[str] = set()
        self._lock = threading.Lock()
        self._reading: Listing | None = None
        self._next: Listing | None = None

    async def listing(self) -> list[JSONValue]:
        """The sessions, from a read that started after this call (never an older one)."""
        if self._next is None:
            self._next = asyncio.ensure_future(self._read_after(self._reading))
        # Shielded: one caller going away must not cancel the read the others wait for.
        return await asyncio.shield(self._next)

    def forget(self, session_id: str) -> None:
        """``session_id`` changed here: describe it again, whatever its time says."""
        with self._lock:
            self._digests.pop(session_id, None)
            self._forgotten.add(session_id)

    async def _read_after(self, previous: Listing | None) -> list[JSONValue]:
        if previous is not None and not previous.done():
            await asyncio.wait([previous])
        self._reading, self._next = self._next, None
        return await asyncio.to_thread(self._read)

    def _read(self) -> list[JSONValue]:
        runtime = self._runtime()
        try:
            stores, workspace = runtime.store_factory, runtime.workspace
            stored = stores.sessions(workspace)
            now = time.time()
            with self._lock:
                known = dict(self._digests)
                self._forgotten.clear()
            kept: dict[str, tuple[float, SessionDigest]] = {}
            sessions: list[JSONValue] = []
            for session in stored:
                cached = known.get(session.session_id)
                if cached is not None and cached[0] == session.last_activity:
                    digest = cached[1]
                else:
                    try:
                        digest = stores.describe(workspace, session.session_id)
                    except (CairnError, OSError):
                        continue  # listed by what it holds; one that cannot be read is left out
                if now - session.last_activity >= SETTLED_S:
                    kept[session.session_id] = (session.last_activity, digest)
                sessions.append(
                    {
                        "id": session.session_id,
                        "firstPrompt": digest.first_prompt[:120],
                        "messages": digest.messages,
                        "lastActivity": session.last_activity,
                    }
                )
            with self._lock:
                for session_id in self._forgotten:
                    kept.pop(session_id, None)
                self._digests = kept  # sessions no longer stored drop out
            return sessions
        finally:
            runtime.close()
