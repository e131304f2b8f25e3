"""What the file and bash tools can hand to the program hosting Cairn: file I/O and a terminal.

An editor that runs Cairn over the Agent Client Protocol may offer to read
and write files itself — so the agent sees unsaved buffers and the editor
sees the agent's edits as its own — and to run commands in its terminals,
where the person can watch them. The surface speaking that protocol
implements ``HostFiles`` and ``HostTerminal`` and gives them to the
``Runtime``; the tools find them in ``ToolContext.files`` and
``ToolContext.terminal`` and, when those are ``None``, do their own I/O as
they always have.

Confinement never moves to the host: a tool resolves and opens a path
beneath the workspace first, with the checks it always makes, and hands the
host only the absolute path that walk verified. A host that cannot do what
it is asked raises ``HostIOError`` (any ``OSError`` is accepted); the tool
turns it into an error result for the model.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, TypeAlias

from cairn.errors import CairnError

__all__ = [
    "HostFiles",
    "HostIOError",
    "HostTerminal",
    "TerminalEnd",
    "TerminalOutcome",
    "host_problem",
]


class HostIOError(CairnError, OSError):
    """The host refused or failed a read, a write or a command; the message is one line."""


class HostFiles(Protocol):
    """File I/O done by the host (an editor's buffers, open or not)."""

    async def read_text(self, path: Path) -> str:
        """The whole text at the absolute ``path``: the editor's buffer when it has one open."""
        ...

    async def write_text(self, path: Path, content: str) -> None:
        """Replace the whole text at the absolute ``path`` (creating the file if needed)."""
        ...


#: How a command run in a host terminal ended.
TerminalEnd: TypeAlias = Literal["exited", "timed out", "interrupted"]


@dataclass(frozen=True)
class TerminalOutcome:
    """What a command run in a host terminal left: its output and how it ended."""

    #: The captured output, stdout and stderr together (the host may have cut it).
    output: str
    #: The exit status; ``None`` when killed by a signal, or when it did not exit by itself.
    exit_code: int | None
    #: ``"timed out"`` / ``"interrupted"``: the host killed it (timeout, or ``abort`` set).
    ended: TerminalEnd = "exited"
    #: The signal that killed it (``"SIGKILL"``), when the host knows one.
    signal: str | None = None
    #: The host kept only part of the output.
    truncated: bool = False


class HostTerminal(Protocol):
    """Commands run by the host, e.g. in an editor's terminal the person can see."""

    async def run(
        self, command: str, *, cwd: Path, timeout: float, abort: asyncio.Event
    ) -> TerminalOutcome:
        """Run ``command`` with ``bash -c`` semantics in ``cwd`` and wait for its end.

        After ``timeout`` seconds, or once ``abort`` is set, the host kills the
        command and returns an outcome that ended ``"timed out"`` or
        ``"interrupted"`` with the output so far. Cancelling this call must
        kill the command too: the tool cancels it when it has not returned a
        little after the timeout (a host that never answers cannot hang a turn).
        A command that cannot be started, or a terminal that fails, raises
        ``HostIOError``.
        """
        ...


def host_problem(exc: OSError) -> str:
    """The host's error as one line for the model."""
    text = exc.strerror or str(exc) or type(exc).__name__
    return " ".join(text.split())
