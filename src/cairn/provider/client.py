"""The OpenAI-compatible chat-completions client (DESIGN §9).

``OpenAIProvider`` sends a ``ChatRequest`` with the official ``openai`` SDK
(``AsyncOpenAI``, any ``base_url``) to ``POST /chat/completions``, streamed
with usage included, and yields ``StreamEvent`` objects; the deadlines,
retries and errors are ``cairn.provider.streaming``'s, shared with the other
wire APIs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import openai
from openai import AsyncOpenAI

from cairn.provider.errors import ContextLimitError, ProviderError
from cairn.provider.events import StreamEvent, events_from_chunk
from cairn.provider.request import ChatRequest
from cairn.provider.streaming import (
    Call,
    SdkErrors,
    StreamingProvider,
    quote,
)

#: The OpenAI SDK's exception classes (the Responses client uses them too).
OPENAI_ERRORS = SdkErrors(
    api=openai.APIError,
    status=openai.APIStatusError,
    connection=openai.APIConnectionError,
    timeout=openai.APITimeoutError,
)

#: "Leave this argument out": ``openai.omit`` in recent SDKs, ``NOT_GIVEN`` in older ones.
OMIT: Any = getattr(openai, "omit", None) or openai.NOT_GIVEN


class _ChunkParser:
    """Chat-completions chunks are independent: no state between them."""

    def feed(self, data: Mapping[str, object]) -> list[StreamEvent]:
        return events_from_chunk(data)


class OpenAIClientBase(StreamingProvider):
    """What both OpenAI APIs share: the SDK client, its errors and the key."""

    sdk_errors = OPENAI_ERRORS

    def _new_client(self) -> AsyncOpenAI:
        # The SDK never retries (``stream`` does, within the deadline) and gets
        # only the connect timeout; its read timeout is the overall deadline, a
        # backstop behind the timers of ``stream``.
        return AsyncOpenAI(
            api_key=self.api_key(),
            base_url=self.config.base_url,
            max_retries=0,
            timeout=openai.Timeout(
                self.config.request_timeout, connect=self.config.connect_timeout
            ),
        )

    def _error_details(self, body: object) -> tuple[str | None, str | None]:
        # The SDK hands over the ``error`` object of an error body.
        if isinstance(body, Mapping):
            message: str | None = None
            for key in ("message", "detail", "error"):
                value = body.get(key)
                if isinstance(value, str) and value.strip():
                    message = value
                    break
            raw_type = body.get("type")
            return message, raw_type if isinstance(raw_type, str) else None
        return None, None


class OpenAIProvider(OpenAIClientBase):
    """Streams chat completions from one OpenAI-compatible endpoint (``model.api = "chat"``)."""

    def _parser(self) -> _ChunkParser:
        return _ChunkParser()

    def _create(self, client: AsyncOpenAI, request: ChatRequest, attempt: int) -> Any:
        return client.chat.completions.create(
            model=request.model,
            messages=cast(Any, list(request.messages)),
            tools=cast(Any, list(request.tools)) if request.tools else OMIT,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=dict(request.params) if request.params else None,
            # The SDK numbers its own retries; these are ours.
            extra_headers={"x-stainless-retry-count": str(attempt)},
        )

    async def _after_empty_stream(
        self, client: AsyncOpenAI, request: ChatRequest, call: Call
    ) -> ProviderError | None:
        """Ask once, without streaming and for one token, whether the request is too long.

        Some servers (llama-cpp-python's) answer 200 and then drop a stream
        they cannot serve, saying why only to a request that does not stream.
        A request that fits costs one prompt evaluation here, and the caller
        reports the broken stream as before. The probe gets a first-byte
        deadline of its own, within the overall one; when it passes, the
        broken stream is what the caller reports.
        """
        params = {k: v for k, v in request.params.items() if k not in ("max_tokens", "stream")}
        probe = client.chat.completions.create(
            model=request.model,
            messages=cast(Any, list(request.messages)),
            tools=cast(Any, list(request.tools)) if request.tools else OMIT,
            max_tokens=1,
            extra_body=params or None,
        )
        try:
            await call.within(probe, "first_byte", call.after(self.config.first_byte_timeout))
        except openai.APIStatusError as exc:
            error = self._from_sdk_error(
                exc,
                status=exc.status_code,
                origin=f"HTTP {exc.status_code} from {call.endpoint}",
                output_started=False,
            )
            return error if isinstance(error, ContextLimitError) else None
        except Exception:
            return None
        return None


__all__ = ["OMIT", "OPENAI_ERRORS", "OpenAIClientBase", "OpenAIProvider", "quote"]
