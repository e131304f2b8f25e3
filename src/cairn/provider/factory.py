"""Which client speaks the configured wire API (``ModelConfig.api``)."""

from __future__ import annotations

from cairn.provider.client import OpenAIProvider
from cairn.provider.config import ModelConfig
from cairn.provider.streaming import StreamingProvider


def open_provider(
    config: ModelConfig, *, max_retries: int = 2, api_key: str | None = None
) -> StreamingProvider:
    """The provider for ``config.api``: chat completions, Responses or Anthropic Messages.

    Use it as an async context manager (``async with open_provider(model) as p``)
    so its connection pool closes with the event loop.
    """
    kind: type[StreamingProvider] = OpenAIProvider
    # Imported here: each client loads its SDK, which the other APIs never need.
    if config.api == "anthropic":
        from cairn.provider.anthropic_client import AnthropicProvider

        kind = AnthropicProvider
    elif config.api == "responses":
        from cairn.provider.responses_client import ResponsesProvider

        kind = ResponsesProvider
    return kind(config, max_retries=max_retries, api_key=api_key)
