"""The web UI's panes: what they share (``WebSetup``), each one's session and work
(``Pane``), and which session is open in which pane across every page (``OpenSessions``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from cairn.agent import AgentSession, PermissionMode, Runtime, Settings
from cairn.provider import ChatProvider, ModelConfig


@dataclass
class WebSetup:
    """What every pane shares: the model, the provider, the workspace."""

    model: ModelConfig
    provider: ChatProvider
    workspace: Path
    #: Cairn's home (transcripts); ``None``: ``CAIRN_HOME`` or ``~/.cairn``.
    home: Path | None = None
    permission_mode: PermissionMode = "accept-edits"
    settings: Settings = field(default_factory=Settings)
    #: Read AGENTS.md / CLAUDE.md into each pane's prompt (``--no-instructions``: false).
    instructions: bool = True

    def runtime(self) -> Runtime:
        return Runtime(
            self.workspace,
            self.model,
            self.provider,
            settings=self.settings,
            home=self.home,
            permission_mode=self.permission_mode,
            answers_permissions=True,
            instructions=self.instructions,
        )


@dataclass
class Pane:
    id: str
    runtime: Runtime
    agent: AgentSession
    #: The lines and commands running in this pane (more than one only for an instant:
    #: a line sent while one runs is queued by the core and its task ends at once).
    works: set[asyncio.Task[None]] = field(default_factory=set)
    #: The guard bit last sent to the page.
    shown_busy: bool | None = None

    @property
    def busy(self) -> bool:
        working = any(not work.done() for work in self.works)
        return working or self.agent.status != "idle" or bool(self.agent.running_tasks)


class OpenSessions:
    """Which session is open in which pane, across every page of one server.

    One writer per transcript: a session shown in a pane cannot be opened in
    another (the store's lock would refuse it anyway, less kindly).
    """

    def __init__(self) -> None:
        self._owners: dict[str, Pane] = {}

    def held(self, session_id: str) -> bool:
        return session_id in self._owners

    def claim(self, pane: Pane) -> bool:
        return self._owners.setdefault(pane.agent.id, pane) is pane

    def release(self, pane: Pane) -> None:
        if self._owners.get(pane.agent.id) is pane:
            del self._owners[pane.agent.id]


def doing(pane: Pane) -> str:
    """What keeps the pane from switching: its status, a background task, or a line running."""
    status = pane.agent.status
    if status != "idle":
        return status
    return "running a background task" if pane.agent.running_tasks else "busy"
