"""The OpenAI Responses API (``POST …/responses``) for the test server (``openai_server``).

The Responses API used statelessly (``store: false``): the whole conversation
is sent as ``input`` items every time, reasoning travels as ``reasoning``
items whose ``encrypted_content`` only the server can read. This module:

- ``normalize`` turns a native request into the chat-completions body a chat
  client would have sent for the same conversation;
- ``validate`` refuses what the real API refuses, in its words (an output
  with no call, a call with no output, a reasoning item whose encrypted
  content does not verify or that is missing);
- ``PrefixCache`` implements automatic prompt caching: the longest prefix of
  (tools, instructions, input items) seen before, in 128-token steps from 1024;
- ``stream_events`` and ``response_object`` render a ``Reply`` as the
  semantic SSE events (``response.created`` … ``response.completed``) or as
  a ``response`` object.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import json
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from support.wire_anthropic import Rejection

if TYPE_CHECKING:
    from support.openai_server import Reply

#: Top-level keys that are the protocol's own structure (never passed through as they are).
STRUCTURAL_KEYS = frozenset(
    {"input", "instructions", "tools", "store", "include", "max_output_tokens"}
)
#: Cached tokens are reported in steps of this many.
CACHE_STEP = 128
ENCRYPTED_REASONING = "reasoning.encrypted_content"


# ---------------------------------------------------------------------------
# Encrypted reasoning


def seal(secret: bytes, item_id: str, summary: str) -> str:
    """An opaque ``encrypted_content``: a payload and its HMAC under the server's secret."""
    payload = json.dumps(
        {"item": item_id, "summary": hashlib.sha256(summary.encode()).hexdigest()}
    ).encode()
    mac = hmac.new(secret, payload, hashlib.sha256).digest()
    return "gAAAAA" + base64.urlsafe_b64encode(payload).decode() + "." + mac.hex()


def unseal(secret: bytes, token: object) -> bool:
    """Whether ``token`` is an ``encrypted_content`` this server made."""
    if not isinstance(token, str) or not token.startswith("gAAAAA") or "." not in token:
        return False
    encoded, _, mac = token[len("gAAAAA") :].rpartition(".")
    try:
        payload = base64.urlsafe_b64decode(encoded.encode())
    except (ValueError, TypeError):
        return False
    expected = hmac.new(secret, payload, hashlib.sha256).hexdigest()
    return hmac.compare_digest(mac, expected)


# ---------------------------------------------------------------------------
# Reading a native request


def _items(native: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    value = native.get("input")
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if isinstance(value, list):
        return [item for item in value if isinstance(item, Mapping)]
    return []


def _kind(item: Mapping[str, Any]) -> str | None:
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"  # an "easy" input message: {"role", "content"}
    return str(kind) if kind is not None else None


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# ---------------------------------------------------------------------------
# Normalizing to chat form


def normalize(native: Mapping[str, Any]) -> dict[str, Any]:
    """The chat-completions body a chat client would have sent for ``native``."""
    out: dict[str, Any] = {}
    if "model" in native:
        out["model"] = native["model"]
    messages: list[dict[str, Any]] = []
    instructions = native.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    out["messages"] = messages + _chat_messages(_items(native))
    tools = [_chat_tool(tool) for tool in native.get("tools") or () if isinstance(tool, Mapping)]
    if tools:
        out["tools"] = tools
    if "max_output_tokens" in native:
        out["max_tokens"] = native["max_output_tokens"]
    out["stream"] = bool(native.get("stream", False))
    if out["stream"]:
        out["stream_options"] = {"include_usage": True}
    for key, value in native.items():
        if key not in STRUCTURAL_KEYS and key not in out:
            out[key] = copy.deepcopy(value)
    return out


def _chat_messages(items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    assistant: dict[str, Any] | None = None  # the one that following calls join
    reasoning: list[str] = []  # summaries waiting for the assistant message they precede

    def open_assistant(content: Any) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reasoning:
            message["reasoning_content"] = "".join(reasoning)
            reasoning.clear()
        out.append(message)
        return message

    for item in items:
        kind = _kind(item)
        if kind == "message":
            role = item.get("role")
            if role == "assistant":
                assistant = open_assistant(_content(item.get("content")))
            else:
                assistant = None
                chat_role = "system" if role in ("system", "developer") else role
                out.append({"role": chat_role, "content": _content(item.get("content"))})
        elif kind == "function_call":
            if assistant is None:
                assistant = open_assistant(None)
            assistant.setdefault("tool_calls", []).append(
                {
                    "id": item.get("call_id"),
                    "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments", "")},
                }
            )
        elif kind == "function_call_output":
            assistant = None
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": item.get("call_id"),
                    "content": _text(item.get("output")),
                }
            )
        elif kind == "reasoning":
            assistant = None
            reasoning.append(
                "".join(
                    str(part.get("text", ""))
                    for part in item.get("summary") or ()
                    if isinstance(part, Mapping)
                )
            )
    if reasoning:
        open_assistant(None)
    return out


