"""Reliability campaign: the provider against a server that misbehaves in every known way.

Each fault kind — a server that never answers, answers headers and then
nothing, sends only keep-alive comments, stalls or trickles mid-stream,
resets the connection, sends invalid UTF-8, garbage, JSON that is not JSON,
a lone surrogate, HTTP errors with and without ``Retry-After``, an empty
stream; a closed port; a listener whose backlog is full — is played against
``tests/openai_server.py`` (or a bare socket) ``count(3, 50)`` times with
deadlines of a fraction of a second. Every fault must end as the documented
outcome: a ``ProviderError`` of the documented class and code whose message
names the endpoint, or a clean answer. A hang (the generous guard fires) or
any other exception is an unexpected outcome; there must be none.

Figures: ``provider_faults`` — ``faults`` played, ``kinds``, ``unexpected``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from soak import count, record

from cairn.messages import user
from cairn.provider import (
    ContentDelta,
    ContextLimitError,
    ModelConfig,
    OpenAIProvider,
    ProviderError,
    ReasoningDelta,
    StreamEvent,
    ToolCallDelta,
    chat_request,
)
from cairn.provider.errors import ProviderTimeoutError
from openai_server import (  # noqa: F401  (the ``openai_server`` fixture)
    DEFAULT_TEXT,
    OpenAIServer,
    Reply,
    ToolCallSpec,
    openai_server_fixture,
)

#: Deadlines for the faults that end in one: small enough for hundreds of
#: faults, far above what a loopback answer takes.
TINY: dict[str, float] = {
    "connect_timeout": 0.5,
    "first_byte_timeout": 0.25,
    "idle_timeout": 0.25,
    "request_timeout": 5.0,
}
#: Deadlines for every other fault: no timer can fire by accident on a busy machine.
RELAXED: dict[str, float] = {
    "connect_timeout": 5.0,
    "first_byte_timeout": 5.0,
    "idle_timeout": 5.0,
    "request_timeout": 10.0,
}
#: Far beyond any deadline above: reaching it means the client hung.
GUARD_S = 20.0
#: Faults played at once (each lane its own server).
LANES = 4
CONTEXT_LIMIT = "This model's maximum context length is 8192 tokens. However, you requested 9081"


@dataclass(frozen=True)
class Fault:
    """One fault kind and the outcome the provider documents for it.

    ``error`` is the expected ``ProviderError`` class (``None``: the call
    returns ``text``); ``code`` and ``status`` its fields; ``ANY`` as
    ``error`` accepts any ``ProviderError`` or a clean answer (random garbage).
    """

    name: str
    replies: Callable[[int], list[Reply]]
    error: type[ProviderError] | str | None
    code: str | None = None
    status: int | None = None
    output_started: bool | None = None
    text: str | None = None
    #: How many requests the server must see (``None``: not checked).
    requests: int | None = None
    retries: int = 0
    #: ``TINY`` deadlines (else ``RELAXED``), then these overrides.
    tiny: bool = False
    timeouts: dict[str, float] = field(default_factory=dict)
    #: Not the test server: ``"refused"`` (a closed port) or ``"backlog"`` (a full listener).
    endpoint: str | None = None


ANY = "any outcome but a hang or a foreign exception"


def garbage(seed: int, *, sse: bool) -> bytes:
    """Random bytes; as SSE, shaped like a field line so the parser has to look at it."""
    rng = random.Random(seed)
    body = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    return (b"data: " + body + b"\n\n") if sse else body


def text_of(n: int) -> str:
    return f"answer number {n}, long enough for several chunks"


def http_error_without_retry_after(status: int) -> Callable[[int], list[Reply]]:
    return lambda n: [Reply.http_error(status, retry_after_ms=None)]


FAULTS: tuple[Fault, ...] = (
    Fault(
        "never answers",
        lambda n: [Reply(stall_before_headers=True)],
        ProviderTimeoutError,
        "first_byte_timeout",
        output_started=False,
        requests=1,
        retries=2,  # a timeout is never retried
        tiny=True,
    ),
    Fault(
        "headers, then nothing",
        lambda n: [Reply(stall_after=0)],
        ProviderTimeoutError,
        "first_byte_timeout",
        output_started=False,
        requests=1,
        tiny=True,
    ),
    Fault(
        "keep-alive comments only",
        lambda n: [Reply(keepalive_after=0)],
        ProviderTimeoutError,
        "first_byte_timeout",
        output_started=False,
        requests=1,
        tiny=True,
    ),
    Fault(
        "role chunk, then keep-alive comments",
        lambda n: [Reply(keepalive_after=1)],
        ProviderTimeoutError,
        "first_byte_timeout",
        output_started=False,
        tiny=True,
    ),
    Fault(
        "output, then keep-alive comments",
        lambda n: [Reply(text=text_of(n), keepalive_after=3)],
        ProviderTimeoutError,
        "idle_timeout",
        output_started=True,
        tiny=True,
    ),
    Fault(
        "output, then a stall",
        lambda n: [Reply(text=text_of(n), stall_after=3)],
        ProviderTimeoutError,
        "idle_timeout",
        output_started=True,
        tiny=True,
    ),
    Fault(
        "a stream that trickles forever",
        lambda n: [Reply(text="x" * 10_000, delta_chars=1, chunk_interval=0.01)],
        ProviderTimeoutError,
        "request_timeout",
        output_started=True,
        timeouts={"request_timeout": 0.4},
        tiny=True,
    ),
    Fault(
        "a finished answer, then a stall before [DONE]",
        lambda n: [Reply(text="ok", stall_after=4)],  # role, "ok", finish, usage
        None,
        text="ok",
        tiny=True,
    ),
    Fault(
        "reset mid-stream",
        lambda n: [Reply(text=text_of(n), reset_after=3)],
        ProviderError,
        "connection_error",
        output_started=True,
        requests=1,
    ),
    Fault(
        "reset right after the headers",
        lambda n: [Reply(reset_after=0)],
        ProviderError,
        "connection_error",
        output_started=False,
        requests=1,
    ),
    Fault(
        "reset before the headers, retried once",
        lambda n: [Reply(reset_before_headers=True), Reply(reset_before_headers=True)],
        ProviderError,
        "connection_error",
        output_started=False,
        requests=2,
        retries=1,
    ),
    Fault(
        "reset before the headers, then an answer",
        lambda n: [Reply(reset_before_headers=True), Reply(text=text_of(n))],
        None,
        text="answer",
        requests=2,
        retries=1,
    ),
    Fault(
        "invalid UTF-8 before output",
        lambda n: [Reply(text=text_of(n), inject=b"data: \xff\xfe\xc3\n\n", inject_after=1)],
        ProviderError,
        "malformed_stream",
        output_started=False,
    ),
    Fault(
        "invalid UTF-8 after output",
        lambda n: [Reply(text=text_of(n), inject=b'data: {"a": "\xe9t\xe9"}\n\n', inject_after=3)],
        ProviderError,
        "malformed_stream",
        output_started=True,
    ),
    Fault(
        "a data line that is not JSON",
        lambda n: [Reply(text=text_of(n), inject=b"data: <html>502 Bad Gateway</html>\n\n")],
        ProviderError,
        "malformed_stream",
    ),
    Fault(
        "truncated JSON",
        lambda n: [
            Reply(text=text_of(n), inject=b'data: {"choices": [{"delta": {"content": "ab\n\n')
        ],
        ProviderError,
        "malformed_stream",
    ),
    Fault(
        "JSON of the wrong shape",
        lambda n: [
            Reply(
                text="fine",
                inject=b'data: {"choices": "x"}\n\ndata: [1, 2]\n\ndata: null\n\n'
                b'data: {"choices": [{"delta": 5}]}\n\n',
            )
        ],
        None,
        text="fine",
    ),
    Fault("random bytes as SSE", lambda n: [Reply(inject=garbage(n, sse=True))], ANY, tiny=True),
    Fault(
        "random bytes in the HTTP body",
        lambda n: [Reply(inject=garbage(n, sse=False), inject_unframed=True)],
        ANY,
        tiny=True,
    ),
    Fault(
        "a lone surrogate in every text",
        lambda n: [
            Reply(
                text="a\ud800b",
                reasoning="r\udfff",
                tool_calls=[ToolCallSpec("f\ud83d", '{"k": "\ud800"}', id="call_\udc00")],
                delta_chars=2,
            )
        ],
        None,
        text="a\ufffdb",
    ),
    *(
        Fault(
            f"HTTP {status} without Retry-After",
            http_error_without_retry_after(status),
            ProviderError,
            status=status,
            requests=1,
        )
        for status in (500, 502, 503, 429)
    ),
    Fault(
        "HTTP 503 without Retry-After, retries cut by the request deadline",
        lambda n: [Reply.http_error(503, retry_after_ms=None)],
        ProviderError,
        status=503,
        requests=1,
        retries=2,
        # The first back-off (0.375-0.5 s) would pass the deadline: no retry.
        timeouts={"request_timeout": 0.3},
    ),
    Fault(
        "HTTP 503 with Retry-After (ms), retries exhausted",
        lambda n: [Reply.http_error(503) for _ in range(3)],
        ProviderError,
        status=503,
        requests=3,
        retries=2,
    ),
    Fault(
        "HTTP 429 with Retry-After (s), then an answer",
        lambda n: [
            Reply.http_error(429, retry_after_ms=None, headers={"retry-after": "0.01"}),
            Reply(text=text_of(n)),
        ],
        None,
        text="answer",
        requests=2,
        retries=2,
    ),
    Fault(
        "HTTP 502 whose Retry-After passes the deadline",
        lambda n: [Reply.http_error(502, retry_after_ms=None, headers={"retry-after": "60"})],
        ProviderError,
        status=502,
        requests=1,
        retries=2,
    ),
    Fault(
        "HTTP 200 with an empty stream",
        lambda n: [Reply(end_after=0), Reply(text="probe")],
        ProviderError,
        "incomplete_stream",
        output_started=False,
        requests=2,  # the stream and the one-token probe
    ),
    Fault(
        "HTTP 200 with an empty stream, the probe says context limit",
        lambda n: [
            Reply(end_after=0),
            Reply.http_error(400, CONTEXT_LIMIT, code="context_length_exceeded"),
        ],
        ContextLimitError,
        output_started=False,
        requests=2,
    ),
    Fault(
        "HTTP 200 with an empty stream, the probe never answers",
        lambda n: [Reply(end_after=0), Reply(stall_before_headers=True)],
        ProviderError,
        "incomplete_stream",
        output_started=False,
        requests=2,
        tiny=True,
    ),
    Fault(
        "an error event mid-stream",
        lambda n: [Reply(text=text_of(n), error_after=2)],
        ProviderError,
        output_started=True,
    ),
    Fault(
        "connection refused", lambda n: [], ProviderError, "connection_error", endpoint="refused"
    ),
    Fault(
        "connect timeout (full backlog)",
        lambda n: [],
        ProviderTimeoutError,
        "connect_timeout",
        endpoint="backlog",
        timeouts={"connect_timeout": 0.2, "first_byte_timeout": 2.0},
        tiny=True,
    ),
)


@dataclass
class Tally:
    faults: int = 0
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)


def config(base_url: str, fault: Fault) -> ModelConfig:
    base = TINY if fault.tiny else RELAXED
    timeouts = {**base, **fault.timeouts}
    return ModelConfig(
        model="test-model",
        base_url=base_url,
        connect_timeout=timeouts["connect_timeout"],
        first_byte_timeout=timeouts["first_byte_timeout"],
        idle_timeout=timeouts["idle_timeout"],
        request_timeout=timeouts["request_timeout"],
    )


@contextmanager
def closed_port() -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    yield f"http://127.0.0.1:{port}/v1"


@contextmanager
def full_backlog() -> Iterator[str]:
    """A listener that never accepts, its queue already full: connecting hangs."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)):
            yield f"http://127.0.0.1:{port}/v1"


