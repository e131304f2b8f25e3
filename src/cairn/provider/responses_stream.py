"""OpenAI Responses API answers: stream events, usage and error bodies.

``ResponsesStream`` turns the streamed events of one response into Cairn's
``StreamEvent`` objects; ``responses_usage`` and ``responses_error`` read a
usage object and an error body. All of it is pure and works on plain JSON, so
it behaves the same on live streams, recordings and test servers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from cairn.messages import JSONObject, JSONValue, Usage, scrub
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
    "ResponsesStream",
    "ResponsesStreamError",
    "responses_error",
    "responses_usage",
]

#: Where ``response.incomplete`` says the output cap was reached.
_CAP_REASON = "max_output_tokens"
#: Separates two summary parts (or reasoning items) in the readable reasoning.
_REASONING_SEPARATOR = "\n\n"


class ResponsesStreamError(StreamReportedError):
    """The stream reported a failure (``response.failed`` or an ``error`` event)."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message, code=code)


class ResponsesStream:
    """Turns the streamed events of one response into ``StreamEvent`` objects.

    Feed it each event as a plain mapping (the SDK's ``event.to_dict()``).
    Deltas become content, reasoning and tool-call events; a ``.done`` event
    fills in only what no delta carried, for servers that send whole parts.
    A finished reasoning item becomes a ``ReasoningItem`` to send back; the
    end of the response gives exactly one ``Finish`` and its usage, and
    anything after it is ignored. A failure raises ``ResponsesStreamError``.
    """

    def __init__(self) -> None:
        #: Function call index by item id and by output index.
        self._call_by_item: dict[str, int] = {}
        self._call_by_output: dict[int, int] = {}
        self._calls = 0
        #: Function calls whose arguments have been emitted (by index).
        self._arguments_sent: set[int] = set()
        #: Function calls whose id and name have been emitted (by index).
        self._announced: set[int] = set()
        #: Text and reasoning parts already emitted, as (item key, kind, part index).
        self._parts_sent: set[tuple[str, str, int]] = set()
        self._last_reasoning: tuple[str, str, int] | None = None
        self._finished = False

    @property
    def finished(self) -> bool:
        """Whether the response's end (completed or incomplete) has been seen."""
        return self._finished

    def feed(self, event: Mapping[str, object]) -> list[StreamEvent]:
        """The events ``event`` yields, in order; raises ``ResponsesStreamError`` on failure."""
        if self._finished:
            return []
        kind = event.get("type")
        match kind:
            case "response.output_text.delta" | "response.refusal.delta":
                return self._text_delta(event, "delta")
            case "response.output_text.done":
                return self._text_done(event, "text")
            case "response.refusal.done":
                return self._text_done(event, "refusal")
            case "response.reasoning_summary_text.delta":
                return self._reasoning(event, "summary", "summary_index", "delta")
            case "response.reasoning_summary_text.done":
                return self._reasoning(event, "summary", "summary_index", "text", done=True)
            case "response.reasoning_text.delta":
                return self._reasoning(event, "content", "content_index", "delta")
            case "response.reasoning_text.done":
                return self._reasoning(event, "content", "content_index", "text", done=True)
            case "response.output_item.added":
                return self._item_added(event)
            case "response.function_call_arguments.delta":
                return self._arguments(event, "delta")
            case "response.function_call_arguments.done":
                return self._arguments(event, "arguments", done=True)
            case "response.output_item.done":
                return self._item_done(event)
            case "response.completed" | "response.incomplete":
                return self._end(event, complete=kind == "response.completed")
            case "response.failed":
                response = event.get("response")
                error = response.get("error") if isinstance(response, Mapping) else None
                raise _stream_error(error, "the response failed")
            case "error":
                nested = event.get("error")
                raise _stream_error(
                    nested if isinstance(nested, Mapping) else event, "the stream reported an error"
                )
            case _:
                return []

    # -- text ------------------------------------------------------------

    def _text_delta(self, event: Mapping[str, object], field: str) -> list[StreamEvent]:
        delta = event.get(field)
        if not isinstance(delta, str) or not delta:
            return []
        self._parts_sent.add((_item_key(event), "text", _index(event, "content_index")))
        return [ContentDelta(scrub(delta))]

    def _text_done(self, event: Mapping[str, object], field: str) -> list[StreamEvent]:
        return self._fill_text(_item_key(event), _index(event, "content_index"), event.get(field))

    def _fill_text(self, item: str, index: int, text: object) -> list[StreamEvent]:
        key = (item, "text", index)
        if key in self._parts_sent or not isinstance(text, str) or not text:
            return []
        self._parts_sent.add(key)
        return [ContentDelta(scrub(text))]

    # -- reasoning -------------------------------------------------------

    def _reasoning(
        self,
        event: Mapping[str, object],
        kind: str,
        index_field: str,
        field: str,
        *,
        done: bool = False,
    ) -> list[StreamEvent]:
        key = (_item_key(event), kind, _index(event, index_field))
        if done and key in self._parts_sent:
            return []
        return self._reasoning_text(key, event.get(field))

    def _reasoning_text(self, key: tuple[str, str, int], text: object) -> list[StreamEvent]:
        if not isinstance(text, str) or not text:
            return []
        events: list[StreamEvent] = []
        # Summary parts stream back to back; without a break they would read as one.
        if self._last_reasoning is not None and self._last_reasoning != key:
            events.append(ReasoningDelta(_REASONING_SEPARATOR))
        self._last_reasoning = key
        self._parts_sent.add(key)
        events.append(ReasoningDelta(scrub(text)))
        return events

    def _reasoning_done(self, item: Mapping[str, object], key: str) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        summary = _text_parts(item.get("summary"))
        # The raw reasoning text only when there is no summary: never both.
        kind, parts = (
            ("summary", summary) if summary else ("content", _text_parts(item.get("content")))
        )
        for index, text in parts:
            if (key, kind, index) not in self._parts_sent:
                events.extend(self._reasoning_text((key, kind, index), text))
        sendable = _reasoning_item(item)
        if sendable is not None:
            events.append(ReasoningItem("responses", sendable))
        return events

    # -- function calls --------------------------------------------------

    def _item_added(self, event: Mapping[str, object]) -> list[StreamEvent]:
        item = event.get("item")
        if not isinstance(item, Mapping) or item.get("type") != "function_call":
            return []
        return self._announce(self._call_index(item.get("id"), event.get("output_index")), item)

    def _announce(self, index: int, item: Mapping[str, object]) -> list[StreamEvent]:
        """The call's id and name, with whatever arguments it holds that were not sent yet."""
        self._announced.add(index)
        call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
        if not isinstance(arguments, str) or index in self._arguments_sent:
            arguments = ""
        if arguments:
            self._arguments_sent.add(index)
        return [
            ToolCallDelta(
                index=index,
                id=scrub(call_id) if isinstance(call_id, str) and call_id else None,
                name=scrub(name) if isinstance(name, str) and name else None,
                arguments=scrub(arguments),
            )
        ]

    def _arguments(
        self, event: Mapping[str, object], field: str, *, done: bool = False
    ) -> list[StreamEvent]:
        index = self._call_index(event.get("item_id"), event.get("output_index"))
        return self._emit_arguments(index, event.get(field), done=done)

    def _emit_arguments(self, index: int, arguments: object, *, done: bool) -> list[StreamEvent]:
        if not isinstance(arguments, str) or not arguments:
            return []
        if done and index in self._arguments_sent:
            return []
        self._arguments_sent.add(index)
        return [ToolCallDelta(index=index, id=None, name=None, arguments=scrub(arguments))]

    def _call_index(self, item_id: object, output_index: object) -> int:
        """The ordinal of call ``item_id`` (else the one at ``output_index``); new if unseen."""
        if isinstance(item_id, str) and item_id in self._call_by_item:
            return self._call_by_item[item_id]
        position = _int(output_index)
        if position is not None and position in self._call_by_output:
            return self._call_by_output[position]
        index = self._calls
        self._calls += 1
        if isinstance(item_id, str):
            self._call_by_item[item_id] = index
        if position is not None:
            self._call_by_output[position] = index
        return index

    # -- whole items and the end ----------------------------------------

    def _item_done(self, event: Mapping[str, object]) -> list[StreamEvent]:
        item = event.get("item")
        if not isinstance(item, Mapping):
            return []
        key = _item_key({"item_id": item.get("id"), "output_index": event.get("output_index")})
        match item.get("type"):
            case "reasoning":
                return self._reasoning_done(item, key)
            case "message":
                events: list[StreamEvent] = []
                for index, text in _text_parts(item.get("content")):
                    events.extend(self._fill_text(key, index, text))
                return events
            case "function_call":
                index = self._call_index(item.get("id"), event.get("output_index"))
                if index not in self._announced:  # a server that sends whole items only
                    return self._announce(index, item)
                return self._emit_arguments(index, item.get("arguments"), done=True)
            case _:
                return []

    def _end(self, event: Mapping[str, object], *, complete: bool) -> list[StreamEvent]:
        self._finished = True
        response = event.get("response")
        response = response if isinstance(response, Mapping) else {}
        if complete:
            reason = "tool_calls" if self._calls else "stop"
        else:
            details = response.get("incomplete_details")
            raw = details.get("reason") if isinstance(details, Mapping) else None
            reason = "length" if raw == _CAP_REASON or not isinstance(raw, str) else scrub(raw)
        events: list[StreamEvent] = [Finish(reason)]
        usage = response.get("usage")
        if isinstance(usage, Mapping):
            events.append(UsageEvent(responses_usage(usage)))
        return events


