"""The Anthropic Messages client (``model.api = "anthropic"``, DESIGN §9).

``AnthropicProvider`` turns a ``ChatRequest`` into a Messages request
(``cairn.provider.anthropic_request``: system and tools as Anthropic expects,
tool calls and results as ``tool_use`` / ``tool_result`` blocks, thinking
blocks sent back with their signatures, ``cache_control`` breakpoints so the
next request and the compaction fork read this one's cache) and streams it
through the official ``anthropic`` SDK. Deadlines, retries and errors are
``cairn.provider.streaming``'s; "prompt is too long" is a
``ContextLimitError`` like any other endpoint's.
"""

from __future__ import annotations

from typing import Any

import anthropic
from anthropic import AsyncAnthropic

from cairn.provider.anthropic_request import anthropic_body
from cairn.provider.anthropic_stream import AnthropicStream, anthropic_error
from cairn.provider.request import ChatRequest
from cairn.provider.streaming import (
    SdkErrors,
    StreamingProvider,
)

ANTHROPIC_ERRORS = SdkErrors(
    api=anthropic.APIError,
    status=anthropic.APIStatusError,
    connection=anthropic.APIConnectionError,
    timeout=anthropic.APITimeoutError,
)


def sdk_base_url(base_url: str | None) -> str | None:
    """The endpoint as the SDK wants it: without the ``/v1`` it adds itself.

    Users of OpenAI-compatible endpoints write ``…/v1``; the SDK appends
    ``/v1/messages``, so ``https://api.anthropic.com/v1`` would otherwise
    reach ``/v1/v1/messages`` and a 404.
    """
    if base_url is None:
        return None
    root = base_url.rstrip("/")
    return root.removesuffix("/v1") if root.endswith("/v1") else base_url


class AnthropicProvider(StreamingProvider):
    """Streams Anthropic Messages from one endpoint (``ANTHROPIC_BASE_URL`` by default)."""

    sdk_errors = ANTHROPIC_ERRORS

    def _new_client(self) -> AsyncAnthropic:
        return AsyncAnthropic(
            api_key=self.api_key(),
            base_url=sdk_base_url(self.config.base_url),
            max_retries=0,
            timeout=anthropic.Timeout(
                self.config.request_timeout, connect=self.config.connect_timeout
            ),
        )

    def _parser(self) -> AnthropicStream:
        return AnthropicStream()

    def _create(self, client: AsyncAnthropic, request: ChatRequest, attempt: int) -> Any:
        body = anthropic_body(request)
        return client.messages.create(
            model=str(body["model"]),
            messages=body["messages"],  # type: ignore[arg-type]
            max_tokens=body["max_tokens"],  # type: ignore[arg-type]
            stream=True,
            extra_body={k: v for k, v in body.items() if k not in _PASSED} or None,
            # The SDK numbers its own retries; these are ours.
            extra_headers={"x-stainless-retry-count": str(attempt)},
        )

    def _error_details(self, body: object) -> tuple[str | None, str | None]:
        return anthropic_error(body)


#: Body keys given to the SDK by name; the rest of the body goes as ``extra_body``.
_PASSED = frozenset({"model", "messages", "max_tokens", "stream"})