def check(fault: Fault, events: list[StreamEvent], error: ProviderError | None, url: str) -> str:
    """What is wrong with this outcome ("" when it is the documented one)."""
    if fault.error == ANY:
        return "" if error is None or url in str(error) else f"URL missing: {error}"
    if error is None:
        if fault.error is not None:
            return f"returned instead of raising {fault.error}"
        return check_answer(fault, events)
    if fault.error is None:
        return f"raised {error!r}"
    problems = []
    if type(error) is not fault.error:
        problems.append(f"{type(error).__name__} is not {fault.error}")
    if fault.code is not None and error.code != fault.code:
        problems.append(f"code {error.code!r}")
    if fault.status is not None and error.status != fault.status:
        problems.append(f"status {error.status!r}")
    if fault.output_started is not None and error.output_started != fault.output_started:
        problems.append(f"output_started {error.output_started}")
    if url not in str(error) or "\n" in str(error):
        problems.append(f"message {str(error)!r}")
    return "; ".join(problems)


def check_answer(fault: Fault, events: list[StreamEvent]) -> str:
    texts: list[str] = []
    for event in events:
        if isinstance(event, ContentDelta | ReasoningDelta):
            texts.append(event.text)
        elif isinstance(event, ToolCallDelta):
            texts.extend(t for t in (event.id, event.name, event.arguments) if t)
    try:
        orjson.dumps(texts)  # what --output-format json does with them
    except TypeError as exc:
        return f"unencodable text: {exc}"
    answer = "".join(e.text for e in events if isinstance(e, ContentDelta))
    if fault.text is not None and not answer.startswith(fault.text):
        return f"answer {answer!r}"
    return ""


