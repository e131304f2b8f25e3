"""The provider through a real local HTTP server: streaming, requests, usage, errors."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import openai
import pytest

from cairn.messages import (
    JSONObject,
    ToolCall,
    Usage,
    assistant,
    system,
    tool_result,
    user,
)
from cairn.provider import (
    ChatProvider,
    ChatRequest,
    ContentDelta,
    ContextLimitError,
    Finish,
    ModelConfig,
    ModelConfigError,
    OpenAIProvider,
    ProviderError,
    ReasoningDelta,
    StreamEvent,
    ToolCallDelta,
    TurnAccumulator,
    UsageEvent,
    chat_request,
    events_from_chunk,
    is_context_limit,
    model_from_env,
    usage_from_wire,
)
from cairn.provider.errors import ProviderTimeoutError
from cairn.provider.factory import open_provider
from cairn.provider.streaming import StreamingProvider
from support.openai_server import (
    DEFAULT_TEXT,
    ErrorSpec,
    OpenAIServer,
    Reply,
    ToolCallSpec,
    UsageSpec,
    every_api_server_fixture,  # noqa: F401  (the ``openai_server`` fixture, once per API)
    loopback_only,
)

T = TypeVar("T")

TOOLS: list[JSONObject] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]


#: Each API's own cache fields for a usage of 100 cached tokens (the sizes are the same).
CACHE_FIELDS: dict[str, dict[str, int]] = {
    "chat": {},
    "responses": {"cache_creation_input_tokens": 0},  # ``cache_write_tokens``
    "anthropic": {"cache_read_input_tokens": 100, "cache_creation_input_tokens": 0},
}
#: How each API's server names a tool call.
ID_PREFIX = {"chat": "call_", "responses": "call_", "anthropic": "toolu_"}
#: Where each API's client posts, from a ``…/v1`` base URL.
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages"}

#: Providers made by this test; ``run`` closes their pools before its loop ends.
_PROVIDERS: list[StreamingProvider] = []


@pytest.fixture(autouse=True)
def _forget_providers() -> Iterator[None]:
    yield
    _PROVIDERS.clear()


@pytest.fixture
def chat_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIServer]:
    """The server for what only chat completions has: its exact body and chunks,
    DeepSeek's usage fields, the probe for llama.cpp's silent context-limit drops."""
    loopback_only(monkeypatch)
    with OpenAIServer() as server:
        yield server


def make_provider(config: ModelConfig, **kwargs: Any) -> StreamingProvider:
    provider = open_provider(config, **kwargs)
    _PROVIDERS.append(provider)
    return provider


def run(factory: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        try:
            return await factory()
        finally:
            for provider in _PROVIDERS:
                await provider.aclose()

    return asyncio.run(main())


def config_for(server: OpenAIServer, **kwargs: Any) -> ModelConfig:
    """The model for ``server.api`` (every test that takes the server runs once per API)."""
    return ModelConfig(model="test-model", base_url=server.base_url, api=server.api, **kwargs)


def simple_request(server: OpenAIServer, text: str = "hi") -> ChatRequest:
    return chat_request(config_for(server), [system("You are terse.")], [], [user(text)])


async def collect(
    provider: StreamingProvider, request: ChatRequest, **kwargs: Any
) -> list[StreamEvent]:
    return [event async for event in provider.stream(request, **kwargs)]


async def collect_until_error(
    provider: StreamingProvider, request: ChatRequest, **kwargs: Any
) -> tuple[list[StreamEvent], ProviderError]:
    events: list[StreamEvent] = []
    try:
        async for event in provider.stream(request, **kwargs):
            events.append(event)
    except ProviderError as exc:
        return events, exc
    raise AssertionError("the stream did not fail")


# ---------------------------------------------------------------------------
# Streaming


def test_streaming_text_with_usage(openai_server: OpenAIServer) -> None:
    openai_server.script(
        Reply(text="Hello, streaming world.", usage=UsageSpec(120, 7, cached_tokens=100))
    )
    provider = make_provider(config_for(openai_server))
    request = simple_request(openai_server)

    async def scenario() -> tuple[list[StreamEvent], list[str], TurnAccumulator]:
        acc = TurnAccumulator()
        seen: list[StreamEvent] = []
        texts: list[str] = []
        assert not acc.output_started
        async for event in provider.stream(request):
            acc.add(event)
            seen.append(event)
            texts.append(acc.text)
        await provider.aclose()
        return seen, texts, acc

    events, texts, acc = run(scenario)
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["ContentDelta"] * (len(events) - 2) + ["Finish", "UsageEvent"]
    assert len(events) - 2 > 1  # the text arrived in several deltas
    assert "".join(e.text for e in events if isinstance(e, ContentDelta)) == (
        "Hello, streaming world."
    )
    assert texts[0] == "Hell" and texts[-1] == "Hello, streaming world."
    assert events[-2] == Finish("stop")
    usage = Usage(
        prompt_tokens=120,
        completion_tokens=7,
        total_tokens=127,
        cached_tokens=100,
        **CACHE_FIELDS[openai_server.api],
    )
    assert events[-1] == UsageEvent(usage)

    message = acc.message()
    assert acc.output_started
    assert message.role == "assistant"
    assert message.content == "Hello, streaming world."
    assert message.tool_calls == ()
    assert message.reasoning is None
    assert message.meta.usage == usage
    assert message.meta.extra == {"finish_reason": "stop"}


def test_complete_returns_the_default_reply_when_nothing_is_scripted(
    openai_server: OpenAIServer,
) -> None:
    provider = make_provider(config_for(openai_server))
    message = run(lambda: provider.complete(simple_request(openai_server)))
    assert message.content == DEFAULT_TEXT
    usage = message.meta.usage
    assert usage is not None and usage.total_tokens == usage.prompt_tokens + (
        usage.completion_tokens
    )
    assert usage.cached_tokens == 0


def test_reasoning_deltas_come_before_the_answer(openai_server: OpenAIServer) -> None:
    openai_server.script(Reply(reasoning="Two plus two is four.", text="4"))
    provider = make_provider(config_for(openai_server))
    events = run(lambda: collect(provider, simple_request(openai_server)))
    reasoning = [e for e in events if isinstance(e, ReasoningDelta)]
    assert len(reasoning) > 1
    first_content = next(i for i, e in enumerate(events) if isinstance(e, ContentDelta))
    assert all(events.index(e) < first_content for e in reasoning)

    acc = TurnAccumulator()
    for event in events:
        acc.add(event)
    message = acc.message()
    assert message.reasoning == "Two plus two is four."
    assert message.content == "4"


def test_parallel_tool_calls_are_assembled_by_index(openai_server: OpenAIServer) -> None:
    calls = [
        ToolCallSpec("read_file", '{"path": "src/app.py"}', id="call_a"),
        ToolCallSpec("grep", '{"pattern": "def main", "path": "."}', id="call_b"),
        ToolCallSpec("bash", '{"command": "ls -la"}', id="call_c"),
    ]
    openai_server.script(Reply(tool_calls=calls, interleave_tool_calls=True))
    provider = make_provider(config_for(openai_server))
    events = run(lambda: collect(provider, simple_request(openai_server)))

    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert sorted({d.index for d in deltas}) == [0, 1, 2]
    if openai_server.api == "chat":  # only chunks can interleave calls: the indexes alternate
        assert [d.index for d in deltas[:3]] == [0, 1, 2]
        assert [d.index for d in deltas[3:6]] == [0, 1, 2]
    assert Finish("tool_calls") in events

    acc = TurnAccumulator()
    for event in events:
        acc.add(event)
    message = acc.message()
    assert message.content is None
    assert message.tool_calls == (
        ToolCall("call_a", "read_file", '{"path": "src/app.py"}'),
        ToolCall("call_b", "grep", '{"pattern": "def main", "path": "."}'),
        ToolCall("call_c", "bash", '{"command": "ls -la"}'),
    )
    assert message.meta.extra == {"finish_reason": "tool_calls"}


def test_text_and_a_tool_call_in_one_turn(openai_server: OpenAIServer) -> None:
    openai_server.script(
        Reply(text="Let me look.", tool_calls=[ToolCallSpec("read_file", '{"path": "a"}')])
    )
    provider = make_provider(config_for(openai_server))
    message = run(lambda: provider.complete(simple_request(openai_server)))
    assert message.content == "Let me look."
    assert [(c.name, c.arguments) for c in message.tool_calls] == [("read_file", '{"path": "a"}')]
    assert message.tool_calls[0].id.startswith(ID_PREFIX[openai_server.api])


def test_an_abandoned_stream_leaves_the_provider_usable(openai_server: OpenAIServer) -> None:
    openai_server.script(Reply(text="x" * 400, delta_chars=1), Reply(text="second"))
    provider = make_provider(config_for(openai_server))

    async def scenario() -> str:
        stream = provider.stream(simple_request(openai_server))
        async for _event in stream:
            break
        await stream.aclose()
        message = await provider.complete(simple_request(openai_server))
        await provider.aclose()
        return message.text

    assert run(scenario) == "second"
    assert len(openai_server.requests) == 2


def test_a_cancelled_stream_closes_its_connection_and_the_provider_goes_on(
    openai_server: OpenAIServer,
) -> None:
    """Esc in a surface cancels the task reading the stream: the request's connection
    closes (the provider stops paying for output) and the next request is served."""
    stalled = Reply(text="a long answer that never ends", stall_after=3)
    openai_server.script(stalled, Reply(text="next"))
    provider = make_provider(config_for(openai_server))

    async def scenario() -> tuple[list[StreamEvent], bool, str]:
        seen: list[StreamEvent] = []

        async def read() -> None:
            async for event in provider.stream(simple_request(openai_server)):
                seen.append(event)

        task = asyncio.create_task(read())
        while not seen:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        left = await asyncio.to_thread(stalled.client_left.wait, 10)
        return seen, left, (await provider.complete(simple_request(openai_server))).text

    seen, left, after = run(scenario)
    assert any(isinstance(e, ContentDelta) for e in seen)
    assert left and after == "next"


def test_one_provider_serves_several_event_loops(openai_server: OpenAIServer) -> None:
    openai_server.script(Reply(text="one"), Reply(text="two"))
    provider = make_provider(config_for(openai_server))
    first = run(lambda: provider.complete(simple_request(openai_server)))
    second = run(lambda: provider.complete(simple_request(openai_server)))
    assert (first.text, second.text) == ("one", "two")


def test_a_held_reply_stalls_until_released(openai_server: OpenAIServer) -> None:
    import threading

    gate = threading.Event()
    reply = Reply(text="released", hold=gate, hold_after=1)
    openai_server.script(reply)
    provider = make_provider(config_for(openai_server))

    async def scenario() -> tuple[bool, str]:
        task = asyncio.create_task(provider.complete(simple_request(openai_server)))
        await asyncio.to_thread(openai_server.wait_for_requests, 1)
        await asyncio.to_thread(reply.started.wait, 5)
        await asyncio.sleep(0)
        pending = not task.done()
        gate.set()
        message = await task
        return pending, message.text

    pending, text = run(scenario)
    assert pending
    assert text == "released"


def test_requests_run_concurrently_while_one_is_held(openai_server: OpenAIServer) -> None:
    import threading

    gate = threading.Event()
    openai_server.script(Reply(text="slow", hold=gate), Reply(text="fast"))
    provider = make_provider(config_for(openai_server))

    async def scenario() -> tuple[str, bool, str]:
        slow = asyncio.create_task(provider.complete(simple_request(openai_server, "one")))
        await asyncio.to_thread(openai_server.wait_for_requests, 1)
        fast = await provider.complete(simple_request(openai_server, "two"))
        slow_pending = not slow.done()
        gate.set()
        return fast.text, slow_pending, (await slow).text

    fast, slow_pending, slow = run(scenario)
    assert (fast, slow_pending, slow) == ("fast", True, "slow")
    first, second = openai_server.requests
    assert first.client_port != second.client_port


def test_sequential_requests_reuse_one_connection(openai_server: OpenAIServer) -> None:
    provider = make_provider(config_for(openai_server))

    async def scenario() -> None:
        for _ in range(3):
            await provider.complete(simple_request(openai_server))
        await provider.aclose()

    run(scenario)
    assert len({r.client_port for r in openai_server.requests}) == 1


# ---------------------------------------------------------------------------
# Requests


def _history() -> tuple[list[Any], list[Any]]:
    call = ToolCall("call_1", "read_file", '{"path": "README.md"}')
    system_messages = [system("You are a coding agent.")]
    history = [
        user("What does the README say?"),
        assistant("Reading it.", [call], reasoning="The user wants the README."),
        tool_result("call_1", "# Cairn\nAn agent runtime."),
        assistant("It describes Cairn, an agent runtime."),
        user("Thanks. Now summarise the tests."),
    ]
    return system_messages, history


def test_the_recorded_body_is_exactly_chat_request_body(chat_server: OpenAIServer) -> None:
    config = config_for(
        chat_server, params={"temperature": 0.2, "top_p": 0.9, "seed": 7}, max_output_tokens=512
    )
    system_messages, history = _history()
    with_tools = chat_request(
        config, system_messages, TOOLS, history, reasoning_field="reasoning_content"
    )
    without_tools = chat_request(config, system_messages, [], history)
    provider = make_provider(config)

    async def scenario() -> None:
        await provider.complete(with_tools)
        await provider.complete(without_tools)

    run(scenario)
    first, second = chat_server.bodies
    assert first == with_tools.body()
    assert second == without_tools.body()
    assert first["stream"] is True
    assert first["stream_options"] == {"include_usage": True}
    assert first["max_tokens"] == 512 and first["temperature"] == 0.2
    assert first["tools"] == TOOLS
    assert "tools" not in second
    # Reasoning goes back only under the requested field.
    assert first["messages"][2]["reasoning_content"] == "The user wants the README."
    assert "reasoning_content" not in second["messages"][2]
    assert first["messages"][3] == {
        "role": "tool",
        "content": "# Cairn\nAn agent runtime.",
        "tool_call_id": "call_1",
    }


def _wire_messages_text(raw: bytes) -> str:
    """The ``messages`` array exactly as its bytes went over the wire."""
    text = raw.decode()
    start = text.index("[", text.index('"messages"'))
    _, end = json.JSONDecoder().raw_decode(text, start)
    return text[start:end]


def test_two_requests_over_one_history_share_their_prefix_byte_for_byte(
    chat_server: OpenAIServer,
) -> None:
    config = config_for(chat_server, params={"temperature": 0.0})
    system_messages, history = _history()
    main = chat_request(config, system_messages, TOOLS, history)
    fork = chat_request(
        config, system_messages, TOOLS, [*history, user("Summarise the conversation.")]
    )
    assert fork.messages[: len(main.messages)] == main.messages
    assert (fork.model, fork.tools, fork.params) == (main.model, main.tools, main.params)
    assert chat_request(config, system_messages, TOOLS, history) == main

    provider = make_provider(config)

    async def scenario() -> None:
        await provider.complete(main)
        await provider.complete(fork)

    run(scenario)
    main_wire, fork_wire = (_wire_messages_text(r.raw) for r in chat_server.requests)
    # Same bytes up to the main request's closing bracket.
    assert fork_wire.startswith(main_wire[:-1])
    assert len(fork_wire) > len(main_wire)


def test_reserved_params_are_rejected() -> None:
    with pytest.raises(ModelConfigError, match="stream"):
        ModelConfig(model="m", params={"stream": False})
    with pytest.raises(ValueError, match="messages"):
        ChatRequest(model="m", messages=(), params={"messages": []})


def test_api_key_comes_from_the_configured_variable(
    openai_server: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_TEST_KEY", "sk-test-123")
    provider = make_provider(config_for(openai_server, api_key_env="MY_TEST_KEY"))
    run(lambda: provider.complete(simple_request(openai_server)))
    monkeypatch.delenv("MY_TEST_KEY")
    keyless = make_provider(config_for(openai_server, api_key_env="MY_TEST_KEY"))
    run(lambda: keyless.complete(simple_request(openai_server)))
    first, second = openai_server.requests
    # Every SDK sends the key as a bearer token (the anthropic SDK too, since 2026).
    assert first.headers["authorization"] == "Bearer sk-test-123"
    assert second.headers["authorization"] == "Bearer not-needed"
    assert first.path == PATHS[openai_server.api]


def test_openai_provider_is_a_chat_provider() -> None:
    assert isinstance(OpenAIProvider(ModelConfig(model="m")), ChatProvider)


# ---------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize(
    ("reply", "status"),
    [
        (
            Reply.http_error(
                400, "Your input is too large for this model.", code="context_length_exceeded"
            ),
            400,
        ),
        (Reply.http_error(413, "Request Entity Too Large", type="request_too_large"), 413),
        (
            Reply.http_error(
                400,
                "This model's maximum context length is 8192 tokens. However, your messages "
                "resulted in 9000 tokens. Please reduce the length of the messages.",
            ),
            400,
        ),
    ],
    ids=["code", "413", "message"],
)
def test_context_limit_before_output(
    openai_server: OpenAIServer, reply: Reply, status: int
) -> None:
    openai_server.script(reply)
    provider = make_provider(config_for(openai_server))  # default retries: 4xx are not retried
    events, error = run(lambda: collect_until_error(provider, simple_request(openai_server)))
    assert isinstance(error, ContextLimitError)
    assert events == []
    assert error.output_started is False
    assert error.status == status
    assert len(openai_server.requests) == 1


def test_context_limit_inside_the_stream_after_output(openai_server: OpenAIServer) -> None:
    openai_server.script(
        Reply(
            text="partial answer",
            error_after=3,
            error=ErrorSpec("context window exceeded", code="context_length_exceeded"),
        )
    )
    provider = make_provider(config_for(openai_server))
    events, error = run(lambda: collect_until_error(provider, simple_request(openai_server)))
    assert isinstance(error, ContextLimitError)
    assert error.output_started is True
    # Anthropic's error events carry a type, never a code.
    code = None if openai_server.api == "anthropic" else "context_length_exceeded"
    assert error.status is None and error.code == code
    assert [e for e in events if isinstance(e, ContentDelta)] == [
        ContentDelta("part"),
        ContentDelta("ial "),
    ]


def test_a_server_error_event_after_output(openai_server: OpenAIServer) -> None:
    openai_server.script(
        Reply(
            text="partial",
            error_after=2,
            error=ErrorSpec("The server had an error.", type="server_error"),
        )
    )
    provider = make_provider(config_for(openai_server))
    events, error = run(lambda: collect_until_error(provider, simple_request(openai_server)))
    assert type(error) is ProviderError
    assert error.output_started is True
    assert error.message == "The server had an error."
    assert events == [ContentDelta("part")]


def test_a_dropped_connection_after_output(openai_server: OpenAIServer) -> None:
    openai_server.script(Reply(text="partial answer", abort_after=3))
    provider = make_provider(config_for(openai_server))
    events, error = run(lambda: collect_until_error(provider, simple_request(openai_server)))
    assert type(error) is ProviderError
    assert error.output_started is True
    assert len(events) == 2
    assert len(openai_server.requests) == 1  # nothing is retried once streaming began


def test_an_error_event_before_output_is_not_output(openai_server: OpenAIServer) -> None:
    openai_server.script(
        Reply(error_after=1, error=ErrorSpec("prompt is too long: 210000 tokens > 200000"))
    )
    provider = make_provider(config_for(openai_server))
    events, error = run(lambda: collect_until_error(provider, simple_request(openai_server)))
    assert isinstance(error, ContextLimitError)
    assert events == []
    assert error.output_started is False


def test_a_stream_without_a_finish_reason_is_an_error(openai_server: OpenAIServer) -> None:
    openai_server.script(Reply(text="cut off", omit_finish=True))
    provider = make_provider(config_for(openai_server))
    _, error = run(lambda: collect_until_error(provider, simple_request(openai_server)))
    assert type(error) is ProviderError
    assert error.code == "incomplete_stream"
    assert error.output_started is True


def test_a_500_without_retries_is_one_request(openai_server: OpenAIServer) -> None:
    openai_server.script(*(Reply.http_error(500, type="server_error") for _ in range(3)))
    provider = make_provider(config_for(openai_server), max_retries=0)
    _, error = run(lambda: collect_until_error(provider, simple_request(openai_server)))
    assert type(error) is ProviderError
    assert error.status == 500 and error.output_started is False
    assert len(openai_server.requests) == 1


def test_a_500_with_two_retries_is_three_requests(openai_server: OpenAIServer) -> None:
    openai_server.script(*(Reply.http_error(500, type="server_error") for _ in range(3)))
    provider = make_provider(config_for(openai_server), max_retries=2)
    _, error = run(lambda: collect_until_error(provider, simple_request(openai_server)))
    assert error.status == 500
    assert len(openai_server.requests) == 3
    retry_counts = [r.headers["x-stainless-retry-count"] for r in openai_server.requests]
    assert retry_counts == ["0", "1", "2"]


def test_per_call_retries_override_the_provider(openai_server: OpenAIServer) -> None:
    openai_server.script(*(Reply.http_error(503, type="server_error") for _ in range(3)))
    provider = make_provider(config_for(openai_server), max_retries=2)
    _, error = run(
        lambda: collect_until_error(provider, simple_request(openai_server), max_retries=0)
    )
    assert error.status == 503
    assert len(openai_server.requests) == 1


def test_a_rate_limit_is_retried_then_succeeds(openai_server: OpenAIServer) -> None:
    openai_server.script(
        Reply.http_error(429, "Rate limit reached: too many tokens per min", type="tokens"),
        Reply(text="after the limit"),
    )
    provider = make_provider(config_for(openai_server))
    message = run(lambda: provider.complete(simple_request(openai_server)))
    assert message.text == "after the limit"
    assert len(openai_server.requests) == 2


def test_a_rate_limit_is_never_a_context_limit(openai_server: OpenAIServer) -> None:
    openai_server.script(
        Reply.http_error(429, "Rate limit reached: too many tokens per min", type="tokens")
    )
    provider = make_provider(config_for(openai_server), max_retries=0)
    _, error = run(lambda: collect_until_error(provider, simple_request(openai_server)))
    assert type(error) is ProviderError
    assert error.status == 429


def test_an_unreachable_server_is_a_provider_error() -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = ModelConfig(model="m", base_url=f"http://127.0.0.1:{port}/v1")
    provider = make_provider(config, max_retries=0)
    request = chat_request(config, [], [], [user("hi")])
    _, error = run(lambda: collect_until_error(provider, request))
    assert type(error) is ProviderError
    assert error.status is None and error.output_started is False


@pytest.mark.parametrize(
    ("status", "code", "message", "expected"),
    [
        (413, None, "Request Entity Too Large", True),
        (400, "context_length_exceeded", "whatever", True),
        (400, "exceed_context_size_error", "", True),
        (400, None, "This model's maximum context length is 8192 tokens.", True),
        (None, None, "Context length exceeded", True),
        (400, None, "prompt is too long: 210000 tokens > 200000 maximum", True),
        (
            400,
            None,
            "input length and `max_tokens` exceed context limit: 6412 + 16000 > 16384, "
            "decrease input length or `max_tokens` and try again",
            True,
        ),
        (400, None, "Too many tokens in the request", True),
        (400, None, "Input is too long for requested model.", True),
        (400, None, "Your input exceeds the context window of this model.", True),
        (400, None, "Please reduce the length of the messages or completion.", True),
        (400, None, "the request exceeds the available context size", True),
        (400, None, "Invalid value for 'temperature'", False),
        (401, "invalid_api_key", "Incorrect API key provided", False),
        (500, None, "The server had an error", False),
        (429, None, "Rate limit: too many tokens per min", False),
        (None, None, "", False),
    ],
)
def test_is_context_limit(
    status: int | None, code: str | None, message: str, expected: bool
) -> None:
    assert is_context_limit(status, code, message) is expected


# ---------------------------------------------------------------------------
# Chunks, usage and configuration without a server


def test_events_from_chunk_reads_the_reasoning_field_and_missing_indexes() -> None:
    chunk = {
        "choices": [
            {
                "index": 0,
                "delta": {
                    "reasoning": "hmm",
                    "content": "",
                    "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}],
                },
                "finish_reason": None,
            }
        ]
    }
    assert events_from_chunk(chunk) == [
        ReasoningDelta("hmm"),
        ToolCallDelta(0, "c1", "f", "{}"),
    ]
    assert events_from_chunk({"choices": [], "usage": None}) == []


def test_usage_mapping_variants() -> None:
    deepseek = usage_from_wire(
        {
            "prompt_tokens": 100,
            "completion_tokens": 10,
            "total_tokens": 110,
            "prompt_cache_hit_tokens": 64,
            "prompt_cache_miss_tokens": 36,
        }
    )
    assert deepseek == Usage(100, 10, 110, cached_tokens=64)
    no_total = usage_from_wire({"prompt_tokens": 5, "completion_tokens": 2})
    assert no_total.total_tokens == 7 and no_total.cached_tokens is None
    gateway = usage_from_wire(
        {
            "prompt_tokens": 50,
            "completion_tokens": 5,
            "total_tokens": 55,
            "cache_read_input_tokens": 40,
            "cache_creation_input_tokens": 10,
        }
    )
    assert (gateway.cache_read_input_tokens, gateway.cache_creation_input_tokens) == (40, 10)


def test_deepseek_cache_fields_through_the_server(chat_server: OpenAIServer) -> None:
    chat_server.script(
        Reply(text="ok", usage=UsageSpec(300, 3, extra={"prompt_cache_hit_tokens": 256}))
    )
    provider = make_provider(config_for(chat_server))
    message = run(lambda: provider.complete(simple_request(chat_server)))
    assert message.meta.usage == Usage(300, 3, 303, cached_tokens=256)


def test_accumulator_gives_a_call_without_id_a_stable_one() -> None:
    acc = TurnAccumulator()
    acc.add(ToolCallDelta(0, None, "f", '{"a"'))
    acc.add(ToolCallDelta(0, None, None, ": 1}"))
    first, second = acc.message(), acc.message()
    assert first.tool_calls[0].arguments == '{"a": 1}'
    assert first.tool_calls[0].id == second.tool_calls[0].id
    assert acc.output_started
    assert not TurnAccumulator().output_started
    finish_only = TurnAccumulator()
    finish_only.add(Finish("stop"))
    assert not finish_only.output_started
    assert finish_only.message().content == ""


def test_model_from_env() -> None:
    assert model_from_env({}) is None
    assert model_from_env({"CAIRN_MODEL": "  "}) is None
    assert model_from_env({"CAIRN_MODEL": "my-model"}) == ModelConfig(model="my-model")
    # A model the registry knows brings its window and image support (issue 26).
    assert model_from_env({"CAIRN_MODEL": "gpt-4o-mini"}) == ModelConfig(
        model="gpt-4o-mini", context_window=128_000, images=True
    )
    full = model_from_env(
        {
            "CAIRN_MODEL": "deepseek-chat",
            "OPENAI_BASE_URL": "http://127.0.0.1:8000/v1",
            "CAIRN_CONTEXT_WINDOW": "65536",
            "CAIRN_MAX_OUTPUT_TOKENS": "8192",
        }
    )
    assert full == ModelConfig(
        model="deepseek-chat",
        base_url="http://127.0.0.1:8000/v1",
        context_window=65_536,
        max_output_tokens=8_192,
    )
    with pytest.raises(ModelConfigError, match="CAIRN_CONTEXT_WINDOW"):
        model_from_env({"CAIRN_MODEL": "m", "CAIRN_CONTEXT_WINDOW": "big"})
    with pytest.raises(ModelConfigError, match="CAIRN_MAX_OUTPUT_TOKENS"):
        model_from_env({"CAIRN_MODEL": "m", "CAIRN_MAX_OUTPUT_TOKENS": "0"})


def test_max_output_tokens_goes_out_as_max_tokens() -> None:
    config = ModelConfig(
        model="m", params={"temperature": 1.0, "max_tokens": 5}, max_output_tokens=9
    )
    request = chat_request(config, [], [], [user("x")])
    assert request.params == {"temperature": 1.0, "max_tokens": 9}
    assert request.body() == {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        "temperature": 1.0,
        "max_tokens": 9,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


# ---------------------------------------------------------------------------
# The test server itself speaks the protocol the SDK expects


def test_the_server_answers_non_streaming_requests(openai_server: OpenAIServer) -> None:
    openai_server.script(
        Reply(text="plain", reasoning="why", tool_calls=[ToolCallSpec("f", '{"x": 1}', id="c9")])
    )

    async def scenario() -> Any:
        async with openai.AsyncOpenAI(
            base_url=openai_server.base_url, api_key="k", max_retries=0
        ) as client:
            return await client.chat.completions.create(
                model="test-model", messages=[{"role": "user", "content": "hi"}]
            )

    completion = run(scenario)
    choice = completion.choices[0]
    assert choice.message.content == "plain"
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    assert choice.message.tool_calls[0].id == "c9"
    assert completion.usage is not None and completion.usage.total_tokens > 0
    assert "stream" not in openai_server.bodies[0]


def test_the_server_omits_usage_unless_asked(openai_server: OpenAIServer) -> None:
    async def scenario() -> list[Any]:
        async with openai.AsyncOpenAI(
            base_url=openai_server.base_url, api_key="k", max_retries=0
        ) as client:
            stream = await client.chat.completions.create(
                model="test-model", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            return [chunk async for chunk in stream]

    chunks = run(scenario)
    assert all(chunk.usage is None for chunk in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"


# ---------------------------------------------------------------------------
# A server that drops a stream it cannot serve (llama-cpp-python's server)


def test_a_stream_dropped_before_any_chunk_is_probed_for_a_context_limit(
    chat_server: OpenAIServer,
) -> None:
    """Regression (found against the real llama.cpp server): a prompt over ``n_ctx`` got
    HTTP 200 and an empty stream, so the context limit went unrecognised."""
    too_long = Reply.http_error(
        400,
        "This model's maximum context length is 8192 tokens. However, you requested 9081",
        code="context_length_exceeded",
    )
    chat_server.respond_with(
        lambda body: Reply(text="never", end_after=0) if body.get("stream") else too_long
    )
    request = simple_request(chat_server)
    _, error = run(lambda: collect_until_error(make_provider(config_for(chat_server)), request))
    assert isinstance(error, ContextLimitError) and not error.output_started
    probe = chat_server.bodies[-1]
    assert "stream" not in probe or probe["stream"] is False
    assert probe["max_tokens"] == 1 and probe["messages"] == chat_server.bodies[0]["messages"]


def test_a_dropped_stream_that_is_not_a_context_limit_stays_an_incomplete_stream(
    openai_server: OpenAIServer,
) -> None:
    openai_server.respond_with(
        lambda body: Reply(text="never", end_after=0) if body.get("stream") else Reply(text="x")
    )
    _, error = run(
        lambda: collect_until_error(
            make_provider(config_for(openai_server)), simple_request(openai_server)
        )
    )
    assert not isinstance(error, ContextLimitError)
    assert error.code == "incomplete_stream"


# ---------------------------------------------------------------------------
# Deadlines and stream faults (issue 12, finding 6): every fault is a clear
# ProviderError naming the endpoint, within the configured deadline, never a
# hang or a traceback. ``guarded`` fails a test that hangs (the old client
# waited 3 x 600 s) long before any deadline of the old code would pass.

GUARD_S = 20.0
TINY_DEADLINES: dict[str, float] = {
    "connect_timeout": 0.5,
    "first_byte_timeout": 0.3,
    "idle_timeout": 0.3,
    "request_timeout": 10.0,
}


def tiny_config(server: OpenAIServer, **kwargs: Any) -> ModelConfig:
    return config_for(server, **{**TINY_DEADLINES, **kwargs})


def fail_guarded(provider: StreamingProvider, request: ChatRequest) -> ProviderError:
    async def scenario() -> ProviderError:
        _, error = await asyncio.wait_for(collect_until_error(provider, request), GUARD_S)
        return error

    return run(scenario)


@pytest.mark.parametrize(
    ("reply", "deadline", "output_started"),
    [
        (Reply(stall_before_headers=True), "first_byte", False),
        (Reply(stall_after=0), "first_byte", False),
        (Reply(keepalive_after=0), "first_byte", False),
        # The role chunk is an empty delta: no data, the first-byte clock runs on.
        (Reply(keepalive_after=1), "first_byte", False),
        (Reply(text="partial answer", stall_after=3), "idle", True),
        (Reply(text="partial answer", keepalive_after=3), "idle", True),
    ],
    ids=[
        "never-answers",
        "headers-then-nothing",
        "keepalive-only",
        "role-chunk-then-keepalive",
        "stall-after-output",
        "keepalive-after-output",
    ],
)
def test_a_silent_server_is_a_timeout_naming_the_endpoint_and_the_setting(
    openai_server: OpenAIServer, reply: Reply, deadline: str, output_started: bool
) -> None:
    """Regression: no deadline but the SDK's 600 s read timeout, reset by every
    ``: ping`` comment and multiplied by two retries."""
    openai_server.script(reply)
    # Once output has come, only the idle deadline may fire: a first-byte deadline
    # with room to spare keeps a loaded machine from hitting it first.
    roomy = {"first_byte_timeout": 2.0} if deadline == "idle" else {}
    provider = make_provider(tiny_config(openai_server, **roomy), max_retries=2)
    error = fail_guarded(provider, simple_request(openai_server))
    assert isinstance(error, ProviderTimeoutError)
    assert (error.deadline, error.code) == (deadline, f"{deadline}_timeout")
    assert error.output_started is output_started
    setting = f"{deadline}_timeout"
    assert openai_server.base_url in str(error)
    assert f"set model.{setting} or CAIRN_{setting.upper()}" in str(error)
    assert len(openai_server.requests) == 1  # a timed-out request is not sent again


def test_a_stream_that_trickles_forever_hits_the_request_deadline(
    openai_server: OpenAIServer,
) -> None:
    openai_server.script(Reply(text="x" * 10_000, delta_chars=1, chunk_interval=0.01))
    # A first-byte deadline with room to spare: a loaded machine must not hit it first.
    config = tiny_config(openai_server, request_timeout=1.5, first_byte_timeout=1.0)
    provider = make_provider(config)
    error = fail_guarded(provider, simple_request(openai_server))
    assert isinstance(error, ProviderTimeoutError) and error.deadline == "request"
    assert error.output_started is True
    assert str(error) == (
        f"the request to {openai_server.base_url} did not finish within 1.5 s "
        "(request timeout; set model.request_timeout or CAIRN_REQUEST_TIMEOUT)"
    )


def test_a_connect_timeout_names_the_endpoint() -> None:
    """A listener whose accept queue is full drops the SYN: connecting hangs."""
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        with socket.create_connection(listener.getsockname()):
            config = ModelConfig(model="m", base_url=url, connect_timeout=0.3)
            provider = make_provider(config, max_retries=2)
            error = fail_guarded(provider, chat_request(config, [], [], [user("hi")]))
    assert isinstance(error, ProviderTimeoutError) and error.deadline == "connect"
    assert str(error).startswith(f"could not connect to {url} within 0.3 s (connect timeout;")


def test_a_refused_connection_names_the_url() -> None:
    """Regression: the message was only "Connection error."."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = ModelConfig(model="m", base_url=f"http://127.0.0.1:{port}/v1")
    provider = make_provider(config, max_retries=0)
    error = fail_guarded(provider, chat_request(config, [], [], [user("hi")]))
    assert error.code == "connection_error"
    assert str(error).startswith(f"cannot connect to http://127.0.0.1:{port}/v1 (")


