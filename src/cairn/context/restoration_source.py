"""What restoration reads from the session: the facts the agent runtime keeps.

``RestorationSource`` is the protocol ``build_restoration`` reads after a
compaction — the working directory, the files read, plan mode, the skills
invoked, the background tasks — and these are the types of those facts. The
agent runtime's session state (``cairn.agent.state.SessionState``) holds
them and implements the protocol; the pipeline only reads them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class FileRead:
    """One read of a file by a tool. ``path`` may be relative to ``workspace``."""

    path: Path
    session_id: str
    workspace: Path
    read_at: float


@dataclass(frozen=True)
class PlanState:
    """Plan mode is on when a ``PlanState`` is given."""

    plan_file: Path


@dataclass(frozen=True)
class InvokedSkill:
    """A skill the model invoked; ``body_as_seen`` is the exact text it was shown."""

    name: str
    skill_file: Path
    description: str = ""
    body_as_seen: str | None = None


@dataclass(frozen=True)
class BackgroundTask:
    id: str
    description: str
    status: str


class RestorationSource(Protocol):
    def cwd(self) -> Path: ...

    def file_reads(self) -> Sequence[FileRead]:
        """Every read, of any session and workspace, in any order."""
        ...

    def plan_state(self) -> PlanState | None: ...

    def invoked_skills(self) -> Sequence[InvokedSkill]: ...

    def background_tasks(self) -> Sequence[BackgroundTask]: ...
