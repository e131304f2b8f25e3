"""What the pipeline asks of compaction hooks, without knowing how they run.

The agent layer implements ``CompactionHooks`` with settings-file commands
(real subprocesses); the pipeline only calls this protocol, so
``cairn.context`` never imports ``cairn.agent``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeAlias

from cairn.store.records import Trigger

SessionStartSource: TypeAlias = Literal["startup", "resume", "clear", "compact"]


class CompactionBlockedError(RuntimeError):
    """A PreCompact hook explicitly blocked the compaction (``{"decision": "block"}``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"compaction blocked by a PreCompact hook: {reason}")
        self.reason = reason


@dataclass(frozen=True)
class HookOutcome:
    """What running the hooks of one event produced."""

    #: Text the hooks printed for the event to use (PreCompact: extra instructions).
    output: str = ""
    #: Messages to show the user (stderr of a hook that exited 2, timeouts, crashes).
    notices: tuple[str, ...] = field(default=())
    #: Set when a hook asked to block (only PreCompact honours it).
    blocked: str | None = None


class CompactionHooks(Protocol):
    async def pre_compact(self, trigger: Trigger, instructions: str | None) -> HookOutcome: ...

    async def session_start(self, source: SessionStartSource) -> HookOutcome: ...

    async def post_compact(self, trigger: Trigger, summary: str) -> HookOutcome: ...


class NoHooks:
    """No hooks configured."""

    async def pre_compact(self, trigger: Trigger, instructions: str | None) -> HookOutcome:
        return HookOutcome()

    async def session_start(self, source: SessionStartSource) -> HookOutcome:
        return HookOutcome()

    async def post_compact(self, trigger: Trigger, summary: str) -> HookOutcome:
        return HookOutcome()
