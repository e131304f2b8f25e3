"""The Anthropic wire translation: request bodies, cache breakpoints, stream events, usage."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
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
    system,
    to_wire,
    tool_result,
    user,
)
from cairn.provider.anthropic_request import (
    EMPTY_TOOL_RESULT,
    EMPTY_USER_TEXT,
    MAX_CACHE_BREAKPOINTS,
    anthropic_body,
    anthropic_messages,
    count_cache_breakpoints,
    place_cache_breakpoints,
    tool_input,
    tool_use_id,
)
from cairn.provider.anthropic_stream import (
    AnthropicStream,
    AnthropicStreamError,
    anthropic_error,
    anthropic_usage,
)
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
from cairn.provider.registry import TokenCounts
from cairn.provider.request import ChatRequest

EPHEMERAL: JSONObject = {"type": "ephemeral"}
THINKING: JSONObject = {"type": "thinking", "thinking": "Let me look.", "signature": "sig-1"}
PNG = "iVBORw0KGgo="


def _strip(value: JSONValue) -> JSONValue:
    """``value`` without any ``cache_control`` marker."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _blocks(body: JSONObject) -> list[JSONObject]:
    """Every content block of every message, in order."""
    out: list[JSONObject] = []
    messages = body["messages"]
    assert isinstance(messages, list)
    for message in messages:
        assert isinstance(message, dict)
        content = message["content"]
        assert isinstance(content, list)
        out.extend(block for block in content if isinstance(block, dict))
    return out


def _all_blocks(body: JSONObject) -> list[JSONObject]:
    """Tools, system and message blocks: everywhere a marker may sit."""
    out: list[JSONObject] = []
    for key in ("tools", "system"):
        value = body.get(key)
        if isinstance(value, list):
            out.extend(v for v in value if isinstance(v, dict))
    return out + _blocks(body)


def _request(messages: Sequence[JSONObject], **params: JSONValue) -> ChatRequest:
    return ChatRequest(model="claude-test", messages=tuple(messages), params=params)


# ---------------------------------------------------------------------------
# Request body


def _conversation() -> list[JSONObject]:
    """System, a user message with images, thinking + text + two calls, two results, a user."""
    calls = (
        ToolCall("toolu_1", "read", '{"path": "a.txt"}'),
        ToolCall("toolu_2", "noop", ""),
    )
    head = Message(
        role="assistant",
        content="I'll check two things.",
        tool_calls=calls,
        meta=MessageMeta(native_reasoning=NativeReasoning("anthropic", (THINKING,))),
    )
    messages = [
        system("You are Cairn."),
        system("Be brief."),
        user(
            [
                TextPart("What is in this picture?"),
                ImagePart(f"data:image/png;base64,{PNG}"),
                ImagePart("https://example.com/cat.jpg", detail="high"),
            ]
        ),
        head,
        tool_result("toolu_1", "contents of a"),
        tool_result("toolu_2", ""),
        user("thanks"),
    ]
    return to_wire(messages, native_api="anthropic")