@pytest.mark.parametrize(
    ("inject", "detail"),
    [
        (b"data: \xff\xfe\n\n", "invalid UTF-8"),
        (b"data: <html>502 Bad Gateway</html>\n\n", "a data line is not JSON"),
        (b'data: {"choices": [{"delta": {"content": "ab\n\n', "a data line is not JSON"),
    ],
    ids=["invalid-utf8", "not-json", "truncated-json"],
)
def test_a_malformed_stream_is_a_provider_error_naming_the_endpoint(
    openai_server: OpenAIServer, inject: bytes, detail: str
) -> None:
    """Regression: invalid UTF-8 escaped the client as a UnicodeDecodeError traceback."""
    openai_server.script(Reply(text="partial answer", inject=inject, inject_after=2))
    provider = make_provider(tiny_config(openai_server))
    error = fail_guarded(provider, simple_request(openai_server))
    assert type(error) is ProviderError and error.code == "malformed_stream"
    assert error.output_started is True
    assert str(error).startswith(f"{openai_server.base_url} sent a malformed stream: {detail}")


def test_a_connection_reset_mid_stream_names_the_endpoint(openai_server: OpenAIServer) -> None:
    # The reset waits until the client has read some text: a TCP RST discards
    # whatever the client had not read yet, so an earlier one can land before
    # any output (this test was flaky for that reason).
    read = threading.Event()
    openai_server.script(Reply(text="partial answer", hold=read, hold_after=3, reset_after=3))
    provider = make_provider(tiny_config(openai_server))

    async def scenario() -> ProviderError:
        try:
            async for event in provider.stream(simple_request(openai_server)):
                if isinstance(event, ContentDelta):
                    read.set()
        except ProviderError as exc:
            return exc
        raise AssertionError("the stream did not fail")

    try:
        error = run(lambda: asyncio.wait_for(scenario(), GUARD_S))
    finally:
        read.set()
    assert type(error) is ProviderError and error.code == "connection_error"
    assert error.output_started is True
    assert str(error).startswith(f"the connection to {openai_server.base_url} failed mid-response")