def _content(content: object) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": part.get("text", "")})
        elif kind == "refusal":
            parts.append({"type": "text", "text": part.get("refusal", "")})
        elif kind == "input_image":
            url = part.get("image_url") or part.get("file_id") or ""
            parts.append({"type": "image_url", "image_url": {"url": url}})
        else:
            parts.append(copy.deepcopy(dict(part)))
    if len(parts) == 1 and parts[0].get("type") == "text":
        return str(parts[0]["text"])
    return parts


def _text(output: object) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "".join(str(part.get("text", "")) for part in output if isinstance(part, Mapping))
    return "" if output is None else json.dumps(output)


def _chat_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    if tool.get("type") != "function":
        return copy.deepcopy(dict(tool))  # a built-in tool (web search, …): no chat form
    function: dict[str, Any] = {"name": tool.get("name")}
    if tool.get("description") is not None:
        function["description"] = tool["description"]
    function["parameters"] = copy.deepcopy(tool.get("parameters", {}))
    return {"type": "function", "function": function}


# ---------------------------------------------------------------------------
# Validation


def validate(native: Mapping[str, Any], secret: bytes) -> Rejection | None:
    """What the real API would refuse in ``native``, or ``None``."""
    if "model" not in native:
        return Rejection(
            "Missing required parameter: 'model'.",
            code="missing_required_parameter",
            param="model",
        )
    calls: list[str] = []
    answered: set[str] = set()
    for item in _items(native):
        kind = _kind(item)
        if kind == "function_call":
            calls.append(str(item.get("call_id")))
        elif kind == "function_call_output":
            call_id = str(item.get("call_id"))
            if call_id not in calls:
                return Rejection(
                    f"No tool call found for function call output with call_id {call_id}.",
                    param="input",
                )
            answered.add(call_id)
        elif kind == "reasoning":
            rejection = _check_reasoning(native, item, secret)
            if rejection is not None:
                return rejection
    for call_id in calls:
        if call_id not in answered:
            return Rejection(f"No tool output found for function call {call_id}.", param="input")
    return None


def _check_reasoning(
    native: Mapping[str, Any], item: Mapping[str, Any], secret: bytes
) -> Rejection | None:
    item_id = item.get("id")
    token = item.get("encrypted_content")
    if token is None:
        # Without its encrypted content the item can only be looked up, and nothing is stored.
        message = f"Item with id '{item_id}' not found."
        if native.get("store") is False:
            message += (
                " Items are not persisted when `store` is set to false. Try again with `store` "
                "set to true, or remove this item from your input."
            )
        return Rejection(message, status=404, param="input")
    if not unseal(secret, token):
        return Rejection(
            f"The encrypted content for item {item_id} could not be verified. "
            "Reason: Encrypted content could not be decrypted or parsed.",
            code="invalid_encrypted_content",
        )
    return None


# ---------------------------------------------------------------------------
# Automatic prompt caching


def prefix_layout(native: Mapping[str, Any]) -> tuple[list[str], list[int]]:
    """The request's prefix units (tools, instructions, input items): chain hashes and sizes."""
    units: list[Any] = [["tool", tool] for tool in native.get("tools") or ()]
    if native.get("instructions"):
        units.append(["instructions", native["instructions"]])
    # An "easy" message and its typed form are the same input.
    units.extend(
        ["item", {"type": "message", **item} if _kind(item) == "message" else dict(item)]
        for item in _items(native)
    )
    chain = hashlib.sha256(_canonical(["model", native.get("model")]).encode()).hexdigest()
    hashes: list[str] = []
    sizes: list[int] = []
    for unit in units:
        text = _canonical(unit)
        chain = hashlib.sha256((chain + text).encode()).hexdigest()
        hashes.append(chain)
        sizes.append(len(text.encode()))
    return hashes, sizes


