"""The one event stream of a session, and its one wire form, for every surface.

Every event is a frozen dataclass with a stable wire name (``WIRE``); its
fields go on the wire in camelCase (``is_compacting`` → ``isCompacting``),
messages as the transcript writes them — both through ``cairn.codec``, the
mechanism the transcript uses too. ``event_to_wire`` / ``event_from_wire`` are
the one JSON codec: ``cairn -p --output-format stream-json`` prints it, and
every surface sends it.

Ordering rules a surface may rely on (README, *Events*):

- ``compactionStateChange {isCompacting: true}`` is always followed by exactly
  one ``{isCompacting: false}``, whatever happens in between (a failure, a
  hook block, a session switch); ``compactionContentUpdate`` and
  ``compactBlockAdded`` come only between the two.
- ``messageUpdated`` events of one response carry the text accumulated so
  far and come before that response's ``messageAdded``.
- ``toolStarted`` for a call comes before its ``toolFinished``, and both
  before the ``messageAdded`` of its result.
- Hidden control messages (the handoff reminder) are never published:
  clients render what they receive, and the model's private reminders are
  not theirs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import ClassVar, Literal, TypeAlias, get_args

from pydantic import ConfigDict, StrictBool, StrictInt
from pydantic.alias_generators import to_camel

from cairn.codec import Codec
from cairn.context.events import PreparedState
from cairn.errors import FormatError
from cairn.messages import JSONObject, Message, StoredMessage, ToolCall

SessionStatus: TypeAlias = Literal["idle", "streaming", "tools", "compacting"]
SESSION_STATUSES: tuple[SessionStatus, ...] = get_args(SessionStatus)
#: What Shift+Tab cycles through: the permission modes, then plan mode.
SessionMode: TypeAlias = Literal["ask", "accept-edits", "bypass", "plan"]
SESSION_MODES: tuple[SessionMode, ...] = get_args(SessionMode)


class _OnTheWire:
    """The base of every event: its fields travel under camelCase names."""

    __slots__ = ()
    __pydantic_config__ = ConfigDict(alias_generator=to_camel)


@dataclass(frozen=True)
class MessageAdded(_OnTheWire):
    WIRE: ClassVar[str] = "messageAdded"

    message: StoredMessage


@dataclass(frozen=True)
class MessageUpdated(_OnTheWire):
    """A streaming assistant message so far (accumulated text, not the delta)."""

    WIRE: ClassVar[str] = "messageUpdated"

    message_id: str
    content: str
    reasoning: str = ""


@dataclass(frozen=True)
class ToolStarted(_OnTheWire):
    WIRE: ClassVar[str] = "toolStarted"

    call: ToolCall


@dataclass(frozen=True)
class ToolFinished(_OnTheWire):
    WIRE: ClassVar[str] = "toolFinished"

    call_id: str
    result: StoredMessage


@dataclass(frozen=True)
class CompactionStateChange(_OnTheWire):
    WIRE: ClassVar[str] = "compactionStateChange"

    is_compacting: StrictBool


@dataclass(frozen=True)
class CompactionContentUpdate(_OnTheWire):
    """The compaction fork's text so far (accumulated)."""

    WIRE: ClassVar[str] = "compactionContentUpdate"

    content: str


@dataclass(frozen=True)
class SummaryPrepared(_OnTheWire):
    """The summary prepared in the background (DESIGN §5.5a): ``preparing``,
    ``ready``, or ``None`` when none is held. A quiet indicator: the user is not
    waiting, so it is never the "compacting" hint."""

    WIRE: ClassVar[str] = "summaryPrepared"

    state: PreparedState | None


@dataclass(frozen=True)
class CompactBlockAdded(_OnTheWire):
    WIRE: ClassVar[str] = "compactBlockAdded"

    block: StoredMessage


@dataclass(frozen=True)
class UsageUpdate(_OnTheWire):
    """``latestTotalTokens``: the provider's ``total_tokens`` only, never cache fields."""

    WIRE: ClassVar[str] = "usage"

    latest_total_tokens: StrictInt
    window: StrictInt | None = None
    input_budget: StrictInt | None = None