TOOLS: tuple[JSONObject, ...] = (
    {
        "type": "function",
        "function": {
            "name": "read",
            "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    },
    {"type": "function", "function": {"name": "noop", "description": ""}},
)


def test_body_of_a_representative_conversation() -> None:
    request = ChatRequest(
        model="claude-test",
        messages=tuple(_conversation()),
        tools=TOOLS,
        params={
            "max_tokens": 1024,
            "temperature": 0.2,
            "stop": "END",
            "thinking": {"type": "enabled", "budget_tokens": 512},
        },
    )
    assert anthropic_body(request) == {
        "model": "claude-test",
        "max_tokens": 1024,
        "system": [
            {"type": "text", "text": "You are Cairn."},
            {"type": "text", "text": "Be brief.", "cache_control": EPHEMERAL},
        ],
        "tools": [
            {
                "name": "read",
                "description": "Read a file.",
                "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
            {"name": "noop", "input_schema": {"type": "object", "properties": {}}},
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in this picture?"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                    },
                    {
                        "type": "image",
                        "source": {"type": "url", "url": "https://example.com/cat.jpg"},
                        # where the previous request ended: the one that produced the calls
                        "cache_control": EPHEMERAL,
                    },
                ],
            },
            {
                "role": "assistant",
                "content": [
                    THINKING,
                    {"type": "text", "text": "I'll check two things."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "read",
                        "input": {"path": "a.txt"},
                    },
                    {"type": "tool_use", "id": "toolu_2", "name": "noop", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "contents of a"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": EMPTY_TOOL_RESULT},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "text", "text": "thanks", "cache_control": EPHEMERAL}],
            },
        ],
        "temperature": 0.2,
        "stop_sequences": ["END"],
        "thinking": {"type": "enabled", "budget_tokens": 512},
        "stream": True,
    }


def test_body_is_deterministic_and_leaves_the_request_alone() -> None:
    request = ChatRequest("claude-test", tuple(_conversation()), TOOLS, {"max_tokens": 64})
    before = copy.deepcopy(request)
    first = json.dumps(anthropic_body(request))
    assert json.dumps(anthropic_body(request)) == first
    assert request == before
    # The thinking block in the body is a copy: changing it cannot reach the history.
    body = anthropic_body(request)
    block = _blocks(body)[3]
    assert block["type"] == "thinking"
    block["thinking"] = "changed"
    assert anthropic_body(request) == json.loads(first)


def test_max_tokens_defaults_and_owned_keys_are_not_overridden() -> None:
    body = anthropic_body(_request([{"role": "user", "content": "hi"}], top_p=0.9))
    assert body["max_tokens"] == 8192
    assert body["top_p"] == 0.9
    body = anthropic_body(_request([{"role": "user", "content": "hi"}]), default_max_tokens=100)
    assert body["max_tokens"] == 100
    body = anthropic_body(_request([{"role": "user", "content": "hi"}], system="x", max_tokens=5))
    assert body["max_tokens"] == 5
    assert "system" not in body
    assert body["stream"] is True


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"stop": "END"}, ["END"]),
        ({"stop": ["a", "b"]}, ["a", "b"]),
        ({"stop": ["a"], "stop_sequences": ["z"]}, ["z"]),
        ({"stop": None}, None),
    ],
)
def test_stop_becomes_stop_sequences(params: dict[str, JSONValue], expected: JSONValue) -> None:
    body = anthropic_body(_request([{"role": "user", "content": "hi"}], **params))
    assert "stop" not in body
    assert body.get("stop_sequences") == expected


def test_blank_system_messages_are_skipped_and_name_is_dropped() -> None:
    messages: list[JSONObject] = [
        {"role": "system", "content": "", "name": "x"},
        {"role": "system", "content": [{"type": "text", "text": "Rules."}]},
        {"role": "user", "content": "hi", "name": "ann"},
    ]
    body = anthropic_body(_request(messages))
    assert body["system"] == [{"type": "text", "text": "Rules.", "cache_control": EPHEMERAL}]
    assert _strip(body["messages"]) == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    ]
    no_system = anthropic_body(_request(messages[2:]))
    assert "system" not in no_system


def test_a_late_system_message_stays_in_place_as_a_user_message() -> None:
    messages: list[JSONObject] = [
        {"role": "system", "content": "Rules."},
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "Later note."},
    ]
    body = anthropic_body(_request(messages))
    assert _strip(body["system"]) == [{"type": "text", "text": "Rules."}]
    assert _strip(body["messages"]) == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "user", "content": [{"type": "text", "text": "Later note."}]},
    ]


def test_without_system_the_last_tool_caches_the_prefix() -> None:
    request = ChatRequest("m", ({"role": "user", "content": "hi"},), TOOLS)
    tools = anthropic_body(request)["tools"]
    assert isinstance(tools, list)
    assert [isinstance(t, dict) and "cache_control" in t for t in tools] == [False, True]


