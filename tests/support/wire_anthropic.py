"""Anthropic Messages (``POST …/messages``) for the test server (``openai_server``).

The test server keeps one model of a conversation, the chat-completions
body, and one script of answers, ``Reply``. This module is what lets it also
speak Anthropic's Messages API, as Anthropic documents it:

- ``normalize`` turns a native request into the chat-completions body a chat
  client would have sent for the same conversation, so scripts and responders
  read one shape;
- ``validate`` refuses, with the API's own wording, what the real API refuses
  (tool_use / tool_result pairing, thinking-block signatures, thinking rules,
  empty text, misplaced or too many ``cache_control`` markers, missing fields);
- ``cache_layout`` and ``PromptCache`` implement prompt caching as documented:
  breakpoints, a 20-block lookback, a minimum cacheable prefix;
- ``stream_events`` and ``message`` render a ``Reply`` as SSE events or as a
  ``message`` object, with ``thinking`` signatures the server can verify later.

Nothing here imports the server at run time; ``openai_server`` drives it.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import json
import re
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from support.openai_server import Reply

#: The most blocks one request may mark with ``cache_control``.
MAX_BREAKPOINTS = 4
#: How many block boundaries, the breakpoint's own included, are checked for a cache hit.
LOOKBACK_BLOCKS = 20
#: Top-level keys that are the protocol's own structure (never passed through as they are).
STRUCTURAL_KEYS = frozenset({"system", "messages", "tools", "stop_sequences", "cache_control"})
#: The error types the API sends (``error.type``).
ERROR_TYPES = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "billing_error",
        "permission_error",
        "not_found_error",
        "request_too_large",
        "rate_limit_error",
        "api_error",
        "overloaded_error",
        "timeout_error",
    }
)
#: OpenAI's error types in Anthropic's vocabulary.
FROM_OPENAI_TYPES = {
    "server_error": "api_error",
    "rate_limit_exceeded": "rate_limit_error",
    "insufficient_quota": "billing_error",
    "not_found": "not_found_error",
}
#: Chat finish reasons as Anthropic stop reasons; others pass through as they are.
STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}
THINKING_RULE = (
    "When `thinking` is enabled, a final `assistant` message must start with a thinking block "
    "(preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you "
    "include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. "
    "Please consult our documentation at "
    "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
)


@dataclass(frozen=True)
class Rejection:
    """Why the API refuses a request: an HTTP status and the error's own words."""

    message: str
    status: int = 400
    code: str | None = None
    param: str | None = None


# ---------------------------------------------------------------------------
# Signatures


def sign(secret: bytes, thinking: str) -> str:
    """The ``signature`` of a thinking block: an HMAC of its text under the server's secret."""
    digest = hmac.new(
        secret, b"thinking\x00" + thinking.encode("utf-8", "surrogatepass"), hashlib.sha256
    ).digest()
    return base64.b64encode(b"cairn-test\x00" + digest).decode()


def verify(secret: bytes, thinking: str, signature: object) -> bool:
    return isinstance(signature, str) and hmac.compare_digest(signature, sign(secret, thinking))


# ---------------------------------------------------------------------------
# Reading a native request


def _blocks(content: object) -> list[Mapping[str, Any]]:
    """A message's content as blocks (a plain string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [block for block in content if isinstance(block, Mapping)]
    return []


def _bare(block: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of ``block`` without ``cache_control``."""
    return {key: copy.deepcopy(value) for key, value in block.items() if key != "cache_control"}


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def thinking_enabled(native: Mapping[str, Any]) -> bool:
    thinking = native.get("thinking")
    return isinstance(thinking, Mapping) and thinking.get("type") in ("enabled", "adaptive")


# ---------------------------------------------------------------------------
# Normalizing to chat form


