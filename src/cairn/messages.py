"""The message model: OpenAI chat shape with stable ids and host metadata.

Everything in Cairn — the pipeline, the store, the surfaces — passes these
objects around. This module also knows the two structural facts the rest of
the system must never violate: how messages group into API rounds (an
assistant message travels with every tool result that answers it) and how a
message becomes the exact dict an OpenAI-compatible endpoint accepts.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, TypeAlias, cast, get_args

from cairn.errors import CairnError

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset(get_args(Role))

JSONValue: TypeAlias = "str | int | float | bool | list[JSONValue] | dict[str, JSONValue] | None"
JSONObject: TypeAlias = dict[str, JSONValue]

#: Kinds the host writes itself; anything else in ``meta.kind`` is kept as is.
KIND_CHAT = "chat"
KIND_COMPACT_SUMMARY = "compact_summary"
KIND_RESTORATION = "restoration"
KIND_HANDOFF = "handoff"
KIND_PLAN_REMINDER = "plan_reminder"
KIND_SKILL = "skill"
KIND_ERROR = "error"


class MessageFormatError(CairnError, ValueError):
    """A stored or received message does not have the shape Cairn expects."""


def new_id(prefix: str = "msg") -> str:
    """A fresh, globally unique id such as ``msg_3f2a…``."""
    return f"{prefix}_{uuid.uuid4().hex}"


def json_kind(value: object) -> str:
    """How an error message names a JSON value's type: ``null``, ``a string``, ``an array`` …"""
    match value:
        case None:
            return "null"
        case bool():
            return "a boolean"
        case int() | float():
            return "a number"
        case str():
            return "a string"
        case list() | tuple():
            return "an array"
        case dict():
            return "an object"
        case _:
            return type(value).__name__


# A Python ``str`` holds astral characters as single code points, so any
# surrogate code point in one is a lone half: undecodable bytes smuggled in
# (``surrogateescape`` file names, raw tool output) or a bad ``\ud800`` escape.
_SURROGATE = re.compile("[\ud800-\udfff]")


