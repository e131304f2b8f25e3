"""The one event stream of a session, consumed by every surface.

Hidden control messages (the handoff reminder) are never published: clients
render what they receive, and the model's private reminders are not theirs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Literal, TypeAlias

from cairn.messages import Message, ToolCall

SessionStatus: TypeAlias = Literal["idle", "streaming", "compacting"]


@dataclass(frozen=True)
class MessageAdded:
    message: Message


@dataclass(frozen=True)
class MessageUpdated:
    """A streaming assistant message so far (accumulated text, not the delta)."""

    message_id: str
    content: str
    reasoning: str = ""


@dataclass(frozen=True)
class ToolStarted:
    call: ToolCall


@dataclass(frozen=True)
class ToolFinished:
    call_id: str
    result: Message


@dataclass(frozen=True)
class CompactionStateChange:
    is_compacting: bool


@dataclass(frozen=True)
class CompactionContentUpdate:
    content: str


@dataclass(frozen=True)
class CompactBlockAdded:
    block: Message


@dataclass(frozen=True)
class UsageUpdate:
    """``latestTotalTokens``: the provider's ``total_tokens`` only, never cache fields."""

    latest_total_tokens: int


@dataclass(frozen=True)
class StatusChange:
    status: SessionStatus


@dataclass(frozen=True)
class Notice:
    """Something the user should see: a hook's stderr, a skipped compaction."""

    text: str


@dataclass(frozen=True)
class ErrorEvent:
    message: str
    code: str | None = None


Event: TypeAlias = (
    MessageAdded
    | MessageUpdated
    | ToolStarted
    | ToolFinished
    | CompactionStateChange
    | CompactionContentUpdate
    | CompactBlockAdded
    | UsageUpdate
    | StatusChange
    | Notice
    | ErrorEvent
)


class EventBus:
    """Fan-out of a session's events to callbacks and async subscribers."""

    def __init__(self) -> None:
        self._callbacks: list[Callable[[Event], None]] = []
        self._queues: list[asyncio.Queue[Event | None]] = []

    def on(self, callback: Callable[[Event], None]) -> None:
        self._callbacks.append(callback)

    def publish(self, event: Event) -> None:
        if isinstance(event, MessageAdded) and event.message.meta.hidden:
            return
        for callback in self._callbacks:
            callback(event)
        for queue in self._queues:
            queue.put_nowait(event)

    async def subscribe(self) -> AsyncIterator[Event]:
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
        self._queues.append(queue)
        try:
            while (event := await queue.get()) is not None:
                yield event
        finally:
            self._queues.remove(queue)

    def close(self) -> None:
        for queue in self._queues:
            queue.put_nowait(None)

    # The pipeline's CompactionListener, forwarded as events.

    def compaction_state_changed(self, is_compacting: bool) -> None:
        self.publish(CompactionStateChange(is_compacting))

    def compaction_content_updated(self, content: str) -> None:
        self.publish(CompactionContentUpdate(content))

    def compact_block_added(self, block: Message) -> None:
        self.publish(CompactBlockAdded(block))

    def compaction_notice(self, text: str) -> None:
        self.publish(Notice(text))