async def play(server: OpenAIServer, fault: Fault, reps: int, tally: Tally) -> None:
    with _endpoint(server, fault) as url:
        cfg = config(url, fault)
        provider = OpenAIProvider(cfg, max_retries=fault.retries)
        request = chat_request(cfg, [], [], [user("hi")])
        try:
            for n in range(reps):
                before = len(server.requests)
                server.script(*fault.replies(n))
                await play_once(provider, request, fault, url, tally)
                seen = len(server.requests) - before
                if fault.requests is not None and seen != fault.requests:
                    tally.mismatched.append(f"{fault.name}: {seen} requests")
                if server.pending:
                    tally.mismatched.append(f"{fault.name}: {server.pending} replies unplayed")
                    while server.pending:  # drain, so the next fault starts clean
                        with contextlib.suppress(ProviderError):
                            await asyncio.wait_for(provider.complete(request), GUARD_S)
            if fault.endpoint is None:
                await healthy(provider, request, fault, tally)
        finally:
            await provider.aclose()


async def healthy(provider: OpenAIProvider, request: Any, fault: Fault, tally: Tally) -> None:
    """The same provider (its connection pool) still serves a plain request after the faults."""
    try:
        message = await asyncio.wait_for(provider.complete(request), GUARD_S)
    except Exception as exc:  # counted, like every outcome of the campaign
        tally.mismatched.append(f"{fault.name}: then failed: {exc!r}")
        return
    if message.text != DEFAULT_TEXT:
        tally.mismatched.append(f"{fault.name}: then answered {message.text!r}")