def scrub(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD.

    A lone surrogate cannot be UTF-8: it makes the request body, the
    transcript line and every JSON event unencodable. The message model
    scrubs at construction, so whatever enters a message — tool output, file
    names, the provider's text, the user's input — is clean from there on;
    event streams that bypass messages call this too.
    """
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub("\ufffd", text)


def _scrubbed(owner: object, *names: str) -> None:
    for name in names:
        value = getattr(owner, name)
        if isinstance(value, str):
            clean = scrub(value)
            if clean is not value:
                object.__setattr__(owner, name, clean)


@dataclass(frozen=True, slots=True)
class TextPart:
    text: str
    type: Literal["text"] = "text"

    def __post_init__(self) -> None:
        _scrubbed(self, "text")


@dataclass(frozen=True, slots=True)
class ImagePart:
    url: str
    detail: str | None = None
    type: Literal["image_url"] = "image_url"


ContentPart: TypeAlias = TextPart | ImagePart
Content: TypeAlias = "str | tuple[ContentPart, ...] | None"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call requested by the model; ``arguments`` is the raw JSON text."""

    id: str
    name: str
    arguments: str = "{}"

    def __post_init__(self) -> None:
        _scrubbed(self, "id", "name", "arguments")


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage reported by the provider for one response.

    Only ``total_tokens`` (and prompt + completion) ever feed a decision; the
    cache fields are kept for reports and bills, never added to a size.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None

    @property
    def context_tokens(self) -> int:
        """The provider floor for the context size: ``max(total, prompt + completion)``."""
        return max(self.total_tokens, self.prompt_tokens + self.completion_tokens)


@dataclass(frozen=True, slots=True)
class MessageMeta:
    kind: str = KIND_CHAT
    #: The model sees it; clients never render it (e.g. the handoff reminder).
    hidden: bool = False
    #: Written by the host, not typed by the user nor produced by the model.
    synthetic: bool = False
    #: On a tool result: the tool failed. Errors are evidence, kept longest by snip.
    tool_error: bool = False
    usage: Usage | None = None
    extra: Mapping[str, JSONValue] = field(default_factory=dict)


_DEFAULT_META = MessageMeta()


@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    content: Content = None
    id: str = field(default_factory=new_id)
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    reasoning: str | None = None
    meta: MessageMeta = field(default_factory=MessageMeta)

    def __post_init__(self) -> None:
        _scrubbed(self, "content", "id", "tool_call_id", "name", "reasoning")

    @property
    def text(self) -> str:
        """The textual content; image parts contribute nothing."""
        content = self.content
        if content is None:
            return ""
        if isinstance(content, str):
            return content
        return "".join(part.text for part in content if isinstance(part, TextPart))

    @property
    def images(self) -> tuple[ImagePart, ...]:
        if isinstance(self.content, tuple):
            return tuple(part for part in self.content if isinstance(part, ImagePart))
        return ()

    def with_content(self, content: Content) -> Message:
        return replace(self, content=content)


# ---------------------------------------------------------------------------
# Constructors for the common cases


def system(text: str, **meta: JSONValue) -> Message:
    return Message(role="system", content=text, meta=_meta(meta))


def user(text: str | Sequence[ContentPart], **meta: JSONValue) -> Message:
    content: Content = text if isinstance(text, str) else tuple(text)
    return Message(role="user", content=content, meta=_meta(meta))


def assistant(
    text: str | None = None,
    tool_calls: Iterable[ToolCall] = (),
    *,
    reasoning: str | None = None,
    usage: Usage | None = None,
) -> Message:
    return Message(
        role="assistant",
        content=text,
        tool_calls=tuple(tool_calls),
        reasoning=reasoning,
        meta=MessageMeta(usage=usage),
    )


def tool_result(
    call_id: str, text: str, *, name: str | None = None, error: bool = False
) -> Message:
    meta = MessageMeta(tool_error=True) if error else _DEFAULT_META
    return Message(role="tool", content=text, tool_call_id=call_id, name=name, meta=meta)


def _meta(values: Mapping[str, JSONValue]) -> MessageMeta:
    if not values:
        return MessageMeta()
    return meta_from_dict(dict(values))


# ---------------------------------------------------------------------------
# API rounds


@dataclass(frozen=True, slots=True)
class Round:
    """A slice ``messages[start:end]`` that must never be split.

    Either an assistant message with its tool results, or one lone message.
    ``missing`` lists call ids that no result in the round answers; an
    orphan tool result (no preceding call) forms a round of its own with
    ``orphan=True``.
    """

    start: int
    end: int
    missing: tuple[str, ...] = ()
    orphan: bool = False

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def complete(self) -> bool:
        return not self.missing and not self.orphan


def group_rounds(messages: Sequence[Message]) -> list[Round]:
    """Group ``messages`` into API rounds, in order, covering every index once."""
    rounds: list[Round] = []
    i, n = 0, len(messages)
    while i < n:
        message = messages[i]
        if message.role == "assistant" and message.tool_calls:
            pending = {call.id for call in message.tool_calls}
            j = i + 1
            while j < n and pending:
                candidate = messages[j]
                if candidate.role != "tool" or candidate.tool_call_id not in pending:
                    break
                pending.discard(candidate.tool_call_id)
                j += 1
            missing = tuple(c.id for c in message.tool_calls if c.id in pending)
            rounds.append(Round(i, j, missing=missing))
            i = j
        else:
            rounds.append(Round(i, i + 1, orphan=message.role == "tool"))
            i += 1
    return rounds


def iter_round_slices(messages: Sequence[Message]) -> Iterator[Sequence[Message]]:
    for r in group_rounds(messages):
        yield messages[r.start : r.end]


@dataclass(frozen=True, slots=True)
class Orphans:
    """Tool calls with no result and tool results with no call."""

    calls: tuple[str, ...] = ()
    results: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.calls or self.results)


def find_orphans(messages: Sequence[Message]) -> Orphans:
    """Every broken call/result pairing in ``messages`` (empty when the list is sound)."""
    calls: list[str] = []
    results: list[str] = []
    for r in group_rounds(messages):
        calls.extend(r.missing)
        if r.orphan:
            results.append(messages[r.start].tool_call_id or "")
    return Orphans(tuple(calls), tuple(results))


# ---------------------------------------------------------------------------
# Wire format (what an OpenAI-compatible endpoint accepts)


