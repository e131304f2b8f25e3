"""A pane that shows a session another process is writing: read-only, as it is written.

A session has one writer (the store's lock), so a pane asked to open one that
another process holds — a second ``cairn web`` worker on the same database,
or a terminal ``cairn`` on the same files — cannot resume it. It follows it
instead: the store's follower (``StoreFactory.follow``) reads what is stored
and then each record as it is committed, and the pane gets the same frames a
writing pane gets — ``opened`` with the end of the UI view (``readOnly``
set), then ``messageAdded`` and ``compactBlockAdded`` events as entries
arrive, and ``history`` pages on request. Nothing is written; prompts are
refused. The follower runs on a thread of its own, so the event loop never
waits on the store.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable, Iterator

from cairn.agent import CompactBlockAdded, Event, MessageAdded, Runtime, SessionUsage
from cairn.errors import CairnError
from cairn.messages import KIND_COMPACT_SUMMARY, JSONObject, Message
from cairn.store import Record, UiPage, ui_entries, ui_page
from cairn.surfaces.web.frames import event_frame, opened_frame, state_frame

__all__ = ["Watch"]


class Watch:
    """One pane following ``session_id`` through ``runtime``'s store, which it closes."""

    def __init__(
        self,
        pane_id: str,
        session_id: str,
        runtime: Runtime,
        send: Callable[[JSONObject], None],
        *,
        reason: str,
        page_size: int,
    ) -> None:
        self.id = pane_id
        self.session_id = session_id
        #: Why the pane cannot write (the store's lock error), shown with the session.
        self.reason = reason
        self._runtime = runtime
        self._send = send
        self._page_size = page_size
        self._stop = threading.Event()
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name=f"watch {session_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop following; the thread ends (and closes the runtime) at its next look."""
        self._stop.set()

    async def history(self, before: int, limit: int) -> UiPage:
        """The ``limit`` entries before ``before``, read off the loop."""
        return await asyncio.to_thread(self._page, before, limit)

    # -- the follower's thread ------------------------------------------------------------

    def _run(self) -> None:
        try:
            last, compactions = self._catch_up()
            if self._stop.is_set():
                return
            stores, workspace = self._runtime.store_factory, self._runtime.workspace
            followed = stores.follow(workspace, self.session_id, last, stop=self._stop)
            for entry in ui_entries(record for _, record in followed):
                if entry.meta.kind != KIND_COMPACT_SUMMARY:
                    self._post_event(MessageAdded(entry))
                    continue
                compactions += 1
                self._post_event(CompactBlockAdded(entry))
                # As a writing pane's meter counts it, after its block.
                self._post(state_frame(self.id, _usage(compactions), status="idle", busy=False))
        except (CairnError, OSError) as exc:
            text = f"cannot follow session {self.session_id}: {exc}"
            self._post({"type": "error", "pane": self.id, "text": text})
        finally:
            self._runtime.close()

    def _catch_up(self) -> tuple[int, int]:
        """Send ``opened`` with the end of what is stored; the seq of the last record read,
        and the compactions so far."""
        last = 0
        page: deque[Message] = deque(maxlen=self._page_size)
        total = compactions = 0

        def stored() -> Iterator[Record]:
            nonlocal last
            for seq, record in self._records(timeout=0):
                if self._stop.is_set():
                    return  # the pane closed meanwhile: read no further, send nothing
                last = seq
                yield record

        for entry in ui_entries(stored()):
            page.append(entry)
            total += 1
            compactions += entry.meta.kind == KIND_COMPACT_SUMMARY
        end = UiPage(list(page), total - len(page), total)
        self._post(
            opened_frame(
                self.id,
                self.session_id,
                end,
                _usage(compactions),
                status="idle",
                busy=False,
                read_only=True,
            )
        )
        self._post({"type": "notice", "pane": self.id, "text": self.reason})
        return last, compactions

    def _page(self, before: int, limit: int) -> UiPage:
        return ui_page(
            (record for _, record in self._records(timeout=0)), before=before, limit=limit
        )

    def _records(self, *, timeout: float) -> Iterator[tuple[int, Record]]:
        stores, workspace = self._runtime.store_factory, self._runtime.workspace
        return stores.follow(workspace, self.session_id, timeout=timeout)

    def _post_event(self, event: Event) -> None:
        self._post(event_frame(self.id, event))

    def _post(self, frame: JSONObject) -> None:
        """Hand a frame to the loop's writer, unless the pane stopped following meanwhile."""
        if not self._stop.is_set():
            try:
                self._loop.call_soon_threadsafe(self._deliver, frame)
            except RuntimeError:
                self._stop.set()  # the server's loop is closed: nobody to show it to

    def _deliver(self, frame: JSONObject) -> None:
        if not self._stop.is_set():
            self._send(frame)


def _usage(compactions: int) -> SessionUsage:
    """The meter of a followed session: its compactions; its tokens are the writer's to know."""
    return SessionUsage(None, None, None, compactions)
