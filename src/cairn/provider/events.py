"""Stream events, parsed from chat-completions chunks, and folded into a message.

A streamed response is a sequence of small events — content, reasoning and
tool-call deltas, one usage report, a finish reason. ``events_from_chunk``
turns one ``chat.completion.chunk`` (as a plain mapping) into events;
``TurnAccumulator`` folds them into the assistant ``Message`` the session
stores. Both are pure, so they work the same on live streams and recordings.

Every string a chunk carries into an event is scrubbed of lone surrogates
here, once: a JSON ``\\ud800`` escape decodes to one, and it would make the
``--output-format json`` result, the event stream and the transcript line
unencodable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeAlias

from cairn.messages import (
    JSONObject,
    Message,
    MessageMeta,
    NativeAPI,
    NativeReasoning,
    ToolCall,
    Usage,
    new_id,
    scrub,
)

#: Delta fields that carry reasoning, in order of preference.
REASONING_FIELDS: tuple[str, ...] = ("reasoning_content", "reasoning")


@dataclass(frozen=True, slots=True)
class ContentDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A piece of the tool call at ``index``: id and name come once, arguments in pieces."""

    index: int
    id: str | None
    name: str | None
    arguments: str


@dataclass(frozen=True, slots=True)
class ReasoningItem:
    """A whole piece of reasoning ``api`` wants back verbatim (``NativeReasoning``).

    An Anthropic thinking or redacted-thinking block with its signature, or a
    Responses reasoning item with its encrypted content; its readable text,
    if any, has already streamed as ``ReasoningDelta`` events.
    """

    api: NativeAPI
    item: JSONObject


@dataclass(frozen=True, slots=True)
class UsageEvent:
    usage: Usage


@dataclass(frozen=True, slots=True)
class Finish:
    reason: str | None


StreamEvent: TypeAlias = (
    ContentDelta | ReasoningDelta | ReasoningItem | ToolCallDelta | UsageEvent | Finish
)

#: Events that count as output for ``output_started`` (a bare finish does not).
OUTPUT_EVENTS = (ContentDelta, ReasoningDelta, ReasoningItem, ToolCallDelta, UsageEvent)


def events_from_chunk(chunk: Mapping[str, object]) -> list[StreamEvent]:
    """The events in one chunk, in the order a reader should apply them.

    Only the first choice is read. Empty deltas (the opening ``role`` chunk,
    ``content: ""``) produce nothing; the finish reason comes after the
    deltas of its chunk and the usage after that.
    """
    events: list[StreamEvent] = []
    choices = chunk.get("choices")
    if isinstance(choices, list) and choices:
        choice = choices[0]
        if isinstance(choice, Mapping):
            delta = choice.get("delta")
            if isinstance(delta, Mapping):
                events.extend(_delta_events(delta))
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                events.append(Finish(scrub(reason)))
    usage = chunk.get("usage")
    if isinstance(usage, Mapping):
        events.append(UsageEvent(usage_from_wire(usage)))
    return events


def _delta_events(delta: Mapping[str, object]) -> list[StreamEvent]:
    events: list[StreamEvent] = []
    for name in REASONING_FIELDS:
        reasoning = delta.get(name)
        if isinstance(reasoning, str) and reasoning:
            events.append(ReasoningDelta(scrub(reasoning)))
            break
    content = delta.get("content")
    if isinstance(content, str) and content:
        events.append(ContentDelta(scrub(content)))
    calls = delta.get("tool_calls")
    if isinstance(calls, list):
        for position, raw in enumerate(calls):
            if isinstance(raw, Mapping):
                events.append(_tool_call_delta(raw, position))
    return events


def _tool_call_delta(raw: Mapping[str, object], position: int) -> ToolCallDelta:
    index = raw.get("index")
    fn = raw.get("function")
    fn = fn if isinstance(fn, Mapping) else {}
    call_id, name, arguments = raw.get("id"), fn.get("name"), fn.get("arguments")
    return ToolCallDelta(
        # A few servers omit the index; their calls come one per chunk, in order.
        index=index if isinstance(index, int) and not isinstance(index, bool) else position,
        id=scrub(call_id) if isinstance(call_id, str) and call_id else None,
        name=scrub(name) if isinstance(name, str) and name else None,
        arguments=scrub(arguments) if isinstance(arguments, str) else "",
    )