async def play_once(
    provider: OpenAIProvider, request: Any, fault: Fault, url: str, tally: Tally
) -> None:
    events: list[StreamEvent] = []

    async def consume() -> None:
        async for event in provider.stream(request):
            events.append(event)

    tally.faults += 1
    error: ProviderError | None = None
    try:
        await asyncio.wait_for(consume(), GUARD_S)
    except ProviderError as exc:
        error = exc
    except TimeoutError:
        tally.unexpected.append(f"{fault.name}: hang")
        return
    except Exception as exc:  # the campaign counts these rather than stopping at one
        tally.unexpected.append(f"{fault.name}: {type(exc).__name__}: {exc}")
        return
    problem = check(fault, events, error, url)
    if problem:
        tally.mismatched.append(f"{fault.name}: {problem}")


@contextmanager
def _endpoint(server: OpenAIServer, fault: Fault) -> Iterator[str]:
    if fault.endpoint == "refused":
        with closed_port() as url:
            yield url
    elif fault.endpoint == "backlog":
        with full_backlog() as url:
            yield url
    else:
        yield server.base_url


def test_provider_faults(openai_server: OpenAIServer) -> None:
    reps = count(3, 50)
    tally = Tally()

    async def lane(server: OpenAIServer, faults: tuple[Fault, ...]) -> None:
        for fault in faults:
            await play(server, fault, reps, tally)

    async def campaign(servers: list[OpenAIServer]) -> None:
        # Most faults wait on a deadline: lanes overlap the waiting, each with its
        # own server so that no lane takes another's scripted replies.
        await asyncio.gather(*(lane(s, FAULTS[i :: len(servers)]) for i, s in enumerate(servers)))

    with contextlib.ExitStack() as stack:
        servers = [openai_server, *(stack.enter_context(OpenAIServer()) for _ in range(LANES - 1))]
        asyncio.run(campaign(servers))
    record(
        "provider_faults",
        faults=tally.faults,
        kinds=len(FAULTS),
        unexpected=len(tally.unexpected),
        mismatched=len(tally.mismatched),
    )
    assert tally.faults == reps * len(FAULTS)
    assert tally.unexpected == []
    assert tally.mismatched == []