def normalize(native: Mapping[str, Any]) -> dict[str, Any]:
    """The chat-completions body a chat client would have sent for ``native``."""
    out: dict[str, Any] = {}
    if "model" in native:
        out["model"] = native["model"]
    out["messages"] = _system_messages(native.get("system")) + _chat_messages(
        native.get("messages")
    )
    tools = [_chat_tool(tool) for tool in native.get("tools") or () if isinstance(tool, Mapping)]
    if tools:
        out["tools"] = tools
    if "max_tokens" in native:
        out["max_tokens"] = native["max_tokens"]
    out["stream"] = bool(native.get("stream", False))
    if out["stream"]:
        out["stream_options"] = {"include_usage": True}
    if "stop_sequences" in native:
        out["stop"] = copy.deepcopy(native["stop_sequences"])
    for key, value in native.items():
        if key not in STRUCTURAL_KEYS and key not in out:
            out[key] = copy.deepcopy(value)
    return out


def _system_messages(system: object) -> list[dict[str, Any]]:
    if isinstance(system, str):
        return [{"role": "system", "content": system}]
    return [
        {"role": "system", "content": block.get("text", "")}
        for block in _blocks(system)
        if block.get("type") == "text"
    ]


def _chat_messages(messages: object) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, Mapping):
            continue
        content = message.get("content")
        if message.get("role") == "assistant":
            out.append(_assistant_message(_blocks(content)))
        elif isinstance(content, str):
            out.append({"role": message.get("role", "user"), "content": content})
        else:
            out.extend(_user_messages(_blocks(content)))
    return out