def test_empty_user_content_gets_a_placeholder() -> None:
    contents: list[JSONValue] = ["", "   ", None, [], [{"type": "text", "text": ""}]]
    for content in contents:
        messages = anthropic_messages([{"role": "user", "content": content}])
        assert messages == [
            {"role": "user", "content": [{"type": "text", "text": EMPTY_USER_TEXT}]}
        ]


def test_empty_assistant_messages_are_dropped_but_never_tool_calls() -> None:
    call: JSONObject = {
        "id": "c1",
        "type": "function",
        "function": {"name": "f", "arguments": "{}"},
    }
    messages = anthropic_messages(
        [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": ""},
            {"role": "assistant", "content": None},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ]
    )
    assert messages == [
        {"role": "user", "content": [{"type": "text", "text": "a"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "c1", "name": "f", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "ok"}],
        },
    ]


def test_consecutive_user_messages_are_kept_apart() -> None:
    messages = anthropic_messages(
        [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    )
    assert len(messages) == 2


def test_tool_results_with_parts() -> None:
    messages = anthropic_messages(
        [
            {
                "role": "tool",
                "tool_call_id": "c1",
                "content": [
                    {"type": "text", "text": "see"},
                    {"type": "image_url", "image_url": {"url": "data:image/gif;base64,R0lG"}},
                ],
            },
            {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": " "}]},
        ]
    )
    assert messages == [
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "c1",
                    "content": [
                        {"type": "text", "text": "see"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/gif", "data": "R0lG"},
                        },
                    ],
                },
                {"type": "tool_result", "tool_use_id": "c2", "content": EMPTY_TOOL_RESULT},
            ],
        }
    ]


def test_percent_encoded_data_url_is_sent_as_base64() -> None:
    [message] = anthropic_messages(
        [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/svg+xml,%3Csvg%3E"}}
                ],
            }
        ]
    )
    assert message["content"] == [
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/svg+xml", "data": "PHN2Zz4="},
        }
    ]


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ("", {}),
        ("  ", {}),
        ("[1, 2]", {"arguments": "[1, 2]"}),
        ('{"a": ', {"arguments": '{"a": '}),
        ("NaN", {"arguments": "NaN"}),
        ('{"a": NaN}', {"arguments": '{"a": NaN}'}),
        ("prose", {"arguments": "prose"}),
    ],
)
def test_tool_input(arguments: str, expected: JSONObject) -> None:
    assert tool_input(arguments) == expected


def test_tool_use_ids_are_made_valid_without_collisions() -> None:
    assert tool_use_id("toolu_01-AbC") == "toolu_01-AbC"
    a, b = tool_use_id("functions.read:0"), tool_use_id("functions_read_0")
    assert a.startswith("functions_read_0_")
    assert a != b
    assert tool_use_id("functions.read:0") == a
    assert tool_use_id("") != ""
    call: JSONObject = {
        "id": "fn.x:1",
        "type": "function",
        "function": {"name": "x", "arguments": "{}"},
    }
    assistant_message, results = anthropic_messages(
        [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "fn.x:1", "content": "ok"},
        ]
    )
    use = assistant_message["content"]
    result = results["content"]
    assert isinstance(use, list) and isinstance(result, list)
    assert isinstance(use[0], dict) and isinstance(result[0], dict)
    assert use[0]["id"] == result[0]["tool_use_id"] == tool_use_id("fn.x:1")


# ---------------------------------------------------------------------------
# Properties over random valid conversations

_TEXTS = st.sampled_from(["", " ", "hi", "hello world", "é\n"]) | st.text(max_size=8)
_ARGUMENTS = st.sampled_from(['{"a": 1}', "", "[1]", "not json", '{"path": "x.py"}'])
_IDS = st.sampled_from(["toolu_{n}", "call_{n}", "functions.f:{n}"])
_REASONING_ITEMS: list[JSONObject] = [
    {"type": "thinking", "thinking": "hmm", "signature": "s"},
    {"type": "thinking", "thinking": "", "signature": "t"},
    {"type": "redacted_thinking", "data": "opaque"},
]
_REASONING: st.SearchStrategy[list[JSONObject]] = st.lists(
    st.sampled_from(_REASONING_ITEMS), max_size=2
)