def test_http_and_stream_errors_name_the_endpoint(openai_server: OpenAIServer) -> None:
    openai_server.script(
        Reply.http_error(502, "<html>\n<h1>Bad gateway</h1>\n</html>", retry_after_ms=None),
        Reply(text="partial", error_after=2, error=ErrorSpec("overloaded", type="server_error")),
    )
    provider = make_provider(tiny_config(openai_server), max_retries=0)
    http = fail_guarded(provider, simple_request(openai_server))
    assert http.status == 502 and http.message == "<html> <h1>Bad gateway</h1> </html>"
    assert str(http) == f"HTTP 502 from {openai_server.base_url}: {http.message}"
    in_stream = fail_guarded(provider, simple_request(openai_server))
    assert in_stream.message == "overloaded"
    assert str(in_stream) == f"{openai_server.base_url} reported an error: overloaded"


def test_retries_never_wait_past_the_request_deadline(openai_server: OpenAIServer) -> None:
    """Regression: the SDK honoured Retry-After up to 120 s per retry, whatever the deadline."""
    openai_server.script(
        Reply.http_error(503, retry_after_ms=None, headers={"retry-after": "60"}),
        # No Retry-After: the first back-off (0.375-0.5 s) would pass a 0.3 s deadline.
        Reply.http_error(500, retry_after_ms=None),
    )
    slow_server = make_provider(tiny_config(openai_server), max_retries=2)
    first = fail_guarded(slow_server, simple_request(openai_server))
    assert first.status == 503 and len(openai_server.requests) == 1
    short = make_provider(tiny_config(openai_server, request_timeout=0.3), max_retries=2)
    second = fail_guarded(short, simple_request(openai_server))
    assert second.status == 500 and len(openai_server.requests) == 2


