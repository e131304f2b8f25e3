"""The one way to build a chat-completions request.

Prefix caching only pays when two requests over the same history start with
the same bytes. ``chat_request`` is therefore the single function that turns
system messages, tool schemas and history into a request — the agent loop
and the compaction fork both call it — and ``ChatRequest.body`` is exactly
the JSON that goes out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cairn.messages import JSONObject, JSONValue, Message, to_wire
from cairn.provider.config import RESERVED_PARAMS, ModelConfig


@dataclass(frozen=True)
class ChatRequest:
    """A streaming chat-completions request: wire messages, tool schemas, parameters."""

    model: str
    messages: tuple[JSONObject, ...]
    tools: tuple[JSONObject, ...] = ()
    params: Mapping[str, JSONValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        reserved = sorted(RESERVED_PARAMS.intersection(self.params))
        if reserved:
            raise ValueError(f"params may not set {', '.join(reserved)}")

    def body(self) -> JSONObject:
        """The exact JSON body sent to ``POST /chat/completions``."""
        out: JSONObject = {"model": self.model, "messages": list(self.messages)}
        if self.tools:
            out["tools"] = list(self.tools)
        out.update(self.params)
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
        return out


def chat_request(
    config: ModelConfig,
    system: Sequence[Message],
    tools: Sequence[JSONObject],
    messages: Sequence[Message],
    *,
    reasoning_field: str | None = None,
) -> ChatRequest:
    """Build the request for ``system`` + ``messages`` with ``tools``.

    Deterministic: the same inputs always give the same body, and a request
    over a longer history starts with the wire messages of the shorter one.
    ``reasoning_field`` names the field under which a provider wants earlier
    reasoning sent back (e.g. DeepSeek's ``reasoning_content``).
    """
    native_api = None if config.api == "chat" else config.api
    wire = to_wire([*system, *messages], reasoning_field=reasoning_field, native_api=native_api)
    return ChatRequest(
        model=config.model,
        messages=tuple(wire),
        tools=tuple(tools),
        params=config.request_params(),
    )