@st.composite
def _content(draw: st.DrawFn) -> JSONValue:
    if draw(st.booleans()):
        text: str = draw(_TEXTS)
        return text
    parts: list[JSONValue] = []
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            parts.append({"type": "text", "text": draw(_TEXTS)})
        else:
            url = draw(st.sampled_from([f"data:image/png;base64,{PNG}", "https://x.test/a.png"]))
            parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


@st.composite
def _conversations(draw: st.DrawFn) -> list[JSONObject]:
    """Valid chat conversations: every call answered right after its assistant message."""
    messages: list[JSONObject] = [
        {"role": "system", "content": draw(_TEXTS)} for _ in range(draw(st.integers(0, 2)))
    ]
    calls_made = 0
    for _ in range(draw(st.integers(0, 7))):
        if draw(st.booleans()):
            messages.append({"role": "user", "content": draw(_content())})
            continue
        message: JSONObject = {
            "role": "assistant",
            "content": draw(st.none() | _TEXTS),
        }
        calls: list[JSONValue] = []
        for _ in range(draw(st.integers(0, 3))):
            calls_made += 1
            call_id = draw(_IDS).format(n=calls_made)
            calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "f", "arguments": draw(_ARGUMENTS)},
                }
            )
        if calls:
            message["tool_calls"] = calls
        reasoning: list[JSONObject] = draw(_REASONING)
        if reasoning:
            message["native_reasoning"] = [dict(item) for item in reasoning]
        messages.append(message)
        for call in calls:
            assert isinstance(call, dict)
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": draw(_content())}
            )
    return messages


def _assert_extends(short: JSONObject, long: JSONObject) -> None:
    """``long``'s messages extend ``short``'s block for block, markers aside."""
    s, lo = _strip(short), _strip(long)
    assert isinstance(s, dict) and isinstance(lo, dict)
    assert {k: v for k, v in s.items() if k != "messages"} == {
        k: v for k, v in lo.items() if k != "messages"
    }
    sm, lm = s["messages"], lo["messages"]
    assert isinstance(sm, list) and isinstance(lm, list)
    assert len(sm) <= len(lm)
    if not sm:
        return
    assert sm[:-1] == lm[: len(sm) - 1]
    last, other = sm[-1], lm[len(sm) - 1]
    assert isinstance(last, dict) and isinstance(other, dict)
    assert last["role"] == other["role"]
    # A prefix may end inside a run of tool results: that message only grows.
    last_content, other_content = last["content"], other["content"]
    assert isinstance(last_content, list) and isinstance(other_content, list)
    assert other_content[: len(last_content)] == last_content


@settings(max_examples=300, deadline=None)
@given(_conversations(), st.data())
def test_a_longer_history_extends_the_body_block_for_block(
    messages: list[JSONObject], data: st.DataObject
) -> None:
    # Histories grow after the system messages, which never change.
    leading = sum(1 for message in messages if message["role"] == "system")
    cut = data.draw(st.integers(leading, len(messages)))
    full = anthropic_body(_request(messages, max_tokens=10))
    _assert_extends(anthropic_body(_request(messages[:cut], max_tokens=10)), full)
    # The compaction fork: the main request plus one user message.
    fork = anthropic_body(_request([*messages, {"role": "user", "content": "summarize"}]))
    _assert_extends(anthropic_body(_request(messages)), fork)


