"""Anthropic Messages API requests: the exact body of ``POST /v1/messages``.

``anthropic_body`` turns a ``ChatRequest`` (chat-completions messages and
tools) into that body, cache breakpoints included. It is pure: the client
shell sends the body (``cairn.provider.anthropic_client``), and
``cairn.provider.anthropic_stream`` reads the answer.

Two properties make prompt caching pay, and every rule below keeps them:
the same request always gives the same body, and a request over a longer
history gives content blocks that extend the shorter one's, block for block
(``cache_control`` markers aside, since they move with the end of history).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence

from cairn.messages import NATIVE_REASONING_FIELD, JSONObject, JSONValue
from cairn.provider.request import ChatRequest
from cairn.wire_apis import ANTHROPIC_DEFAULT_MAX_TOKENS

__all__ = [
    "BODY_KEYS",
    "EMPTY_TOOL_RESULT",
    "EMPTY_USER_TEXT",
    "MAX_CACHE_BREAKPOINTS",
    "anthropic_body",
    "anthropic_messages",
    "count_cache_breakpoints",
    "place_cache_breakpoints",
    "tool_input",
    "tool_use_id",
]

#: The most ``cache_control`` markers one request may carry (the API refuses more).
MAX_CACHE_BREAKPOINTS = 4
#: Keys of the body that ``anthropic_body`` writes itself; params may not override them.
BODY_KEYS: frozenset[str] = frozenset(
    {"model", "messages", "system", "tools", "stream", "max_tokens"}
)
#: Stands in for a user message with no text: the API refuses empty text blocks.
EMPTY_USER_TEXT = "(empty)"
#: Stands in for an empty tool result, for the same reason.
EMPTY_TOOL_RESULT = "(no output)"

_THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})
_EMPTY_SCHEMA: JSONObject = {"type": "object", "properties": {}}
_TOOL_USE_ID = re.compile(r"[A-Za-z0-9_-]+")
_NOT_ID_CHAR = re.compile(r"[^A-Za-z0-9_-]")


def anthropic_body(
    request: ChatRequest, *, default_max_tokens: int = ANTHROPIC_DEFAULT_MAX_TOKENS
) -> JSONObject:
    """The exact JSON body for a streaming ``POST /v1/messages``.

    The leading ``system`` messages become the ``system`` blocks; the rest go
    through ``anthropic_messages``. ``max_tokens`` (which the API requires)
    is ``params["max_tokens"]`` or ``default_max_tokens``; ``stop`` becomes
    ``stop_sequences`` unless those are given too; every other parameter
    passes through as a top-level key, except the keys in ``BODY_KEYS``.
    Cache breakpoints are placed by ``place_cache_breakpoints``.
    """
    system: list[JSONValue] = []
    start = 0
    for message in request.messages:
        if message.get("role") != "system":
            break
        start += 1
        text = _text_of(message.get("content"))
        if not _blank(text):
            system.append({"type": "text", "text": text})
    body: JSONObject = {
        "model": request.model,
        "max_tokens": _max_tokens(request.params, default_max_tokens),
    }
    if system:
        body["system"] = system
    tools: list[JSONValue] = [tool for tool in map(_tool, request.tools) if tool is not None]
    if tools:
        body["tools"] = tools
    body["messages"] = list(anthropic_messages(request.messages[start:]))
    body.update(_passed_params(request.params))
    body["stream"] = True
    return place_cache_breakpoints(body)


def _max_tokens(params: Mapping[str, JSONValue], default: int) -> int:
    value = params.get("max_tokens")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return default


def _passed_params(params: Mapping[str, JSONValue]) -> JSONObject:
    out: JSONObject = {}
    for key, value in params.items():
        if key in BODY_KEYS:
            continue
        if key == "stop":
            if "stop_sequences" not in params and value is not None:
                out["stop_sequences"] = [value] if isinstance(value, str) else copy.deepcopy(value)
            continue
        out[key] = copy.deepcopy(value)
    return out


def _tool(raw: Mapping[str, JSONValue]) -> JSONObject | None:
    fn = raw.get("function")
    if not isinstance(fn, dict):
        return None
    name = fn.get("name")
    if not isinstance(name, str):
        return None
    tool: JSONObject = {"name": name}
    description = fn.get("description")
    if isinstance(description, str) and description:
        tool["description"] = description
    parameters = fn.get("parameters")
    tool["input_schema"] = copy.deepcopy(
        parameters if isinstance(parameters, dict) else _EMPTY_SCHEMA
    )
    return tool


def anthropic_messages(messages: Iterable[Mapping[str, JSONValue]]) -> list[JSONObject]:
    """Chat-completions messages (no leading system ones) as Anthropic messages.

    One Anthropic message per chat user message and per run of consecutive
    tool results (one ``user`` message of ``tool_result`` blocks), so each
    result group directly follows the assistant message that called it.
    Consecutive user messages are not merged (the API does that itself), so
    the mapping stays reversible. An assistant message with no blocks at all
    is dropped, since the API refuses empty content; one with tool calls
    never is. A ``system`` message after the first non-system one (only
    imported transcripts have those) becomes a ``user`` message: hoisting it
    into ``system`` would reorder the conversation and change the prefix.
    """
    out: list[JSONObject] = []
    results: list[JSONValue] | None = None
    for message in messages:
        role = message.get("role")
        if role == "tool":
            if results is None:
                results = []
                out.append({"role": "user", "content": results})
            results.append(_tool_result(message))
            continue
        results = None
        if role == "assistant":
            blocks = _assistant_blocks(message)
            if blocks:
                out.append({"role": "assistant", "content": blocks})
        elif role in ("user", "system"):
            out.append({"role": "user", "content": _user_blocks(message.get("content"))})
    return out


def _user_blocks(content: JSONValue) -> list[JSONValue]:
    blocks = _content_blocks(content)
    return blocks or [{"type": "text", "text": EMPTY_USER_TEXT}]


def _content_blocks(content: JSONValue) -> list[JSONValue]:
    """Text and image blocks for chat content; blank text is skipped (the API refuses it)."""
    if isinstance(content, str):
        return [] if _blank(content) else [{"type": "text", "text": content}]
    blocks: list[JSONValue] = []
    if isinstance(content, list):
        for part in content:
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            if kind == "text":
                text = part.get("text")
                if isinstance(text, str) and not _blank(text):
                    blocks.append({"type": "text", "text": text})
            elif kind == "image_url":
                image = _image_block(part.get("image_url"))
                if image is not None:
                    blocks.append(image)
    return blocks


def _image_block(image: JSONValue) -> JSONObject | None:
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str) or not url:
        return None
    if not url.startswith("data:"):
        return {"type": "image", "source": {"type": "url", "url": url}}
    header, _, payload = url[len("data:") :].partition(",")
    media_type, *flags = header.split(";")
    if "base64" in flags:
        data = payload
    else:
        # A percent-encoded data URL: the API only takes base64.
        data = base64.b64encode(urllib.parse.unquote_to_bytes(payload)).decode("ascii")
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": media_type, "data": data},
    }


def _assistant_blocks(message: Mapping[str, JSONValue]) -> list[JSONValue]:
    blocks: list[JSONValue] = []
    native = message.get(NATIVE_REASONING_FIELD)
    if isinstance(native, list):
        blocks.extend(copy.deepcopy(item) for item in native if isinstance(item, dict))
    text = _text_of(message.get("content"))
    if not _blank(text):
        blocks.append({"type": "text", "text": text})
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            if isinstance(call, dict):
                blocks.append(_tool_use(call))
    return blocks


def _tool_use(call: Mapping[str, JSONValue]) -> JSONObject:
    fn = call.get("function")
    fn = fn if isinstance(fn, dict) else {}
    name = fn.get("name")
    return {
        "type": "tool_use",
        "id": tool_use_id(call.get("id")),
        "name": name if isinstance(name, str) else "",
        "input": tool_input(fn.get("arguments")),
    }


def tool_input(arguments: JSONValue) -> JSONObject:
    """A call's JSON ``arguments`` as the ``input`` object of a ``tool_use`` block.

    Blank arguments are ``{}``. Arguments that are not a JSON object (a
    truncated stream, a model that wrote prose) go as ``{"arguments": raw}``:
    the model sees what it wrote, and the same text always gives the same
    input.
    """
    if isinstance(arguments, dict):
        return copy.deepcopy(arguments)
    if not isinstance(arguments, str) or _blank(arguments):
        return {}
    try:
        parsed = json.loads(arguments, parse_constant=_reject_constant)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        result: JSONObject = parsed
        return result
    return {"arguments": arguments}


def _reject_constant(name: str) -> object:
    # NaN and Infinity are not JSON: a body holding them would not serialize as JSON.
    raise ValueError(name)


def tool_use_id(raw: JSONValue) -> str:
    """A chat tool-call id as a valid ``tool_use`` id (``[A-Za-z0-9_-]+``).

    Ids another provider minted (``functions.read:0``) would be refused.
    Such an id has each other character replaced by ``_`` and a hash of the
    original appended, so two ids never collide and the call and its result,
    both passed through here, still match.
    """
    text = raw if isinstance(raw, str) else ""
    if _TOOL_USE_ID.fullmatch(text):
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{_NOT_ID_CHAR.sub('_', text)}_{digest}"


def _tool_result(message: Mapping[str, JSONValue]) -> JSONObject:
    content = message.get("content")
    result: JSONValue
    if isinstance(content, list):
        blocks = _content_blocks(content)
        result = blocks if blocks else EMPTY_TOOL_RESULT
    elif isinstance(content, str) and not _blank(content):
        result = content
    else:
        result = EMPTY_TOOL_RESULT
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id(message.get("tool_call_id")),
        "content": result,
    }


def _text_of(content: JSONValue) -> str:
    """The text of chat content: the string, or its text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                text = part.get("text")
                if isinstance(text, str):
                    texts.append(text)
        return "".join(texts)
    return ""