def test_a_retry_the_deadline_allows_still_happens(openai_server: OpenAIServer) -> None:
    openai_server.script(
        Reply.http_error(429, retry_after_ms=None, headers={"retry-after": "0.01"}),
        Reply(text="after the pause"),
    )
    provider = make_provider(tiny_config(openai_server), max_retries=2)
    assert run(lambda: provider.complete(simple_request(openai_server))).text == "after the pause"
    assert [r.headers["x-stainless-retry-count"] for r in openai_server.requests] == ["0", "1"]


def test_the_provider_serves_requests_after_a_timeout(openai_server: OpenAIServer) -> None:
    openai_server.script(Reply(text="partial answer", stall_after=3), Reply(text="healthy"))
    provider = make_provider(tiny_config(openai_server))

    async def scenario() -> tuple[ProviderError, str]:
        _, error = await asyncio.wait_for(
            collect_until_error(provider, simple_request(openai_server)), GUARD_S
        )
        message = await asyncio.wait_for(provider.complete(simple_request(openai_server)), GUARD_S)
        return error, message.text

    error, text = run(scenario)
    assert isinstance(error, ProviderTimeoutError) and text == "healthy"


def test_a_finished_answer_survives_a_stall_before_done(openai_server: OpenAIServer) -> None:
    """Finish reason and usage arrived; a server that then never sends [DONE] costs
    one idle deadline, not the answer."""
    openai_server.script(Reply(text="done", stall_after=4))  # role, "done", finish, usage
    provider = make_provider(tiny_config(openai_server))

    async def scenario() -> list[StreamEvent]:
        return await asyncio.wait_for(collect(provider, simple_request(openai_server)), GUARD_S)

    events = run(scenario)
    assert ContentDelta("done") in events and Finish("stop") in events
    assert any(isinstance(e, UsageEvent) for e in events)