@dataclass(frozen=True)
class StatusChange(_OnTheWire):
    WIRE: ClassVar[str] = "statusChange"

    status: SessionStatus


@dataclass(frozen=True)
class Notice(_OnTheWire):
    """Something the user should see: a hook's stderr, a skipped compaction.

    ``code`` names the notices a surface shows its own way: ``cancelled`` (the
    user's cancel stopped the turn — the editor agent's stop reason says it).
    """

    WIRE: ClassVar[str] = "notice"

    text: str
    code: str | None = None


@dataclass(frozen=True)
class ModeChange(_OnTheWire):
    """The session's mode changed (Shift+Tab, a control): what the footer shows."""

    WIRE: ClassVar[str] = "modeChange"

    mode: SessionMode


@dataclass(frozen=True)
class QueuedPrompt:
    """A prompt sent while the agent worked: it is sent when the turn ends."""

    id: str
    text: str


@dataclass(frozen=True)
class QueueChange(_OnTheWire):
    """The prompts waiting for the turn to end, in the order they will be sent."""

    WIRE: ClassVar[str] = "queueChange"

    prompts: tuple[QueuedPrompt, ...]


@dataclass(frozen=True)
class PermissionRequested(_OnTheWire):
    """A tool waits for the user's decision; ``options`` are the decisions offered."""

    WIRE: ClassVar[str] = "permissionRequested"

    id: str
    tool: str
    arguments: str
    options: tuple[str, ...] = ("allow_once", "allow_always", "reject")
    #: One line a person can judge: the command, or the file and the kind of change.
    summary: str = ""


@dataclass(frozen=True)
class ErrorEvent(_OnTheWire):
    WIRE: ClassVar[str] = "error"

    message: str
    code: str | None = None


Event: TypeAlias = (
    MessageAdded
    | MessageUpdated
    | ToolStarted
    | ToolFinished
    | CompactionStateChange
    | CompactionContentUpdate
    | SummaryPrepared
    | CompactBlockAdded
    | UsageUpdate
    | StatusChange
    | Notice
    | ModeChange
    | QueueChange
    | PermissionRequested
    | ErrorEvent
)
EVENT_TYPES: tuple[type[Event], ...] = (
    MessageAdded,
    MessageUpdated,
    ToolStarted,
    ToolFinished,
    CompactionStateChange,
    CompactionContentUpdate,
    SummaryPrepared,
    CompactBlockAdded,
    UsageUpdate,
    StatusChange,
    Notice,
    ModeChange,
    QueueChange,
    PermissionRequested,
    ErrorEvent,
)
_BY_WIRE: dict[str, type[Event]] = {t.WIRE: t for t in EVENT_TYPES}


class EventFormatError(FormatError):
    """A wire event that is not one of ours, or has a field of the wrong shape."""


_CODECS: dict[str, Codec[Event]] = {
    kind.WIRE: Codec(kind, error=EventFormatError, what=kind.WIRE, by_alias=True)
    for kind in EVENT_TYPES
}


def event_to_wire(event: Event) -> JSONObject:
    """``{"type": "<wireName>", <camelCase fields>…}``: what every surface sends."""
    out: JSONObject = {"type": event.WIRE}
    out.update(_CODECS[event.WIRE].dump(event))
    return out


def message_to_wire(message: Message) -> JSONObject:
    """A message in the form events carry it (camelCase), for a history sent beside them."""
    wire = event_to_wire(MessageAdded(message))["message"]
    assert isinstance(wire, dict)
    return wire


def event_from_wire(data: object) -> Event:
    """The event ``event_to_wire`` encoded; ``EventFormatError`` for anything else."""
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise EventFormatError("an event is a JSON object with a string 'type'")
    codec = _CODECS.get(data["type"])
    if codec is None:
        raise EventFormatError(f"unknown event type {data['type']!r}")
    return codec.load(data)


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

    def summary_prepared(self, state: PreparedState | None) -> None:
        self.publish(SummaryPrepared(state))

    def compaction_notice(self, text: str) -> None:
        self.publish(Notice(text))