def _reasoning_item(item: Mapping[str, object]) -> JSONObject | None:
    """The reasoning item as it goes back in ``input``; ``None`` if it cannot.

    With ``store: false`` the API resolves a reasoning item from its encrypted
    content (or, on servers that return it, its reasoning text); one with
    neither would be looked up by id and refused as not found.
    """
    encrypted, content = item.get("encrypted_content"), item.get("content")
    if not (isinstance(encrypted, str) and encrypted) and not (
        isinstance(content, list) and content
    ):
        return None
    out: JSONObject = {"type": "reasoning"}
    for key in ("id", "summary", "encrypted_content", "content", "status"):
        value = item.get(key)
        if value is not None:
            out[key] = _json(value)
    out.setdefault("summary", [])
    return out


def _text_parts(parts: object) -> list[tuple[int, str]]:
    """The (index, text) of each part of a content or summary list that has text."""
    if not isinstance(parts, list):
        return []
    out: list[tuple[int, str]] = []
    for index, part in enumerate(parts):
        if isinstance(part, Mapping):
            text = part.get("text", part.get("refusal"))
            if isinstance(text, str) and text:
                out.append((index, text))
    return out


def _item_key(event: Mapping[str, object]) -> str:
    item_id = event.get("item_id")
    if isinstance(item_id, str) and item_id:
        return item_id
    return f"#{_int(event.get('output_index'))}"