class PrefixCache:
    """Every prefix the server has seen: the cache OpenAI keeps without being asked."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()

    def account(self, native: Mapping[str, Any], prompt_tokens: int, min_tokens: int) -> int:
        """The cached tokens of this request; then remember its prefixes."""
        hashes, sizes = prefix_layout(native)
        with self._lock:
            longest = -1
            for index, prefix in enumerate(hashes):
                if prefix in self._seen:
                    longest = index
            self._seen.update(hashes)
        total = sum(sizes)
        if longest < 0 or not total:
            return 0
        tokens = prompt_tokens * sum(sizes[: longest + 1]) // total
        if tokens < min_tokens:
            return 0
        return tokens // CACHE_STEP * CACHE_STEP


# ---------------------------------------------------------------------------
# Rendering a reply


@dataclass(frozen=True)
class Turn:
    """What one answer reports besides the reply: ids, the request's echo, usage."""

    response_id: str
    created_at: int
    native: Mapping[str, Any]
    usage: dict[str, Any] | None
    secret: bytes

    @property
    def include_encrypted(self) -> bool:
        include = self.native.get("include")
        return isinstance(include, list) and ENCRYPTED_REASONING in include


def new_turn(native: Mapping[str, Any], usage: dict[str, Any] | None, secret: bytes) -> Turn:
    return Turn(
        response_id=f"resp_{uuid.uuid4().hex}",
        created_at=int(time.time()),
        native=native,
        usage=usage,
        secret=secret,
    )


def usage_json(
    prompt_tokens: int, cached: int, completion: int, reasoning: int, total: int
) -> dict[str, Any]:
    return {
        "input_tokens": prompt_tokens,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": total,
    }


def response_json(
    turn: Turn,
    status: str,
    output: Sequence[Mapping[str, Any]] = (),
    *,
    usage: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    incomplete: str | None = None,
) -> dict[str, Any]:
    """A ``response`` object echoing the request's settings."""
    native = turn.native
    reasoning = native.get("reasoning") if isinstance(native.get("reasoning"), Mapping) else {}
    return {
        "id": turn.response_id,
        "object": "response",
        "created_at": turn.created_at,
        "status": status,
        "background": False,
        "error": error,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "instructions": native.get("instructions"),
        "max_output_tokens": native.get("max_output_tokens"),
        "model": native.get("model", "test-model"),
        "output": [copy.deepcopy(dict(item)) for item in output],
        "parallel_tool_calls": native.get("parallel_tool_calls", True),
        "previous_response_id": None,
        "reasoning": {
            "effort": (reasoning or {}).get("effort"),
            "summary": (reasoning or {}).get("summary"),
        },
        "store": native.get("store", True),
        "temperature": native.get("temperature", 1.0),
        "text": native.get("text", {"format": {"type": "text"}}),
        "tool_choice": native.get("tool_choice", "auto"),
        "tools": copy.deepcopy(native.get("tools") or []),
        "top_p": native.get("top_p", 1.0),
        "truncation": native.get("truncation", "disabled"),
        "usage": usage,
        "user": None,
        "metadata": native.get("metadata") or {},
    }


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _groups(
    opening: Sequence[dict[str, Any]],
    deltas: Iterable[dict[str, Any]],
    closing: Sequence[dict[str, Any]],
    *,
    separate_opening: bool = False,
) -> list[list[dict[str, Any]]]:
    """One output item's events, grouped as the chat chunks they stand for."""
    groups = [[delta] for delta in deltas]
    if separate_opening or not groups:
        groups.insert(0, list(opening))
    else:
        groups[0][:0] = opening
    groups[-1].extend(closing)
    return groups


