"""What every wire API's client shares: deadlines, retries, the stream loop, one error family.

``StreamingProvider`` sends a ``ChatRequest`` through an official SDK and
yields ``StreamEvent`` objects; a subclass says how to open the stream for
its API (``_create``), how to read its events (``_parser``) and how its
SDK's errors are shaped (``sdk_errors``, ``_error_details``). Every failure
— an HTTP error after the retries, a refused or broken connection, an error
event inside the stream, a stream the SDK cannot parse, a stream that ends
before the model finished, a deadline that passed — surfaces as one
``ProviderError`` naming the endpoint, or as ``ContextLimitError`` when it
means the request does not fit, with ``output_started`` saying whether any
output had already been yielded.

The deadlines come from the ``ModelConfig`` (``cairn.provider.config``). The
SDK enforces only the connect timeout; the others are timers here, around
each wait for the next event, because a socket read timeout is reset by any
byte — SSE keep-alive comments included — and multiplied by every retry.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import math
import os
import random
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, Self, TypeVar, cast

from cairn.errors import CairnError
from cairn.messages import Message
from cairn.provider.config import TIMEOUT_ENV, ModelConfig
from cairn.provider.errors import (
    CONNECTION_ERROR_CODE,
    INCOMPLETE_STREAM_CODE,
    MALFORMED_STREAM_CODE,
    ProviderError,
    ProviderTimeoutError,
    provider_error,
)
from cairn.provider.events import OUTPUT_EVENTS, Finish, StreamEvent, TurnAccumulator
from cairn.provider.request import ChatRequest

#: The key sent when the configured environment variable is unset: local
#: servers (vLLM, Ollama, llama.cpp) accept anything.
PLACEHOLDER_API_KEY = "not-needed"

#: HTTP statuses worth another attempt: timeout, conflict, rate limit, server errors.
RETRY_STATUSES: frozenset[int] = frozenset({408, 409, 429})
#: Back-off between attempts when the server does not say: 0.5 s doubling up to 8 s.
INITIAL_RETRY_DELAY = 0.5
MAX_RETRY_DELAY = 8.0
#: A server asking for a longer pause than this is not retried (the SDK's limit too).
MAX_RETRY_AFTER = 120.0
#: The longest provider text quoted in an error (an HTML error page is not a message).
MAX_QUOTED = 300

#: What each deadline bounds, for its error message.
_WHAT = {
    "connect": "could not connect to {url} within {s}",
    "first_byte": "no response from {url} within {s}",
    "idle": "the stream from {url} stalled: no data for {s}",
    "request": "the request to {url} did not finish within {s}",
}

T = TypeVar("T")
_Client = TypeVar("_Client")


@dataclass(frozen=True)
class SdkErrors:
    """The exception classes of one official SDK (both are built the same way)."""

    #: Any error the SDK raises for a call (``APIError``): an error event in the stream.
    api: type[Exception]
    #: An HTTP error answer: ``status_code``, ``response.headers``, ``body``.
    status: type[Exception]
    #: No answer: refused, reset, or broken mid-body.
    connection: type[Exception]
    #: The SDK's own timer (a subclass of ``connection``).
    timeout: type[Exception]


class StreamParser(Protocol):
    """Turns one response's events (plain JSON mappings) into ``StreamEvent`` objects."""

    def feed(self, data: Mapping[str, object]) -> list[StreamEvent]: ...


