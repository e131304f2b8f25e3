"""Reliability campaign: the provider against a server that misbehaves in every known way.

Each fault kind — a server that never answers, answers headers and then
nothing, sends only keep-alive comments, stalls or trickles mid-stream,
resets the connection, sends invalid UTF-8, garbage, JSON that is not JSON,
a lone surrogate, HTTP errors with and without ``Retry-After``, an empty
stream; a closed port; a listener whose backlog is full — is played against
``tests/support/openai_server.py`` (or a bare socket) ``count(3, 50)`` times. Every
fault must end as the documented outcome: a ``ProviderError`` of the
documented class and code whose message names the endpoint, or a clean
answer. A hang (the generous guard fires) or any other exception is an
unexpected outcome; there must be none.

Nothing here races a clock (issue 25, item 7). A deadline the provider is
meant to reach is an order of magnitude above the slowest answer a loaded
machine gives; every deadline it is not meant to reach is far above that; a
provider pays its first request (its SDK client, its connection) before any
fault starts; and the server's side is read once the server has taken every
scripted reply (``wait_for_requests``), never at the moment the client gives up.

Figures: ``provider_faults`` — ``faults`` played, ``kinds``, ``unexpected``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson

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
from reliability.soak import count, record
from support.openai_server import (
    DEFAULT_TEXT,
    OpenAIServer,
    Reply,
    ToolCallSpec,
)

#: The slowest a warm provider got the first content of a plain answer from
#: the test server on a busy 2-core machine (six CPU hogs, every lane at once):
#: what the part of a fault before the fault itself can take.
SLOWEST_ANSWER_S = 0.3
#: The deadline a fault waits out: an order of magnitude above ``SLOWEST_ANSWER_S``,
#: so that only the fault, never a slow machine, can pass it. (The old 0.25 s was
#: passed by the plain part of a fault, before the fault: "never answers: 0
#: requests", "a stream that trickles forever: ... output_started False".)
SHORT_S = 10 * SLOWEST_ANSWER_S
#: Deadlines for the faults that end in one (each has a lane of its own, so the
#: waits overlap).
SHORT: dict[str, float] = {
    "connect_timeout": SHORT_S,
    "first_byte_timeout": SHORT_S,
    "idle_timeout": SHORT_S,
    "request_timeout": 10 * SHORT_S,
}
#: Deadlines for every other fault, and the ones a fault is not about: none of
#: them is meant to fire, and no slow machine gets near them.
RELAXED_S = 10 * SHORT_S
RELAXED: dict[str, float] = {
    "connect_timeout": RELAXED_S,
    "first_byte_timeout": RELAXED_S,
    "idle_timeout": RELAXED_S,
    "request_timeout": RELAXED_S,
}
#: Far beyond any deadline above: reaching it means the client hung.
GUARD_S = 4 * RELAXED_S
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
    #: It ends in a deadline: ``SHORT`` deadlines (else ``RELAXED``), then these
    #: overrides, and a lane of its own.
    short: bool = False
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
        short=True,
    ),
    Fault(
        "headers, then nothing",
        lambda n: [Reply(stall_after=0)],
        ProviderTimeoutError,
        "first_byte_timeout",
        output_started=False,
        requests=1,
        short=True,
    ),
    Fault(
        "keep-alive comments only",
        lambda n: [Reply(keepalive_after=0)],
        ProviderTimeoutError,
        "first_byte_timeout",
        output_started=False,
        requests=1,
        short=True,
    ),
    Fault(
        "role chunk, then keep-alive comments",
        lambda n: [Reply(keepalive_after=1)],
        ProviderTimeoutError,
        "first_byte_timeout",
        output_started=False,
        short=True,
    ),
    Fault(
        "output, then keep-alive comments",
        lambda n: [Reply(text=text_of(n), keepalive_after=3)],
        ProviderTimeoutError,
        "idle_timeout",
        output_started=True,
        short=True,
    ),
    Fault(
        "output, then a stall",
        lambda n: [Reply(text=text_of(n), stall_after=3)],
        ProviderTimeoutError,
        "idle_timeout",
        output_started=True,
        short=True,
    ),
    Fault(
        "a stream that trickles forever",
        # 10,000 chunks 10 ms apart: still trickling when the deadline passes.
        lambda n: [Reply(text="x" * 10_000, delta_chars=1, chunk_interval=0.01)],
        ProviderTimeoutError,
        "request_timeout",
        output_started=True,
        timeouts={"request_timeout": SHORT_S},
        short=True,
    ),
    Fault(
        "a finished answer, then a stall before [DONE]",
        lambda n: [Reply(text="ok", stall_after=4)],  # role, "ok", finish, usage
        None,
        text="ok",
        short=True,
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
    Fault("random bytes as SSE", lambda n: [Reply(inject=garbage(n, sse=True))], ANY, short=True),
    Fault(
        "random bytes in the HTTP body",
        lambda n: [Reply(inject=garbage(n, sse=False), inject_unframed=True)],
        ANY,
        short=True,
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
        # Four answers ask for 1 ms; the fifth says nothing, and the back-off of
        # attempt 4 (6-8 s) would pass the 5 s deadline: no sixth request. (The
        # first back-off, 0.375-0.5 s, could be cut only by a deadline that a
        # slow machine passes before the first answer.)
        lambda n: [
            *(Reply.http_error(503) for _ in range(4)),
            Reply.http_error(503, retry_after_ms=None),
        ],
        ProviderError,
        status=503,
        requests=5,
        retries=5,
        timeouts={"request_timeout": 5.0},
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
        short=True,
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
        # The first-byte deadline also runs while connecting: out of the way.
        timeouts={"first_byte_timeout": RELAXED_S},
        short=True,
    ),
)


@dataclass
class Tally:
    faults: int = 0
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)


def config(base_url: str, fault: Fault | None) -> ModelConfig:
    """The fault's deadlines (``None``: ``RELAXED``)."""
    base = SHORT if fault is not None and fault.short else RELAXED
    timeouts = {**base, **(fault.timeouts if fault is not None else {})}
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