def _output(reply: Reply, turn: Turn) -> list[tuple[dict[str, Any], list[list[dict[str, Any]]]]]:
    """Each output item (done) with its event groups, in order."""
    out: list[tuple[dict[str, Any], list[list[dict[str, Any]]]]] = []
    if reply.reasoning:
        index, summary, item_id = len(out), reply.reasoning, f"rs_{uuid.uuid4().hex}"
        where: dict[str, Any] = {"item_id": item_id, "output_index": index, "summary_index": 0}
        done: dict[str, Any] = {
            "id": item_id,
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": summary}],
        }
        if turn.include_encrypted:
            done["encrypted_content"] = seal(turn.secret, item_id, summary)
        part: dict[str, Any] = {"type": "summary_text", "text": summary}
        groups = _groups(
            [
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {"id": item_id, "type": "reasoning", "summary": []},
                },
                {
                    "type": "response.reasoning_summary_part.added",
                    **where,
                    "part": {"type": "summary_text", "text": ""},
                },
            ],
            (
                {"type": "response.reasoning_summary_text.delta", **where, "delta": piece}
                for piece in _pieces(summary, reply.delta_chars)
            ),
            [
                {"type": "response.reasoning_summary_text.done", **where, "text": summary},
                {"type": "response.reasoning_summary_part.done", **where, "part": part},
                {"type": "response.output_item.done", "output_index": index, "item": done},
            ],
        )
        out.append((done, groups))
    text = reply.resolved_text()
    if text:
        index, item_id = len(out), f"msg_{uuid.uuid4().hex}"
        where = {"item_id": item_id, "output_index": index, "content_index": 0}
        part = {
            "type": "output_text",
            "text": text,
            "annotations": [],
            "logprobs": [],
        }
        done = {
            "id": item_id,
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [part],
        }
        groups = _groups(
            [
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**done, "status": "in_progress", "content": []},
                },
                {
                    "type": "response.content_part.added",
                    **where,
                    "part": {**part, "text": ""},
                },
            ],
            (
                {"type": "response.output_text.delta", **where, "delta": piece, "logprobs": []}
                for piece in _pieces(text, reply.delta_chars)
            ),
            [
                {"type": "response.output_text.done", **where, "text": text, "logprobs": []},
                {"type": "response.content_part.done", **where, "part": part},
                {"type": "response.output_item.done", "output_index": index, "item": done},
            ],
        )
        out.append((done, groups))
    for call in reply.tool_calls:
        index, item_id = len(out), f"fc_{uuid.uuid4().hex}"
        where = {"item_id": item_id, "output_index": index}
        done = {
            "id": item_id,
            "type": "function_call",
            "status": "completed",
            "arguments": call.arguments,
            "call_id": call.id or f"call_{uuid.uuid4().hex[:24]}",
            "name": call.name,
        }
        groups = _groups(
            [
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**done, "status": "in_progress", "arguments": ""},
                }
            ],
            (
                {"type": "response.function_call_arguments.delta", **where, "delta": piece}
                for piece in _pieces(call.arguments, reply.delta_chars)
            ),
            [
                {
                    "type": "response.function_call_arguments.done",
                    **where,
                    "arguments": call.arguments,
                },
                {"type": "response.output_item.done", "output_index": index, "item": done},
            ],
            separate_opening=True,
        )
        out.append((done, groups))
    return out


def _final(reply: Reply, turn: Turn, output: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    finish = reply.resolved_finish_reason()
    if finish in ("length", "content_filter"):
        reason = "max_output_tokens" if finish == "length" else "content_filter"
        return response_json(turn, "incomplete", output, usage=turn.usage, incomplete=reason)
    return response_json(turn, "completed", output, usage=turn.usage)


def stream_events(reply: Reply, turn: Turn) -> list[list[dict[str, Any]]]:
    """The SSE events of a streamed reply, grouped so that group ``k`` stands for chat chunk ``k``.

    Group 0 (``response.created``, ``response.in_progress``) is the chat role
    chunk; each summary, text or argument piece is one group, an item's
    opening events joining its first piece (a call's ``output_item.added`` is
    a group of its own, like the chat delta naming the call); the terminal
    ``response.completed`` / ``response.incomplete`` is the finish chunk.
    ``sequence_number`` counts every event from 0.
    """
    output = _output(reply, turn)
    groups: list[list[dict[str, Any]]] = [
        [
            {"type": "response.created", "response": response_json(turn, "in_progress")},
            {"type": "response.in_progress", "response": response_json(turn, "in_progress")},
        ]
    ]
    for _, item_groups in output:
        groups += item_groups
    if not reply.omit_finish:
        final = _final(reply, turn, [item for item, _ in output])
        groups.append([{"type": f"response.{final['status']}", "response": final}])
    number = 0
    for group in groups:
        for event in group:
            event["sequence_number"] = number
            number += 1
    return groups


def response_object(reply: Reply, turn: Turn) -> dict[str, Any]:
    """A non-streaming ``response`` object."""
    return _final(reply, turn, [item for item, _ in _output(reply, turn)])


def failed_event(turn: Turn, code: str, message: str, sequence_number: int) -> dict[str, Any]:
    """``response.failed``: the model could not finish; ``response.error`` says why."""
    return {
        "type": "response.failed",
        "sequence_number": sequence_number,
        "response": response_json(turn, "failed", error={"code": code, "message": message}),
    }


def sse(event: Mapping[str, Any]) -> bytes:
    """One event as SSE: ``event: <type>`` and its JSON."""
    return b"event: %s\ndata: %s\n\n" % (str(event["type"]).encode(), json.dumps(event).encode())
