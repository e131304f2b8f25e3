"""The MCP connections of one runtime: start, list tools, call, stop — never a traceback.

``McpManager`` owns one connection per configured server
(``cairn.agent.mcp.connection``, the official SDK's ``mcp.Client``: stdio,
the command in its own process group; streamable HTTP, an ``httpx2`` client
with the configured headers). The SDK is imported only when a server starts.

The connections live on an event loop of their own, in a daemon thread. The
SDK's transports are anyio task groups that must be entered and left by the
same task, while Cairn's surfaces drive sessions from whatever loop they
run (``cairn -p`` one ``asyncio.run``, the browser UI many runtimes on one
loop) and close a runtime synchronously (``Runtime.close``). A private loop
serves them all alike: calls cross over with ``run_coroutine_threadsafe``
and ``close`` can stop every server and wait for it from plain code.

Failures are states and one line each, never exceptions:

- a server that cannot start — a missing command, a crash, a refused
  connection, no handshake within ``startup_timeout`` — is ``failed`` with
  its reason (and the last line of its stderr), and one notice says so;
- a server that dies (the connection closes under a call) or hangs (a call
  passes ``timeout``) is stopped and ``failed``: the call's result is one
  line of error, one notice says so, and later calls of its tools are
  refused at once. The session goes on without it.

Every state change happens on the caller's side, so what ``statuses``
reports never changes under a reader in the middle of its loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypeVar

from cairn.agent.mcp.config import McpServerConfig
from cairn.messages import JSONObject

if TYPE_CHECKING:
    from cairn.agent.mcp.connection import Connection

ServerState: TypeAlias = Literal["stopped", "starting", "connected", "failed"]

#: How long ``close`` waits for every server to stop (stdin closed, then
#: SIGTERM and SIGKILL to a stdio server's process group: about 4 s at worst).
CLOSE_TIMEOUT_S = 15.0
#: Longest reason kept in a state or a notice.
_REASON_CHARS = 300

# The SDK logs transport failures with tracebacks; with no handler configured,
# Python's last-resort handler would print them over the terminal UI. An
# application that configures logging still gets them.
logging.getLogger("mcp").addHandler(logging.NullHandler())

_T = TypeVar("_T")


@dataclass(frozen=True)
class McpToolInfo:
    """One tool a server offers, as it listed it."""

    server: str
    #: The server's own name for it (what ``tools/call`` takes).
    name: str
    description: str
    input_schema: JSONObject


@dataclass(frozen=True)
class ServerStatus:
    """What ``/mcp`` shows for one server."""

    name: str
    transport: Literal["stdio", "http"]
    state: ServerState = "stopped"
    #: Why it failed (one line); empty otherwise.
    reason: str = ""
    tools: tuple[McpToolInfo, ...] = ()


@dataclass(frozen=True)
class CallOutcome:
    """A call's result text for the model; ``stopped``: the server is gone (dead or hung)."""

    text: str
    is_error: bool = False
    stopped: str = ""


@dataclass(frozen=True)
class Started:
    """How a server's start ended: its tools, or why it failed (one line)."""

    tools: tuple[McpToolInfo, ...] = ()
    error: str = ""