def test_the_context_limit_probe_has_a_deadline(chat_server: OpenAIServer) -> None:
    """An empty stream is probed; a probe that never answers leaves the incomplete stream."""
    chat_server.script(Reply(end_after=0), Reply(stall_before_headers=True))
    provider = make_provider(tiny_config(chat_server))
    error = fail_guarded(provider, simple_request(chat_server))
    assert type(error) is ProviderError and error.code == "incomplete_stream"
    assert chat_server.base_url in str(error)
    assert len(chat_server.requests) == 2


# ---------------------------------------------------------------------------
# Lone surrogates (issue 12, finding 5): scrubbed once, where chunks become events


def test_events_from_chunk_scrubs_lone_surrogates_from_every_text() -> None:
    chunk = {
        "choices": [
            {
                "delta": {
                    "reasoning_content": "think\ud800",
                    "content": "a\udfffb",
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_\ud83d",
                            "function": {"name": "read\udc00", "arguments": '{"p": "\ud800"}'},
                        }
                    ],
                },
                "finish_reason": "stop\ud800",
            }
        ]
    }
    assert events_from_chunk(chunk) == [
        ReasoningDelta("think\ufffd"),
        ContentDelta("a\ufffdb"),
        ToolCallDelta(0, "call_\ufffd", "read\ufffd", '{"p": "\ufffd"}'),
        Finish("stop\ufffd"),
    ]