@settings(max_examples=300, deadline=None)
@given(_conversations())
def test_every_body_is_well_formed(messages: list[JSONObject]) -> None:
    body = anthropic_body(ChatRequest("m", tuple(messages), TOOLS))
    assert anthropic_body(ChatRequest("m", tuple(messages), TOOLS)) == body
    json.dumps(body, allow_nan=False)
    blocks = _all_blocks(body)
    assert count_cache_breakpoints(body) <= MAX_CACHE_BREAKPOINTS
    for block in blocks:
        if block.get("type") in ("thinking", "redacted_thinking"):
            assert "cache_control" not in block
        if block.get("type") == "text":
            text = block["text"]
            assert isinstance(text, str) and text.strip()
    wire = body["messages"]
    assert isinstance(wire, list)
    for i, message in enumerate(wire):
        assert isinstance(message, dict) and message["content"]
        content = message["content"]
        assert isinstance(content, list)
        uses = [b["id"] for b in content if isinstance(b, dict) and b["type"] == "tool_use"]
        if uses:
            # every call is answered by the very next message, in order
            following = wire[i + 1]
            assert isinstance(following, dict) and isinstance(following["content"], list)
            answered = [b["tool_use_id"] for b in following["content"] if isinstance(b, dict)]
            assert answered == uses


# ---------------------------------------------------------------------------
# Cache breakpoints


def _text(text: str) -> JSONObject:
    return {"type": "text", "text": text}


def _msg(role: str, *blocks: JSONObject) -> JSONObject:
    return {"role": role, "content": list(blocks)}


def _marked(body: JSONObject) -> list[str]:
    """The text (or type) of each marked block, in body order."""
    return [
        str(block.get("text", block.get("type")))
        for block in _all_blocks(body)
        if "cache_control" in block
    ]


def test_breakpoints_on_system_last_message_and_previous_request_end() -> None:
    body: JSONObject = {
        "system": [_text("s1"), _text("s2")],
        "tools": [{"name": "t", "input_schema": {}}],
        "messages": [
            _msg("user", _text("u1")),
            _msg("assistant", _text("a1")),
            _msg("user", _text("u2"), _text("u3")),
        ],
    }
    before = copy.deepcopy(body)
    assert _marked(place_cache_breakpoints(body)) == ["s2", "u1", "u3"]
    assert body == before


def test_previous_request_end_is_before_the_last_assistant() -> None:
    body: JSONObject = {
        "messages": [
            _msg("user", _text("u1")),
            _msg("assistant", _text("a1")),
            _msg("user", _text("u2")),
            _msg("assistant", _text("a2")),
            _msg("user", _text("r1")),
            _msg("user", _text("fork")),
        ]
    }
    assert _marked(place_cache_breakpoints(body)) == ["u2", "fork"]


def test_no_messages_or_a_single_one() -> None:
    assert _marked(place_cache_breakpoints({"messages": []})) == []
    one: JSONObject = {"messages": [_msg("user", _text("u"))]}
    assert _marked(place_cache_breakpoints(one)) == ["u"]
    first: JSONObject = {"messages": [_msg("assistant", _text("a")), _msg("user", _text("u"))]}
    assert _marked(place_cache_breakpoints(first)) == ["u"]


def test_breakpoints_skip_thinking_blocks() -> None:
    body: JSONObject = {
        "messages": [
            _msg("user", _text("u1")),
            _msg("assistant", {"type": "text", "text": "a"}, THINKING),
            _msg("user", _text("u2")),
            _msg("assistant", {"type": "redacted_thinking", "data": "x"}),
        ]
    }
    placed = place_cache_breakpoints(body)
    # the last message holds only thinking: that breakpoint is skipped
    assert _marked(placed) == ["u2"]
    messages = body["messages"]
    assert isinstance(messages, list)
    body["messages"] = messages[:2]
    assert _marked(place_cache_breakpoints(body)) == ["u1", "a"]


def test_breakpoints_respect_existing_markers_and_the_limit() -> None:
    marked: JSONObject = {"type": "text", "text": "m", "cache_control": EPHEMERAL}
    body: JSONObject = {
        "system": [marked, marked, marked],
        "messages": [
            _msg("user", _text("u1")),
            _msg("assistant", _text("a")),
            _msg("user", marked),
        ],
    }
    placed = place_cache_breakpoints(body)
    # 4 already: nothing added, the marked last message uses no budget
    assert count_cache_breakpoints(placed) == 4
    body["system"] = [marked, _text("s")]
    placed = place_cache_breakpoints(body)
    assert count_cache_breakpoints(placed) == 4
    assert _marked(placed) == ["m", "s", "u1", "m"]