def one_line(text: str, limit: int = _REASON_CHARS) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass
class _Loop:
    """The private event loop the connections live on, in a daemon thread."""

    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self.loop.run_forever, name="cairn-mcp", daemon=True)
        self.thread.start()

    def submit(self, coro: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        if self.thread is not None:
            self.thread.join(CLOSE_TIMEOUT_S)
            if self.thread.is_alive():
                return  # a wedged server: leave the daemon thread to the process exit
        self.loop.close()


class McpManager:
    """The MCP servers of one runtime (``Runtime.mcp``)."""

    def __init__(
        self,
        servers: Mapping[str, McpServerConfig],
        *,
        workspace: Path,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        self._configs = dict(servers)
        self._workspace = workspace
        #: Where one-line notices go (the current session's events).
        self.notify: Callable[[str], None] = notify or (lambda _text: None)
        self._statuses: dict[str, ServerStatus] = {
            name: ServerStatus(name, config.transport) for name, config in self._configs.items()
        }
        self._connections: dict[str, Connection] = {}
        self._loop: _Loop | None = None
        self._startup: concurrent.futures.Future[dict[str, Started]] | None = None
        self._recorded = False
        self._closed = False

    def statuses(self) -> list[ServerStatus]:
        """Every configured server, in settings order."""
        return list(self._statuses.values())

    def tools(self) -> list[McpToolInfo]:
        """The tools of the servers that started, in settings order."""
        return [t for s in self._statuses.values() if s.state == "connected" for t in s.tools]

    # -- start -------------------------------------------------------------------

    async def start(self) -> None:
        """Start every server at once and wait until each is connected or failed.

        Idempotent: later calls (another session of the runtime) wait for the
        same start. Each failure is one notice, given once.
        """
        if not self._configs or self._closed:
            return
        if self._startup is None:
            # The SDK loads here, with the first server to start (see ``connection``).
            from cairn.agent.mcp.connection import Connection

            self._loop = _Loop()
            self._loop.start()
            self._connections = {
                name: Connection(name, config, self._workspace)
                for name, config in self._configs.items()
            }
            for name in self._statuses:
                self._set(name, state="starting")
            self._startup = self._loop.submit(self._start_all())
        # Shielded: a caller cancelled while it waits must not cancel the start
        # other sessions of this runtime wait for.
        started = await asyncio.shield(asyncio.wrap_future(self._startup))
        if self._recorded or self._closed:
            return
        self._recorded = True
        for name, outcome in started.items():
            if outcome.error:
                self._set(name, state="failed", reason=one_line(outcome.error))
                self.notify(
                    f"MCP server {name!r} failed to start: {one_line(outcome.error)}; "
                    "the session goes on without it"
                )
            else:
                self._set(name, state="connected", tools=outcome.tools)

    async def _start_all(self) -> dict[str, Started]:
        names = list(self._connections)
        outcomes = await asyncio.gather(*(self._connections[n].start() for n in names))
        return dict(zip(names, outcomes, strict=True))

    # -- calls ---------------------------------------------------------------------

    async def call(
        self, server: str, tool: str, args: JSONObject, *, label: str, abort: asyncio.Event
    ) -> CallOutcome:
        """Call ``tool`` on ``server``; one ``CallOutcome``, whatever happens.

        ``label`` is the tool's name as the model knows it. An ``abort`` cancels
        the call on the server's side and returns at once.
        """
        status = self._statuses.get(server)
        connection = self._connections.get(server)
        if status is None or connection is None or self._loop is None:
            return CallOutcome(f"{label}: MCP server {server!r} is not running", True)
        if status.state != "connected":
            why = f": {status.reason}" if status.reason else ""
            return CallOutcome(
                f"{label}: MCP server {server!r} {status.state}{why}; its tools are "
                "unavailable in this session",
                True,
            )
        running = asyncio.wrap_future(self._loop.submit(connection.call(tool, args, label)))
        aborted = asyncio.ensure_future(abort.wait())
        either: set[asyncio.Future[Any]] = {running, aborted}
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            aborted.cancel()
            if not running.done():
                running.cancel()  # reaches the server's side: the SDK cancels the request
        if not running.done() or running.cancelled():
            return CallOutcome(f"{label}: interrupted by the user", True)
        outcome = running.result()
        if outcome.stopped:
            return self._lost(server, connection, label, outcome.stopped)
        return outcome

    def _lost(self, server: str, connection: Connection, label: str, reason: str) -> CallOutcome:
        """A server died or hung under a call: stop it, say so once, answer the call."""
        reason = one_line(reason)
        if self._statuses[server].state == "connected":
            self._set(server, state="failed", reason=reason)
            self.notify(f"MCP server {server!r} {reason}; the session goes on without it")
        if self._loop is not None:
            # Not awaited to the end: the process teardown takes seconds and the
            # turn need not wait for it; ``close`` waits for whatever is left.
            self._loop.submit(connection.stop())
        return CallOutcome(f"{label}: MCP server {server!r} {reason}", True)

    # -- close ---------------------------------------------------------------------

    def close(self) -> None:
        """Stop every server and the private loop (synchronous, bounded by ``CLOSE_TIMEOUT_S``)."""
        if self._closed:
            return
        self._closed = True
        loop, self._loop = self._loop, None
        if loop is not None:
            stopping = loop.submit(self._stop_all())
            # A server that will not stop in time must not keep Cairn from exiting.
            with contextlib.suppress(Exception):
                stopping.result(CLOSE_TIMEOUT_S)
            loop.stop()
        for name in self._statuses:
            self._set(name, state="stopped", reason="")

    async def _stop_all(self) -> None:
        await asyncio.gather(*(c.stop() for c in self._connections.values()))

    def _set(self, name: str, **changes: Any) -> None:
        self._statuses[name] = replace(self._statuses[name], **changes)