def test_a_lone_surrogate_escape_in_the_stream_never_reaches_an_event(
    openai_server: OpenAIServer,
) -> None:
    """Regression: ``\\ud800`` in a chunk's JSON became a lone surrogate in the content
    deltas, and ``--output-format json`` / stream-json crashed encoding it."""
    import orjson

    openai_server.script(
        Reply(
            text="ok \ud800 fine",
            reasoning="why \udfff",
            tool_calls=[ToolCallSpec("read_file\ud83d", '{"path": "\ud800"}')],
            delta_chars=3,
        )
    )
    assert b"\\ud800" in json.dumps({"t": "\ud800"}).encode()  # the server sends the escape
    provider = make_provider(config_for(openai_server))
    events = run(lambda: collect(provider, simple_request(openai_server)))
    texts = [
        text
        for e in events
        if isinstance(e, ContentDelta | ReasoningDelta | ToolCallDelta)
        for text in (
            (e.text,) if isinstance(e, ContentDelta | ReasoningDelta) else (e.name, e.arguments)
        )
        if text
    ]
    orjson.dumps(texts)  # raises on a lone surrogate
    acc = TurnAccumulator()
    for event in events:
        acc.add(event)
    assert acc.text == "ok \ufffd fine" and acc.reasoning == "why \ufffd"
    assert acc.tool_calls()[0].name == "read_file\ufffd"


@pytest.mark.parametrize("output_format", ["json", "stream-json"])
def test_cairn_p_prints_an_answer_holding_a_lone_surrogate_escape(
    tmp_path: Any, openai_server: OpenAIServer, output_format: str
) -> None:
    """Regression: the model's ``\\ud800`` crashed ``--output-format json`` with a traceback."""
    from support.cli_run import cairn_p

    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    openai_server.respond_with(lambda body: Reply(text="broken \ud800 char", delta_chars=3))
    env = {"CAIRN_HOME": str(home), "CAIRN_MODEL": "m", "OPENAI_BASE_URL": openai_server.base_url}
    done = cairn_p("-p", "hello", "--output-format", output_format, cwd=workspace, env=env)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[-1]["type"] == "result"
    assert lines[-1]["result"] == "broken \ufffd char"


def test_a_context_limit_error_says_what_the_provider_counted_when_it_does() -> None:
    """Issue 25: the refusal's own count sizes the reactive compaction and the fork retry."""
    openai = (
        "This model's maximum context length is 32000 tokens. However, you requested "
        "34000 tokens (26213 in the messages, 7787 in the completion)."
    )
    assert ContextLimitError(openai).prompt_tokens == 26_213
    anthropic = "prompt is too long: 208543 tokens > 200000 maximum"
    assert ContextLimitError(anthropic).prompt_tokens == 208_543
    # Anthropic's other refusal: the input fits but not with max_tokens on top.
    output = "input length and `max_tokens` exceed context limit: 6412 + 16000 > 16384, ..."
    assert ContextLimitError(output).prompt_tokens == 6_412
    assert ContextLimitError("maximum context length exceeded").prompt_tokens is None