def usage_from_wire(raw: Mapping[str, object]) -> Usage:
    """Map a chat-completions ``usage`` object onto ``Usage``.

    ``prompt_tokens_details.cached_tokens`` (or DeepSeek's
    ``prompt_cache_hit_tokens``) becomes ``cached_tokens``; Anthropic-style
    ``cache_read_input_tokens`` / ``cache_creation_input_tokens`` that some
    gateways pass through are kept as they are.
    """
    prompt = _int(raw.get("prompt_tokens")) or 0
    completion = _int(raw.get("completion_tokens")) or 0
    total = _int(raw.get("total_tokens"))
    details = raw.get("prompt_tokens_details")
    details = details if isinstance(details, Mapping) else {}
    cached = _int(details.get("cached_tokens"))
    if cached is None:
        cached = _int(raw.get("prompt_cache_hit_tokens"))
    creation = _int(raw.get("cache_creation_input_tokens"))
    if creation is None:
        creation = _int(details.get("cache_write_tokens"))
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=total if total is not None else prompt + completion,
        cached_tokens=cached,
        cache_read_input_tokens=_int(raw.get("cache_read_input_tokens")),
        cache_creation_input_tokens=creation,
    )


def _int(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


class _PendingCall:
    __slots__ = ("arguments", "id", "name")

    def __init__(self) -> None:
        self.id: str | None = None
        self.name: str | None = None
        self.arguments: list[str] = []


class TurnAccumulator:
    """Folds stream events into one assistant message.

    ``ReasoningItem`` events become the message's ``meta.native_reasoning``.
    Tool calls are assembled by ``index``: the first id and name seen for an
    index win, argument pieces are concatenated. A call that never received
    an id gets a fresh one so its result can still answer it.
    """

    def __init__(self) -> None:
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, _PendingCall] = {}
        self._usage: Usage | None = None
        self._finish_reason: str | None = None
        self._output_started = False
        self._native: list[ReasoningItem] = []

    def add(self, event: StreamEvent) -> None:
        if isinstance(event, OUTPUT_EVENTS):
            self._output_started = True
        if isinstance(event, ContentDelta):
            self._text.append(event.text)
        elif isinstance(event, ReasoningDelta):
            self._reasoning.append(event.text)
        elif isinstance(event, ToolCallDelta):
            call = self._calls.setdefault(event.index, _PendingCall())
            if call.id is None and event.id:
                call.id = event.id
            if call.name is None and event.name:
                call.name = event.name
            if event.arguments:
                call.arguments.append(event.arguments)
        elif isinstance(event, ReasoningItem):
            self._native.append(event)
        elif isinstance(event, UsageEvent):
            self._usage = event.usage
        else:
            self._finish_reason = event.reason

    @property
    def text(self) -> str:
        """The content accumulated so far."""
        return "".join(self._text)

    @property
    def reasoning(self) -> str:
        return "".join(self._reasoning)

    @property
    def usage(self) -> Usage | None:
        return self._usage

    @property
    def finish_reason(self) -> str | None:
        return self._finish_reason

    @property
    def output_started(self) -> bool:
        """Whether any content, reasoning, tool-call or usage event was seen."""
        return self._output_started

    def tool_calls(self) -> tuple[ToolCall, ...]:
        calls: list[ToolCall] = []
        for index in sorted(self._calls):
            pending = self._calls[index]
            if pending.id is None:
                pending.id = new_id("call")
            calls.append(
                ToolCall(pending.id, pending.name or "", "".join(pending.arguments) or "{}")
            )
        return tuple(calls)

    def message(self) -> Message:
        """The assistant message so far (usage in ``meta.usage``).

        Content is ``None`` for a tool-call-only turn, the text otherwise
        (``""`` for an empty answer); the finish reason, when known, is kept
        in ``meta.extra["finish_reason"]``.
        """
        calls = self.tool_calls()
        text = self.text
        extra = {"finish_reason": self._finish_reason} if self._finish_reason else {}
        return Message(
            role="assistant",
            content=None if calls and not text else text,
            tool_calls=calls,
            reasoning=self.reasoning or None,
            meta=MessageMeta(
                usage=self._usage, extra=extra, native_reasoning=self.native_reasoning()
            ),
        )

    def native_reasoning(self) -> NativeReasoning | None:
        """The reasoning items seen, in order; ``None`` when there were none.

        A stream carries one API's items only; should two ever mix, the first
        API's are kept, since sending another API's items would be refused.
        """
        if not self._native:
            return None
        api = self._native[0].api
        return NativeReasoning(api, tuple(e.item for e in self._native if e.api == api))