def _assistant_message(blocks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    texts = [str(b.get("text", "")) for b in blocks if b.get("type") == "text"]
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    calls = [
        {
            "id": block.get("id"),
            "type": "function",
            "function": {"name": block.get("name"), "arguments": json.dumps(block.get("input"))},
        }
        for block in blocks
        if block.get("type") == "tool_use"
    ]
    if calls:
        message["tool_calls"] = calls
    thinking = [str(b.get("thinking", "")) for b in blocks if b.get("type") == "thinking"]
    if thinking:
        message["reasoning_content"] = "".join(thinking)
    return message


def _user_messages(blocks: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    results = [b for b in blocks if b.get("type") == "tool_result"]
    rest = [b for b in blocks if b.get("type") != "tool_result"]
    out: list[dict[str, Any]] = [
        {
            "role": "tool",
            "tool_call_id": block.get("tool_use_id"),
            "content": _result_text(block.get("content")),
        }
        for block in results
    ]
    if rest or not results:
        out.append({"role": "user", "content": _user_content(rest)})
    return out


def _result_text(content: object) -> str:
    if isinstance(content, str):
        return content
    return "".join(str(b.get("text", "")) for b in _blocks(content) if b.get("type") == "text")


def _user_content(blocks: Sequence[Mapping[str, Any]]) -> str | list[dict[str, Any]]:
    if len(blocks) == 1 and blocks[0].get("type") == "text":
        return str(blocks[0].get("text", ""))
    parts: list[dict[str, Any]] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": block.get("text", "")})
        elif kind == "image":
            parts.append({"type": "image_url", "image_url": {"url": _image_url(block)}})
        else:
            parts.append(_bare(block))
    return parts


def _image_url(block: Mapping[str, Any]) -> str:
    source = block.get("source")
    if not isinstance(source, Mapping):
        return ""
    if source.get("type") == "base64":
        return f"data:{source.get('media_type', '')};base64,{source.get('data', '')}"
    return str(source.get("url", ""))


def _chat_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    if "input_schema" not in tool and tool.get("type") not in (None, "custom"):
        return _bare(tool)  # a server tool (web search, …): no chat form
    function: dict[str, Any] = {"name": tool.get("name")}
    if tool.get("description") is not None:
        function["description"] = tool["description"]
    function["parameters"] = copy.deepcopy(tool.get("input_schema", {}))
    return {"type": "function", "function": function}


# ---------------------------------------------------------------------------
# Validation


def count_breakpoints(native: Mapping[str, Any]) -> int:
    """The ``cache_control`` markers of a request (a top-level one uses a slot too)."""
    count = int(isinstance(native.get("cache_control"), Mapping))
    for tool in native.get("tools") or ():
        count += isinstance(tool, Mapping) and "cache_control" in tool
    system = native.get("system")
    if isinstance(system, list):
        count += sum("cache_control" in block for block in _blocks(system))
    for message in native.get("messages") or ():
        if isinstance(message, Mapping) and isinstance(message.get("content"), list):
            count += sum("cache_control" in block for block in _blocks(message["content"]))
    return count


def validate(native: Mapping[str, Any], secret: bytes) -> Rejection | None:
    """What the real API would refuse in ``native``, or ``None``."""
    for key in ("model", "max_tokens", "messages"):
        if key not in native:
            return Rejection(f"{key}: Field required")
    messages = native["messages"]
    if not isinstance(messages, list) or not all(isinstance(m, Mapping) for m in messages):
        return Rejection("messages: Input should be a valid list")
    system = native.get("system")
    if isinstance(system, list) and any(
        b.get("type") == "text" and not b.get("text") for b in _blocks(system)
    ):
        return Rejection("system: text content blocks must be non-empty")
    for i, message in enumerate(messages):
        rejection = _check_blocks(i, message, last=i == len(messages) - 1, secret=secret)
        if rejection is not None:
            return rejection
    found = count_breakpoints(native)
    if found > MAX_BREAKPOINTS:
        return Rejection(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {found}."
        )
    return _check_tool_pairing(messages) or _check_thinking_rule(native, messages)


def _check_blocks(
    i: int, message: Mapping[str, Any], *, last: bool, secret: bytes
) -> Rejection | None:
    content = message.get("content")
    if content in ("", []) and not (last and message.get("role") == "assistant"):
        return Rejection(
            f"messages.{i}: all messages must have non-empty content except for the optional "
            "final assistant message"
        )
    if not isinstance(content, list):
        return None
    for j, block in enumerate(_blocks(content)):
        kind = block.get("type")
        if kind == "text" and not block.get("text"):
            return Rejection("messages: text content blocks must be non-empty")
        if kind in ("thinking", "redacted_thinking") and "cache_control" in block:
            return Rejection(
                f"messages.{i}.content.{j}.{kind}.cache_control: Extra inputs are not permitted"
            )
        if kind == "thinking" and not verify(
            secret, str(block.get("thinking", "")), block.get("signature")
        ):
            return Rejection(f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block")
    return None


def _tool_use_ids(message: Mapping[str, Any] | None) -> list[str]:
    if message is None or message.get("role") != "assistant":
        return []
    blocks = _blocks(message.get("content"))
    return [str(b.get("id")) for b in blocks if b.get("type") == "tool_use"]


def _check_tool_pairing(messages: Sequence[Mapping[str, Any]]) -> Rejection | None:
    """Every ``tool_result`` answers the previous message's ``tool_use``; every one is answered."""
    for i, message in enumerate(messages):
        if message.get("role") != "user":
            continue
        previous = _tool_use_ids(messages[i - 1] if i else None)
        for j, block in enumerate(_blocks(message.get("content"))):
            if block.get("type") == "tool_result" and block.get("tool_use_id") not in previous:
                return Rejection(
                    f"messages.{i}.content.{j}: unexpected `tool_use_id` found in "
                    f"`tool_result` blocks: {block.get('tool_use_id')}. Each `tool_result` "
                    "block must have a corresponding `tool_use` block in the previous message."
                )
    for i, message in enumerate(messages[:-1]):
        following = messages[i + 1]
        answered = {
            b.get("tool_use_id")
            for b in _blocks(following.get("content"))
            if following.get("role") == "user" and b.get("type") == "tool_result"
        }
        missing = [tool_id for tool_id in _tool_use_ids(message) if tool_id not in answered]
        if missing:
            return Rejection(
                f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(missing)}. Each `tool_use` block must have "
                "a corresponding `tool_result` block in the next message."
            )
    return None


def _check_thinking_rule(
    native: Mapping[str, Any], messages: Sequence[Mapping[str, Any]]
) -> Rejection | None:
    if not thinking_enabled(native):
        return None
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") != "assistant":
            continue
        blocks = _blocks(messages[i].get("content"))
        if not any(b.get("type") == "tool_use" for b in blocks):
            return None
        first = blocks[0].get("type")
        if first in ("thinking", "redacted_thinking"):
            return None
        return Rejection(
            f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, "
            f"but found `{first}`. {THINKING_RULE}"
        )
    return None


# ---------------------------------------------------------------------------
# Prompt caching


@dataclass(frozen=True)
class CacheLayout:
    """A request's cacheable content: blocks in order tools → system → messages.

    ``prefixes[k]`` identifies the prefix ending with block ``k`` (a hash chain
    over the blocks' canonical JSON without ``cache_control``, each with its
    section, message index and role, seeded with the model); ``sizes[k]`` is
    the byte length of block ``k``'s canonical JSON; ``breakpoints`` are the
    indices of the blocks that carry ``cache_control``.
    """

    prefixes: tuple[str, ...]
    sizes: tuple[int, ...]
    breakpoints: tuple[int, ...]

    def tokens_through(self, index: int, prompt_tokens: int) -> int:
        """The prompt's tokens up to and including block ``index``, apportioned by bytes."""
        total = sum(self.sizes)
        if index < 0 or not total:
            return 0
        return prompt_tokens * sum(self.sizes[: index + 1]) // total


def cache_layout(native: Mapping[str, Any]) -> CacheLayout:
    blocks: list[tuple[dict[str, Any], bool]] = []
    for tool in native.get("tools") or ():
        if isinstance(tool, Mapping):
            blocks.append(({"section": "tools", "block": _bare(tool)}, "cache_control" in tool))
    for block in _blocks(native.get("system")):
        identity: dict[str, Any] = {"section": "system", "role": "system", "block": _bare(block)}
        blocks.append((identity, "cache_control" in block))
    for index, message in enumerate(native.get("messages") or ()):
        if not isinstance(message, Mapping):
            continue
        for block in _blocks(message.get("content")):
            identity = {
                "section": "messages",
                "message": index,
                "role": message.get("role"),
                "block": _bare(block),
            }
            blocks.append((identity, "cache_control" in block))
    chain = hashlib.sha256(_canonical(["model", native.get("model")]).encode()).hexdigest()
    prefixes: list[str] = []
    sizes: list[int] = []
    breakpoints: list[int] = []
    for index, (identity, marked) in enumerate(blocks):
        chain = hashlib.sha256((chain + _canonical(identity)).encode()).hexdigest()
        prefixes.append(chain)
        sizes.append(len(_canonical(identity["block"]).encode()))
        if marked:
            breakpoints.append(index)
    if isinstance(native.get("cache_control"), Mapping) and blocks:
        # Automatic caching: the breakpoint goes on the last cacheable block.
        last = len(blocks) - 1
        if last not in breakpoints:
            breakpoints.append(last)
    return CacheLayout(tuple(prefixes), tuple(sizes), tuple(breakpoints))


@dataclass(frozen=True)
class CacheSplit:
    """How a prompt's tokens split: read from the cache, written to it, neither."""

    read: int
    creation: int
    input: int


class PromptCache:
    """The server's prompt cache: prefix identity → the tokens written for it."""

    def __init__(self) -> None:
        self._entries: dict[str, int] = {}
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def account(self, layout: CacheLayout, prompt_tokens: int, min_tokens: int) -> CacheSplit:
        """Look up, then write, the request's breakpoints; the prompt's split.

        For each breakpoint the cache checks the boundary at that block and
        the ones before it, ``LOOKBACK_BLOCKS`` in all; the longest hit is
        read. Then every breakpoint whose prefix has at least ``min_tokens``
        tokens is written. Read: the tokens stored with the hit; creation: from
        the hit to the last breakpoint; input: the rest.
        """
        if not layout.breakpoints:
            return CacheSplit(0, 0, prompt_tokens)
        with self._lock:
            hit, read = -1, 0
            for point in layout.breakpoints:
                for index in range(point, max(-1, point - LOOKBACK_BLOCKS), -1):
                    stored = self._entries.get(layout.prefixes[index])
                    if stored is not None:
                        if index > hit:
                            hit, read = index, min(stored, prompt_tokens)
                        break
            for point in layout.breakpoints:
                tokens = layout.tokens_through(point, prompt_tokens)
                if tokens >= min_tokens:
                    self._entries.setdefault(layout.prefixes[point], tokens)
        last = max(layout.breakpoints)
        through_last = layout.tokens_through(last, prompt_tokens)
        creation = 0
        if last > hit and through_last >= min_tokens:
            creation = max(0, through_last - read)
        return CacheSplit(read, creation, prompt_tokens - read - creation)


# ---------------------------------------------------------------------------
# Errors


def error_type(status: int, openai_type: str | None) -> str:
    """Anthropic's ``error.type`` for an HTTP status (200: an error event mid-stream) and a type.

    A type only Anthropic uses is kept, OpenAI's are translated, and the
    generic ``invalid_request_error`` gives way to the status's own type
    (413 ``request_too_large``, 401 ``authentication_error``, …).
    """
    if status == 529:
        return "overloaded_error"
    if openai_type in ERROR_TYPES and openai_type != "invalid_request_error":
        return str(openai_type)
    if openai_type in FROM_OPENAI_TYPES:
        return FROM_OPENAI_TYPES[str(openai_type)]
    by_status = {
        400: "invalid_request_error",
        401: "authentication_error",
        402: "billing_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        504: "timeout_error",
    }
    if status in by_status:
        return by_status[status]
    if openai_type == "invalid_request_error" or 400 <= status < 500:
        return "invalid_request_error"
    return "api_error"  # a 5xx, or an unknown type in a stream that had started


def error_body(kind: str, message: str, request_id: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": request_id}


_WINDOW = re.compile(r"maximum context length is (\d+) tokens")
_PROMPT = re.compile(r"\((\d+) in the messages|messages resulted in (\d+) tokens")
_COMPLETION = re.compile(r"(\d+) in the completion")


def error_message(message: str, code: str | None) -> str:
    """A context-limit refusal in Anthropic's own words, when its numbers can be read.

    OpenAI's "maximum context length is W tokens … (P in the messages, C in
    the completion)" becomes "prompt is too long: P tokens > W maximum" when
    the prompt alone overflows, else Anthropic's "input length and
    `max_tokens` exceed context limit: P + C > W, …". A refusal whose
    ``code`` is ``context_length_exceeded`` but whose numbers are missing
    gets the "prompt is too long: " prefix. Anything else is kept.
    """
    window = _WINDOW.search(message)
    prompt = _PROMPT.search(message)
    if message.startswith("prompt is too long"):
        return message
    if window is None or prompt is None:
        # Without its numbers a refusal flagged by its code keeps Anthropic's own words.
        return f"prompt is too long: {message}" if code == "context_length_exceeded" else message
    limit = int(window.group(1))
    tokens = int(prompt.group(1) or prompt.group(2))
    completion = _COMPLETION.search(message)
    if tokens > limit or completion is None:
        return f"prompt is too long: {tokens} tokens > {limit} maximum"
    return (
        f"input length and `max_tokens` exceed context limit: {tokens} + "
        f"{completion.group(1)} > {limit}, decrease input length or `max_tokens` and try again"
    )


# ---------------------------------------------------------------------------
# Rendering a reply


@dataclass(frozen=True)
class Turn:
    """What one answer reports besides the reply: ids, model, usage, the signing secret."""

    model: str
    message_id: str
    split: CacheSplit
    output_tokens: int
    secret: bytes

    def usage(self, output_tokens: int) -> dict[str, Any]:
        return {
            "input_tokens": self.split.input,
            "cache_creation_input_tokens": self.split.creation,
            "cache_read_input_tokens": self.split.read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": self.split.creation,
                "ephemeral_1h_input_tokens": 0,
            },
            "output_tokens": output_tokens,
            "service_tier": "standard",
        }


def new_message_id() -> str:
    return f"msg_{uuid.uuid4().hex[:24]}"


def stop_reason(reply: Reply) -> str:
    finish = reply.resolved_finish_reason()
    return STOP_REASONS.get(finish, finish)


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _tool_input(arguments: str) -> Any:
    """A call's arguments as the ``input`` object (kept as text when they are not one)."""
    try:
        value = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return arguments
    return value if isinstance(value, dict) else arguments


def _block_groups(
    index: int,
    start: Mapping[str, Any],
    deltas: Iterable[Mapping[str, Any]],
    closing: Sequence[Mapping[str, Any]] = (),
    *,
    separate_start: bool = False,
) -> list[list[dict[str, Any]]]:
    """The events of one content block, grouped as the chat chunks they stand for."""
    opening = {"type": "content_block_start", "index": index, "content_block": dict(start)}
    groups = [
        [{"type": "content_block_delta", "index": index, "delta": dict(delta)}] for delta in deltas
    ]
    if separate_start or not groups:
        groups.insert(0, [opening])
    else:
        groups[0].insert(0, opening)
    groups[-1].extend(
        {"type": "content_block_delta", "index": index, "delta": dict(delta)} for delta in closing
    )
    groups[-1].append({"type": "content_block_stop", "index": index})
    return groups


def stream_events(reply: Reply, turn: Turn) -> list[list[dict[str, Any]]]:
    """The SSE events of a streamed reply, grouped so that group ``k`` stands for chat chunk ``k``.

    Group 0 (``message_start``, ``ping``) is the chat role chunk; each thinking,
    text or argument piece is one group, a block's start joining its first
    piece (a tool call's start is a group of its own, like the chat delta
    naming the call); ``message_delta`` is the finish chunk and
    ``message_stop`` the usage chunk. The fault modes' counts therefore cut
    every API's stream at the same point of the answer.
    """
    start: dict[str, Any] = {
        "id": turn.message_id,
        "type": "message",
        "role": "assistant",
        "model": turn.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": turn.usage(min(1, turn.output_tokens)),
    }
    groups: list[list[dict[str, Any]]] = [
        [{"type": "message_start", "message": start}, {"type": "ping"}]
    ]
    index = 0
    if reply.reasoning:
        groups += _block_groups(
            index,
            {"type": "thinking", "thinking": "", "signature": ""},
            (
                {"type": "thinking_delta", "thinking": piece}
                for piece in _pieces(reply.reasoning, reply.delta_chars)
            ),
            [{"type": "signature_delta", "signature": sign(turn.secret, reply.reasoning)}],
        )
        index += 1
    text = reply.resolved_text()
    if text:
        groups += _block_groups(
            index,
            {"type": "text", "text": ""},
            ({"type": "text_delta", "text": piece} for piece in _pieces(text, reply.delta_chars)),
        )
        index += 1
    for call in reply.tool_calls:
        groups += _block_groups(
            index,
            {
                "type": "tool_use",
                "id": call.id or f"toolu_{uuid.uuid4().hex[:24]}",
                "name": call.name,
                "input": {},
            },
            (
                {"type": "input_json_delta", "partial_json": piece}
                for piece in _pieces(call.arguments, reply.delta_chars)
            ),
            separate_start=True,
        )
        index += 1
    delta = {
        "stop_reason": None if reply.omit_finish else stop_reason(reply),
        "stop_sequence": None,
    }
    usage = turn.usage(turn.output_tokens)
    usage.pop("cache_creation")
    usage.pop("service_tier")
    groups.append([{"type": "message_delta", "delta": delta, "usage": usage}])
    if not reply.omit_finish:
        groups.append([{"type": "message_stop"}])
    return groups


def message(reply: Reply, turn: Turn) -> dict[str, Any]:
    """A non-streaming ``message`` object."""
    content: list[dict[str, Any]] = []
    if reply.reasoning:
        content.append(
            {
                "type": "thinking",
                "thinking": reply.reasoning,
                "signature": sign(turn.secret, reply.reasoning),
            }
        )
    text = reply.resolved_text()
    if text:
        content.append({"type": "text", "text": text})
    content.extend(
        {
            "type": "tool_use",
            "id": call.id or f"toolu_{uuid.uuid4().hex[:24]}",
            "name": call.name,
            "input": _tool_input(call.arguments),
        }
        for call in reply.tool_calls
    )
    return {
        "id": turn.message_id,
        "type": "message",
        "role": "assistant",
        "model": turn.model,
        "content": content,
        "stop_reason": stop_reason(reply),
        "stop_sequence": None,
        "usage": turn.usage(turn.output_tokens),
    }


def sse(event: Mapping[str, Any]) -> bytes:
    """One event as SSE: ``event: <type>`` and its JSON."""
    return b"event: %s\ndata: %s\n\n" % (str(event["type"]).encode(), json.dumps(event).encode())
