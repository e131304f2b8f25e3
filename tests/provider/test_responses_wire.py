"""The Responses API translation: request bodies, stream events, usage and errors, offline."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cairn.messages import (
    ImagePart,
    JSONObject,
    JSONValue,
    Message,
    MessageMeta,
    NativeReasoning,
    TextPart,
    ToolCall,
    Usage,
    assistant,
    system,
    tool_result,
    user,
)
from cairn.provider.config import ModelConfig
from cairn.provider.events import (
    ContentDelta,
    Finish,
    ReasoningDelta,
    ReasoningItem,
    StreamEvent,
    ToolCallDelta,
    TurnAccumulator,
    UsageEvent,
)
from cairn.provider.request import ChatRequest, chat_request
from cairn.provider.responses_request import (
    ENCRYPTED_REASONING,
    TOOL_RESULT_IMAGE_PLACEHOLDER,
    responses_body,
    responses_input,
)
from cairn.provider.responses_stream import (
    ResponsesStream,
    ResponsesStreamError,
    responses_error,
    responses_usage,
)

CONFIG = ModelConfig(
    model="gpt-5-mini",
    max_output_tokens=4000,
    params={"reasoning": {"effort": "low", "summary": "auto"}, "parallel_tool_calls": True},
    api="responses",
)
READ_FILE: JSONObject = {
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
IMAGE_URL = "data:image/png;base64,iVBORw0KGgo="
REASONING: JSONObject = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [{"type": "summary_text", "text": "Two files to read."}],
    "encrypted_content": "gAAAAB-opaque",
}


def with_reasoning(message: Message, *items: JSONObject) -> Message:
    return Message(
        role=message.role,
        content=message.content,
        tool_calls=message.tool_calls,
        meta=MessageMeta(native_reasoning=NativeReasoning("responses", items)),
    )


def request(messages: Sequence[Message], tools: Sequence[JSONObject] = (READ_FILE,)) -> ChatRequest:
    return chat_request(CONFIG, [system("You are terse.")], tools, messages)


def conversation() -> list[Message]:
    calls = [
        ToolCall("call_a", "read_file", '{"path": "a.py"}'),
        ToolCall("call_b", "read_file", "{}"),
    ]
    return [
        user([TextPart("What is in this screenshot?"), ImagePart(IMAGE_URL)]),
        with_reasoning(assistant("Let me read both files.", calls), REASONING),
        tool_result("call_a", "print('a')"),
        tool_result("call_b", "print('b')"),
        user("Thanks. Summarise."),
    ]


# ---------------------------------------------------------------------------
# Request body


def test_body_of_a_representative_conversation() -> None:
    assert responses_body(request(conversation())) == {
        "model": "gpt-5-mini",
        "input": [
            {
                "type": "message",
                "role": "system",
                "content": [{"type": "input_text", "text": "You are terse."}],
            },
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What is in this screenshot?"},
                    {"type": "input_image", "image_url": IMAGE_URL, "detail": "auto"},
                ],
            },
            REASONING,
            {
                "type": "message",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": "Let me read both files.", "annotations": []}
                ],
            },
            {
                "type": "function_call",
                "call_id": "call_a",
                "name": "read_file",
                "arguments": '{"path": "a.py"}',
            },
            {"type": "function_call", "call_id": "call_b", "name": "read_file", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_a", "output": "print('a')"},
            {"type": "function_call_output", "call_id": "call_b", "output": "print('b')"},
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Thanks. Summarise."}],
            },
        ],
        "tools": [
            {
                "type": "function",
                "name": "read_file",
                "description": "Read a file.",
                "parameters": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}},
                    "required": ["path"],
                },
                "strict": False,
            }
        ],
        "reasoning": {"effort": "low", "summary": "auto"},
        "parallel_tool_calls": True,
        "max_output_tokens": 4000,
        "stream": True,
        "store": False,
        "include": [ENCRYPTED_REASONING],
    }


def test_the_body_is_deterministic_and_leaves_the_request_alone() -> None:
    first = request(conversation())
    before = json.dumps(first.body(), sort_keys=True)
    body = responses_body(first)
    assert json.dumps(body) == json.dumps(responses_body(first))
    assert json.dumps(body) == json.dumps(responses_body(request(conversation())))
    items = body["input"]
    assert isinstance(items, list) and isinstance(items[2], dict)
    items[2]["id"] = "changed"  # the body's items are copies, not the request's dicts
    assert json.dumps(first.body(), sort_keys=True) == before
    assert responses_body(first)["input"] == responses_body(request(conversation()))["input"]


def test_the_fork_and_the_next_turn_extend_the_input() -> None:
    history = conversation()
    main = responses_input(request(history).messages)
    fork = responses_input(request([*history, user("Summarise the session.")]).messages)
    answer = assistant(None, [ToolCall("call_c", "read_file", "{}")])
    later = responses_input(request([*history, answer, tool_result("call_c", "x")]).messages)
    assert fork[: len(main)] == main and len(fork) == len(main) + 1
    assert later[: len(main)] == main and len(later) == len(main) + 2


def test_parameters_map_onto_the_responses_names() -> None:
    params: dict[str, JSONValue] = {
        "max_completion_tokens": 900,
        "temperature": 0.2,
        "top_p": 0.9,
        "store": True,
        "include": ["message.output_text.logprobs"],
        "instructions": "ignored",
        "input": "ignored",
    }
    body = responses_body(ChatRequest(model="m", messages=(), params=params))
    assert body == {
        "model": "m",
        "input": [],
        "temperature": 0.2,
        "top_p": 0.9,
        "max_output_tokens": 900,
        "stream": True,
        "store": False,
        "include": [ENCRYPTED_REASONING],
    }
    # The configured cap (``max_tokens``) wins over any other spelling.
    both = ChatRequest(model="m", messages=(), params={"max_output_tokens": 5, "max_tokens": 7})
    assert responses_body(both)["max_output_tokens"] == 7
    unsupported = responses_body(ChatRequest(model="m", messages=()), encrypted_reasoning=False)
    assert "include" not in unsupported and "tools" not in unsupported
    assert "max_output_tokens" not in unsupported


def test_message_shapes_the_chat_form_allows() -> None:
    messages: tuple[JSONObject, ...] = (
        {"role": "system", "content": "s", "name": "ops"},
        {"role": "user", "content": None, "name": "ann"},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "https://x/a.png", "detail": "low"}}
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "part one, "}, {"type": "text", "text": "two"}],
        },
        {"role": "assistant", "content": "", "tool_calls": []},
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": [
                {"type": "text", "text": "see "},
                {"type": "image_url", "image_url": {"url": IMAGE_URL}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_2", "content": None},
    )
    assert responses_input(messages) == [
        {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "s"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": ""}]},
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_image", "image_url": "https://x/a.png", "detail": "low"}],
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "part one, two", "annotations": []}],
        },
        {
            "type": "function_call_output",
            "call_id": "call_1",
            "output": f"see {TOOL_RESULT_IMAGE_PLACEHOLDER}",
        },
        {"type": "function_call_output", "call_id": "call_2", "output": ""},
    ]


def test_reasoning_goes_back_only_ahead_of_an_output_item() -> None:
    cut_off = with_reasoning(assistant(""), REASONING)  # the cap was hit while reasoning
    answered = with_reasoning(assistant("Done."), REASONING)
    calls_only = with_reasoning(assistant(None, [ToolCall("call_1", "f", "{}")]), REASONING)
    assert responses_input(request([user("hi"), cut_off]).messages)[2:] == []
    assert responses_input(request([answered]).messages)[1:3][0] == REASONING
    assert [item["type"] for item in responses_input(request([calls_only]).messages)[1:]] == [
        "reasoning",
        "function_call",
    ]
    # Reasoning of another API is never handed over (``to_wire`` filters it).
    other = Message(
        role="assistant",
        content="x",
        meta=MessageMeta(native_reasoning=NativeReasoning("anthropic", ({"type": "thinking"},))),
    )
    assert [item["type"] for item in responses_input(request([other]).messages)[1:]] == ["message"]


def test_tools_and_malformed_messages() -> None:
    bare: JSONObject = {"type": "function", "function": {"name": "now", "strict": True}}
    body = responses_body(ChatRequest(model="m", messages=(), tools=(bare,)))
    assert body["tools"] == [
        {
            "type": "function",
            "name": "now",
            "parameters": {"type": "object", "properties": {}},
            "strict": True,
        }
    ]
    with pytest.raises(ValueError, match="role 'critic'"):
        responses_input([{"role": "critic", "content": "x"}])
    with pytest.raises(ValueError, match="tool_call_id"):
        responses_input([{"role": "tool", "content": "x"}])
    with pytest.raises(ValueError, match="content part of type 'input_audio'"):
        responses_input([{"role": "user", "content": [{"type": "input_audio"}]}])
    with pytest.raises(ValueError, match="only function tools"):
        responses_body(ChatRequest(model="m", messages=(), tools=({"type": "web_search"},)))


_words = st.text(alphabet="abc xyz\n", min_size=0, max_size=12)


@st.composite
def _rounds(draw: st.DrawFn) -> list[Message]:
    """One user message, or one assistant message and the results of all its calls."""
    if draw(st.booleans()):
        if draw(st.booleans()):
            return [user([TextPart(draw(_words)), ImagePart(IMAGE_URL)])]
        return [user(draw(_words))]
    n_calls = draw(st.integers(0, 3))
    base = draw(st.integers(0, 10_000))
    calls = [ToolCall(f"call_{base}_{i}", "read_file", draw(_words)) for i in range(n_calls)]
    text = draw(st.one_of(st.none(), _words))
    message = assistant(text, calls)
    if draw(st.booleans()):
        item: JSONObject = {**REASONING, "id": f"rs_{base}"}
        message = with_reasoning(message, item)
    return [message, *(tool_result(c.id, draw(_words)) for c in calls)]


@st.composite
def _conversations(draw: st.DrawFn) -> list[Message]:
    rounds = draw(st.lists(_rounds(), max_size=8))
    return [message for round_ in rounds for message in round_]


@given(_conversations(), st.data())
def test_a_longer_history_extends_the_input(messages: list[Message], data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(messages)), label="cut")
    short = responses_body(request(messages[:cut]))["input"]
    long = responses_body(request(messages))["input"]
    assert isinstance(short, list) and isinstance(long, list)
    assert long[: len(short)] == short
    # Every call is followed, not preceded, by its output.
    seen: set[JSONValue] = set()
    for item in long:
        assert isinstance(item, dict)
        if item["type"] == "function_call":
            seen.add(item["call_id"])
        elif item["type"] == "function_call_output":
            assert item["call_id"] in seen


# ---------------------------------------------------------------------------
# Stream events


def feed(
    events: Iterable[Mapping[str, object]], stream: ResponsesStream | None = None
) -> list[StreamEvent]:
    stream = stream or ResponsesStream()
    out: list[StreamEvent] = []
    for event in events:
        out.extend(stream.feed(event))
    return out


USAGE: JSONObject = {
    "input_tokens": 1200,
    "input_tokens_details": {"cached_tokens": 1024},
    "output_tokens": 300,
    "output_tokens_details": {"reasoning_tokens": 200},
    "total_tokens": 1500,
}
DONE_REASONING: JSONObject = {
    "id": "rs_9",
    "type": "reasoning",
    "summary": [
        {"type": "summary_text", "text": "**Plan** Read a."},
        {"type": "summary_text", "text": "Then b."},
    ],
    "encrypted_content": "gAAAAB-encrypted",
    "status": None,
}


def _call_events(n: int, call_id: str, path: str) -> list[JSONObject]:
    item_id, arguments = f"fc_{n}", json.dumps({"path": path})
    added: JSONObject = {
        "id": item_id,
        "type": "function_call",
        "status": "in_progress",
        "arguments": "",
        "call_id": call_id,
        "name": "read_file",
    }
    return [
        {"type": "response.output_item.added", "output_index": n, "item": added},
        {
            "type": "response.function_call_arguments.delta",
            "item_id": item_id,
            "output_index": n,
            "delta": arguments[:5],
        },
        {
            "type": "response.function_call_arguments.delta",
            "item_id": item_id,
            "output_index": n,
            "delta": arguments[5:],
        },
        {
            "type": "response.function_call_arguments.done",
            "item_id": item_id,
            "output_index": n,
            "arguments": arguments,
        },
        {
            "type": "response.output_item.done",
            "output_index": n,
            "item": {**added, "status": "completed", "arguments": arguments},
        },
    ]


def full_response() -> list[JSONObject]:
    summary_delta = "response.reasoning_summary_text.delta"
    message: JSONObject = {"id": "msg_9", "type": "message", "role": "assistant", "content": []}
    text_at: JSONObject = {"item_id": "msg_9", "output_index": 1, "content_index": 0}
    shell: JSONObject = {"id": "resp_9", "object": "response", "status": "in_progress"}
    return [
        {"type": "response.created", "response": shell},
        {"type": "response.in_progress", "response": shell},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"id": "rs_9", "type": "reasoning", "summary": []},
        },
        {"type": "response.reasoning_summary_part.added", "item_id": "rs_9", "summary_index": 0},
        {"type": summary_delta, "item_id": "rs_9", "summary_index": 0, "delta": "**Plan** "},
        {"type": summary_delta, "item_id": "rs_9", "summary_index": 0, "delta": "Read a."},
        {
            "type": "response.reasoning_summary_text.done",
            "item_id": "rs_9",
            "summary_index": 0,
            "text": "**Plan** Read a.",
        },
        {"type": summary_delta, "item_id": "rs_9", "summary_index": 1, "delta": "Then b."},
        {"type": "response.output_item.done", "output_index": 0, "item": DONE_REASONING},
        {"type": "response.output_item.added", "output_index": 1, "item": message},
        {"type": "response.content_part.added", **text_at, "part": {"type": "output_text"}},
        {"type": "response.output_text.delta", **text_at, "delta": "Reading "},
        {"type": "response.output_text.delta", **text_at, "delta": "both."},
        {"type": "response.output_text.done", **text_at, "text": "Reading both."},
        {"type": "response.content_part.done", **text_at},
        {
            "type": "response.output_item.done",
            "output_index": 1,
            "item": {
                **message,
                "content": [{"type": "output_text", "text": "Reading both.", "annotations": []}],
            },
        },
        *_call_events(2, "call_a", "a.py"),
        *_call_events(3, "call_b", "b.py"),
        {
            "type": "response.completed",
            "response": {**shell, "status": "completed", "usage": USAGE},
        },
    ]


SENT_REASONING: JSONObject = {
    "type": "reasoning",
    "id": "rs_9",
    "summary": DONE_REASONING["summary"],
    "encrypted_content": "gAAAAB-encrypted",
}
EXPECTED_USAGE = Usage(
    prompt_tokens=1200, completion_tokens=300, total_tokens=1500, cached_tokens=1024
)


def test_a_full_response_streams_into_events() -> None:
    assert feed(full_response()) == [
        ReasoningDelta("**Plan** "),
        ReasoningDelta("Read a."),
        ReasoningDelta("\n\n"),
        ReasoningDelta("Then b."),
        ReasoningItem("responses", SENT_REASONING),
        ContentDelta("Reading "),
        ContentDelta("both."),
        ToolCallDelta(0, "call_a", "read_file", ""),
        ToolCallDelta(0, None, None, '{"pat'),
        ToolCallDelta(0, None, None, 'h": "a.py"}'),
        ToolCallDelta(1, "call_b", "read_file", ""),
        ToolCallDelta(1, None, None, '{"pat'),
        ToolCallDelta(1, None, None, 'h": "b.py"}'),
        Finish("tool_calls"),
        UsageEvent(EXPECTED_USAGE),
    ]


def test_the_streamed_turn_goes_back_as_it_came() -> None:
    accumulator = TurnAccumulator()
    for event in feed(full_response()):
        accumulator.add(event)
    message = accumulator.message()
    assert message.text == "Reading both."
    assert message.reasoning == "**Plan** Read a.\n\nThen b."
    assert message.tool_calls == (
        ToolCall("call_a", "read_file", '{"path": "a.py"}'),
        ToolCall("call_b", "read_file", '{"path": "b.py"}'),
    )
    assert message.meta.usage == EXPECTED_USAGE
    assert message.meta.extra == {"finish_reason": "tool_calls"}
    items = responses_input(request([message]).messages)[1:]
    assert items == [
        SENT_REASONING,
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Reading both.", "annotations": []}],
        },
        {
            "type": "function_call",
            "call_id": "call_a",
            "name": "read_file",
            "arguments": '{"path": "a.py"}',
        },
        {
            "type": "function_call",
            "call_id": "call_b",
            "name": "read_file",
            "arguments": '{"path": "b.py"}',
        },
    ]


def test_a_text_answer_finishes_with_stop() -> None:
    events = feed(
        [
            {
                "type": "response.output_text.delta",
                "item_id": "m",
                "content_index": 0,
                "delta": "Hi",
            },
            {"type": "response.completed", "response": {"usage": None}},
        ]
    )
    assert events == [ContentDelta("Hi"), Finish("stop")]


def test_whole_items_fill_in_what_no_delta_carried() -> None:
    """A server that sends finished parts and items, not deltas, loses nothing."""
    reasoning: JSONObject = {**DONE_REASONING, "id": "rs_2", "status": "completed"}
    call: JSONObject = {
        "id": "fc_7",
        "type": "function_call",
        "call_id": "call_7",
        "name": "grep",
        "arguments": '{"q": 1}',
    }
    events = feed(
        [
            {"type": "response.output_item.done", "output_index": 0, "item": reasoning},
            {
                "type": "response.output_text.done",
                "item_id": "msg_2",
                "output_index": 1,
                "content_index": 0,
                "text": "Answer.",
            },
            {
                "type": "response.output_item.done",
                "output_index": 1,
                "item": {
                    "id": "msg_2",
                    "type": "message",
                    "content": [
                        {"type": "output_text", "text": "Answer."},
                        {"type": "refusal", "refusal": " No."},
                    ],
                },
            },
            {"type": "response.output_item.done", "output_index": 2, "item": call},
            {"type": "response.completed", "response": {}},
        ]
    )
    assert events == [
        ReasoningDelta("**Plan** Read a."),
        ReasoningDelta("\n\n"),
        ReasoningDelta("Then b."),
        ReasoningItem("responses", {**SENT_REASONING, "id": "rs_2", "status": "completed"}),
        ContentDelta("Answer."),
        ContentDelta(" No."),
        ToolCallDelta(0, "call_7", "grep", '{"q": 1}'),
        Finish("tool_calls"),
    ]


def test_reasoning_that_cannot_be_sent_back_only_streams_its_text() -> None:
    """Without encrypted content, ``store: false`` could not resolve the item: not kept."""
    item: JSONObject = {
        "id": "rs_3",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "t"}],
    }
    assert feed([{"type": "response.output_item.done", "output_index": 0, "item": item}]) == [
        ReasoningDelta("t")
    ]
    # A server returning the reasoning text itself (gpt-oss behind vLLM) can take it back.
    raw: JSONObject = {
        "id": "rs_4",
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "think"}],
    }
    delta: JSONObject = {
        "type": "response.reasoning_text.delta",
        "item_id": "rs_4",
        "content_index": 0,
        "delta": "think",
    }
    assert feed([delta, {"type": "response.output_item.done", "output_index": 0, "item": raw}]) == [
        ReasoningDelta("think"),
        ReasoningItem("responses", raw),
    ]


def test_argument_deltas_find_their_call_by_output_index() -> None:
    added: JSONObject = {
        "type": "function_call",
        "call_id": "call_1",
        "name": "f",
        "arguments": "{",
    }
    events = feed(
        [
            {"type": "response.output_item.added", "output_index": 4, "item": added},
            {"type": "response.function_call_arguments.delta", "output_index": 4, "delta": "}"},
            {"type": "response.function_call_arguments.done", "output_index": 4, "arguments": "{}"},
        ]
    )
    assert events == [ToolCallDelta(0, "call_1", "f", "{"), ToolCallDelta(0, None, None, "}")]


def test_an_incomplete_response_finishes_with_length() -> None:
    usage: JSONObject = {"input_tokens": 10, "output_tokens": 64, "total_tokens": 74}
    capped: JSONObject = {
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "usage": usage,
    }
    assert feed(
        [
            {"type": "response.output_text.delta", "item_id": "m", "delta": "Trunc"},
            {"type": "response.incomplete", "response": capped},
        ]
    ) == [ContentDelta("Trunc"), Finish("length"), UsageEvent(Usage(10, 64, 74))]
    filtered: JSONObject = {"incomplete_details": {"reason": "content_filter"}}
    assert feed([{"type": "response.incomplete", "response": filtered}]) == [
        Finish("content_filter")
    ]
    assert feed([{"type": "response.incomplete", "response": {}}]) == [Finish("length")]


def test_exactly_one_finish_per_response() -> None:
    stream = ResponsesStream()
    completed: JSONObject = {"type": "response.completed", "response": {"usage": USAGE}}
    assert feed([completed], stream) == [Finish("stop"), UsageEvent(EXPECTED_USAGE)]
    assert stream.finished
    late: list[JSONObject] = [
        completed,
        {"type": "response.output_text.delta", "delta": "late"},
        {"type": "error", "message": "late"},
    ]
    assert feed(late, stream) == []


def test_a_failed_response_raises_with_its_code() -> None:
    failed: JSONObject = {
        "type": "response.failed",
        "response": {
            "status": "failed",
            "error": {
                "code": "context_length_exceeded",
                "message": "Your input exceeds the context window of this model.",
            },
        },
    }
    stream = ResponsesStream()
    assert stream.feed({"type": "response.output_text.delta", "delta": "a"}) == [ContentDelta("a")]
    with pytest.raises(ResponsesStreamError) as caught:
        stream.feed(failed)
    assert caught.value.code == "context_length_exceeded"
    assert caught.value.message == "Your input exceeds the context window of this model."
    assert str(caught.value) == caught.value.message
    with pytest.raises(ResponsesStreamError, match="the response failed") as bare:
        ResponsesStream().feed({"type": "response.failed", "response": {"error": None}})
    assert bare.value.code is None


def test_an_error_event_raises() -> None:
    event: JSONObject = {
        "type": "error",
        "code": "server_error",
        "message": "The server had an error.",
        "param": None,
        "sequence_number": 3,
    }
    with pytest.raises(ResponsesStreamError) as caught:
        ResponsesStream().feed(event)
    assert (caught.value.message, caught.value.code) == ("The server had an error.", "server_error")
    nested: JSONObject = {
        "type": "error",
        "error": {"type": "x", "code": "rate_limit_exceeded", "message": "slow"},
    }
    with pytest.raises(ResponsesStreamError) as caught:
        ResponsesStream().feed(nested)
    assert (caught.value.message, caught.value.code) == ("slow", "rate_limit_exceeded")


def test_lone_surrogates_are_scrubbed() -> None:
    bad = "a\ud800b"
    item: JSONObject = {**DONE_REASONING, "summary": [{"type": "summary_text", "text": bad}]}
    events = feed(
        [
            {"type": "response.output_text.delta", "item_id": "m", "delta": bad},
            {"type": "response.reasoning_summary_text.delta", "item_id": "rs_9", "delta": bad},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
        ]
    )
    scrubbed = "a\ufffdb"
    assert events[:2] == [ContentDelta(scrubbed), ReasoningDelta(scrubbed)]
    reasoning = events[2]
    assert isinstance(reasoning, ReasoningItem)
    assert reasoning.item["summary"] == [{"type": "summary_text", "text": scrubbed}]
    json.dumps(reasoning.item).encode()  # encodable


# ---------------------------------------------------------------------------
# Usage and errors


def test_usage_mapping() -> None:
    assert responses_usage(USAGE) == EXPECTED_USAGE
    assert responses_usage(
        {"input_tokens": 7, "output_tokens": 3, "input_tokens_details": {"cache_write_tokens": 5}}
    ) == Usage(prompt_tokens=7, completion_tokens=3, total_tokens=10, cache_creation_input_tokens=5)
    assert responses_usage({"input_tokens": -1, "output_tokens": True}) == Usage()


def test_error_extraction() -> None:
    error: JSONObject = {
        "message": "Your input exceeds\n  the context window.",
        "type": "invalid_request_error",
        "param": "input",
        "code": "context_length_exceeded",
    }
    expected = ("Your input exceeds the context window.", "context_length_exceeded")
    assert responses_error({"error": error}) == expected
    assert responses_error(error) == expected  # the SDK's ``APIStatusError.body``
    assert responses_error(json.dumps({"error": error})) == expected
    assert responses_error(json.dumps({"error": error}).encode()) == expected
    assert responses_error({"error": {**error, "code": None}}) == (expected[0], None)
    assert responses_error({"error": "Bad gateway"}) == ("Bad gateway", None)
    assert responses_error("<html>502</html>") == ("<html>502</html>", None)
    assert responses_error({"error": {"message": "x", "code": 429}}) == ("x", "429")
    assert responses_error(None) == (None, None)
    assert responses_error([1]) == (None, None)
