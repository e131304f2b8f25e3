"""The NDJSON transport under ``cairn acp``: no line a client sends can end the agent.

The protocol library's own transport hands every parsed line to the
connection, so a line that is JSON but not an object (``42``, ``[]``,
``null``) reached code that assumed a dict and ended the process — ``null``
even read as the end of input. Here each line is checked before the
connection sees it: what is not JSON gets JSON-RPC's parse error (-32700),
what is JSON but not a request, notification or response gets its invalid
request error (-32600, echoing the message's id when it has a usable one),
and a line longer than ``max_line_bytes`` is read to its end in pieces,
dropped and answered the same way. The connection only ever receives
well-formed messages, and only the end of the stream ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any, Final

from cairn.messages import JSONObject, JSONValue

log = logging.getLogger(__name__)

__all__ = [
    "INVALID_REQUEST",
    "MAX_LINE_BYTES",
    "PARSE_ERROR",
    "READ_CHUNK_BYTES",
    "GuardedTransport",
    "RefusedNotifications",
    "message_problem",
]

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
#: The longest line read as a message. A prompt carrying a few screenshots is a
#: few MiB of base64; past this a line is answered with an error, not buffered.
MAX_LINE_BYTES: Final = 16 * 1024 * 1024
#: The reader's buffer limit: a long line is read in pieces of about this size,
#: so an oversized one costs this much memory, not its length.
READ_CHUNK_BYTES: Final = 1024 * 1024


class _TooLong:
    """What ``_read_line`` returns for a line over the cap (read to its end and dropped)."""


_TOO_LONG: Final = _TooLong()


def message_problem(value: object) -> str | None:
    """Why ``value`` (one parsed line) is not a JSON-RPC message, or None when it is one."""
    if not isinstance(value, dict):
        return f"a message is a JSON object, not {_json_kind(value)}"
    if "jsonrpc" in value and value["jsonrpc"] != "2.0":
        return "'jsonrpc' must be \"2.0\""
    if "id" in value and not _usable_id(value["id"]):
        return "'id' must be a string, an integer or null"
    if "method" in value:
        method = value["method"]
        if not isinstance(method, str) or not method:
            return "'method' must be a non-empty string"
        params = value.get("params")
        if params is not None and not isinstance(params, dict | list):
            return "'params' must be an object or an array"
        return None
    if "id" in value and ("result" in value or "error" in value):
        return None  # a response to one of the agent's own requests
    return "neither a request, a notification nor a response"


def _usable_id(value: object) -> bool:
    return value is None or isinstance(value, str) or type(value) is int


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array (batches are not supported)"
    return type(value).__name__


class GuardedTransport:
    """The ``acp`` library's message transport over a reader and a writer, every line checked."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        max_line_bytes: int = MAX_LINE_BYTES,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._max_line_bytes = max_line_bytes
        # Responses, notifications and error replies come from many tasks: one line at a time.
        self._writing = asyncio.Lock()

    async def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        async with self._writing:
            self._writer.write(data)
            await self._writer.drain()

    async def receive(self) -> dict[str, Any] | None:
        """The next well-formed message, or None at the end of the stream."""
        while True:
            line = await self._read_line()
            if line is None:
                return None
            if isinstance(line, _TooLong):
                too_long = f"a line is at most {self._max_line_bytes:,} bytes"
                await self._refuse(None, INVALID_REQUEST, too_long)
                continue
            text = line.strip()
            if not text:
                continue
            try:
                value: object = json.loads(text)
            except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
                await self._refuse(None, PARSE_ERROR, f"Parse error: {_first_line(exc)}")
                continue
            if isinstance(value, list) and value:
                await self._refuse_batch(value)
                continue
            problem = message_problem(value)
            if problem is None:
                assert isinstance(value, dict)
                return value
            rid = value.get("id") if isinstance(value, dict) else None
            await self._refuse(rid if _usable_id(rid) else None, INVALID_REQUEST, problem)

    async def close(self) -> None:
        async with self._writing:  # a reply being written is finished first
            pass

    async def _refuse_batch(self, batch: list[object]) -> None:
        """One error per batched request the client waits on (by its id), or one for the batch."""
        ids = [
            m["id"]
            for m in batch
            if isinstance(m, dict) and m.get("id") is not None and _usable_id(m["id"])
        ]
        problem = "batches are not supported: send one message a line"
        for rid in ids or [None]:
            await self._refuse(rid, INVALID_REQUEST, problem)

    async def _refuse(self, rid: JSONValue, code: int, text: str) -> None:
        name = "Parse error" if code == PARSE_ERROR else "Invalid Request"
        error: JSONObject = {"code": code, "message": name, "data": {"details": text}}
        reply: JSONObject = {"jsonrpc": "2.0", "id": rid, "error": error}
        # A client that stopped reading: the end of its input ends the agent.
        with contextlib.suppress(ConnectionError):
            await self.send(reply)

    async def _read_line(self) -> bytes | _TooLong | None:
        """One line (its newline included), ``_TOO_LONG``, or None at the end of input."""
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                chunk = await self._reader.readuntil(b"\n")
                ended = True
            except asyncio.LimitOverrunError as exc:
                chunk = await self._reader.readexactly(exc.consumed)
                ended = False
            except asyncio.IncompleteReadError as exc:  # the input ended without a newline
                if not exc.partial and not chunks and size == 0:
                    return None
                chunk, ended = exc.partial, True
            size += len(chunk)
            if size <= self._max_line_bytes:
                chunks.append(chunk)
            else:
                chunks.clear()  # past the cap nothing more is kept: read on to the newline
            if ended:
                return b"".join(chunks) if size <= self._max_line_bytes else _TOO_LONG


class RefusedNotifications:
    """Notifications that could not be handled: one warning line per method, then a count.

    A notification has no reply to carry its error, so stderr is the only
    place it can be said — once, not once per message of a storm.
    """

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def note(self, method: str, exc: BaseException) -> None:
        seen = self.counts.get(method, 0)
        self.counts[method] = seen + 1
        if not seen:
            log.warning(
                "ignored a %s notification it cannot handle (%s); later ones are ignored quietly",
                method[:100],
                _first_line(exc),
            )


def _first_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]