def _blank(text: str) -> bool:
    # The API refuses text blocks that are empty or hold only whitespace.
    return not text.strip()


# ---------------------------------------------------------------------------
# Cache breakpoints


def place_cache_breakpoints(body: Mapping[str, JSONValue]) -> JSONObject:
    """``body`` with ``cache_control`` markers added; ``body`` itself is not changed.

    In order, while fewer than ``MAX_CACHE_BREAKPOINTS`` markers are in the
    body: (a) the last system block, or the last tool when there is no
    system block, caching tools and system; (b) the last block of the last
    message, caching the whole request for the next one; (c) the last block
    of the message just before the last assistant message, where the
    previous request ended, so the history it cached is read back even when
    the last turn added more blocks than the API looks back over. Thinking
    blocks cannot carry a marker: the nearest earlier block of the same
    message takes it, or, when there is none, that breakpoint is skipped. A
    target already marked is left as it is and uses no budget.
    """
    out: JSONObject = dict(body)
    budget = MAX_CACHE_BREAKPOINTS - count_cache_breakpoints(body)

    system = out.get("system")
    tools = out.get("tools")
    if isinstance(system, list) and system:
        marked, added = _mark_last(system, budget)
        out["system"] = marked
        budget -= added
    elif isinstance(tools, list) and tools:
        marked, added = _mark_last(tools, budget)
        out["tools"] = marked
        budget -= added

    messages = out.get("messages")
    if not isinstance(messages, list) or not messages:
        return out
    messages = list(messages)
    targets = [len(messages) - 1]
    assistants = [
        i
        for i, message in enumerate(messages)
        if isinstance(message, dict) and message.get("role") == "assistant"
    ]
    if assistants and assistants[-1] > 0:
        targets.append(assistants[-1] - 1)
    for index in targets:
        message = messages[index]
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}] if not _blank(content) else []
        if not isinstance(content, list):
            continue
        marked, added = _mark_last(content, budget)
        if added:
            messages[index] = {**message, "content": marked}
            budget -= added
    out["messages"] = messages
    return out


