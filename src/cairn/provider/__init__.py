"""The OpenAI-compatible provider: request building, streaming, usage and errors (DESIGN §9).

``chat_request`` builds every request (so the agent loop and the compaction
fork share a byte-identical prefix), ``OpenAIProvider`` streams it through
the official SDK as ``StreamEvent`` objects, ``TurnAccumulator`` folds them
into an assistant ``Message``, and every failure is a ``ProviderError``
naming the endpoint — ``ContextLimitError`` when the request does not fit the
window, ``ProviderTimeoutError`` when one of the configured deadlines passed.
The model registry (``lookup``) knows the window, output cap, image support
and prices of the models people run; ``price`` turns token counts into USD.
"""

from cairn.provider.client import OpenAIProvider
from cairn.provider.config import (
    ModelConfig,
    ModelConfigError,
    ModelEntry,
    env_entry,
    model_from_env,
    resolve_model,
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
    StreamEvent,
    ToolCallDelta,
    TurnAccumulator,
    UsageEvent,
    events_from_chunk,
    usage_from_wire,
)
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

__all__ = [
    "CONTEXT_LIMIT_CODES",
    "CONTEXT_LIMIT_PHRASES",
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
    "StreamEvent",
    "TokenCounts",
    "ToolCallDelta",
    "TurnAccumulator",
    "UsageEvent",
    "chat_request",
    "env_entry",
    "events_from_chunk",
    "is_context_limit",
    "lookup",
    "model_from_env",
    "price",
    "resolve_model",
    "usage_from_wire",
    "window_notice",
]
