"""OpenAI Responses API requests: the body of a stateless ``POST /v1/responses``.

Cairn holds its history in chat-completions form (``cairn.messages.to_wire``).
``responses_body`` turns a ``ChatRequest`` into that body (``store: false``,
the whole input every time, the reasoning items' encrypted content asked
back so they can be sent again). It is pure and works on plain JSON;
``cairn.provider.responses_stream`` reads the answer.

Every chat message maps to its input items on its own, so a request over a
longer history starts with the items of the shorter one — the prompt cache
depends on it, exactly as it does with chat completions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cairn.messages import NATIVE_REASONING_FIELD, JSONObject, JSONValue
from cairn.provider.request import ChatRequest

__all__ = [
    "ENCRYPTED_REASONING",
    "MAX_TOKENS_PARAMS",
    "OWNED_KEYS",
    "TOOL_RESULT_IMAGE_PLACEHOLDER",
    "responses_body",
    "responses_input",
    "responses_tool",
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