def _mark_last(blocks: Sequence[JSONValue], budget: int) -> tuple[list[JSONValue], int]:
    """``blocks`` with the last markable block marked, and how many markers that added."""
    out = list(blocks)
    for index in range(len(out) - 1, -1, -1):
        block = out[index]
        if not isinstance(block, dict) or block.get("type") in _THINKING_TYPES:
            continue
        if "cache_control" in block:
            return out, 0
        if budget <= 0:
            return out, 0
        out[index] = {**block, "cache_control": {"type": "ephemeral"}}
        return out, 1
    return out, 0


def count_cache_breakpoints(body: Mapping[str, JSONValue]) -> int:
    """How many ``cache_control`` markers ``body`` carries (tools, system, message blocks)."""
    count = 0
    for key in ("tools", "system"):
        value = body.get(key)
        if isinstance(value, list):
            count += _count_marked(value)
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, dict):
                content = message.get("content")
                if isinstance(content, list):
                    count += _count_marked(content)
    return count


def _count_marked(blocks: Sequence[JSONValue]) -> int:
    count = 0
    for block in blocks:
        if isinstance(block, dict):
            count += "cache_control" in block
            inner = block.get("content")
            if isinstance(inner, list):  # a tool_result's own blocks
                count += _count_marked(inner)
    return count