@dataclass
class Lane:
    """Faults played one after another against one server (its scripted replies are
    the lane's alone), each with a provider of its own, built and warmed up before
    any lane plays (``warm_up``)."""

    server: OpenAIServer
    faults: tuple[Fault, ...]
    providers: dict[str, OpenAIProvider] = field(default_factory=dict)


@dataclass
class Slow:
    """A machine as slow as the slowest measured, made on purpose (the regression test).

    The client: once every lane has started its first stream, the event loop
    stalls ``seconds`` (a starved process: no task runs, the deadlines do). The
    server: every reply is held ``seconds`` after its request arrived, and its
    chunks come at least ``seconds`` apart.
    """

    seconds: float
    lanes: int
    started: int = 0

    def reply(self, reply: Reply) -> Reply:
        hold = threading.Event()
        chunk_interval = max(reply.chunk_interval, self.seconds)
        slowed = dataclasses.replace(
            reply, hold=hold, hold_after=None, chunk_interval=chunk_interval
        )

        def release() -> None:
            if slowed.started.wait(RELAXED_S):
                time.sleep(self.seconds)  # the slowness being simulated, not a wait
            hold.set()

        threading.Thread(target=release, name="slow-reply", daemon=True).start()
        return slowed

    def stream_started(self) -> None:
        self.started += 1
        if self.started == self.lanes:
            time.sleep(self.seconds)  # blocks the loop: every lane's deadlines run on


def lanes_of(faults: tuple[Fault, ...]) -> list[tuple[Fault, ...]]:
    """A lane for each fault that waits out a deadline (the waits overlap), one for the rest."""
    rest = tuple(f for f in faults if not f.short)
    return [*((f,) for f in faults if f.short), *([rest] if rest else [])]


def request_for(provider: OpenAIProvider) -> Any:
    return chat_request(provider.config, [], [], [user("hi")])


async def warm_up(lanes: list[Lane], tally: Tally) -> None:
    """Pay every first request before any fault's deadline runs.

    The process's first request (imports, the SDK's models: seconds on a busy
    machine) goes through a provider of relaxed deadlines; then each fault's
    provider makes its first (its SDK client, its connection), one at a time,
    each awaited, so that none of that work lands inside another lane's deadline.
    """
    first = lanes[0].server
    async with OpenAIProvider(config(first.base_url, None)) as provider:
        await healthy(provider, request_for(provider), "warm-up", tally)
    for lane in lanes:
        for fault in lane.faults:
            if fault.endpoint is None:
                provider = OpenAIProvider(
                    config(lane.server.base_url, fault), max_retries=fault.retries
                )
                lane.providers[fault.name] = provider
                await healthy(provider, request_for(provider), f"{fault.name}, before", tally)


async def taken(server: OpenAIServer, count: int) -> int:
    """How many requests the server has, once it took ``count`` (or ``RELAXED_S`` passed).

    The server takes a request in a thread of its own, maybe well after the
    client gave up on it: counted the moment the client gives up, a request
    still on its way was missing ("never answers: 0 requests").
    """
    with contextlib.suppress(TimeoutError):
        await asyncio.to_thread(server.wait_for_requests, count, RELAXED_S)
    return len(server.requests)