def test_a_string_content_gets_its_marker_on_a_block() -> None:
    body: JSONObject = {"messages": [{"role": "user", "content": "hi"}]}
    assert place_cache_breakpoints(body)["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": EPHEMERAL}]}
    ]


_BLOCKS = st.sampled_from(
    [
        _text("t"),
        {"type": "text", "text": "m", "cache_control": EPHEMERAL},
        THINKING,
        {"type": "redacted_thinking", "data": "x"},
        {"type": "tool_result", "tool_use_id": "a", "content": "r"},
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_BLOCKS, max_size=3),
    st.lists(st.tuples(st.sampled_from(["user", "assistant"]), st.lists(_BLOCKS, max_size=3))),
)
def test_breakpoints_never_exceed_the_limit(
    system_blocks: list[JSONValue], messages: list[tuple[str, list[JSONValue]]]
) -> None:
    body: JSONObject = {
        "system": system_blocks,
        "messages": [{"role": role, "content": blocks} for role, blocks in messages],
    }
    before = copy.deepcopy(body)
    existing = count_cache_breakpoints(body)
    placed = place_cache_breakpoints(body)
    assert body == before
    assert count_cache_breakpoints(placed) <= max(existing, MAX_CACHE_BREAKPOINTS)
    assert _strip(placed) == _strip(body)
    for block in _all_blocks(placed):
        if block.get("type") in ("thinking", "redacted_thinking"):
            assert "cache_control" not in block


# ---------------------------------------------------------------------------
# Stream events


def _start(index: int, block: JSONObject) -> JSONObject:
    return {"type": "content_block_start", "index": index, "content_block": block}


def _delta(index: int, delta: JSONObject) -> JSONObject:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def _stop(index: int) -> JSONObject:
    return {"type": "content_block_stop", "index": index}


RECORDED: list[JSONObject] = [
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "claude-test",
            "stop_reason": None,
            "usage": {
                "input_tokens": 12,
                "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 30,
                "output_tokens": 1,
            },
        },
    },
    _start(0, {"type": "thinking", "thinking": "", "signature": ""}),
    _delta(0, {"type": "thinking_delta", "thinking": "Let me "}),
    _delta(0, {"type": "thinking_delta", "thinking": "look."}),
    _delta(0, {"type": "signature_delta", "signature": "sig-1"}),
    _stop(0),
    _start(1, {"type": "redacted_thinking", "data": "opaque"}),
    _stop(1),
    {"type": "ping"},
    _start(2, {"type": "text", "text": ""}),
    _delta(2, {"type": "text_delta", "text": "Reading "}),
    _delta(2, {"type": "text_delta", "text": "two files."}),
    _stop(2),
    _start(3, {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}),
    _delta(3, {"type": "input_json_delta", "partial_json": ""}),
    _delta(3, {"type": "input_json_delta", "partial_json": '{"path":'}),
    _delta(3, {"type": "input_json_delta", "partial_json": ' "a.txt"}'}),
    _stop(3),
    _start(4, {"type": "tool_use", "id": "toolu_2", "name": "noop", "input": {}}),
    _stop(4),
    {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 42},
    },
    {"type": "message_stop"},
]


def _feed_all(events: Sequence[Mapping[str, object]]) -> tuple[AnthropicStream, list[StreamEvent]]:
    stream = AnthropicStream()
    out: list[StreamEvent] = []
    for event in events:
        out.extend(stream.feed(event))
    return stream, out