def to_wire(messages: Iterable[Message], *, reasoning_field: str | None = None) -> list[JSONObject]:
    """Convert to chat-completions request messages.

    The compact block and every other host-written control message go out as
    ``user`` messages (seed 004 §1.3). Hidden messages are included — the
    model must see them — since hiding is a client concern. Reasoning stays in
    storage and is only sent when the provider asks for it back under
    ``reasoning_field`` (DeepSeek's ``reasoning_content``, for instance).
    """
    return [message_to_wire(m, reasoning_field=reasoning_field) for m in messages]


def message_to_wire(message: Message, *, reasoning_field: str | None = None) -> JSONObject:
    role: str = message.role
    if message.meta.kind == KIND_COMPACT_SUMMARY:
        role = "user"
    wire: JSONObject = {"role": role, "content": _content_to_wire(message.content)}
    if message.role == "assistant":
        if message.tool_calls:
            wire["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in message.tool_calls
            ]
        if reasoning_field and message.reasoning:
            wire[reasoning_field] = message.reasoning
    elif message.role == "tool":
        wire["tool_call_id"] = message.tool_call_id or ""
    if message.name and message.role in ("user", "system"):
        wire["name"] = message.name
    return wire


def _content_to_wire(content: Content) -> JSONValue:
    if content is None or isinstance(content, str):
        return content
    return [_part_to_dict(part) for part in content]


def _part_to_dict(part: ContentPart) -> JSONObject:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    image: JSONObject = {"url": part.url}
    if part.detail is not None:
        image["detail"] = part.detail
    return {"type": "image_url", "image_url": image}


def from_wire(data: Mapping[str, object], *, id: str | None = None) -> Message:
    """Build a message from a chat-completions dict (as sent or as recorded)."""
    role = data.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise MessageFormatError(f"message role must be one of {sorted(ROLES)}, got {role!r}")
    calls_raw = data.get("tool_calls") or []
    if not isinstance(calls_raw, list):
        raise MessageFormatError("tool_calls must be a list")
    calls = tuple(_tool_call_from_wire(c) for c in calls_raw)
    reasoning = data.get("reasoning_content", data.get("reasoning"))
    return Message(
        role=cast(Role, role),
        content=_content_from_data(data.get("content")),
        id=id or _opt_str(data, "id") or new_id(),
        tool_calls=calls,
        tool_call_id=_opt_str(data, "tool_call_id"),
        name=_opt_str(data, "name"),
        reasoning=reasoning if isinstance(reasoning, str) else None,
    )


def _tool_call_from_wire(raw: object) -> ToolCall:
    if not isinstance(raw, Mapping):
        raise MessageFormatError("each tool call must be an object")
    fn = raw.get("function")
    if not isinstance(fn, Mapping):
        raise MessageFormatError("tool call is missing its 'function' object")
    call_id, name, arguments = raw.get("id"), fn.get("name"), fn.get("arguments", "{}")
    if not isinstance(call_id, str) or not isinstance(name, str):
        raise MessageFormatError("tool call needs a string 'id' and 'function.name'")
    if not isinstance(arguments, str):
        raise MessageFormatError(f"tool call {call_id}: 'arguments' must be a JSON string")
    return ToolCall(call_id, name, arguments)


# ---------------------------------------------------------------------------
# Storage format (lossless: ids, meta and reasoning included)


def message_to_dict(message: Message) -> JSONObject:
    """The stored form of a message; ``message_from_dict`` inverts it exactly."""
    out: JSONObject = {
        "id": message.id,
        "role": message.role,
        "content": _content_to_wire(message.content),
    }
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        out["name"] = message.name
    if message.reasoning is not None:
        out["reasoning"] = message.reasoning
    meta = meta_to_dict(message.meta)
    if meta:
        out["meta"] = meta
    return out


def message_from_dict(data: object) -> Message:
    """Parse a stored message, raising ``MessageFormatError`` naming the bad field."""
    if not isinstance(data, dict):
        raise MessageFormatError("message must be a JSON object")
    role = data.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise MessageFormatError(f"message role must be one of {sorted(ROLES)}, got {role!r}")
    message_id = data.get("id")
    if not isinstance(message_id, str) or not message_id:
        raise MessageFormatError("message needs a non-empty string 'id'")
    calls: tuple[ToolCall, ...] = ()
    calls_raw = data.get("tool_calls")
    if calls_raw:
        if not isinstance(calls_raw, list):
            raise MessageFormatError(f"message {message_id}: tool_calls must be a list")
        calls = tuple(_stored_tool_call(message_id, c) for c in calls_raw)
    meta_raw = data.get("meta")
    return Message(
        role=cast(Role, role),
        content=_content_from_data(data.get("content")),
        id=message_id,
        tool_calls=calls,
        tool_call_id=_opt_str(data, "tool_call_id"),
        name=_opt_str(data, "name"),
        reasoning=_opt_str(data, "reasoning"),
        meta=meta_from_dict(meta_raw) if meta_raw else _DEFAULT_META,
    )


