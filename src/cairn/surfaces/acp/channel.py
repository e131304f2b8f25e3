"""The agent's side of one ACP connection: ordered notifications, requests, and a flush.

Session events arrive synchronously from the session (``AgentSession.on_event``);
their notifications are queued here and written by one task, in order. A
prompt's response waits for ``flush()``, so every update of a turn reaches
the client before the turn's answer does, and none of it after. A request to
the client (a permission, a file read) flushes first, so the tool call it is
about is on the client's screen before the question.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from acp.connection import Connection

from cairn.messages import JSONObject, JSONValue

log = logging.getLogger(__name__)


class Channel:
    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._queue: asyncio.Queue[tuple[str, JSONObject]] = asyncio.Queue()
        self._writer: asyncio.Task[None] | None = None

    def update(self, session_id: str, update: JSONObject) -> None:
        """One ``session/update`` for ``session_id``."""
        self.notify("session/update", {"sessionId": session_id, "update": update})

    def extension(self, name: str, params: JSONObject) -> None:
        """A Cairn extension notification (``_cairn/…``): clients that do not know it ignore it."""
        self.notify(f"_{name}", params)

    def notify(self, method: str, params: JSONObject) -> None:
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._write())
        self._queue.put_nowait((method, params))

    def notify_after_response(self, send: Callable[[], None]) -> None:
        """Run ``send`` once the response to the request being handled is on its way.

        The library queues a response as soon as its handler returns, before
        anything scheduled now runs; so ``send``'s notifications follow it
        (``available_commands_update`` must name a session the client knows).
        """
        asyncio.get_running_loop().call_soon(send)

    async def flush(self) -> None:
        """Return once every notification queued so far is written."""
        await self._queue.join()

    async def request(self, method: str, params: JSONObject) -> JSONValue:
        await self.flush()
        result: JSONValue = await self._connection.send_request(method, params)
        return result

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer

    async def _write(self) -> None:
        while True:
            method, params = await self._queue.get()
            try:
                await self._connection.send_notification(method, params)
            except ConnectionError:
                pass  # the client went away: nothing is listening for the rest
            except Exception:  # one bad notification must not stop the others
                log.exception("cannot send %s", method)
            finally:
                self._queue.task_done()
