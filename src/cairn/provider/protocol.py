"""The provider interface the agent loop and the compaction fork are written against."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from cairn.messages import Message
from cairn.provider.events import StreamEvent
from cairn.provider.request import ChatRequest


@runtime_checkable
class ChatProvider(Protocol):
    """Anything that streams a ``ChatRequest`` (``OpenAIProvider`` in production).

    ``stream`` is an async generator; both methods raise ``ProviderError``
    (``ContextLimitError`` for a request that does not fit). ``max_retries``
    overrides the provider's own retry budget for one call.
    """

    def stream(
        self, request: ChatRequest, *, max_retries: int | None = None
    ) -> AsyncIterator[StreamEvent]: ...

    async def complete(
        self, request: ChatRequest, *, max_retries: int | None = None
    ) -> Message: ...