class StreamReportedError(CairnError, RuntimeError):
    """The API reported an error inside a stream that had started.

    A parser's wrapper raises it; ``stream`` turns it into a ``ProviderError``
    (a ``ContextLimitError`` when it says so), so it never reaches a caller.
    """

    def __init__(self, message: str, *, code: str | None = None, error_type: str | None = None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.error_type = error_type


class _ExpiredError(Exception):
    """One of our timers fired; ``deadline`` names it."""

    def __init__(self, deadline: str) -> None:
        super().__init__(deadline)
        self.deadline = deadline


class _MalformedError(Exception):
    """The SDK could not turn the stream's bytes into an event."""


class Call:
    """The deadlines of one ``stream`` call, as event-loop times."""

    def __init__(self, config: ModelConfig, endpoint: str) -> None:
        self.config = config
        self.endpoint = endpoint
        self.loop = asyncio.get_running_loop()
        self.request_at = self.loop.time() + config.request_timeout

    def after(self, seconds: float) -> float:
        return self.loop.time() + seconds

    async def within(self, awaitable: Awaitable[T], deadline: str, at: float) -> T:
        """``await awaitable``, or ``_ExpiredError`` at ``at`` (or at the overall deadline)."""
        if self.request_at <= at:
            deadline, at = "request", self.request_at
        timer = asyncio.timeout_at(at)
        try:
            async with timer:
                return await awaitable
        except TimeoutError:
            if timer.expired():
                raise _ExpiredError(deadline) from None
            raise

    def timeout_error(self, deadline: str, *, output_started: bool) -> ProviderTimeoutError:
        setting = f"{deadline}_timeout"
        seconds = float(getattr(self.config, setting))
        what = _WHAT[deadline].format(url=self.endpoint, s=f"{seconds:g} s")
        label = deadline.replace("_", "-")
        message = f"{what} ({label} timeout; set model.{setting} or {TIMEOUT_ENV[setting]})"
        return ProviderTimeoutError(
            message, deadline=deadline, seconds=seconds, output_started=output_started
        )


class StreamingProvider(ABC):
    """A ``ChatProvider`` over one official SDK; see the module docstring.

    ``max_retries`` is the retry budget for connection errors, 408, 409, 429
    and 5xx answers before the stream starts; ``stream`` and ``complete``
    can override it per call (the compaction fork passes 0 and keeps its own
    budget). A retry waits as the server's ``Retry-After`` says (else 0.5 s,
    doubling), and is not made when that wait would pass the request
    deadline. Nothing is retried once the response has started, and no
    timed-out attempt is retried.
    """

    sdk_errors: ClassVar[SdkErrors]

    def __init__(
        self,
        config: ModelConfig,
        *,
        max_retries: int = 2,
        api_key: str | None = None,
    ) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.config = config
        self.max_retries = max_retries
        self._api_key = api_key
        self._client: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- what a subclass says -------------------------------------------

    @abstractmethod
    def _new_client(self) -> Any:
        """A new SDK client: no SDK retries, the connect timeout, the overall deadline."""

    @abstractmethod
    def _create(self, client: Any, request: ChatRequest, attempt: int) -> Awaitable[Any]:
        """Open the stream (the SDK's ``AsyncStream``) for attempt ``attempt`` (0-based)."""

    @abstractmethod
    def _parser(self) -> StreamParser:
        """A fresh parser for one response's events."""

    @abstractmethod
    def _error_details(self, body: object) -> tuple[str | None, str | None]:
        """The provider's message and error type in an error ``body``."""

    async def _after_empty_stream(
        self, client: Any, request: ChatRequest, call: Call
    ) -> ProviderError | None:
        """A better error for a stream that closed before its first event, if there is one."""
        return None

    # -- the client -----------------------------------------------------

    def api_key(self) -> str:
        """The key given, else the configured variable's, else a placeholder."""
        return self._api_key or os.environ.get(self.config.api_key_env) or PLACEHOLDER_API_KEY

    def _sdk(self) -> Any:
        """The SDK client for the running event loop.

        Its connection pool belongs to one loop, so a provider used from a
        new loop (a second ``asyncio.run``) gets a new client.
        """
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = self._new_client()
            self._loop = loop
        return self._client

    def _endpoint(self, client: Any) -> str:
        # As the user configured it; the client's own default when none was.
        return (self.config.base_url or str(client.base_url)).rstrip("/")

    async def aclose(self) -> None:
        """Close the connection pool (the provider stays usable; a new pool opens on demand).

        Call it (or use ``async with``) before the event loop ends, so no
        keep-alive connection is left open.
        """
        client, self._client, self._loop = self._client, None, None
        if client is not None:
            await client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- streaming ------------------------------------------------------

    async def stream(
        self, request: ChatRequest, *, max_retries: int | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        """Send ``request`` and yield its events as they arrive.

        Raises ``ProviderError`` (or ``ContextLimitError``) on any failure,
        including a stream that ends without a finish reason, and
        ``ProviderTimeoutError`` when a deadline passes. A caller that stops
        early should ``aclose()`` the generator (or iterate it inside
        ``contextlib.aclosing``) so the response is released at once.
        """
        retries = self.max_retries if max_retries is None else max_retries
        if retries < 0:
            raise ValueError("max_retries must be >= 0")
        client = self._sdk()
        call = Call(self.config, self._endpoint(client))
        errors = self.sdk_errors
        parser = self._parser()
        output_started = False
        finished = False
        responded = False
        chunks = 0
        try:
            response, first_byte_at = await self._open(client, request, retries, call)
            responded = True
            deadline, at = "first_byte", first_byte_at
            try:
                while True:
                    try:
                        chunk = await call.within(_next_chunk(response), deadline, at)
                    except StopAsyncIteration:
                        break
                    chunks += 1
                    events = parser.feed(_chunk_dict(chunk))
                    for event in events:
                        if isinstance(event, Finish):
                            finished = True
                        elif isinstance(event, OUTPUT_EVENTS):
                            output_started = True
                        yield event
                    if events:
                        # Only data resets the clock: keep-alive comments never reach
                        # here, and an empty delta (the opening role chunk) is not data.
                        deadline, at = "idle", call.after(self.config.idle_timeout)
            finally:
                await response.close()
        except (_ExpiredError, errors.connection) as exc:
            if not finished:
                raise self._failure(exc, call, output_started, responded=responded) from exc
            # The answer is whole; only the rest of the body (usage, [DONE]) is lost.
        except (errors.api, _MalformedError, StreamReportedError) as exc:
            raise self._failure(exc, call, output_started, responded=responded) from exc
        if not finished:
            if chunks == 0:
                better = await self._after_empty_stream(client, request, call)
                if better is not None:
                    raise better
            raise ProviderError(
                f"the stream from {call.endpoint} ended before the model finished its answer",
                code=INCOMPLETE_STREAM_CODE,
                output_started=output_started,
            )

    async def _open(
        self, client: Any, request: ChatRequest, retries: int, call: Call
    ) -> tuple[Any, float]:
        """Start the stream, retrying what is worth it; also its first-byte deadline.

        The first-byte clock starts with each attempt and runs until the first
        event that carries data, so the caller keeps it for the events.
        """
        errors = self.sdk_errors
        for attempt in range(retries + 1):
            first_byte_at = call.after(self.config.first_byte_timeout)
            try:
                response = await call.within(
                    self._create(client, request, attempt), "first_byte", first_byte_at
                )
            except errors.timeout:
                raise
            except (errors.connection, errors.status) as exc:
                delay = self.retry_delay(exc, attempt) if attempt < retries else None
                if delay is None or call.after(delay) >= call.request_at:
                    raise
                await asyncio.sleep(delay)
                continue
            return response, first_byte_at
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def complete(self, request: ChatRequest, *, max_retries: int | None = None) -> Message:
        """Stream ``request`` to the end and return the assistant message."""
        accumulator = TurnAccumulator()
        async for event in self.stream(request, max_retries=max_retries):
            accumulator.add(event)
        return accumulator.message()

    # -- errors ---------------------------------------------------------

    def retry_delay(self, exc: Exception, attempt: int) -> float | None:
        """Seconds to wait before retrying after ``exc`` on attempt ``attempt`` (0-based).

        ``None`` when it is not worth retrying: a status outside
        ``RETRY_STATUSES`` and 5xx, ``x-should-retry: false``, or a
        ``Retry-After`` beyond ``MAX_RETRY_AFTER``. Connection errors are
        retried; a timeout never reaches here.
        """
        errors = self.sdk_errors
        if isinstance(exc, errors.status):
            headers = cast(Any, exc).response.headers
            should = headers.get("x-should-retry")
            if should == "false":
                return None
            status: int = cast(Any, exc).status_code
            if should != "true" and status not in RETRY_STATUSES and status < 500:
                return None
            after = retry_after(headers)
            if after is not None and after > MAX_RETRY_AFTER:
                return None
            if after is not None and after > 0:
                return after
        elif not isinstance(exc, errors.connection):
            return None
        backoff = min(INITIAL_RETRY_DELAY * 2.0 ** min(attempt, 32), MAX_RETRY_DELAY)
        return backoff * (1 - 0.25 * random.random())

    def _failure(
        self, exc: Exception, call: Call, output_started: bool, *, responded: bool
    ) -> ProviderError:
        """The ``ProviderError`` for one failure of a ``stream`` call."""
        errors = self.sdk_errors
        if isinstance(exc, _ExpiredError):
            return call.timeout_error(exc.deadline, output_started=output_started)
        if isinstance(exc, errors.timeout):
            # The SDK's own timers: connect, or its read timeout (the overall deadline).
            connect = type(exc.__cause__).__name__ in ("ConnectTimeout", "PoolTimeout")
            deadline = "connect" if connect and not responded else "request"
            return call.timeout_error(deadline, output_started=output_started)
        if isinstance(exc, _MalformedError):
            return ProviderError(
                f"{call.endpoint} sent a malformed stream: {exc}",
                code=MALFORMED_STREAM_CODE,
                output_started=output_started,
            )
        if isinstance(exc, StreamReportedError):
            return provider_error(
                " ".join(exc.message.split()) or "an error inside the stream",
                code=exc.code,
                error_type=exc.error_type,
                output_started=output_started,
                origin=f"{call.endpoint} reported an error",
            )
        if isinstance(exc, errors.connection):
            cause = _cause(exc)
            if responded:
                text = f"the connection to {call.endpoint} failed mid-response ({cause})"
            elif _connect_refused(exc):
                text = f"cannot connect to {call.endpoint} ({cause})"
            else:
                text = f"the connection to {call.endpoint} failed before an answer ({cause})"
            return ProviderError(text, code=CONNECTION_ERROR_CODE, output_started=output_started)
        if isinstance(exc, errors.status) and not (responded and cast(Any, exc).status_code < 400):
            status = cast(Any, exc).status_code
            return self._from_sdk_error(
                exc,
                status=status,
                origin=f"HTTP {status} from {call.endpoint}",
                output_started=output_started,
            )
        if isinstance(exc, errors.api):
            # An error event inside the stream (the Anthropic SDK raises it as a
            # status error carrying the stream's 200).
            return self._from_sdk_error(
                exc,
                status=None,
                origin=f"{call.endpoint} reported an error",
                output_started=output_started,
            )
        return ProviderError(
            quote(str(exc)) or type(exc).__name__,
            origin=call.endpoint,
            output_started=output_started,
        )

    def _from_sdk_error(
        self, exc: Exception, *, status: int | None, origin: str, output_started: bool
    ) -> ProviderError:
        body = getattr(exc, "body", None)
        message, error_type = self._error_details(body)
        if message is not None:
            message = " ".join(message.split()) or None  # one line; every word kept for detection
        if message is None and isinstance(body, str) and body.strip():
            message = quote(body)
        if message is None:
            message = quote(str(getattr(exc, "message", "") or "")) or type(exc).__name__
        code = getattr(exc, "code", None)
        return provider_error(
            message,
            status=status,
            code=code if isinstance(code, str) else None,
            error_type=error_type,
            output_started=output_started,
            origin=origin,
        )


async def _next_chunk(response: AsyncIterator[Any]) -> object:
    """The stream's next event; ``_MalformedError`` when its bytes are not SSE JSON.

    The SDK decodes each line as UTF-8 and each data line as JSON, and lets
    ``UnicodeDecodeError`` / ``JSONDecodeError`` (both ``ValueError``) out;
    what else a mangled event can raise while the SDK builds its object is
    the same fault, and is no reason for a traceback.
    """
    try:
        return await response.__anext__()
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        raise _MalformedError(_describe_malformed(exc)) from exc


def _describe_malformed(exc: Exception) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return f"invalid UTF-8 at byte {exc.start} of a line"
    if isinstance(exc, json.JSONDecodeError):
        return f"a data line is not JSON ({quote(str(exc))})"
    return f"{type(exc).__name__}: {quote(str(exc))}"


def _chunk_dict(chunk: object) -> Mapping[str, object]:
    """An event as plain JSON data, unknown fields (``reasoning_content``) included.

    The SDKs build their event objects without validation, so an event of
    the wrong shape (``"choices": "x"``) only surfaces here; pydantic's
    warnings about it are silenced, and the parsers skip what is not data.
    """
    to_dict = getattr(chunk, "to_dict", None)
    if callable(to_dict):
        try:
            data = to_dict(warnings=False)
        except (ValueError, TypeError, AttributeError) as exc:
            raise _MalformedError(_describe_malformed(exc)) from exc
        if isinstance(data, Mapping):
            return cast(Mapping[str, object], data)
    return chunk if isinstance(chunk, Mapping) else {}


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The pause a server asks for, in seconds (``retry-after-ms``, or ``retry-after``)."""
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            value = float(raw) / divisor
        except ValueError:
            continue
        if math.isfinite(value):
            return value
    raw = headers.get("retry-after")
    parsed = email.utils.parsedate_tz(raw) if raw else None
    if parsed is None:
        return None
    return float(email.utils.mktime_tz(parsed) - time.time())


def _connect_refused(exc: BaseException) -> bool:
    """Whether the connection was never made (a refused or unreachable host)."""
    return type(exc.__cause__).__name__ == "ConnectError"


def _cause(exc: BaseException) -> str:
    """The first words in ``exc``'s causes that say more than the SDK's "Connection error."."""
    seen: BaseException | None = exc.__cause__ or exc.__context__
    names: list[str] = []
    while seen is not None and len(names) < 8:
        if isinstance(seen, ConnectionResetError):
            return "connection reset by the server"
        text = quote(str(seen))
        if text:
            return text
        names.append(type(seen).__name__)
        seen = seen.__cause__ or seen.__context__
    return names[0] if names else quote(str(exc))


def quote(text: str) -> str:
    """Provider text fit for a one-line error: whitespace collapsed, long text cut."""
    flat = " ".join(text.split())
    return flat if len(flat) <= MAX_QUOTED else flat[: MAX_QUOTED - 1] + "…"
