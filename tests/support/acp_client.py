"""An editor for the ACP tests: the protocol library's own client, over a real socket.

``connected(setup)`` starts Cairn's agent (``cairn.surfaces.acp.serve``) on
one end of a socket pair and the ``agent-client-protocol`` package's
``ClientSideConnection`` on the other, so every request and notification is
JSON-RPC bytes on a socket, parsed by the library, as with a real editor.

``EditorClient`` records every message the agent sent, raw and in order
(``wire``; the library's observer sees each one before it is dispatched),
answers permission requests with a policy the test sets, and can offer the
``fs`` and ``terminal`` capabilities: a dict of unsaved buffers, and
terminals that really run the command in a subprocess.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp import connect_to_agent
from acp.client.connection import ClientSideConnection
from acp.connection import StreamDirection, StreamEvent
from acp.exceptions import RequestError
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    CreateTerminalResponse,
    DeniedOutcome,
    EnvVariable,
    KillTerminalResponse,
    PermissionOption,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    ToolCallUpdate,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)

from cairn.agent.settings import Settings
from cairn.agent.tools.base import PermissionMode
from cairn.provider import ModelConfig, OpenAIProvider
from cairn.surfaces.acp import AgentSetup, serve
from support.openai_server import OpenAIServer, Reply

Decide = Callable[[str, list[PermissionOption]], Awaitable[str | None]]


async def allow_once(tool_call_id: str, options: list[PermissionOption]) -> str | None:
    return "allow_once"


@dataclass
class _Terminal:
    process: asyncio.subprocess.Process
    output: bytearray = field(default_factory=bytearray)
    reader: asyncio.Task[None] | None = None


class EditorClient:
    """What an editor does for the agent, and a record of all it was sent."""

    def __init__(self) -> None:
        #: Every message from the agent, raw JSON, in arrival order.
        self.wire: list[dict[str, Any]] = []
        #: ``(method, params)`` of the extension notifications (``_cairn/…``), in order.
        self.extensions: list[tuple[str, dict[str, Any]]] = []
        #: How permission requests are answered: an option id, or ``None`` (cancelled).
        self.decide: Decide = allow_once
        self.permission_requests: list[tuple[str, ToolCallUpdate, list[PermissionOption]]] = []
        #: The editor's buffers (unsaved text), by absolute path; reads fall back to disk.
        self.buffers: dict[str, str] = {}
        self.file_calls: list[tuple[str, str]] = []
        self.terminal_commands: list[tuple[str, list[str]]] = []
        self._terminals: dict[str, _Terminal] = {}

    def observe(self, event: StreamEvent) -> None:
        if event.direction is StreamDirection.INCOMING:
            self.wire.append(event.message)

    # -- what the wire held ------------------------------------------------

    def updates(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """The ``update`` objects of every ``session/update`` (of one session), in order."""
        return [
            m["params"]["update"]
            for m in self.wire
            if m.get("method") == "session/update"
            and (session_id is None or m["params"]["sessionId"] == session_id)
        ]

    def kinds(self, session_id: str | None = None) -> list[str]:
        return [u["sessionUpdate"] for u in self.updates(session_id)]

    def agent_text(self, session_id: str | None = None) -> str:
        return "".join(
            u["content"]["text"]
            for u in self.updates(session_id)
            if u["sessionUpdate"] == "agent_message_chunk"
        )

    def methods(self) -> list[str]:
        return [m["method"] for m in self.wire if "method" in m]

    # -- the Client protocol ------------------------------------------------

    def on_connect(self, conn: Any) -> None:
        pass

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        pass  # recorded raw by ``observe``

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **kw: Any
    ) -> RequestPermissionResponse:
        self.permission_requests.append((session_id, tool_call, options))
        chosen = await self.decide(tool_call.tool_call_id, options)
        if chosen is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=chosen)
        )

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> ReadTextFileResponse:
        self.file_calls.append(("read", path))
        if path in self.buffers:
            return ReadTextFileResponse(content=self.buffers[path])
        try:
            return ReadTextFileResponse(content=Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise RequestError(-32002, f"cannot read {path}: {exc.strerror}") from exc

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse:
        self.file_calls.append(("write", path))
        self.buffers[path] = content
        return WriteTextFileResponse()

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[EnvVariable] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> CreateTerminalResponse:
        self.terminal_commands.append((command, list(args or [])))
        process = await asyncio.create_subprocess_exec(
            command,
            *(args or []),
            cwd=cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        terminal = _Terminal(process)
        terminal.reader = asyncio.get_running_loop().create_task(self._read(terminal))
        terminal_id = f"term-{len(self._terminals) + 1}"
        self._terminals[terminal_id] = terminal
        return CreateTerminalResponse(terminal_id=terminal_id)

    async def _read(self, terminal: _Terminal) -> None:
        assert terminal.process.stdout is not None
        while chunk := await terminal.process.stdout.read(4096):
            terminal.output += chunk

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> WaitForTerminalExitResponse:
        terminal = self._terminals[terminal_id]
        code = await terminal.process.wait()
        if terminal.reader is not None:
            await terminal.reader
        return WaitForTerminalExitResponse(exit_code=code if code >= 0 else None)

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> TerminalOutputResponse:
        terminal = self._terminals[terminal_id]
        code = terminal.process.returncode
        status = None
        if code is not None:
            status = TerminalExitStatus(
                exit_code=code if code >= 0 else None, signal="SIGKILL" if code < 0 else None
            )
        return TerminalOutputResponse(
            output=terminal.output.decode("utf-8", errors="replace"),
            truncated=False,
            exit_status=status,
        )

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> KillTerminalResponse:
        with contextlib.suppress(ProcessLookupError):
            self._terminals[terminal_id].process.kill()
        await self._terminals[terminal_id].process.wait()
        return KillTerminalResponse()

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> ReleaseTerminalResponse:
        terminal = self._terminals.pop(terminal_id)
        if terminal.process.returncode is None:
            terminal.process.kill()
            await terminal.process.wait()
        return ReleaseTerminalResponse()

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        self.extensions.append((method, params))


def capabilities(
    *, fs: bool = False, terminal: bool = False, compaction: bool = False, cairn: bool = True
) -> dict[str, Any]:
    """Raw ``clientCapabilities``, as a client writes them (``session.compaction`` included).

    ``cairn``: the client asks for Cairn's ``_cairn/compaction…`` notifications
    (``_meta.cairn.compaction``), as a client that shows Cairn's compaction hint does.
    """
    raw: dict[str, Any] = {
        "fs": {"readTextFile": fs, "writeTextFile": fs},
        "terminal": terminal,
    }
    if compaction:
        raw["session"] = {"compaction": {}}
    if cairn:
        raw["_meta"] = {"cairn": {"compaction": True}}
    return raw


#: A client that asks for Cairn's compaction notifications, as the library's model.
CAIRN_CLIENT = ClientCapabilities(field_meta={"cairn": {"compaction": True}})


def make_setup(
    tmp_path: Path,
    server: OpenAIServer,
    *,
    mode: PermissionMode = "bypass",
    context_window: int = 32_768,
    settings: Settings | None = None,
    images: bool = False,
) -> AgentSetup:
    model = ModelConfig(
        model="test-model",
        base_url=server.base_url,
        context_window=context_window,
        images=images,
    )
    return AgentSetup(
        model,
        OpenAIProvider(model),
        permission_mode=mode,
        home=tmp_path / "home",
        settings=lambda workspace: settings or Settings(),
    )


@dataclass
class Editor:
    """A connected editor: the library's connection, the client's record, the workspace."""

    conn: ClientSideConnection
    client: EditorClient
    workspace: Path

    async def new(self, cwd: Path | None = None) -> str:
        return (await self.conn.new_session(cwd=str(cwd or self.workspace))).session_id

    async def ask(self, session_id: str, text: str) -> str:
        """A prompt; its stop reason."""
        response = await self.conn.prompt(
            session_id=session_id,
            prompt=[{"type": "text", "text": text}],  # type: ignore[list-item]
        )
        return response.stop_reason


@contextlib.asynccontextmanager
async def connected(
    setup: AgentSetup, workspace: Path, *, client_capabilities: dict[str, Any] | None = None
) -> AsyncIterator[Editor]:
    """An initialized connection to a Cairn agent served in this process."""
    provider = setup.provider
    assert isinstance(provider, OpenAIProvider)
    workspace.mkdir(parents=True, exist_ok=True)
    agent_end, client_end = socket.socketpair()
    agent_reader, agent_writer = await asyncio.open_connection(sock=agent_end)
    client_reader, client_writer = await asyncio.open_connection(sock=client_end)
    served = asyncio.get_running_loop().create_task(serve(setup, agent_reader, agent_writer))
    client = EditorClient()
    conn = connect_to_agent(
        client,  # type: ignore[arg-type]  # no elicitation: Cairn never asks for one
        client_writer,
        client_reader,
        observers=[client.observe],
    )
    try:
        # Raw, because the 0.12 schema has no field for ``session.compaction``: a client
        # that advertises it writes it into the request, as a newer client would.
        await conn._conn.send_request(
            "initialize",
            {"protocolVersion": 1, "clientCapabilities": client_capabilities or capabilities()},
        )
        yield Editor(conn, client, workspace)
    finally:
        await conn.close()
        client_writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(served, 10)
        agent_writer.close()
        await provider.aclose()


# -- the scenarios' common steps -------------------------------------------------

SUMMARY = (
    "<summary>\n## Objective and constraints\nExplain calc.py to the user.\n"
    "## Exact next action\nAnswer the next question.\n</summary>"
)
ANSWER = "calc.py defines add(), which subtracts where it should add. " * 30


def is_fork(body: dict[str, Any]) -> bool:
    last = body["messages"][-1]
    return last["role"] == "user" and "TEXT ONLY" in str(last.get("content"))


def answering(server: OpenAIServer, *, hold: threading.Event | None = None) -> None:
    server.respond_with(
        lambda body: (
            Reply(text=SUMMARY, hold=hold, hold_after=6 if hold else None)
            if is_fork(body)
            else Reply(text=ANSWER)
        )
    )


async def converse(editor: Editor, session_id: str, turns: int = 3) -> None:
    for n in range(turns):
        assert await editor.ask(session_id, f"question {n} about calc.py") == "end_turn"


def compaction_notices(editor: Editor, session_id: str | None = None) -> list[tuple[str, Any]]:
    """``(name, value)`` of the ``_cairn/compaction…`` notifications, in order."""
    out = []
    for method, params in editor.client.extensions:
        if session_id is not None and params["sessionId"] != session_id:
            continue
        if method == "cairn/compactionStateChange":
            out.append(("state", params["isCompacting"]))
        elif method == "cairn/compactionContentUpdate":
            out.append(("content", params["content"]))
    return out


async def arrived(editor: Editor, kind: str) -> None:
    """Wait for an update sent after a response (it may still be on the socket)."""
    for _ in range(500):
        if kind in editor.client.kinds():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"no {kind} arrived")


def since(editor: Editor, mark: int, session_id: str) -> list[dict[str, Any]]:
    """The session's updates after the first ``mark`` wire messages."""
    return [
        m["params"]["update"]
        for m in editor.client.wire[mark:]
        if m.get("method") == "session/update" and m["params"]["sessionId"] == session_id
    ]
