"""One MCP server's connection, through the official SDK (``mcp.Client``).

Imported only when a runtime has servers to start: the SDK and its HTTP
stack take about a third of a second to import, which ``cairn -p`` and every
session without MCP servers should not pay.

Every method of ``Connection`` runs on ``McpManager``'s private loop (see
``cairn.agent.mcp.client``), and answers with values, never exceptions: a
failed start is ``Started(error=…)``, a call a ``CallOutcome``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import os
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, TextIO, cast

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client import Transport
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import (
    AudioContent,
    CallToolResult,
    ImageContent,
    Implementation,
    ResourceLink,
    TextContent,
    TextResourceContents,
)
from mcp_types.jsonrpc import CONNECTION_CLOSED

from cairn.agent.mcp.client import (
    CLOSE_TIMEOUT_S,
    CallOutcome,
    McpToolInfo,
    Started,
    one_line,
)
from cairn.agent.mcp.config import McpConfigError, McpServerConfig, expand_env
from cairn.messages import JSONObject

#: The HTTP client's deadlines: connecting and sending; reading, where a server
#: may hold a stream open (the per-call deadline still applies on top).
HTTP_CONNECT_TIMEOUT_S = 30.0
HTTP_READ_TIMEOUT_S = 300.0
#: Pages of ``tools/list`` read at most (a server paging forever cannot hang the start).
MAX_TOOL_PAGES = 100
#: Bytes of a server's stderr read back for the reason it failed.
_STDERR_TAIL_BYTES = 4096


def _client_info() -> Implementation:
    try:
        version = importlib.metadata.version("cairn")
    except importlib.metadata.PackageNotFoundError:
        version = "0"
    return Implementation(name="cairn", version=version)


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside the exception groups anyio's task groups raise."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _is_disconnect(exc: BaseException) -> bool:
    """Whether ``exc`` means the connection is gone (the server died or went away)."""
    if isinstance(exc, MCPError):
        return exc.code == CONNECTION_CLOSED
    return isinstance(
        exc,
        OSError
        | httpx2.TransportError
        | anyio.ClosedResourceError
        | anyio.BrokenResourceError
        | anyio.EndOfStream,
    )


def _describe(exc: BaseException, config: McpServerConfig) -> str:
    exc = _leaf(exc)
    if isinstance(exc, FileNotFoundError) and config.command is not None:
        return f"cannot run {config.command!r}: command not found"
    if isinstance(exc, PermissionError) and config.command is not None:
        return f"cannot run {config.command!r}: permission denied"
    if isinstance(exc, httpx2.TransportError) and config.url is not None:
        return f"cannot reach {config.url}: {type(exc).__name__}: {exc}"
    if isinstance(exc, MCPError):
        if exc.code == CONNECTION_CLOSED:
            return "the server closed the connection"
        return f"the server answered with an error: {exc.message}"
    if isinstance(exc, McpConfigError):
        return str(exc)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Connection:
    """One server's connection; every method runs on the manager's loop."""

    def __init__(self, name: str, config: McpServerConfig, workspace: Path) -> None:
        self.name = name
        self.config = config
        self.workspace = workspace
        self.client: Client | None = None
        self._stop = asyncio.Event()
        self._ready: asyncio.Future[tuple[McpToolInfo, ...]] | None = None
        self._task: asyncio.Task[None] | None = None
        self._stderr: TextIO | None = None
        self._calls: set[asyncio.Task[Any]] = set()

    # -- start and stop ------------------------------------------------------

    async def start(self) -> Started:
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._task = loop.create_task(self._serve(self._ready))
        timeout = self.config.startup_timeout
        try:
            async with asyncio.timeout(timeout):
                tools = await asyncio.shield(self._ready)
        except TimeoutError:
            await self.stop()
            return Started(error=f"no answer within {timeout:g} s (startup_timeout)")
        except Exception as exc:
            reason = self._with_stderr(_describe(exc, self.config))
            await self.stop()
            return Started(error=reason)
        return Started(tools)

    async def _serve(self, ready: asyncio.Future[tuple[McpToolInfo, ...]]) -> None:
        """Hold the connection open until ``stop``: the SDK's contexts live in this one task."""
        try:
            async with AsyncExitStack() as stack:
                client = Client(await self._transport(stack), client_info=_client_info())
                await stack.enter_async_context(client)
                tools = await self._list_tools(client)
                self.client = client
                ready.set_result(tools)
                await self._stop.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
        except BaseException:
            # Cancelled by ``stop`` (a start past its deadline, or ``close``):
            # nobody waits for ``ready`` any more.
            ready.cancel()
            raise
        finally:
            self.client = None

    async def _transport(self, stack: AsyncExitStack) -> Transport:
        """The SDK transport for this server, its resources entered on ``stack``."""
        config = self.config
        where = f"mcpServers.{self.name}"
        if config.command is not None:
            # The server's stderr goes to a file, not the terminal (a UI owns it);
            # its last line explains a failed start. Closed by ``stop``, after
            # the reason is read.
            if self._stderr is None:
                # Not a ``with``: the file outlives this call, as long as the server runs.
                stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
                self._stderr = cast(TextIO, stderr)
            params = StdioServerParameters(
                command=expand_env(config.command, f"{where}.command"),
                args=[expand_env(a, f"{where}.args") for a in config.args],
                env={k: expand_env(v, f"{where}.env.{k}") for k, v in config.env.items()},
                cwd=self.workspace,
            )
            return stdio_client(params, errlog=self._stderr)
        assert config.url is not None  # validated: a server has a command or a url
        http = httpx2.AsyncClient(
            headers={k: expand_env(v, f"{where}.headers.{k}") for k, v in config.headers.items()},
            timeout=httpx2.Timeout(HTTP_CONNECT_TIMEOUT_S, read=HTTP_READ_TIMEOUT_S),
        )
        await stack.enter_async_context(http)
        return streamable_http_client(expand_env(config.url, f"{where}.url"), http_client=http)

    async def _list_tools(self, client: Client) -> tuple[McpToolInfo, ...]:
        tools: list[McpToolInfo] = []
        cursor: str | None = None
        for _ in range(MAX_TOOL_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(
                McpToolInfo(self.name, t.name, t.description or "", dict(t.input_schema))
                for t in page.tools
            )
            cursor = page.next_cursor
            if cursor is None:
                break
        return tuple(tools)

    async def stop(self) -> None:
        """Stop the server: cancel its calls, leave the SDK's contexts, wait (bounded)."""
        for call in list(self._calls):
            call.cancel()
        self._stop.set()
        task = self._task
        if task is not None and not task.done():
            # Leaving the contexts closes stdin, then SIGTERM, then SIGKILL (the
            # SDK bounds each wait); a start still in its handshake is cancelled.
            if self.client is None:
                task.cancel()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait({task}, timeout=CLOSE_TIMEOUT_S)
        self.client = None
        if self._stderr is not None:
            self._stderr.close()

    def _with_stderr(self, reason: str) -> str:
        tail = self._stderr_tail()
        return f"{reason} (stderr: {tail})" if tail else reason

    def _stderr_tail(self) -> str:
        stream = self._stderr
        if stream is None or stream.closed:
            return ""
        try:
            # ``pread``: the server shares the file's offset, which must stay at the end.
            fd = stream.fileno()
            size = os.fstat(fd).st_size
            start = max(0, size - _STDERR_TAIL_BYTES)
            tail = os.pread(fd, size - start, start).decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""
        lines = [line for line in tail.splitlines() if line.strip()]
        return one_line(lines[-1], 160) if lines else ""

    # -- calls -----------------------------------------------------------------

    async def call(self, tool: str, args: JSONObject, label: str) -> CallOutcome:
        client = self.client
        if client is None:
            return CallOutcome(f"{label}: MCP server {self.name!r} is not running", True)
        task = asyncio.current_task()
        assert task is not None
        self._calls.add(task)
        timeout = self.config.timeout
        try:
            async with asyncio.timeout(timeout):
                result = await client.call_tool(tool, dict(args))
        except TimeoutError:
            reason = f"hung: no answer to {label} within {timeout:g} s (timeout)"
            return CallOutcome("", True, reason)
        except asyncio.CancelledError:
            # Stopped by ``stop`` or by the caller (an abort): the caller says which.
            return CallOutcome(f"{label}: the call was cancelled", True, "")
        except Exception as exc:
            if _is_disconnect(_leaf(exc)):
                reason = self._with_stderr(f"died: {_describe(exc, self.config)}")
                return CallOutcome("", True, reason)
            return CallOutcome(f"{label} failed: {one_line(_describe(exc, self.config))}", True)
        finally:
            self._calls.discard(task)
        text, is_error = render_result(result)
        return CallOutcome(text, is_error)


def render_result(result: CallToolResult) -> tuple[str, bool]:
    """The result's text for the model: text as it is, anything else as one line."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ImageContent | AudioContent):
            size = len(block.data) * 3 // 4  # base64 → bytes
            parts.append(f"[{block.type} {block.mime_type}, {size:,} bytes: not shown]")
        elif isinstance(block, ResourceLink):
            parts.append(f"[resource link {block.name}: {block.uri}]")
        elif isinstance(block.resource, TextResourceContents):
            parts.append(f"[resource {block.resource.uri}]\n{block.resource.text}")
        else:
            kind = block.resource.mime_type or "binary"
            parts.append(f"[resource {block.resource.uri}, {kind}: not shown]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts), result.is_error
