"""``$/cancel_request {requestId}``: the client cancels one request it sent, by its id.

The library hands a request's handler its method and params, not its id; so
the connection's observer, which sees each incoming message just before the
library starts the task that handles it, puts the id in a context variable
that the new task inherits (``asyncio`` copies the context into each task).

A cancelled ``session/prompt`` or ``_cairn/compact`` stops as
``session/cancel`` stops it — the turn or the compaction ends at a safe
point and the request answers normally, ``cancelled`` — so the transcript
stays whole. Any other request's handler task is cancelled and the request
answers JSON-RPC's -32800 "Request cancelled". An id nothing runs under
(unknown, or already answered) is ignored, as the protocol asks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Final

from acp.connection import StreamDirection, StreamEvent
from acp.exceptions import RequestError

__all__ = ["CANCEL_REQUEST", "REQUEST_CANCELLED", "InFlight"]

CANCEL_REQUEST: Final = "$/cancel_request"
REQUEST_CANCELLED: Final = -32800

#: ``(type name, id)``: the ids ``1`` and ``"1"`` are different requests.
RequestKey = tuple[str, object]

_REQUEST: ContextVar[RequestKey | None] = ContextVar("cairn_acp_request", default=None)

#: Stops a request's work the way its feature defines (``session/cancel``); true if it did.
Cooperative = Callable[[str, object], Awaitable[bool]]


def _key(request_id: object) -> RequestKey | None:
    if isinstance(request_id, str) or type(request_id) is int:
        return (type(request_id).__name__, request_id)
    return None


class InFlight:
    """The requests being handled, by id, so that ``$/cancel_request`` can find them."""

    def __init__(self, cooperative: Cooperative) -> None:
        self._cooperative = cooperative
        self._running: dict[RequestKey, tuple[str, object, asyncio.Future[object]]] = {}
        self._cancelled: set[RequestKey] = set()

    def observe(self, event: StreamEvent) -> None:
        """The connection's observer: note the id of each incoming request."""
        message = event.message
        if event.direction is StreamDirection.INCOMING and "method" in message:
            _REQUEST.set(_key(message.get("id")) if "id" in message else None)

    async def run(
        self, method: str, params: object, handle: Callable[[], Awaitable[object]]
    ) -> object:
        """Handle one request (``handle``), cancellable by its id while it runs."""
        key = _REQUEST.get()
        work: asyncio.Future[object] = asyncio.ensure_future(handle())
        if key is None:
            return await work
        self._running[key] = (method, params, work)
        try:
            return await work
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if key in self._cancelled and (current is None or not current.cancelling()):
                raise RequestError(REQUEST_CANCELLED, "Request cancelled") from None
            raise  # the connection itself is closing
        finally:
            if self._running.get(key, (None, None, work))[2] is work:
                self._running.pop(key, None)
            self._cancelled.discard(key)

    async def cancel(self, params: object) -> None:
        """``$/cancel_request``; anything but the id of a request in flight is ignored."""
        request_id = params.get("requestId") if isinstance(params, dict) else None
        key = _key(request_id)
        entry = self._running.get(key) if key is not None else None
        if key is None or entry is None:
            return
        method, request_params, work = entry
        if await self._cooperative(method, request_params):
            return
        self._cancelled.add(key)
        work.cancel()
