"""The OpenAI-compatible streaming client (DESIGN §9).

``OpenAIProvider`` sends a ``ChatRequest`` with the official ``openai`` SDK
(``AsyncOpenAI``, any ``base_url``), streams it with usage included, and
yields ``StreamEvent`` objects. Every failure — an HTTP error after the SDK's
retries, a dropped connection, an error event inside the stream, a stream
that ends before the model finished — surfaces as one ``ProviderError``, or
as ``ContextLimitError`` when it means the request does not fit, with
``output_started`` saying whether any output had already been yielded.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncGenerator, Mapping
from typing import Any, cast

import openai
from openai import AsyncOpenAI

from cairn.messages import Message
from cairn.provider.config import ModelConfig
from cairn.provider.errors import ContextLimitError, ProviderError, provider_error
from cairn.provider.events import (
    OUTPUT_EVENTS,
    Finish,
    StreamEvent,
    TurnAccumulator,
    events_from_chunk,
)
from cairn.provider.request import ChatRequest

#: The key sent when the configured environment variable is unset: local
#: servers (vLLM, Ollama, llama.cpp) accept anything.
PLACEHOLDER_API_KEY = "not-needed"

INCOMPLETE_STREAM = "incomplete_stream"

#: "Leave this argument out": ``openai.omit`` in recent SDKs, ``NOT_GIVEN`` in older ones.
_OMIT: Any = getattr(openai, "omit", None) or openai.NOT_GIVEN


class OpenAIProvider:
    """Streams chat completions from one OpenAI-compatible endpoint.

    ``max_retries`` is the SDK's retry budget for connection errors, 408,
    409, 429 and 5xx answers before the stream starts; ``stream`` and
    ``complete`` can override it per call (the compaction fork passes 0 and
    keeps its own budget). Nothing is retried once the stream has started.
    """

    def __init__(
        self,
        config: ModelConfig,
        *,
        max_retries: int = 2,
        timeout: float = 600.0,
        api_key: str | None = None,
    ) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.config = config
        self.max_retries = max_retries
        self.timeout = timeout
        self._api_key = api_key or os.environ.get(config.api_key_env) or PLACEHOLDER_API_KEY
        self._client: AsyncOpenAI | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _sdk(self) -> AsyncOpenAI:
        """The SDK client for the running event loop.

        Its connection pool belongs to one loop, so a provider used from a
        new loop (a second ``asyncio.run``) gets a new client.
        """
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = AsyncOpenAI(
                api_key=self._api_key,
                base_url=self.config.base_url,
                max_retries=self.max_retries,
                timeout=self.timeout,
            )
            self._loop = loop
        return self._client

    async def aclose(self) -> None:
        """Close the connection pool (the provider stays usable; a new pool opens on demand).

        Call it (or use ``async with``) before the event loop ends, so no
        keep-alive connection is left open.
        """
        client, self._client, self._loop = self._client, None, None
        if client is not None:
            await client.close()

    async def __aenter__(self) -> OpenAIProvider:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def stream(
        self, request: ChatRequest, *, max_retries: int | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        """Send ``request`` and yield its events as they arrive.

        Raises ``ProviderError`` (or ``ContextLimitError``) on any failure,
        including a stream that ends without a finish reason. A caller that
        stops early should ``aclose()`` the generator (or iterate it inside
        ``contextlib.aclosing``) so the response is released at once.
        """
        client = self._sdk()
        if max_retries is not None and max_retries != self.max_retries:
            client = client.with_options(max_retries=max_retries)
        output_started = False
        finished = False
        chunks = 0
        try:
            response = await client.chat.completions.create(
                model=request.model,
                messages=cast(Any, list(request.messages)),
                tools=cast(Any, list(request.tools)) if request.tools else _OMIT,
                stream=True,
                stream_options={"include_usage": True},
                extra_body=dict(request.params) if request.params else None,
            )
            try:
                async for chunk in response:
                    chunks += 1
                    for event in events_from_chunk(_chunk_dict(chunk)):
                        if isinstance(event, Finish):
                            finished = True
                        elif isinstance(event, OUTPUT_EVENTS):
                            output_started = True
                        yield event
            finally:
                await response.close()
        except openai.APIError as exc:
            raise _from_sdk_error(exc, output_started=output_started) from exc
        except openai.OpenAIError as exc:
            raise ProviderError(str(exc), output_started=output_started) from exc
        except json.JSONDecodeError as exc:
            raise ProviderError(
                f"the provider sent a malformed stream chunk: {exc}",
                code="malformed_stream",
                output_started=output_started,
            ) from exc
        if not finished:
            if chunks == 0:
                # Some servers (llama-cpp-python's) answer 200 and then drop a stream
                # they cannot serve, saying why only to a request that does not stream.
                limit = await self._probe_context_limit(client, request)
                if limit is not None:
                    raise limit
            raise ProviderError(
                "the stream ended before the model finished its answer",
                code=INCOMPLETE_STREAM,
                output_started=output_started,
            )

    async def _probe_context_limit(
        self, client: AsyncOpenAI, request: ChatRequest
    ) -> ProviderError | None:
        """Ask once, without streaming and for one token, whether the request is too long.

        Only after a stream that closed before its first chunk: a request that
        fits costs one prompt evaluation here, and the caller reports the
        broken stream as before.
        """
        params = {k: v for k, v in request.params.items() if k not in ("max_tokens", "stream")}
        try:
            await client.with_options(max_retries=0).chat.completions.create(
                model=request.model,
                messages=cast(Any, list(request.messages)),
                tools=cast(Any, list(request.tools)) if request.tools else _OMIT,
                max_tokens=1,
                extra_body=params or None,
            )
        except openai.APIError as exc:
            error = _from_sdk_error(exc, output_started=False)
            return error if isinstance(error, ContextLimitError) else None
        except openai.OpenAIError:
            return None
        return None

    async def complete(self, request: ChatRequest, *, max_retries: int | None = None) -> Message:
        """Stream ``request`` to the end and return the assistant message."""
        accumulator = TurnAccumulator()
        async for event in self.stream(request, max_retries=max_retries):
            accumulator.add(event)
        return accumulator.message()


def _chunk_dict(chunk: object) -> Mapping[str, object]:
    """A chunk as plain JSON data, unknown fields (``reasoning_content``) included."""
    to_dict = getattr(chunk, "to_dict", None)
    if callable(to_dict):
        data = to_dict()
        if isinstance(data, Mapping):
            return cast(Mapping[str, object], data)
    return chunk if isinstance(chunk, Mapping) else {}


def _from_sdk_error(exc: openai.APIError, *, output_started: bool) -> ProviderError:
    status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
    body = exc.body
    message: str | None = None
    error_type: str | None = None
    if isinstance(body, Mapping):
        for key in ("message", "detail", "error"):
            value = body.get(key)
            if isinstance(value, str) and value:
                message = value
                break
        raw_type = body.get("type")
        error_type = raw_type if isinstance(raw_type, str) else None
    elif isinstance(body, str) and body.strip():
        message = body.strip()
    if message is None:
        message = exc.message or type(exc).__name__
    return provider_error(
        message,
        status=status,
        code=exc.code,
        error_type=error_type,
        output_started=output_started,
    )