async def play(lane: Lane, fault: Fault, reps: int, tally: Tally, slow: Slow | None) -> None:
    server = lane.server
    with _endpoint(server, fault) as url:
        provider = lane.providers.pop(fault.name, None) or OpenAIProvider(
            config(url, fault), max_retries=fault.retries
        )
        request = request_for(provider)
        try:
            for n in range(reps):
                before = len(server.requests)
                replies = fault.replies(n)
                server.script(*(slow.reply(r) if slow else r for r in replies))
                await play_once(provider, request, fault, url, tally, slow)
                seen = await taken(server, before + len(replies)) - before
                if fault.requests is not None and seen != fault.requests:
                    tally.mismatched.append(f"{fault.name}: {seen} requests")
                if server.pending:
                    tally.mismatched.append(f"{fault.name}: {server.pending} replies unplayed")
                    while server.pending:  # drain, so the next fault starts clean
                        with contextlib.suppress(ProviderError):
                            await asyncio.wait_for(provider.complete(request), GUARD_S)
            if fault.endpoint is None:
                await healthy(provider, request, f"{fault.name}: then", tally)
        finally:
            await provider.aclose()


async def healthy(provider: OpenAIProvider, request: Any, what: str, tally: Tally) -> None:
    """The provider (its connection pool) serves a plain request: before the faults, after them."""
    try:
        message = await asyncio.wait_for(provider.complete(request), GUARD_S)
    except Exception as exc:  # counted, like every outcome of the campaign
        tally.mismatched.append(f"{what} failed: {exc!r}")
        return
    if message.text != DEFAULT_TEXT:
        tally.mismatched.append(f"{what} answered {message.text!r}")


async def play_once(
    provider: OpenAIProvider,
    request: Any,
    fault: Fault,
    url: str,
    tally: Tally,
    slow: Slow | None = None,
) -> None:
    events: list[StreamEvent] = []

    async def consume() -> None:
        async for event in provider.stream(request):
            events.append(event)

    tally.faults += 1
    error: ProviderError | None = None
    try:
        task = asyncio.ensure_future(consume())
        if slow is not None and slow.started < slow.lanes:
            await asyncio.sleep(0)  # the stream's first step: its deadlines run from here
            slow.stream_started()
        await asyncio.wait_for(task, GUARD_S)
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


def run_campaign(
    first: OpenAIServer, faults: tuple[Fault, ...], reps: int, slow_s: float = 0.0
) -> Tally:
    """Every fault ``reps`` times, the lanes at once, each lane with its own server."""
    tally = Tally()
    groups = lanes_of(faults)
    slow = Slow(slow_s, lanes=len(groups)) if slow_s else None

    async def lane(this: Lane) -> None:
        for fault in this.faults:
            await play(this, fault, reps, tally, slow)

    async def campaign(lanes: list[Lane]) -> None:
        try:
            await warm_up(lanes, tally)
            await asyncio.gather(*(lane(this) for this in lanes))
        finally:
            for this in lanes:  # any a failed lane left
                for provider in this.providers.values():
                    await provider.aclose()

    with contextlib.ExitStack() as stack:
        servers = [first, *(stack.enter_context(OpenAIServer()) for _ in groups[1:])]
        asyncio.run(campaign([Lane(s, g) for s, g in zip(servers, groups, strict=True)]))
    return tally


def test_provider_faults(openai_server: OpenAIServer) -> None:
    reps = count(3, 50)
    tally = run_campaign(openai_server, FAULTS, reps)
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


def test_item7_provider_faults_wait_for_events_not_clocks(openai_server: OpenAIServer) -> None:
    """Issue 25, item 7: every fault that ends in a deadline, on a machine made as slow
    as the slowest measured (``Slow``: the client's loop stalls ``SLOWEST_ANSWER_S``
    as the streams start, the server holds each reply as long and paces its chunks
    so). Each still ends as documented, every scripted reply taken: the deadlines
    are ten times that slowness. With the old ones (0.25 s) five faults ended in
    the wrong deadline and a probe never reached the server."""
    short = tuple(f for f in FAULTS if f.short)
    tally = run_campaign(openai_server, short, reps=1, slow_s=SLOWEST_ANSWER_S)
    assert tally.faults == len(short)
    assert tally.unexpected == []
    assert tally.mismatched == []