def _stored_tool_call(message_id: str, raw: object) -> ToolCall:
    if not isinstance(raw, dict):
        raise MessageFormatError(f"message {message_id}: each tool call must be an object")
    call_id, name, arguments = raw.get("id"), raw.get("name"), raw.get("arguments", "{}")
    if not (isinstance(call_id, str) and isinstance(name, str) and isinstance(arguments, str)):
        raise MessageFormatError(
            f"message {message_id}: tool call needs string 'id', 'name' and 'arguments'"
        )
    return ToolCall(call_id, name, arguments)


def _content_from_data(raw: object) -> Content:
    if raw is None or isinstance(raw, str):
        return raw
    if not isinstance(raw, list):
        raise MessageFormatError("content must be a string, a list of parts, or null")
    parts: list[ContentPart] = []
    for part in raw:
        if not isinstance(part, Mapping):
            raise MessageFormatError("each content part must be an object")
        kind = part.get("type")
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise MessageFormatError("text part needs a string 'text'")
            parts.append(TextPart(text))
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, Mapping) else image
            if not isinstance(url, str):
                raise MessageFormatError("image part needs 'image_url.url'")
            detail = image.get("detail") if isinstance(image, Mapping) else None
            parts.append(ImagePart(url, detail if isinstance(detail, str) else None))
        else:
            raise MessageFormatError(f"unknown content part type {kind!r}")
    return tuple(parts)


def meta_to_dict(meta: MessageMeta) -> JSONObject:
    out: JSONObject = {}
    if meta.kind != KIND_CHAT:
        out["kind"] = meta.kind
    if meta.hidden:
        out["hidden"] = True
    if meta.synthetic:
        out["synthetic"] = True
    if meta.tool_error:
        out["tool_error"] = True
    if meta.usage is not None:
        out["usage"] = usage_to_dict(meta.usage)
    if meta.extra:
        out["extra"] = dict(meta.extra)
    return out


def meta_from_dict(raw: object) -> MessageMeta:
    if not isinstance(raw, dict):
        raise MessageFormatError("meta must be a JSON object")
    kind = raw.get("kind", KIND_CHAT)
    extra = raw.get("extra", {})
    if not isinstance(kind, str):
        raise MessageFormatError("meta.kind must be a string")
    if not isinstance(extra, dict):
        raise MessageFormatError("meta.extra must be an object")
    usage = raw.get("usage")
    return MessageMeta(
        kind=kind,
        hidden=raw.get("hidden") is True,
        synthetic=raw.get("synthetic") is True,
        tool_error=raw.get("tool_error") is True,
        usage=usage_from_dict(usage) if usage is not None else None,
        extra=extra,
    )


_USAGE_FIELDS = (
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "cached_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)


def usage_to_dict(usage: Usage) -> JSONObject:
    out: JSONObject = {}
    for name in _USAGE_FIELDS:
        value = getattr(usage, name)
        if value is not None:
            out[name] = value
    return out


def usage_from_dict(raw: object) -> Usage:
    if not isinstance(raw, dict):
        raise MessageFormatError("usage must be a JSON object")
    values: dict[str, int | None] = {}
    for name in _USAGE_FIELDS:
        value = raw.get(name)
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 0
        ):
            raise MessageFormatError(f"usage.{name} must be a non-negative integer")
        values[name] = value
    return Usage(
        prompt_tokens=values["prompt_tokens"] or 0,
        completion_tokens=values["completion_tokens"] or 0,
        total_tokens=values["total_tokens"] or 0,
        cached_tokens=values["cached_tokens"],
        cache_read_input_tokens=values["cache_read_input_tokens"],
        cache_creation_input_tokens=values["cache_creation_input_tokens"],
    )


def _opt_str(data: Mapping[str, object], key: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise MessageFormatError(f"'{key}' must be a string")
    return value
