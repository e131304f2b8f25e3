"""What the pipeline asks of compaction hooks, without knowing how they run.

The agent layer implements ``CompactionHooks`` with settings-file commands
(real subprocesses); the pipeline only calls this protocol, so
``cairn.context`` never imports ``cairn.agent``.

SessionStart output reaches the model as one hidden, synthetic user message
(``session_start_reminder``): durable in the transcript and in the API view,
never in the UI view nor in the event stream. Its text is capped at
``MAX_REMINDER_CHARS`` (10,000 characters, as Claude Code caps hook context);
the cut is marked in the text so the model knows it saw only a part.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeAlias

from cairn.errors import ContextError
from cairn.messages import Message, MessageMeta
from cairn.store.records import Trigger

SessionStartSource: TypeAlias = Literal["startup", "resume", "clear", "compact"]

#: ``meta.kind`` of the hidden reminder that carries SessionStart output.
KIND_SESSION_START = "session_start"
#: Most characters of SessionStart output added to the model's context.
MAX_REMINDER_CHARS = 10_000


class CompactionBlockedError(ContextError):
    """A PreCompact hook explicitly blocked the compaction (``{"decision": "block"}``)."""

    code = "compaction_blocked"

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


#: Room kept at the end of a cut reminder for the marker that says so.
_MARKER_ROOM = 64


def cap_reminder(text: str) -> tuple[str, int]:
    """``text`` within ``MAX_REMINDER_CHARS``, the cut marked, and how many characters went.

    Idempotent: a capped text, marker included, is within the cap.
    """
    if len(text) <= MAX_REMINDER_CHARS:
        return text, 0
    kept = MAX_REMINDER_CHARS - _MARKER_ROOM
    dropped = len(text) - kept
    return f"{text[:kept]}\n[… {dropped:,} more characters dropped]", dropped


def session_start_reminder(text: str, source: SessionStartSource) -> Message | None:
    """SessionStart hook output as a hidden reminder for the model; ``None`` when empty."""
    body, _ = cap_reminder(text.strip())
    if not body:
        return None
    return Message(
        role="user",
        content=(
            f"<system-reminder>\nSessionStart hook output (source: {source}):\n"
            f"{body}\n</system-reminder>"
        ),
        meta=MessageMeta(
            kind=KIND_SESSION_START, hidden=True, synthetic=True, extra={"source": source}
        ),
    )