def test_a_recorded_stream() -> None:
    stream, events = _feed_all(RECORDED)
    usage = Usage(
        prompt_tokens=142,
        completion_tokens=42,
        total_tokens=184,
        cached_tokens=100,
        cache_read_input_tokens=100,
        cache_creation_input_tokens=30,
    )
    assert events == [
        ReasoningDelta("Let me "),
        ReasoningDelta("look."),
        ReasoningItem(
            "anthropic", {"type": "thinking", "thinking": "Let me look.", "signature": "sig-1"}
        ),
        ReasoningItem("anthropic", {"type": "redacted_thinking", "data": "opaque"}),
        ContentDelta("Reading "),
        ContentDelta("two files."),
        ToolCallDelta(0, "toolu_1", "read", ""),
        ToolCallDelta(0, None, None, '{"path":'),
        ToolCallDelta(0, None, None, ' "a.txt"}'),
        ToolCallDelta(1, "toolu_2", "noop", ""),
        Finish("tool_calls"),
        UsageEvent(usage),
    ]
    assert stream.stopped
    assert stream.finish_reason == "tool_calls"
    assert stream.usage == usage

    turn = TurnAccumulator()
    for event in events:
        turn.add(event)
    message = turn.message()
    assert message.content == "Reading two files."
    assert message.tool_calls == (
        ToolCall("toolu_1", "read", '{"path": "a.txt"}'),
        ToolCall("toolu_2", "noop", "{}"),
    )
    assert message.reasoning == "Let me look."
    native = message.meta.native_reasoning
    assert native is not None and native.api == "anthropic" and len(native.items) == 2
    # What came back goes out again unchanged with the next request.
    [wire] = to_wire([message], native_api="anthropic")
    [back] = anthropic_messages([wire])
    content = back["content"]
    assert isinstance(content, list)
    assert content[:2] == [dict(item) for item in native.items]


def test_stream_events_from_the_sdk_parse_the_same() -> None:
    from anthropic.types import RawMessageStreamEvent
    from pydantic import TypeAdapter

    adapter: TypeAdapter[RawMessageStreamEvent] = TypeAdapter(RawMessageStreamEvent)
    via_sdk = [
        adapter.validate_python(event).to_dict() for event in RECORDED if event["type"] != "ping"
    ]
    _, expected = _feed_all(RECORDED)
    assert _feed_all(via_sdk)[1] == expected


def test_tool_input_given_whole_at_start_is_emitted_once() -> None:
    _, events = _feed_all(
        [
            _start(0, {"type": "tool_use", "id": "t1", "name": "f", "input": {"x": "é"}}),
            _stop(0),
        ]
    )
    assert events == [ToolCallDelta(0, "t1", "f", ""), ToolCallDelta(0, None, None, '{"x": "é"}')]


def test_usage_comes_at_message_stop_when_message_delta_has_none() -> None:
    _, events = _feed_all(
        [
            {
                "type": "message_start",
                "message": {"usage": {"input_tokens": 5, "output_tokens": 1}},
            },
            _start(0, {"type": "text", "text": "Hi"}),
            _stop(0),
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}},
            {"type": "message_stop"},
        ]
    )
    assert events == [
        ContentDelta("Hi"),
        Finish("stop"),
        UsageEvent(Usage(prompt_tokens=5, completion_tokens=1, total_tokens=6)),
    ]


def test_message_delta_usage_is_cumulative_and_replaces() -> None:
    _, events = _feed_all(
        [
            {
                "type": "message_start",
                "message": {
                    "usage": {"input_tokens": 5, "cache_read_input_tokens": 7, "output_tokens": 1}
                },
            },
            {
                "type": "message_delta",
                "delta": {"stop_reason": "max_tokens"},
                "usage": {
                    "input_tokens": 5,
                    "cache_read_input_tokens": 7,
                    "cache_creation_input_tokens": None,
                    "output_tokens": 9,
                },
            },
            {"type": "message_stop"},
        ]
    )
    assert events == [
        Finish("length"),
        UsageEvent(
            Usage(
                prompt_tokens=12,
                completion_tokens=9,
                total_tokens=21,
                cached_tokens=7,
                cache_read_input_tokens=7,
            )
        ),
    ]


