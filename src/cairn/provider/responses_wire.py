"""The OpenAI Responses API on the wire: request bodies out, stream events in.

Cairn holds its history in chat-completions form (``cairn.messages.to_wire``).
``responses_body`` turns a ``ChatRequest`` into the body of a stateless
``POST /v1/responses`` (``store: false``, the whole input every time, the
reasoning items' encrypted content asked back so they can be sent again);
``ResponsesStream`` turns the streamed events of one response into Cairn's
``StreamEvent`` objects; ``responses_usage`` and ``responses_error`` read a
usage object and an error body. All of it is pure and works on plain JSON, so
it behaves the same on live streams, recordings and test servers.

Every chat message maps to its input items on its own, so a request over a
longer history starts with the items of the shorter one — the prompt cache
depends on it, exactly as it does with chat completions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from cairn.messages import NATIVE_REASONING_FIELD, JSONObject, JSONValue, Usage, scrub
from cairn.provider.events import (
    ContentDelta,
    Finish,
    ReasoningDelta,
    ReasoningItem,
    StreamEvent,
    ToolCallDelta,
    UsageEvent,
)
from cairn.provider.request import ChatRequest
from cairn.provider.streaming import StreamReportedError

__all__ = [
    "ENCRYPTED_REASONING",
    "MAX_TOKENS_PARAMS",
    "OWNED_KEYS",
    "TOOL_RESULT_IMAGE_PLACEHOLDER",
    "ResponsesStream",
    "ResponsesStreamError",
    "responses_body",
    "responses_error",
    "responses_input",
    "responses_tool",
    "responses_usage",
]

#: The ``include`` value that makes reasoning items come back sendable with ``store: false``.
ENCRYPTED_REASONING = "reasoning.encrypted_content"
#: What a tool result's image becomes: ``function_call_output`` is sent as text.
TOOL_RESULT_IMAGE_PLACEHOLDER = "[image omitted from the tool result]"
#: Parameters naming the output cap, in order of precedence; the first set one
#: becomes ``max_output_tokens``. ``max_tokens`` is the configured cap
#: (``ModelConfig.request_params``) that the context budget reserves.
MAX_TOKENS_PARAMS: tuple[str, ...] = ("max_tokens", "max_completion_tokens", "max_output_tokens")
#: Body keys ``responses_body`` sets itself; a parameter of the same name is not sent.
OWNED_KEYS: frozenset[str] = frozenset(
    {"model", "input", "instructions", "tools", "stream", "store", "include", *MAX_TOKENS_PARAMS}
)
#: Where ``response.incomplete`` says the output cap was reached.
_CAP_REASON = "max_output_tokens"
#: Separates two summary parts (or reasoning items) in the readable reasoning.
_REASONING_SEPARATOR = "\n\n"


class ResponsesStreamError(StreamReportedError):
    """The stream reported a failure (``response.failed`` or an ``error`` event)."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message, code=code)


# ---------------------------------------------------------------------------
# Request body


def responses_body(request: ChatRequest, *, encrypted_reasoning: bool = True) -> JSONObject:
    """The exact JSON body for a streamed, stateless ``POST /v1/responses``.

    Parameters other than the output cap and the keys in ``OWNED_KEYS`` go
    out unchanged as top-level keys. ``encrypted_reasoning=False`` leaves out
    ``include``, for models that refuse it ("Encrypted content is not
    supported with this model"): those return no reasoning items anyway.
    """
    body: JSONObject = {"model": request.model, "input": [*responses_input(request.messages)]}
    if request.tools:
        body["tools"] = [responses_tool(tool) for tool in request.tools]
    for key, value in request.params.items():
        if key not in OWNED_KEYS:
            body[key] = value
    cap = _output_cap(request.params)
    if cap is not None:
        body["max_output_tokens"] = cap
    body["stream"] = True
    body["store"] = False
    if encrypted_reasoning:
        body["include"] = [ENCRYPTED_REASONING]
    return body


def responses_input(messages: Sequence[Mapping[str, JSONValue]]) -> list[JSONObject]:
    """The ``input`` items for chat-form ``messages``, in order (one message's items together)."""
    items: list[JSONObject] = []
    for message in messages:
        items.extend(_message_items(message))
    return items


def responses_tool(tool: Mapping[str, JSONValue]) -> JSONObject:
    """A chat-form function tool as a Responses function tool (``strict`` off unless set)."""
    if tool.get("type") != "function":
        raise ValueError(f"only function tools can be sent, got type {tool.get('type')!r}")
    fn = _mapping(tool.get("function"), "a tool's 'function'")
    out: JSONObject = {"type": "function", "name": _string(fn.get("name"), "a tool's name")}
    description = fn.get("description")
    if isinstance(description, str):
        out["description"] = description
    parameters = fn.get("parameters")
    # The API requires the key; a tool without arguments still has an object schema.
    out["parameters"] = (
        parameters if isinstance(parameters, dict) else {"type": "object", "properties": {}}
    )
    strict = fn.get("strict")
    out["strict"] = strict if isinstance(strict, bool) else False
    return out


