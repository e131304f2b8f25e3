"""The message model: OpenAI chat shape with stable ids and host metadata.

Everything in Cairn — the pipeline, the store, the surfaces — passes these
objects around. This module also knows the two structural facts the rest of
the system must never violate: how messages group into API rounds (an
assistant message travels with every tool result that answers it) and how a
message becomes the exact dict an OpenAI-compatible endpoint accepts.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Literal, TypeAlias, cast, get_args

from pydantic import (
    BeforeValidator,
    Discriminator,
    Field,
    PlainSerializer,
    StrictBool,
    StrictInt,
    Tag,
)

from cairn.codec import OMIT_EMPTY, OMIT_NONE, Codec, JSONKey, invalid, tag
from cairn.codec import JSONObject as JSONObject  # re-exported: most modules name them from here
from cairn.codec import JSONValue as JSONValue
from cairn.codec import scrub as scrub  # the message model scrubs at construction
from cairn.errors import FormatError

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset(get_args(Role))


#: Kinds the host writes itself; anything else in ``meta.kind`` is kept as is.
KIND_CHAT = "chat"
KIND_COMPACT_SUMMARY = "compact_summary"
KIND_RESTORATION = "restoration"
KIND_HANDOFF = "handoff"
KIND_PLAN_REMINDER = "plan_reminder"
KIND_SKILL = "skill"
KIND_ERROR = "error"


class MessageFormatError(FormatError):
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


def _scrubbed(owner: object, *names: str) -> None:
    for name in names:
        value = getattr(owner, name)
        # ASCII text (most of it) cannot hold a surrogate: skip the call.
        if isinstance(value, str) and not value.isascii():
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


def _image_to_json(part: ImagePart) -> JSONObject:
    # The OpenAI shape, both in the transcript and on the wire.
    image: JSONObject = {"url": part.url}
    if part.detail is not None:
        image["detail"] = part.detail
    return {"type": "image_url", "image_url": image}


def _image_from_json(raw: object) -> object:
    if not isinstance(raw, dict):
        return raw
    image = raw.get("image_url")
    if isinstance(image, str):  # some recorders flatten the object to its URL
        return {"url": image}
    if not isinstance(image, dict):
        raise invalid("image part needs an 'image_url' object with a string 'url'")
    return {key: image[key] for key in ("url", "detail") if key in image}


def _part_tag(raw: object) -> str | None:
    kind = raw.get("type") if isinstance(raw, dict) else getattr(raw, "type", None)
    return tag(kind) if kind in ("text", "image_url") else None


def _content_tag(raw: object) -> str | None:
    if raw is None:
        return tag("null")
    if isinstance(raw, str):
        return tag("string")
    return tag("parts") if isinstance(raw, list | tuple) else None


# How content is stored and sent: a string, null, or a list of typed parts.
_StoredPart: TypeAlias = Annotated[
    Annotated[TextPart, Tag(tag("text"))]
    | Annotated[
        ImagePart,
        BeforeValidator(_image_from_json),
        PlainSerializer(_image_to_json),
        Tag(tag("image_url")),  # last: pydantic reads a branch's tag from its outermost layer
    ],
    Discriminator(
        _part_tag,
        custom_error_type="cairn",
        custom_error_message="must be an object whose 'type' is 'text' or 'image_url'",
    ),
]
_StoredContent: TypeAlias = Annotated[
    Annotated[str, Tag(tag("string"))]
    | Annotated[tuple[_StoredPart, ...], Tag(tag("parts"))]
    | Annotated[None, Tag(tag("null"))],
    Discriminator(
        _content_tag,
        custom_error_type="cairn",
        custom_error_message="must be a string, a list of parts, or null",
    ),
]
_Count: TypeAlias = Annotated[StrictInt, Field(ge=0)]
_Nonempty: TypeAlias = Annotated[str, Field(min_length=1)]


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

    prompt_tokens: _Count = 0
    completion_tokens: _Count = 0
    total_tokens: _Count = 0
    cached_tokens: Annotated[_Count | None, OMIT_NONE] = None
    cache_read_input_tokens: Annotated[_Count | None, OMIT_NONE] = None
    cache_creation_input_tokens: Annotated[_Count | None, OMIT_NONE] = None

    @property
    def context_tokens(self) -> int:
        """The provider floor for the context size: ``max(total, prompt + completion)``."""
        return max(self.total_tokens, self.prompt_tokens + self.completion_tokens)


#: The wire APIs whose reasoning goes back verbatim (``NativeReasoning.api``).
NativeAPI: TypeAlias = Literal["anthropic", "responses"]
#: The key under which ``to_wire`` hands an assistant message's native reasoning to
#: the API's request builder; never sent to a chat-completions endpoint.
NATIVE_REASONING_FIELD = "native_reasoning"


@dataclass(frozen=True, slots=True)
class NativeReasoning:
    """Reasoning a provider wants back verbatim with the next requests.

    Anthropic's thinking blocks (with their signatures) and the Responses
    API's reasoning items (with their encrypted content): opaque to Cairn,
    sent back unchanged to the API that produced them and to no other.
    """

    api: NativeAPI
    items: tuple[Mapping[JSONKey, JSONValue], ...]


@dataclass(frozen=True, slots=True)
class MessageMeta:
    kind: Annotated[str, Field(exclude_if=lambda kind: kind == KIND_CHAT)] = KIND_CHAT
    #: The model sees it; clients never render it (e.g. the handoff reminder).
    hidden: Annotated[StrictBool, OMIT_EMPTY] = False
    #: Written by the host, not typed by the user nor produced by the model.
    synthetic: Annotated[StrictBool, OMIT_EMPTY] = False
    #: On a tool result: the tool failed. Errors are evidence, kept longest by snip.
    tool_error: Annotated[StrictBool, OMIT_EMPTY] = False
    usage: Annotated[Usage | None, OMIT_NONE] = None
    extra: Annotated[Mapping[JSONKey, JSONValue], OMIT_EMPTY] = field(default_factory=dict)
    #: On an assistant message: the reasoning its API wants back verbatim.
    native_reasoning: Annotated[NativeReasoning | None, OMIT_NONE] = None


_DEFAULT_META = MessageMeta()


@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    content: _StoredContent = None
    id: _Nonempty = field(default_factory=new_id)
    tool_calls: Annotated[tuple[ToolCall, ...], OMIT_EMPTY] = ()
    tool_call_id: Annotated[str | None, OMIT_NONE] = None
    name: Annotated[str | None, OMIT_NONE] = None
    reasoning: Annotated[str | None, OMIT_NONE] = None
    meta: Annotated[MessageMeta, Field(exclude_if=lambda meta: meta == _DEFAULT_META)] = field(
        default_factory=MessageMeta
    )

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


def _stored_message_has_id(raw: object) -> object:
    # A stored message keeps the id it was written with: a fresh one on every
    # load would make the API view differ between loads.
    if isinstance(raw, dict) and "id" not in raw:
        raise invalid("needs a non-empty string 'id'")
    return raw


#: A message as the transcript and the events hold it: the id is required.
StoredMessage: TypeAlias = Annotated[Message, BeforeValidator(_stored_message_has_id)]


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
    return _META_CODEC.load(dict(values))


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


def to_wire(
    messages: Iterable[Message],
    *,
    reasoning_field: str | None = None,
    native_api: str | None = None,
) -> list[JSONObject]:
    """Convert to chat-completions request messages.

    The compact block and every other host-written control message go out as
    ``user`` messages (seed 004 §1.3). Hidden messages are included — the
    model must see them — since hiding is a client concern. Reasoning stays in
    storage and is only sent when the provider asks for it back under
    ``reasoning_field`` (DeepSeek's ``reasoning_content``, for instance).
    With ``native_api``, an assistant message whose ``native_reasoning`` came
    from that API carries it under ``NATIVE_REASONING_FIELD`` for the API's
    request builder.
    """
    return [
        message_to_wire(m, reasoning_field=reasoning_field, native_api=native_api) for m in messages
    ]


def message_to_wire(
    message: Message, *, reasoning_field: str | None = None, native_api: str | None = None
) -> JSONObject:
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
        native = message.meta.native_reasoning
        if native is not None and native.api == native_api and native.items:
            wire[NATIVE_REASONING_FIELD] = [dict(item) for item in native.items]
    elif message.role == "tool":
        wire["tool_call_id"] = message.tool_call_id or ""
    if message.name and message.role in ("user", "system"):
        wire["name"] = message.name
    return wire


def _content_to_wire(content: Content) -> JSONValue:
    if content is None or isinstance(content, str):
        return content
    wire: JSONValue = _CONTENT_CODEC.dump(content)
    return wire


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
        content=_CONTENT_CODEC.load(data.get("content")),
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

MESSAGE_CODEC: Codec[Message] = Codec(StoredMessage, error=MessageFormatError, what="message")
_META_CODEC: Codec[MessageMeta] = Codec(MessageMeta, error=MessageFormatError, what="meta")
_CONTENT_CODEC: Codec[Content] = Codec(_StoredContent, error=MessageFormatError, what="content")


def message_to_dict(message: Message) -> JSONObject:
    """The stored form of a message; ``message_from_dict`` inverts it exactly."""
    data: JSONObject = MESSAGE_CODEC.dump(message)
    return data


def message_from_dict(data: object) -> Message:
    """Parse a stored message, raising ``MessageFormatError`` naming the bad field."""
    return MESSAGE_CODEC.load(data)


def _opt_str(data: Mapping[str, object], key: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise MessageFormatError(f"'{key}' must be a string")
    return value
