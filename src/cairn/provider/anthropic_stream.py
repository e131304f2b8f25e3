"""Anthropic Messages API answers: stream events, usage and error bodies.

``AnthropicStream`` turns the server-sent events of one response into the
same ``StreamEvent`` values the chat-completions parser produces, so the
rest of Cairn never learns which API answered. No I/O happens here: the
client shell (``cairn.provider.anthropic_client``) feeds the events in.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from cairn.messages import JSONObject, Usage, scrub
from cairn.provider.events import (
    ContentDelta,
    Finish,
    ReasoningDelta,
    ReasoningItem,
    StreamEvent,
    ToolCallDelta,
    UsageEvent,
)
from cairn.provider.streaming import StreamReportedError

__all__ = [
    "FINISH_REASONS",
    "AnthropicStream",
    "AnthropicStreamError",
    "anthropic_error",
    "anthropic_usage",
]

#: Anthropic stop reasons in the chat-completions vocabulary; others pass through.
FINISH_REASONS: Mapping[str, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}


class AnthropicStreamError(StreamReportedError):
    """An ``error`` event arrived mid-stream (``overloaded_error``, ``api_error`` …).

    The stream loop turns it into a ``ProviderError``; its error type is also its code.
    """

    def __init__(self, message: str, error_type: str | None = None) -> None:
        super().__init__(message, code=error_type, error_type=error_type)


@dataclass(slots=True)
class _Block:
    kind: str
    tool_index: int = -1
    pieces: list[str] = field(default_factory=list)
    signature: list[str] = field(default_factory=list)
    data: str = ""
    whole_input: JSONObject | None = None
    streamed_input: bool = False


class AnthropicStream:
    """Parses the events of one streamed Messages response into ``StreamEvent`` values.

    Feed each event as a plain mapping (the SDK's ``event.to_dict()``). Tool
    calls are indexed by their ordinal among the response's ``tool_use``
    blocks; a call whose input came whole in its ``content_block_start``,
    with no ``input_json_delta`` after, gets that input as its arguments,
    once, at its ``content_block_stop``. Thinking and redacted-thinking
    blocks come out whole, as ``ReasoningItem`` at their
    ``content_block_stop``, after their text has streamed as
    ``ReasoningDelta``. The finish reason comes from ``message_delta``,
    followed by exactly one ``UsageEvent``: there when it carries usage,
    else at ``message_stop``. An ``error`` event raises
    ``AnthropicStreamError``.
    """

    def __init__(self) -> None:
        self._usage: dict[str, int] = {}
        self._blocks: dict[int, _Block] = {}
        self._last_index = -1
        self._tool_calls = 0
        self._usage_sent = False
        self._finish_reason: str | None = None
        self._stopped = False

    @property
    def usage(self) -> Usage | None:
        """The usage reported so far; ``None`` before any was."""
        return anthropic_usage(self._usage) if self._usage else None

    @property
    def finish_reason(self) -> str | None:
        """The mapped stop reason, once ``message_delta`` gave one."""
        return self._finish_reason

    @property
    def stopped(self) -> bool:
        """Whether ``message_stop`` arrived: a stream that ends without it was cut."""
        return self._stopped

    def feed(self, event: Mapping[str, object]) -> list[StreamEvent]:
        """The Cairn events for one Anthropic stream event, in order."""
        match event.get("type"):
            case "message_start":
                message = event.get("message")
                if isinstance(message, Mapping):
                    self._add_usage(message.get("usage"))
                return []
            case "content_block_start":
                return self._start(event)
            case "content_block_delta":
                return self._delta(event)
            case "content_block_stop":
                return self._stop(event)
            case "message_delta":
                return self._message_delta(event)
            case "message_stop":
                self._stopped = True
                return self._usage_event()
            case "error":
                message, error_type = anthropic_error(event)
                raise AnthropicStreamError(message or "error event in the stream", error_type)
            case _:
                return []

    def _index(self, event: Mapping[str, object]) -> int:
        index = event.get("index")
        if isinstance(index, int) and not isinstance(index, bool):
            return index
        return self._last_index

    def _start(self, event: Mapping[str, object]) -> list[StreamEvent]:
        index = self._index(event)
        self._last_index = index
        raw = event.get("content_block")
        if not isinstance(raw, Mapping):
            return []
        kind = raw.get("type")
        if kind == "text":
            self._blocks[index] = _Block("text")
            text = _str(raw.get("text"))
            return [ContentDelta(text)] if text else []
        if kind == "tool_use":
            block = _Block("tool_use", tool_index=self._tool_calls)
            self._tool_calls += 1
            given = raw.get("input")
            if isinstance(given, dict) and given:
                block.whole_input = given
            self._blocks[index] = block
            return [
                ToolCallDelta(
                    index=block.tool_index,
                    id=_str(raw.get("id")) or None,
                    name=_str(raw.get("name")) or None,
                    arguments="",
                )
            ]
        if kind == "thinking":
            block = _Block("thinking")
            self._blocks[index] = block
            text = _str(raw.get("thinking"))
            signature = _str(raw.get("signature"))
            if signature:
                block.signature.append(signature)
            if text:
                block.pieces.append(text)
                return [ReasoningDelta(text)]
            return []
        if kind == "redacted_thinking":
            self._blocks[index] = _Block("redacted_thinking", data=_str(raw.get("data")))
        # Server tool blocks (web search …) are the API's own business: nothing to report.
        return []

    def _delta(self, event: Mapping[str, object]) -> list[StreamEvent]:
        block = self._blocks.get(self._index(event))
        delta = event.get("delta")
        if block is None or not isinstance(delta, Mapping):
            return []
        match delta.get("type"):
            case "text_delta":
                text = _str(delta.get("text"))
                return [ContentDelta(text)] if text else []
            case "input_json_delta" if block.kind == "tool_use":
                piece = _str(delta.get("partial_json"))
                if not piece:
                    return []
                block.streamed_input = True
                return [ToolCallDelta(block.tool_index, None, None, piece)]
            case "thinking_delta" if block.kind == "thinking":
                text = _str(delta.get("thinking"))
                if not text:
                    return []
                block.pieces.append(text)
                return [ReasoningDelta(text)]
            case "signature_delta" if block.kind == "thinking":
                block.signature.append(_str(delta.get("signature")))
                return []
            case _:
                return []

    def _stop(self, event: Mapping[str, object]) -> list[StreamEvent]:
        block = self._blocks.pop(self._index(event), None)
        if block is None:
            return []
        if block.kind == "thinking":
            item: JSONObject = {
                "type": "thinking",
                "thinking": "".join(block.pieces),
                "signature": "".join(block.signature),
            }
            return [ReasoningItem("anthropic", item)]
        if block.kind == "redacted_thinking":
            return [ReasoningItem("anthropic", {"type": "redacted_thinking", "data": block.data})]
        if block.kind == "tool_use" and block.whole_input and not block.streamed_input:
            arguments = scrub(json.dumps(block.whole_input, ensure_ascii=False))
            return [ToolCallDelta(block.tool_index, None, None, arguments)]
        return []

    def _message_delta(self, event: Mapping[str, object]) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        delta = event.get("delta")
        if isinstance(delta, Mapping):
            reason = delta.get("stop_reason")
            if isinstance(reason, str) and reason:
                self._finish_reason = FINISH_REASONS.get(reason, scrub(reason))
                events.append(Finish(self._finish_reason))
        usage = event.get("usage")
        if isinstance(usage, Mapping):
            self._add_usage(usage)
            events.extend(self._usage_event())
        return events

    def _add_usage(self, raw: object) -> None:
        # message_delta repeats counts cumulatively: a later value replaces an earlier one.
        if isinstance(raw, Mapping):
            for key, value in raw.items():
                count = _count(value)
                if isinstance(key, str) and count is not None:
                    self._usage[key] = count

    def _usage_event(self) -> list[StreamEvent]:
        if self._usage_sent or not self._usage:
            return []
        self._usage_sent = True
        return [UsageEvent(anthropic_usage(self._usage))]


def _str(value: object) -> str:
    return scrub(value) if isinstance(value, str) else ""


def _count(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


# ---------------------------------------------------------------------------
# Usage and errors


def anthropic_usage(raw: Mapping[str, object]) -> Usage:
    """An Anthropic ``usage`` object as ``Usage``.

    Anthropic's ``input_tokens`` leaves out the tokens read from and written
    to the cache; ``prompt_tokens`` is the whole input (all three), as in
    chat completions, and ``cached_tokens`` the cache reads, so billing
    prices those as cached input. The two cache fields are kept as reported
    and are already inside ``prompt_tokens``: nothing may add them again.
    """
    read = _count(raw.get("cache_read_input_tokens"))
    creation = _count(raw.get("cache_creation_input_tokens"))
    prompt = (_count(raw.get("input_tokens")) or 0) + (read or 0) + (creation or 0)
    completion = _count(raw.get("output_tokens")) or 0
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        cached_tokens=read,
        cache_read_input_tokens=read,
        cache_creation_input_tokens=creation,
    )


def anthropic_error(body: object) -> tuple[str | None, str | None]:
    """``(message, error_type)`` from an Anthropic error body; ``None`` for what is missing.

    Takes the whole body (``{"type": "error", "error": {...}}``), the inner
    ``error`` object alone, or their JSON text.
    """
    if isinstance(body, bytes | str):
        try:
            body = json.loads(body)
        except ValueError:
            return None, None
    if not isinstance(body, Mapping):
        return None, None
    error = body.get("error")
    inner: Mapping[str, object] = error if isinstance(error, Mapping) else body
    message, error_type = inner.get("message"), inner.get("type")
    if inner is body and error_type == "error":
        error_type = None  # the envelope's own type, not the error's
    return (
        scrub(message) if isinstance(message, str) and message else None,
        scrub(error_type) if isinstance(error_type, str) and error_type else None,
    )
