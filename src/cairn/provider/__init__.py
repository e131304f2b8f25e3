"""The provider: request building, streaming, usage and errors on three wire APIs (DESIGN §9).

``chat_request`` builds every request (so the agent loop and the compaction
fork share a byte-identical prefix), ``open_provider`` picks the client for
``ModelConfig.api`` — ``OpenAIProvider`` (chat completions),
``ResponsesProvider`` (the OpenAI Responses API, stateless) or
``AnthropicProvider`` (Anthropic Messages, with cache breakpoints) — which
streams it through the official SDK as ``StreamEvent`` objects, ``TurnAccumulator`` folds them
into an assistant ``Message``, and every failure is a ``ProviderError``
naming the endpoint — ``ContextLimitError`` when the request does not fit the
window, ``ProviderTimeoutError`` when one of the configured deadlines passed.
The model registry (``lookup``) knows the window, output cap, image support
and prices of the models people run; ``price`` turns token counts into USD.
"""

import importlib
from typing import TYPE_CHECKING

from cairn.provider.client import OpenAIProvider
from cairn.provider.config import (
    ModelConfig,
    ModelConfigError,
    ModelEntry,
    env_entry,
    model_from_env,
    resolve_model,
    resolve_with_env,
    window_notice,
)
from cairn.provider.errors import (
    CONTEXT_LIMIT_CODES,
    CONTEXT_LIMIT_PHRASES,
    ContextLimitError,
    ProviderError,
    ProviderTimeoutError,
    is_context_limit,
)
from cairn.provider.events import (
    ContentDelta,
    Finish,
    ReasoningDelta,
    ReasoningItem,
    StreamEvent,
    ToolCallDelta,
    TurnAccumulator,
    UsageEvent,
    events_from_chunk,
    usage_from_wire,
)
from cairn.provider.factory import open_provider
from cairn.provider.protocol import ChatProvider
from cairn.provider.registry import (
    ModelInfo,
    ModelOverride,
    Prices,
    TokenCounts,
    lookup,
    price,
)
from cairn.provider.request import ChatRequest, chat_request
from cairn.provider.streaming import StreamingProvider
from cairn.wire_apis import WIRE_APIS, WireAPI

if TYPE_CHECKING:
    from cairn.provider.anthropic_client import AnthropicProvider
    from cairn.provider.responses_client import ResponsesProvider

#: Loaded on first use: each pulls in its SDK, which a chat-only session never needs.
_LAZY = {
    "AnthropicProvider": "cairn.provider.anthropic_client",
    "ResponsesProvider": "cairn.provider.responses_client",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "CONTEXT_LIMIT_CODES",
    "CONTEXT_LIMIT_PHRASES",
    "WIRE_APIS",
    "AnthropicProvider",
    "ChatProvider",
    "ChatRequest",
    "ContentDelta",
    "ContextLimitError",
    "Finish",
    "ModelConfig",
    "ModelConfigError",
    "ModelEntry",
    "ModelInfo",
    "ModelOverride",
    "OpenAIProvider",
    "Prices",
    "ProviderError",
    "ProviderTimeoutError",
    "ReasoningDelta",
    "ReasoningItem",
    "ResponsesProvider",
    "StreamEvent",
    "StreamingProvider",
    "TokenCounts",
    "ToolCallDelta",
    "TurnAccumulator",
    "UsageEvent",
    "WireAPI",
    "chat_request",
    "env_entry",
    "events_from_chunk",
    "is_context_limit",
    "lookup",
    "model_from_env",
    "open_provider",
    "price",
    "resolve_model",
    "resolve_with_env",
    "usage_from_wire",
    "window_notice",
]
