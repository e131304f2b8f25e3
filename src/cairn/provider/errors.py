"""Provider failures, and how a context-limit error is recognised.

Providers disagree on how they say "your prompt is too big": OpenAI answers
400 with code ``context_length_exceeded``, gateways answer 413, others only
put it in the message. ``is_context_limit`` knows all three, so reactive
compaction (DESIGN §5.8) sees one ``ContextLimitError`` whatever the endpoint.

Every error the client raises names the endpoint (its base URL) in
``str(error)``; ``code`` says what kind of failure it was (the ``*_CODE``
constants below, or the provider's own error code), and a deadline that
passed is a ``ProviderTimeoutError`` naming the setting that changes it.
"""

from __future__ import annotations

import re

from cairn.errors import CairnError

#: Error codes (or error types) that mean the request does not fit the window.
CONTEXT_LIMIT_CODES: tuple[str, ...] = (
    "context_length_exceeded",  # OpenAI, DeepSeek, most OpenAI-compatible servers
    "exceed_context_size_error",  # llama.cpp server
)

#: Lower-case message fragments that mean the same, from the providers that
#: only say it in words.
CONTEXT_LIMIT_PHRASES: tuple[str, ...] = (
    "maximum context length",  # OpenAI, vLLM, DeepSeek, Mistral
    "context length exceeded",
    "context_length_exceeded",
    "prompt is too long",  # Anthropic
    "exceed context limit",  # Anthropic: input + max_tokens over the window
    "too many tokens",
    "input is too long",  # Bedrock
    "exceeds the context window",  # OpenAI Responses
    "reduce the length of the messages",  # OpenAI, Groq
    "exceeds the available context size",  # llama.cpp
    "context size has been exceeded",  # llama.cpp (older)
    "range of input length should be",  # Qwen / DashScope
    "exceeds the maximum number of tokens allowed",  # Gemini
)

#: ``code`` of a connection that could not be opened, or broke before the model finished.
CONNECTION_ERROR_CODE = "connection_error"
#: ``code`` of a stream the SDK cannot parse: invalid UTF-8, a data line that is not JSON.
MALFORMED_STREAM_CODE = "malformed_stream"
#: ``code`` of a stream that ended cleanly but without a finish reason.
INCOMPLETE_STREAM_CODE = "incomplete_stream"

#: A rate limit talks about tokens too ("tokens per min"); it is never a
#: context-limit error.
RATE_LIMIT_STATUS = 429


class ProviderError(CairnError, RuntimeError):
    """The provider failed: an HTTP error, a broken connection, or an error mid-stream.

    ``status`` is the HTTP status (``None`` for connection failures and
    errors reported inside the stream); ``code`` the provider's error code;
    ``output_started`` whether any content, reasoning, tool-call or usage
    event had already been yielded when it failed.

    ``message`` is the provider's own words when it gave any; ``origin`` says
    who said them (``"HTTP 500 from http://127.0.0.1:8080/v1"``), and
    ``str(error)`` is ``"origin: message"`` so that it always names the endpoint.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        output_started: bool = False,
        origin: str | None = None,
    ) -> None:
        super().__init__(f"{origin}: {message}" if origin else message)
        self.message = message
        self.origin = origin
        self.status = status
        self.code = code
        self.output_started = output_started

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.message!r}, status={self.status!r}, "
            f"code={self.code!r}, output_started={self.output_started!r})"
        )


#: How providers say what the refused prompt counted (the first group): OpenAI
#: and vLLM ("… (12345 in the messages, …"), Anthropic ("prompt is too long:
#: 210000 tokens > 200000 maximum").
_PROMPT_COUNTS: tuple[re.Pattern[str], ...] = (
    re.compile(r"\((\d+) in the messages"),
    re.compile(r"prompt is too long: (\d+) tokens"),
    re.compile(r"exceed context limit: (\d+) \+"),
)


class ContextLimitError(ProviderError):
    """The request does not fit the model's context window.

    Reactive compaction may replay the request only when
    ``output_started`` is false (DESIGN §5.8).
    """

    @property
    def prompt_tokens(self) -> int | None:
        """What the provider counted in the refused prompt, when its message says."""
        for pattern in _PROMPT_COUNTS:
            found = pattern.search(self.message)
            if found is not None:
                return int(found.group(1))
        return None


class ProviderTimeoutError(ProviderError):
    """A deadline passed before the provider finished.

    ``deadline`` is which one — ``"connect"``, ``"first_byte"``, ``"idle"`` or
    ``"request"`` (the overall one) — and ``seconds`` its length; ``code`` is
    ``"<deadline>_timeout"``. The message names the endpoint and the setting
    that changes the deadline. A timed-out request is never retried: the wait
    has already happened.
    """

    def __init__(
        self, message: str, *, deadline: str, seconds: float, output_started: bool = False
    ) -> None:
        super().__init__(message, code=f"{deadline}_timeout", output_started=output_started)
        self.deadline = deadline
        self.seconds = seconds


def is_context_limit(status: int | None, code: str | None, message: str) -> bool:
    """Whether an error means the request exceeds the context window.

    True for HTTP 413, for a code in ``CONTEXT_LIMIT_CODES``, or for a
    message containing one of ``CONTEXT_LIMIT_PHRASES`` (case-insensitive);
    never for a 429 rate limit.
    """
    if status == RATE_LIMIT_STATUS:
        return False
    if status == 413:
        return True
    if code is not None and code.lower() in CONTEXT_LIMIT_CODES:
        return True
    lowered = message.lower()
    return any(phrase in lowered for phrase in CONTEXT_LIMIT_PHRASES)


def provider_error(
    message: str,
    *,
    status: int | None = None,
    code: str | None = None,
    error_type: str | None = None,
    output_started: bool = False,
    origin: str | None = None,
) -> ProviderError:
    """A ``ContextLimitError`` when the details say so, else a ``ProviderError``."""
    limit = is_context_limit(status, code, message) or (
        error_type is not None and is_context_limit(status, error_type, message)
    )
    cls = ContextLimitError if limit else ProviderError
    return cls(message, status=status, code=code, output_started=output_started, origin=origin)