def _output_cap(params: Mapping[str, JSONValue]) -> JSONValue:
    for key in MAX_TOKENS_PARAMS:
        value = params.get(key)
        if value is not None:
            return value
    return None


def _message_items(message: Mapping[str, JSONValue]) -> list[JSONObject]:
    role = message.get("role")
    content = message.get("content")
    if role in ("system", "developer", "user"):
        # System messages stay in ``input`` (not ``instructions``) so the whole
        # history is one list and a longer one extends it item for item.
        return [{"type": "message", "role": role, "content": _input_content(content)}]
    if role == "assistant":
        return _assistant_items(message)
    if role == "tool":
        call_id = _string(message.get("tool_call_id"), "a tool result's 'tool_call_id'")
        return [
            {"type": "function_call_output", "call_id": call_id, "output": _tool_output(content)}
        ]
    raise ValueError(f"cannot send a message with role {role!r} to the Responses API")


def _assistant_items(message: Mapping[str, JSONValue]) -> list[JSONObject]:
    text = _text(message.get("content"))
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise ValueError("an assistant message's 'tool_calls' must be a list")
    items: list[JSONObject] = []
    native = message.get(NATIVE_REASONING_FIELD) or []
    if not isinstance(native, list):
        raise ValueError(f"an assistant message's {NATIVE_REASONING_FIELD!r} must be a list")
    # The API refuses a reasoning item that no output item follows; a turn cut
    # off while reasoning (nothing else said) sends none.
    if text or calls:
        items.extend(dict(_mapping(item, "a reasoning item")) for item in native)
    if text:
        # No ``id``/``status``: those name a stored output item, and with
        # ``store: false`` the API takes an assistant message without them.
        part: JSONObject = {"type": "output_text", "text": text, "annotations": []}
        items.append({"type": "message", "role": "assistant", "content": [part]})
    for raw in calls:
        call = _mapping(raw, "a tool call")
        fn = _mapping(call.get("function"), "a tool call's 'function'")
        arguments = fn.get("arguments")
        items.append(
            {
                "type": "function_call",
                "call_id": _string(call.get("id"), "a tool call's 'id'"),
                "name": _string(fn.get("name"), "a tool call's name"),
                "arguments": arguments if isinstance(arguments, str) else "{}",
            }
        )
    return items


def _input_content(content: JSONValue) -> list[JSONValue]:
    if content is None or isinstance(content, str):
        return [{"type": "input_text", "text": content or ""}]
    parts: list[JSONValue] = []
    for raw in _list(content, "message content"):
        part = _mapping(raw, "a content part")
        kind = part.get("type")
        if kind == "text":
            parts.append({"type": "input_text", "text": _string(part.get("text"), "a text part")})
        elif kind == "image_url":
            url, detail = _image(part)
            parts.append({"type": "input_image", "image_url": url, "detail": detail or "auto"})
        else:
            raise ValueError(f"cannot send a content part of type {kind!r}")
    return parts


def _image(part: Mapping[str, JSONValue]) -> tuple[str, str | None]:
    image = part.get("image_url")
    if isinstance(image, str):
        return image, None
    fields = _mapping(image, "an image part's 'image_url'")
    detail = fields.get("detail")
    return _string(fields.get("url"), "an image url"), detail if isinstance(detail, str) else None


def _text(content: JSONValue) -> str:
    """The text of chat content; image parts contribute nothing."""
    if content is None or isinstance(content, str):
        return content or ""
    texts: list[str] = []
    for raw in _list(content, "message content"):
        part = _mapping(raw, "a content part")
        if part.get("type") == "text":
            texts.append(_string(part.get("text"), "a text part"))
    return "".join(texts)


def _tool_output(content: JSONValue) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    texts: list[str] = []
    for raw in _list(content, "tool result content"):
        part = _mapping(raw, "a content part")
        if part.get("type") == "image_url":
            texts.append(TOOL_RESULT_IMAGE_PLACEHOLDER)
        else:
            texts.append(_string(part.get("text"), "a text part"))
    return "".join(texts)


def _mapping(value: object, what: str) -> Mapping[str, JSONValue]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{what} must be an object")
    return value


def _list(value: object, what: str) -> list[JSONValue]:
    if not isinstance(value, list):
        raise ValueError(f"{what} must be a string, a list of parts or null")
    return value


def _string(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string")
    return value


# ---------------------------------------------------------------------------
# Stream events


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