@pytest.mark.parametrize(
    ("stop_reason", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("pause_turn", "stop"),
        ("tool_use", "tool_calls"),
        ("max_tokens", "length"),
        ("model_context_window_exceeded", "length"),
        ("refusal", "content_filter"),
        ("something_new", "something_new"),
    ],
)
def test_stop_reasons(stop_reason: str, finish: str) -> None:
    events = AnthropicStream().feed(
        {"type": "message_delta", "delta": {"stop_reason": stop_reason}}
    )
    assert events == [Finish(finish)]


def test_unknown_events_and_blocks_are_ignored() -> None:
    _, events = _feed_all(
        [
            {"type": "ping"},
            {"type": "something_new", "index": 0},
            _start(0, {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}),
            _delta(0, {"type": "input_json_delta", "partial_json": "{}"}),
            _stop(0),
            _delta(7, {"type": "text_delta", "text": "orphan"}),
            _start(1, {"type": "text", "text": ""}),
            _delta(1, {"type": "citations_delta", "citation": {}}),
            _stop(1),
        ]
    )
    assert events == []


def test_an_error_event_raises() -> None:
    stream = AnthropicStream()
    with pytest.raises(AnthropicStreamError) as caught:
        stream.feed(
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        )
    assert caught.value.message == "Overloaded"
    assert caught.value.error_type == "overloaded_error"
    with pytest.raises(AnthropicStreamError) as bare:
        stream.feed({"type": "error"})
    assert bare.value.error_type is None


def test_stream_strings_are_scrubbed() -> None:
    _, events = _feed_all(
        [
            _start(0, {"type": "text", "text": ""}),
            _delta(0, {"type": "text_delta", "text": "a\ud800b"}),
            _start(1, {"type": "thinking", "thinking": ""}),
            _delta(1, {"type": "thinking_delta", "thinking": "x\udfffy"}),
            _stop(1),
        ]
    )
    assert events == [
        ContentDelta("a\ufffdb"),
        ReasoningDelta("x\ufffdy"),
        ReasoningItem("anthropic", {"type": "thinking", "thinking": "x\ufffdy", "signature": ""}),
    ]


# ---------------------------------------------------------------------------
# Usage and errors


def test_usage_counts_cache_tokens_as_prompt_once() -> None:
    usage = anthropic_usage(
        {
            "input_tokens": 10,
            "cache_read_input_tokens": 1000,
            "cache_creation_input_tokens": 200,
            "output_tokens": 50,
        }
    )
    assert usage == Usage(
        prompt_tokens=1210,
        completion_tokens=50,
        total_tokens=1260,
        cached_tokens=1000,
        cache_read_input_tokens=1000,
        cache_creation_input_tokens=200,
    )
    assert usage.context_tokens == 1260
    # Billing: the cache reads are cached input, the rest (writes included) input.
    assert TokenCounts.from_usage(usage) == TokenCounts(
        input=210, cached_input=1000, output=50, cache_write=200
    )


def test_usage_without_cache_fields() -> None:
    usage = anthropic_usage({"input_tokens": 10, "output_tokens": 3, "server_tool_use": None})
    assert usage == Usage(prompt_tokens=10, completion_tokens=3, total_tokens=13)
    assert usage.cached_tokens is None and usage.cache_creation_input_tokens is None
    assert anthropic_usage({}) == Usage()
    assert anthropic_usage({"input_tokens": -1, "output_tokens": True}) == Usage()


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "prompt is too long: 210000 tokens > 200000 maximum",
                },
            },
            ("prompt is too long: 210000 tokens > 200000 maximum", "invalid_request_error"),
        ),
        ({"type": "overloaded_error", "message": "Overloaded"}, ("Overloaded", "overloaded_error")),
        ('{"type": "error", "error": {"type": "api_error"}}', (None, "api_error")),
        (b'{"error": {"message": "bad"}}', ("bad", None)),
        ({"type": "error"}, (None, None)),
        ({"type": "error", "error": "flat"}, (None, None)),
        ("<html>502</html>", (None, None)),
        (None, (None, None)),
        ([1, 2], (None, None)),
    ],
)
def test_anthropic_error(body: object, expected: tuple[str | None, str | None]) -> None:
    assert anthropic_error(body) == expected