def _index(event: Mapping[str, object], field: str) -> int:
    return _int(event.get(field)) or 0


def _int(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _json(value: object) -> JSONValue:
    """``value`` as JSON, every string scrubbed of lone surrogates (a transcript must encode)."""
    if isinstance(value, str):
        return scrub(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, Mapping):
        return {scrub(str(k)): _json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    raise ValueError(f"not JSON: {type(value).__name__}")


def _stream_error(error: object, fallback: str) -> ResponsesStreamError:
    message, code = responses_error(error)
    return ResponsesStreamError(message or fallback, code)


# ---------------------------------------------------------------------------
# Usage and errors


def responses_usage(raw: Mapping[str, object]) -> Usage:
    """Map a Responses ``usage`` object onto ``Usage``.

    ``input_tokens`` already counts the cached tokens and ``output_tokens``
    the reasoning tokens, so they are the prompt and completion sizes as
    they are; ``input_tokens_details.cached_tokens`` (and
    ``cache_write_tokens``, where reported) are kept for reports.
    """
    prompt = _int(raw.get("input_tokens")) or 0
    completion = _int(raw.get("output_tokens")) or 0
    total = _int(raw.get("total_tokens"))
    details = raw.get("input_tokens_details")
    details = details if isinstance(details, Mapping) else {}
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=total if total is not None else prompt + completion,
        cached_tokens=_int(details.get("cached_tokens")),
        cache_creation_input_tokens=_int(details.get("cache_write_tokens")),
    )


def responses_error(body: object) -> tuple[str | None, str | None]:
    """The (message, code) of an error body, ``None`` for what it lacks.

    Takes the whole body ``{"error": {...}}``, the ``error`` object alone (as
    the SDK's ``APIStatusError.body`` holds it), or the body's JSON text. The
    message is made one line; the code is e.g. ``context_length_exceeded``.
    """
    if isinstance(body, bytes | str):
        text = body.decode(errors="replace") if isinstance(body, bytes) else body
        try:
            body = json.loads(text)
        except ValueError:
            return _one_line(text), None
    if not isinstance(body, Mapping):
        return None, None
    error = body.get("error")
    if isinstance(error, Mapping):
        body = error
    elif isinstance(error, str):
        return _one_line(error), None
    message, code = body.get("message"), body.get("code")
    if isinstance(code, int) and not isinstance(code, bool):
        code = str(code)
    return (
        _one_line(message) if isinstance(message, str) else None,
        scrub(code) if isinstance(code, str) and code else None,
    )


def _one_line(text: str) -> str | None:
    return scrub(" ".join(text.split())) or None
