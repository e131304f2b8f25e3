"""What a tool is: a name, a JSON schema, a declared effect and an async ``run``.

Tools never raise for the model's mistakes: a bad argument, a path outside
the workspace or a refused permission is a ``ToolResult`` with
``is_error=True`` whose text tells the model what went wrong.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, TypeAlias

from cairn.agent.snapshots import FileSnapshots
from cairn.agent.state import SessionState
from cairn.agent.tools.host_io import HostFiles, HostTerminal
from cairn.context.effects import ToolEffect
from cairn.messages import JSONObject, JSONValue

PermissionMode: TypeAlias = Literal["ask", "accept-edits", "bypass"]
PERMISSION_MODES: tuple[PermissionMode, ...] = ("ask", "accept-edits", "bypass")


@dataclass(frozen=True)
class ToolResult:
    content: str
    is_error: bool = False
    extra: dict[str, JSONValue] = field(default_factory=dict)


@dataclass(frozen=True)
class PermissionRequest:
    tool: str
    #: One line a person can judge: the command, or the file and the kind of change.
    summary: str
    #: The call's arguments, as the model sent them (JSON).
    arguments: str = "{}"


#: Asks the surface whether a tool may run; ``None`` when nobody can be asked.
Asker: TypeAlias = Callable[[PermissionRequest], Awaitable[bool]]


@dataclass
class ToolContext:
    """What a running tool may use."""

    workspace: Path
    state: SessionState
    #: The session's folder for artifacts (plans, background output).
    session_dir: Path
    #: The folders of the sessions this one was branched from: read-only, for the
    #: saved outputs their copied messages name.
    lineage_dirs: tuple[Path, ...] = ()
    permission_mode: PermissionMode = "ask"
    ask: Asker | None = None
    abort: asyncio.Event = field(default_factory=asyncio.Event)
    clock: Callable[[], float] = field(default=lambda: 0.0)
    #: The host's file I/O (an editor's buffers); ``None``: the tools read and write the disk.
    files: HostFiles | None = None
    #: The host's terminal for foreground bash; ``None``: commands run as local subprocesses.
    terminal: HostTerminal | None = None
    #: ``permissions.allow``: tool-name patterns that run without asking
    #: (``cairn.agent.tools.permissions``).
    allow: tuple[str, ...] = ()
    #: Where write_file / edit_file save a file's prior state before changing it
    #: (a rewind restores it); ``None``: nothing is saved.
    snapshots: FileSnapshots | None = None


class Tool(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def parameters(self) -> JSONObject:
        """The JSON schema of the arguments object."""
        ...

    @property
    def effect(self) -> ToolEffect: ...

    async def run(self, args: JSONObject, ctx: ToolContext) -> ToolResult: ...


def tool_schema(tool: Tool) -> JSONObject:
    """The OpenAI ``tools`` entry for ``tool``."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }
