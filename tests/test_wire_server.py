"""The test server's three wire APIs, driven through the official SDKs (``openai_server``).

Chat completions, Anthropic Messages and the OpenAI Responses API answer the
same scripted ``Reply``: the SDKs must parse every stream, object and error
the server sends, a native request must be recorded in chat-completions form,
refusals must come in each API's own words, and prompt caching must split
the one prompt count as the providers document.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from support.openai_server import (
    ErrorSpec,
    OpenAIServer,
    Reply,
    ToolCallSpec,
    UsageSpec,
)

LONG_SYSTEM = "You are a careful assistant who reads every file before answering. " * 150
PARAMS = {"type": "object", "properties": {"path": {"type": "string"}}}


def claude(server: OpenAIServer) -> anthropic.Anthropic:
    # The SDK posts to {base_url}/v1/messages: with base_url ending in /v1 the path is
    # /v1/v1/messages, which the server routes like any path ending in /messages.
    return anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0)


def oai(server: OpenAIServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)


def dump(model: Any) -> dict[str, Any]:
    """An SDK object as the JSON it was parsed from (fields the server did not send left out)."""
    out: dict[str, Any] = model.to_dict(mode="json", exclude_unset=True)
    return out


def api_message(error: openai.APIStatusError) -> str:
    """The ``error.message`` the server sent (the SDK's own message adds the status)."""
    body: Any = error.body
    return str(body["message"])


def post(server: OpenAIServer, path: str, payload: dict[str, Any]) -> tuple[int, Any, Any]:
    """A raw POST (for requests the SDKs would not send): status, headers, JSON body."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.port}{path}",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.headers, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, error.headers, json.loads(error.read())


def post_raw(server: OpenAIServer, path: str, payload: dict[str, Any]) -> bytes:
    """A raw POST's response body, as bytes (an SSE stream read to its end)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.port}{path}",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        body: bytes = response.read()
    return body


def anthropic_events(server: OpenAIServer, **params: Any) -> list[dict[str, Any]]:
    params.setdefault("model", "claude-test")
    params.setdefault("max_tokens", 1024)
    params.setdefault("messages", [{"role": "user", "content": "hi"}])
    stream = claude(server).messages.create(stream=True, **params)
    return [dump(event) for event in stream]


def responses_events(server: OpenAIServer, **params: Any) -> list[dict[str, Any]]:
    params.setdefault("model", "gpt-test")
    params.setdefault("input", "hi")
    params.setdefault("store", False)
    stream = oai(server).responses.create(stream=True, **params)
    return [dump(event) for event in stream]


def text_of(events: list[dict[str, Any]]) -> str:
    """The answer text of Anthropic or Responses events."""
    out = ""
    for event in events:
        if event["type"] == "content_block_delta" and event["delta"]["type"] == "text_delta":
            out += event["delta"]["text"]
        if event["type"] == "response.output_text.delta":
            out += event["delta"]
    return out


# ---------------------------------------------------------------------------
# Anthropic Messages


def test_anthropic_streams_text_as_documented_events(openai_server: OpenAIServer) -> None:
    openai_server.script(Reply(text="Hello there"))
    events = anthropic_events(openai_server)
    # (The SDK drops ``ping`` events; the raw stream has one after ``message_start``.)
    assert [e["type"] for e in events] == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * 3,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[0]["message"]
    assert start["id"].startswith("msg_") and start["model"] == "claude-test"
    assert start["role"] == "assistant" and start["content"] == []
    assert events[1]["content_block"] == {"type": "text", "text": ""}
    assert text_of(events) == "Hello there"
    assert events[-2]["delta"]["stop_reason"] == "end_turn"
    usage = events[-2]["usage"]
    assert usage["output_tokens"] == 3
    assert usage["input_tokens"] == start["usage"]["input_tokens"] > 0
    request = openai_server.requests[-1]
    assert request.api == "anthropic" and request.path == "/v1/v1/messages"
    assert request.native is not None and request.native["max_tokens"] == 1024
    assert request.body["messages"] == [{"role": "user", "content": "hi"}]
    assert openai_server.bodies == [request.body]

    openai_server.script(Reply(text="Hi"))
    raw = post_raw(openai_server, "/v1/messages", {**request.native, "stream": True})
    frames = raw.decode().split("\n\n")
    assert frames[0].startswith("event: message_start\ndata: {")
    assert frames[1] == 'event: ping\ndata: {"type": "ping"}'
    assert frames[-2] == 'event: message_stop\ndata: {"type": "message_stop"}'


def test_anthropic_tool_calls_through_the_stream_helper(openai_server: OpenAIServer) -> None:
    openai_server.script(
        Reply(
            text="Reading.",
            tool_calls=[
                ToolCallSpec("read", '{"path": "a.txt"}', id="toolu_given"),
                ToolCallSpec("list", "{}"),
            ],
        )
    )
    tools: Any = [{"name": "read", "description": "Read a file", "input_schema": PARAMS}]
    with claude(openai_server).messages.stream(
        model="claude-test",
        max_tokens=64,
        messages=[{"role": "user", "content": "read a.txt"}],
        tools=tools,
    ) as stream:
        message = stream.get_final_message()
    blocks = [dump(block) for block in message.content]
    assert blocks[0] == {"type": "text", "text": "Reading."}
    assert blocks[1]["type"] == "tool_use" and blocks[1]["id"] == "toolu_given"
    assert blocks[1]["name"] == "read" and blocks[1]["input"] == {"path": "a.txt"}
    assert blocks[2]["id"].startswith("toolu_") and blocks[2]["input"] == {}
    assert message.stop_reason == "tool_use"
    assert openai_server.requests[-1].body["tools"] == [
        {
            "type": "function",
            "function": {"name": "read", "description": "Read a file", "parameters": PARAMS},
        }
    ]


def test_anthropic_thinking_signatures_round_trip(openai_server: OpenAIServer) -> None:
    client = claude(openai_server)
    thinking: Any = {"type": "enabled", "budget_tokens": 1024}
    openai_server.script(
        Reply(reasoning="I should read it.", tool_calls=[ToolCallSpec("read", '{"path": "a"}')])
    )
    first = client.messages.create(
        model="claude-test",
        max_tokens=2048,
        thinking=thinking,
        messages=[{"role": "user", "content": "read a"}],
    )
    content = [dump(block) for block in first.content]
    assert content[0]["type"] == "thinking" and content[0]["thinking"] == "I should read it."
    assert content[0]["signature"]
    call_id = content[1]["id"]
    result = {"type": "tool_result", "tool_use_id": call_id, "content": "file a"}
    history: Any = [
        {"role": "user", "content": "read a"},
        {"role": "assistant", "content": content},
        {"role": "user", "content": [result]},
    ]
    openai_server.script(Reply(text="Done."), Reply(text="never played"))
    second = client.messages.create(
        model="claude-test", max_tokens=2048, thinking=thinking, messages=history
    )
    assert dump(second.content[0]) == {"type": "text", "text": "Done."}
    assert openai_server.requests[-1].body["messages"][1]["reasoning_content"] == (
        "I should read it."
    )

    # A thinking block whose text or signature was changed is refused, and no reply is used.
    tampered = json.loads(json.dumps(history))
    tampered[1]["content"][0]["thinking"] = "I should read b."
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(
            model="claude-test", max_tokens=2048, thinking=thinking, messages=tampered
        )
    assert refused.value.status_code == 400
    assert refused.value.api_message == (
        "messages.1.content.0: Invalid `signature` in `thinking` block"
    )
    assert refused.value.type == "invalid_request_error" and refused.value.request_id
    assert openai_server.pending == 1
    assert openai_server.requests[-1].rejected == refused.value.api_message

    # With thinking on, the tool-using assistant message must start with its thinking block.
    without = json.loads(json.dumps(history))
    without[1]["content"] = without[1]["content"][1:]
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(
            model="claude-test", max_tokens=2048, thinking=thinking, messages=without
        )
    assert str(refused.value.api_message).startswith(
        "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
        "`tool_use`. When `thinking` is enabled, a final `assistant` message must start "
        "with a thinking block"
    )
    # ... which is no rule at all without thinking.
    assert (
        claude(openai_server)
        .messages.create(model="claude-test", max_tokens=64, messages=without)
        .content
    )
    assert openai_server.pending == 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda r: r["messages"][2]["content"][0].update(tool_use_id="toolu_other"),
            "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: "
            "toolu_other. Each `tool_result` block must have a corresponding `tool_use` block "
            "in the previous message.",
        ),
        (
            lambda r: r["messages"][2].update(content="no result"),
            "messages.1: `tool_use` ids were found without `tool_result` blocks immediately "
            "after: toolu_1. Each `tool_use` block must have a corresponding `tool_result` "
            "block in the next message.",
        ),
        (
            lambda r: r["messages"][0].update(content=[{"type": "text", "text": ""}]),
            "messages: text content blocks must be non-empty",
        ),
        (
            lambda r: r["messages"][1]["content"].insert(
                0,
                {
                    "type": "thinking",
                    "thinking": "t",
                    "signature": "forged",
                    "cache_control": {"type": "ephemeral"},
                },
            ),
            "messages.1.content.0.thinking.cache_control: Extra inputs are not permitted",
        ),
        (lambda r: r.pop("max_tokens"), "max_tokens: Field required"),
    ],
)
def test_anthropic_refuses_what_the_api_refuses(
    openai_server: OpenAIServer, change: Any, message: str
) -> None:
    request: dict[str, Any] = {
        "model": "claude-test",
        "max_tokens": 64,
        "messages": [
            {"role": "user", "content": "read a"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a"}],
            },
        ],
    }
    openai_server.script(Reply(text="kept"))
    assert post(openai_server, "/v1/messages", request)[0] == 200
    openai_server.script(Reply(text="kept"))
    change(request)
    status, headers, body = post(openai_server, "/v1/messages", request)
    assert status == 400
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"] == message
    assert headers["request-id"] == body["request_id"]
    assert openai_server.pending == 1  # the refusal took no scripted reply
    assert openai_server.requests[-1].rejected == message
    assert [r.api for r in openai_server.requests] == ["anthropic", "anthropic"]


def test_anthropic_request_in_chat_form(openai_server: OpenAIServer) -> None:
    cache = {"type": "ephemeral"}
    request: Any = {
        "model": "claude-test",
        "max_tokens": 99,
        "temperature": 0.5,
        "stop_sequences": ["END"],
        "system": [{"type": "text", "text": "Be terse.", "cache_control": cache}],
        "tools": [
            {"name": "read", "input_schema": PARAMS, "cache_control": cache},
            {"name": "list", "description": "List files", "input_schema": {"type": "object"}},
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Look:"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"},
                    },
                    {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Reading "},
                    {"type": "text", "text": "both."},
                    {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "list", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "A"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": [{"type": "text", "text": "a\n"}, {"type": "text", "text": "b"}],
                    },
                    {"type": "text", "text": "Now answer.", "cache_control": cache},
                ],
            },
        ],
    }
    assert post(openai_server, "/v1/messages", request)[0] == 200
    assert openai_server.requests[-1].body == {
        "model": "claude-test",
        "messages": [
            {"role": "system", "content": "Be terse."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Look:"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}},
                    {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                ],
            },
            {
                "role": "assistant",
                "content": "Reading both.",
                "tool_calls": [
                    {
                        "id": "toolu_1",
                        "type": "function",
                        "function": {"name": "read", "arguments": '{"path": "a"}'},
                    },
                    {
                        "id": "toolu_2",
                        "type": "function",
                        "function": {"name": "list", "arguments": "{}"},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "toolu_1", "content": "A"},
            {"role": "tool", "tool_call_id": "toolu_2", "content": "a\nb"},
            {"role": "user", "content": "Now answer."},
        ],
        "tools": [
            {"type": "function", "function": {"name": "read", "parameters": PARAMS}},
            {
                "type": "function",
                "function": {
                    "name": "list",
                    "description": "List files",
                    "parameters": {"type": "object"},
                },
            },
        ],
        "max_tokens": 99,
        "stream": False,
        "stop": ["END"],
        "temperature": 0.5,
    }


def test_anthropic_http_errors_parse_in_the_sdk(openai_server: OpenAIServer) -> None:
    client = claude(openai_server)
    params: Any = {"model": "c", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    openai_server.script(Reply.http_error(429, "Number of requests has exceeded your limit."))
    with pytest.raises(anthropic.RateLimitError) as limited:
        client.messages.create(**params)
    assert limited.value.status_code == 429 and limited.value.type == "rate_limit_error"
    assert limited.value.api_message == "Number of requests has exceeded your limit."
    assert str(limited.value.request_id).startswith("req_")

    openai_server.script(Reply.http_error(529, "Overloaded"))
    with pytest.raises(anthropic.APIStatusError) as overloaded:
        client.messages.create(**params)
    assert overloaded.value.status_code == 529 and overloaded.value.type == "overloaded_error"

    # A context-limit refusal scripted in OpenAI's words comes in Anthropic's.
    openai_server.script(
        Reply.http_error(
            400,
            "This model's maximum context length is 8192 tokens. However, you requested 9081 "
            "tokens (9000 in the messages, 81 in the completion).",
            code="context_length_exceeded",
        ),
        Reply.http_error(
            400,
            "This model's maximum context length is 8192 tokens. However, you requested 9081 "
            "tokens (8000 in the messages, 1081 in the completion).",
            code="context_length_exceeded",
        ),
    )
    with pytest.raises(anthropic.BadRequestError) as too_long:
        client.messages.create(**params)
    assert too_long.value.api_message == "prompt is too long: 9000 tokens > 8192 maximum"
    with pytest.raises(anthropic.BadRequestError) as too_long:
        client.messages.create(**params)
    assert too_long.value.api_message == (
        "input length and `max_tokens` exceed context limit: 8000 + 1081 > 8192, "
        "decrease input length or `max_tokens` and try again"
    )


def test_anthropic_error_event_mid_stream(openai_server: OpenAIServer) -> None:
    openai_server.script(
        Reply(text="partial answer", error_after=3, error=ErrorSpec("Overloaded", type="x"))
    )
    seen: list[dict[str, Any]] = []
    stream = claude(openai_server).messages.create(
        model="c", max_tokens=8, messages=[{"role": "user", "content": "hi"}], stream=True
    )
    with pytest.raises(anthropic.APIStatusError) as failed:
        for event in stream:
            seen.append(dump(event))
    assert text_of(seen) == "partial "
    assert failed.value.type == "api_error" and failed.value.api_message == "Overloaded"

    openai_server.script(
        Reply(error_after=1, error=ErrorSpec("Overloaded", type="overloaded_error"))
    )
    with pytest.raises(anthropic.APIStatusError) as failed:
        anthropic_events(openai_server)
    assert failed.value.type == "overloaded_error"


def test_anthropic_a_stream_without_a_finish_has_no_message_stop(
    openai_server: OpenAIServer,
) -> None:
    openai_server.script(Reply(text="cut off", omit_finish=True))
    events = anthropic_events(openai_server)
    assert events[-1]["type"] == "message_delta"
    assert events[-1]["delta"]["stop_reason"] is None
    openai_server.script(Reply(text="long", finish_reason="length"))
    assert anthropic_events(openai_server)[-2]["delta"]["stop_reason"] == "max_tokens"


def cached_request(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "model": "claude-test",
        "max_tokens": 64,
        "system": [{"type": "text", "text": LONG_SYSTEM, "cache_control": {"type": "ephemeral"}}],
        "messages": messages,
    }


def marked(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}


def usage_of(server: OpenAIServer, request: dict[str, Any]) -> dict[str, Any]:
    status, _, body = post(server, "/v1/messages", request)
    assert status == 200, body
    usage: dict[str, Any] = body["usage"]
    return usage


def chat_prompt_tokens(server: OpenAIServer) -> int:
    """The prompt count of the last request's chat form, as the chat API computes it."""
    body = server.requests[-1].body
    return max(1, len(json.dumps([body.get("messages", []), body.get("tools", [])])) // 4)


def test_anthropic_prompt_cache_writes_then_reads_the_prefix(
    openai_server: OpenAIServer,
) -> None:
    first = cached_request([{"role": "user", "content": [marked("first question")]}])
    one = usage_of(openai_server, first)
    prompt_one = chat_prompt_tokens(openai_server)
    assert prompt_one > openai_server.cache_min_tokens
    assert one["cache_read_input_tokens"] == 0
    assert one["cache_creation_input_tokens"] == prompt_one  # through the last breakpoint
    assert one["input_tokens"] == 0

    second = cached_request(
        [
            {"role": "user", "content": [{"type": "text", "text": "first question"}]},
            {"role": "assistant", "content": "First answer."},
            {"role": "user", "content": [marked("second question")]},
        ]
    )
    two = usage_of(openai_server, second)
    prompt_two = chat_prompt_tokens(openai_server)
    # The breakpoint moved on; the lookback finds request 1's and reads its prefix.
    assert two["cache_read_input_tokens"] == prompt_one
    assert two["cache_creation_input_tokens"] == prompt_two - prompt_one > 0
    assert two["input_tokens"] == 0
    stats = openai_server.cache_stats
    assert [(s.cache_read, s.cache_creation, s.input_tokens) for s in stats] == [
        (0, prompt_one, 0),
        (prompt_one, prompt_two - prompt_one, 0),
    ]
    assert [s.prompt_tokens for s in stats] == [prompt_one, prompt_two]

    # A tail after the last breakpoint is ordinary input.
    third = cached_request(second["messages"] + [])
    third["messages"].append({"role": "assistant", "content": "Second answer."})
    third["messages"].append({"role": "user", "content": "third question"})
    three = usage_of(openai_server, third)
    assert three["cache_read_input_tokens"] == prompt_two
    assert three["cache_creation_input_tokens"] == 0
    assert three["input_tokens"] == chat_prompt_tokens(openai_server) - prompt_two > 0


def test_anthropic_cache_lookback_is_twenty_blocks(openai_server: OpenAIServer) -> None:
    base: dict[str, Any] = {
        "model": "claude-test",
        "max_tokens": 64,
        "system": LONG_SYSTEM,
        "messages": [{"role": "user", "content": [marked("question")]}],
    }
    written = usage_of(openai_server, base)["cache_creation_input_tokens"]
    assert written > 0

    def later(blocks: int) -> dict[str, Any]:
        texts = [{"type": "text", "text": f"note {n}"} for n in range(blocks - 1)]
        return {
            **base,
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "question"}]},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": [*texts, marked("last note")]},
            ],
        }

    # 25 blocks after the assistant message: the breakpoint is 26 blocks past the entry.
    assert usage_of(openai_server, later(25))["cache_read_input_tokens"] == 0
    # 15: the entry is 16 blocks back, inside the window.
    assert usage_of(openai_server, later(15))["cache_read_input_tokens"] == written


def test_anthropic_cache_needs_a_minimum_prefix(openai_server: OpenAIServer) -> None:
    short: dict[str, Any] = {
        "model": "claude-test",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": [marked("short")]}],
    }
    for _ in range(2):
        usage = usage_of(openai_server, short)
        assert usage["cache_creation_input_tokens"] == usage["cache_read_input_tokens"] == 0
        assert usage["input_tokens"] == chat_prompt_tokens(openai_server)
    openai_server.cache_min_tokens = 0
    assert usage_of(openai_server, short)["cache_creation_input_tokens"] > 0
    assert usage_of(openai_server, short)["cache_read_input_tokens"] > 0
    openai_server.clear_caches()
    assert usage_of(openai_server, short)["cache_read_input_tokens"] == 0


def test_anthropic_more_than_four_breakpoints_are_refused(openai_server: OpenAIServer) -> None:
    request = cached_request(
        [{"role": "user", "content": [marked("a"), marked("b"), marked("c"), marked("d")]}]
    )
    status, _, body = post(openai_server, "/v1/messages", request)
    assert status == 400
    assert body["error"] == {
        "type": "invalid_request_error",
        "message": "A maximum of 4 blocks with cache_control may be provided. Found 5.",
    }
    assert openai_server.cache_stats == []


# ---------------------------------------------------------------------------
# OpenAI Responses


def test_responses_streams_text_as_documented_events(openai_server: OpenAIServer) -> None:
    openai_server.script(Reply(text="Hello there"))
    events = responses_events(openai_server, instructions="Be terse.")
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * 3,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert text_of(events) == "Hello there"
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["output"] == [events[-2]["item"]]
    usage = final["usage"]
    assert usage["input_tokens"] == chat_prompt_tokens(openai_server)
    assert usage["input_tokens_details"]["cached_tokens"] == 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    request = openai_server.requests[-1]
    assert request.api == "responses" and request.path == "/v1/responses"
    assert request.body["messages"] == [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "hi"},
    ]


def test_responses_tool_calls_through_the_stream_helper(openai_server: OpenAIServer) -> None:
    openai_server.script(Reply(tool_calls=[ToolCallSpec("read", '{"path": "a"}', id="call_given")]))
    tools: Any = [{"type": "function", "name": "read", "parameters": PARAMS, "strict": False}]
    with oai(openai_server).responses.stream(
        model="gpt-test", input="read a", tools=tools, store=False
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "response.function_call_arguments.delta"]
        response = stream.get_final_response()
    assert "".join(deltas) == '{"path": "a"}'
    call = dump(response.output[0])
    assert call["type"] == "function_call" and call["call_id"] == "call_given"
    assert call["id"].startswith("fc_") and call["arguments"] == '{"path": "a"}'
    assert openai_server.requests[-1].body["tools"] == [
        {"type": "function", "function": {"name": "read", "parameters": PARAMS}}
    ]


def test_responses_encrypted_reasoning_round_trip(openai_server: OpenAIServer) -> None:
    client = oai(openai_server)
    openai_server.script(
        Reply(reasoning="Check the file.", tool_calls=[ToolCallSpec("read", "{}", id="call_1")])
    )
    first = client.responses.create(
        model="gpt-test",
        input="read a",
        store=False,
        include=["reasoning.encrypted_content"],
        reasoning={"effort": "low", "summary": "auto"},
    )
    reasoning, call = (dump(item) for item in first.output)
    assert reasoning["summary"] == [{"type": "summary_text", "text": "Check the file."}]
    assert reasoning["encrypted_content"]
    history: Any = [
        {"role": "user", "content": "read a"},
        reasoning,
        call,
        {"type": "function_call_output", "call_id": "call_1", "output": "file a"},
    ]
    openai_server.script(Reply(text="Done."), Reply(text="never played"))
    second = client.responses.create(model="gpt-test", input=history, store=False)
    assert second.output_text == "Done."
    assert openai_server.requests[-1].body["messages"][1] == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "Check the file.",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        ],
    }

    tampered = json.loads(json.dumps(history))
    tampered[1]["encrypted_content"] = reasoning["encrypted_content"][:-4] + "0000"
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="gpt-test", input=tampered, store=False)
    assert refused.value.code == "invalid_encrypted_content"
    assert api_message(refused.value).startswith(
        f"The encrypted content for item {reasoning['id']} could not be verified."
    )
    stripped = json.loads(json.dumps(history))
    del stripped[1]["encrypted_content"]
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.create(model="gpt-test", input=stripped, store=False)
    assert api_message(missing.value).startswith(f"Item with id '{reasoning['id']}' not found.")
    assert openai_server.pending == 1

    # Without asking for it, no encrypted content comes.
    openai_server.script(Reply(reasoning="Hmm.", text="ok"))
    plain = client.responses.create(model="gpt-test", input="hi", store=False)
    assert "encrypted_content" not in dump(plain.output[0])


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (
            [{"type": "function_call_output", "call_id": "call_9", "output": "x"}],
            "No tool call found for function call output with call_id call_9.",
        ),
        (
            [{"type": "function_call", "call_id": "call_9", "name": "read", "arguments": "{}"}],
            "No tool output found for function call call_9.",
        ),
    ],
)
def test_responses_refuses_unpaired_tool_items(
    openai_server: OpenAIServer, items: list[dict[str, Any]], message: str
) -> None:
    openai_server.script(Reply(text="kept"))
    history: Any = [{"role": "user", "content": "hi"}, *items]
    with pytest.raises(openai.BadRequestError) as refused:
        oai(openai_server).responses.create(model="gpt-test", input=history, store=False)
    assert api_message(refused.value) == message and refused.value.param == "input"
    assert openai_server.pending == 1 and openai_server.requests[-1].rejected == message


def test_responses_request_in_chat_form(openai_server: OpenAIServer) -> None:
    request = {
        "model": "gpt-test",
        "instructions": "Be terse.",
        "max_output_tokens": 77,
        "parallel_tool_calls": False,
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "tools": [{"type": "function", "name": "read", "parameters": PARAMS, "strict": True}],
        "input": [
            {"type": "message", "role": "developer", "content": "Use tools."},
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Look:"},
                    {"type": "input_image", "image_url": "data:image/png;base64,QUJD"},
                ],
            },
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Reading.", "annotations": []}],
            },
            {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "read", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "A"},
            {
                "type": "function_call_output",
                "call_id": "c2",
                "output": [{"type": "input_text", "text": "B"}],
            },
            {"role": "user", "content": [{"type": "input_text", "text": "Now answer."}]},
        ],
    }
    assert post(openai_server, "/v1/responses", request)[0] == 200
    call = {"type": "function", "function": {"name": "read", "arguments": "{}"}}
    assert openai_server.requests[-1].body == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "Be terse."},
            {"role": "system", "content": "Use tools."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Look:"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}},
                ],
            },
            {
                "role": "assistant",
                "content": "Reading.",
                "tool_calls": [{"id": "c1", **call}, {"id": "c2", **call}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "A"},
            {"role": "tool", "tool_call_id": "c2", "content": "B"},
            {"role": "user", "content": "Now answer."},
        ],
        "tools": [{"type": "function", "function": {"name": "read", "parameters": PARAMS}}],
        "max_tokens": 77,
        "stream": False,
        "parallel_tool_calls": False,
    }


def test_responses_errors_parse_in_the_sdk(openai_server: OpenAIServer) -> None:
    openai_server.script(
        Reply.http_error(
            400, "Your input exceeds the context window.", code="context_length_exceeded"
        )
    )
    with pytest.raises(openai.BadRequestError) as refused:
        oai(openai_server).responses.create(model="gpt-test", input="hi")
    assert refused.value.code == "context_length_exceeded"
    assert api_message(refused.value) == "Your input exceeds the context window."

    openai_server.script(
        Reply(text="partial", error_after=2, error=ErrorSpec("prompt is too long: 9 > 8"))
    )
    events = responses_events(openai_server)
    assert text_of(events) == "part"
    failed = events[-1]
    assert failed["type"] == "response.failed"
    assert failed["sequence_number"] == events[-2]["sequence_number"] + 1
    assert failed["response"]["status"] == "failed"
    assert failed["response"]["error"] == {
        "code": "context_length_exceeded",
        "message": "prompt is too long: 9 > 8",
    }

    openai_server.script(Reply(text="long", finish_reason="length"))
    final = responses_events(openai_server)[-1]
    assert final["type"] == "response.incomplete"
    assert final["response"]["incomplete_details"] == {"reason": "max_output_tokens"}

    openai_server.script(Reply(text="cut off", omit_finish=True))
    assert responses_events(openai_server)[-1]["type"] == "response.output_item.done"


def test_responses_caches_a_repeated_prefix(openai_server: OpenAIServer) -> None:
    first = responses_events(openai_server, instructions=LONG_SYSTEM, input="first question")
    prompt_one = first[-1]["response"]["usage"]["input_tokens"]
    assert prompt_one > 1024
    assert first[-1]["response"]["usage"]["input_tokens_details"]["cached_tokens"] == 0
    history: Any = [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "First answer."},
        {"role": "user", "content": "second question"},
    ]
    second = responses_events(openai_server, instructions=LONG_SYSTEM, input=history)
    usage = second[-1]["response"]["usage"]
    cached = usage["input_tokens_details"]["cached_tokens"]
    assert usage["input_tokens"] == chat_prompt_tokens(openai_server)
    assert cached % 128 == 0 and 1024 <= cached <= prompt_one < cached + 256
    assert openai_server.cache_stats[-1].cache_read == cached
    other = responses_events(openai_server, instructions="Other. " + LONG_SYSTEM, input=history)
    assert other[-1]["response"]["usage"]["input_tokens_details"]["cached_tokens"] == 0


# ---------------------------------------------------------------------------
# All three


def chat_text(server: OpenAIServer, **params: Any) -> Iterator[str]:
    stream = oai(server).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True, **params
    )
    for chunk in stream:
        for choice in chunk.choices:
            yield choice.delta.content or ""


@pytest.mark.parametrize("api", ["chat", "anthropic", "responses"])
def test_a_fault_cuts_every_api_at_the_same_point(openai_server: OpenAIServer, api: str) -> None:
    openai_server.script(Reply(text="Hello world", abort_after=3))
    got: list[str] = []
    with pytest.raises((openai.APIConnectionError, anthropic.APIConnectionError)):
        if api == "chat":
            got.extend(chat_text(openai_server))
        elif api == "anthropic":
            stream = claude(openai_server).messages.create(
                model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}], stream=True
            )
            got.extend(text_of([dump(event)]) for event in stream)
        else:
            stream_r = oai(openai_server).responses.create(model="m", input="hi", stream=True)
            got.extend(text_of([dump(event)]) for event in stream_r)
    assert "".join(got) == "Hello wo"
    assert openai_server.requests[-1].api == api


def test_one_conversation_counts_the_same_in_every_api(openai_server: OpenAIServer) -> None:
    tool = {"name": "read", "description": "Read a file", "parameters": PARAMS}
    openai_server.script(Reply(text="a"), Reply(text="a"), Reply(text="a"))
    chat_tools: Any = [{"type": "function", "function": tool}]
    chat = oai(openai_server).chat.completions.create(
        model="m",
        messages=[{"role": "system", "content": "Be terse."}, {"role": "user", "content": "hi"}],
        tools=chat_tools,
        stream=True,
        stream_options={"include_usage": True},
    )
    chat_usage = next(chunk.usage for chunk in chat if chunk.usage)
    claude_tools: Any = [{"name": "read", "description": "Read a file", "input_schema": PARAMS}]
    with claude(openai_server).messages.stream(
        model="m",
        max_tokens=8,
        system="Be terse.",
        messages=[{"role": "user", "content": "hi"}],
        tools=claude_tools,
    ) as stream:
        claude_usage = stream.get_final_message().usage
    responses_tools: Any = [{"type": "function", **tool}]
    response = oai(openai_server).responses.create(
        model="m", instructions="Be terse.", input="hi", tools=responses_tools
    )
    bodies = openai_server.bodies
    assert bodies[0]["messages"] == bodies[1]["messages"] == bodies[2]["messages"]
    assert bodies[0]["tools"] == bodies[1]["tools"] == bodies[2]["tools"]
    prompt = chat_usage.prompt_tokens
    claude_input = (
        claude_usage.input_tokens
        + (claude_usage.cache_read_input_tokens or 0)
        + (claude_usage.cache_creation_input_tokens or 0)
    )
    assert response.usage is not None
    assert prompt == claude_input == response.usage.input_tokens
    assert [s.prompt_tokens for s in openai_server.cache_stats] == [prompt] * 3
    assert [s.api for s in openai_server.cache_stats] == ["chat", "anthropic", "responses"]


def test_responders_read_every_api_in_chat_form(openai_server: OpenAIServer) -> None:
    openai_server.respond_with(
        lambda body: Reply(text=f"{len(body['messages'])}:{body['messages'][-1]['content']}")
    )
    message = claude(openai_server).messages.create(
        model="m", max_tokens=8, system="s", messages=[{"role": "user", "content": "one"}]
    )
    assert dump(message.content[0])["text"] == "2:one"
    assert oai(openai_server).responses.create(model="m", input="two").output_text == "1:two"
    usage = UsageSpec(1000, 7, cached_tokens=512)
    openai_server.respond_with(lambda body: Reply(text="x", usage=usage))
    scripted = (
        claude(openai_server)
        .messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "x"}])
        .usage
    )
    assert (scripted.input_tokens, scripted.cache_read_input_tokens) == (488, 512)
    assert scripted.output_tokens == 7
    assert [r.api for r in openai_server.requests] == ["anthropic", "responses", "anthropic"]
    assert all(r.native is not None for r in openai_server.requests)
