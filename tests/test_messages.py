"""Tests for the message model: API rounds, orphans, wire and storage formats."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cairn.messages import (
    KIND_COMPACT_SUMMARY,
    KIND_HANDOFF,
    ImagePart,
    Message,
    MessageFormatError,
    MessageMeta,
    Orphans,
    Round,
    TextPart,
    ToolCall,
    Usage,
    assistant,
    find_orphans,
    from_wire,
    group_rounds,
    iter_round_slices,
    message_from_dict,
    message_to_dict,
    message_to_wire,
    system,
    to_wire,
    tool_result,
    user,
)

# ---------------------------------------------------------------------------
# Helpers


def call(call_id: str, name: str = "read_file", arguments: str = "{}") -> ToolCall:
    return ToolCall(call_id, name, arguments)


def spans(rounds: Sequence[Round]) -> list[tuple[int, int]]:
    return [(r.start, r.end) for r in rounds]


# ---------------------------------------------------------------------------
# Constructors and basic properties


def test_constructors_set_roles_and_fields() -> None:
    s = system("be brief")
    u = user("hi", kind=KIND_HANDOFF, hidden=True)
    a = assistant("ok", [call("c1")], reasoning="think", usage=Usage(1, 2, 3))
    t = tool_result("c1", "result", name="read_file")
    assert (s.role, u.role, a.role, t.role) == ("system", "user", "assistant", "tool")
    assert u.meta.kind == KIND_HANDOFF and u.meta.hidden
    assert a.tool_calls == (call("c1"),)
    assert a.reasoning == "think"
    assert a.meta.usage == Usage(1, 2, 3)
    assert t.tool_call_id == "c1" and t.name == "read_file"


def test_ids_are_unique_and_prefixed() -> None:
    ids = {user("x").id for _ in range(100)}
    assert len(ids) == 100
    assert all(i.startswith("msg_") for i in ids)


def test_text_and_images_of_multipart_content() -> None:
    m = user([TextPart("look "), ImagePart("data:image/png;base64,AA"), TextPart("here")])
    assert m.text == "look here"
    assert m.images == (ImagePart("data:image/png;base64,AA"),)
    assert Message(role="assistant").text == ""
    assert user("plain").images == ()


def test_with_content_keeps_identity() -> None:
    m = user("before")
    m2 = m.with_content("after")
    assert m2.id == m.id and m2.text == "after" and m.text == "before"


def test_usage_context_tokens_ignores_cache_fields() -> None:
    u = Usage(prompt_tokens=100, completion_tokens=20, total_tokens=110, cached_tokens=90)
    assert u.context_tokens == 120
    assert Usage(total_tokens=500, cache_read_input_tokens=10_000).context_tokens == 500


# ---------------------------------------------------------------------------
# API rounds


def test_group_rounds_empty() -> None:
    assert group_rounds([]) == []
    assert find_orphans([]) == Orphans()
    assert not find_orphans([])


def test_lone_messages_are_rounds_of_one() -> None:
    msgs = [system("s"), user("u"), assistant("a"), user("u2")]
    rounds = group_rounds(msgs)
    assert spans(rounds) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert all(r.complete and r.size == 1 for r in rounds)


def test_assistant_with_results_is_one_round() -> None:
    msgs = [
        user("go"),
        assistant(None, [call("c1")]),
        tool_result("c1", "r1"),
        assistant("done"),
    ]
    rounds = group_rounds(msgs)
    assert spans(rounds) == [(0, 1), (1, 3), (3, 4)]
    assert rounds[1].complete and rounds[1].size == 2


def test_parallel_calls_results_out_of_order() -> None:
    msgs = [
        user("go"),
        assistant(None, [call("a"), call("b"), call("c")]),
        tool_result("c", "rc"),
        tool_result("a", "ra"),
        tool_result("b", "rb"),
        user("next"),
    ]
    rounds = group_rounds(msgs)
    assert spans(rounds) == [(0, 1), (1, 5), (5, 6)]
    assert rounds[1] == Round(1, 5)
    assert rounds[1].complete
    assert not find_orphans(msgs)
    slices = list(iter_round_slices(msgs))
    assert [len(s) for s in slices] == [1, 4, 1]
    assert slices[1][0].role == "assistant"


def test_missing_results_are_reported_in_call_order() -> None:
    msgs = [
        assistant(None, [call("a"), call("b"), call("c")]),
        tool_result("b", "rb"),
        assistant("after"),
    ]
    rounds = group_rounds(msgs)
    assert spans(rounds) == [(0, 2), (2, 3)]
    assert rounds[0].missing == ("a", "c")
    assert not rounds[0].complete
    assert not rounds[0].orphan
    assert find_orphans(msgs) == Orphans(calls=("a", "c"), results=())


def test_assistant_with_no_results_at_all() -> None:
    msgs = [assistant(None, [call("x")])]
    rounds = group_rounds(msgs)
    assert rounds == [Round(0, 1, missing=("x",))]
    assert find_orphans(msgs).calls == ("x",)


def test_orphan_tool_result_forms_its_own_round() -> None:
    msgs = [user("u"), tool_result("ghost", "boo"), assistant("a")]
    rounds = group_rounds(msgs)
    assert spans(rounds) == [(0, 1), (1, 2), (2, 3)]
    assert rounds[1].orphan and not rounds[1].complete
    assert rounds[1].missing == ()
    orphans = find_orphans(msgs)
    assert orphans == Orphans(calls=(), results=("ghost",))
    assert bool(orphans)


def test_result_for_unknown_id_after_assistant_is_orphan() -> None:
    msgs = [
        assistant(None, [call("a")]),
        tool_result("a", "ra"),
        tool_result("zzz", "stray"),
    ]
    rounds = group_rounds(msgs)
    assert spans(rounds) == [(0, 2), (2, 3)]
    assert rounds[0].complete
    assert rounds[1].orphan
    assert find_orphans(msgs) == Orphans(results=("zzz",))


def test_duplicate_result_is_an_orphan() -> None:
    msgs = [assistant(None, [call("a")]), tool_result("a", "1"), tool_result("a", "2")]
    rounds = group_rounds(msgs)
    assert spans(rounds) == [(0, 2), (2, 3)]
    assert rounds[1].orphan
    assert find_orphans(msgs).results == ("a",)


def test_round_interrupted_by_user_message() -> None:
    msgs = [
        assistant(None, [call("a"), call("b")]),
        tool_result("a", "ra"),
        user("stop, do something else"),
        tool_result("b", "late rb"),
    ]
    rounds = group_rounds(msgs)
    assert spans(rounds) == [(0, 2), (2, 3), (3, 4)]
    assert rounds[0].missing == ("b",)
    assert rounds[1].complete
    assert rounds[2].orphan
    assert find_orphans(msgs) == Orphans(calls=("b",), results=("b",))


def test_assistant_without_calls_then_tool_is_orphan() -> None:
    msgs = [assistant("no calls"), tool_result("a", "r")]
    rounds = group_rounds(msgs)
    assert spans(rounds) == [(0, 1), (1, 2)]
    assert rounds[0].complete
    assert rounds[1].orphan


def test_tool_result_with_no_call_id_is_orphan_with_empty_id() -> None:
    msgs = [Message(role="tool", content="x")]
    assert find_orphans(msgs) == Orphans(results=("",))


def test_orphans_bool() -> None:
    assert not Orphans()
    assert Orphans(calls=("a",))
    assert Orphans(results=("b",))


# ---------------------------------------------------------------------------
# Property: rounds partition the list


@dataclass
class Conversation:
    """A generated message list and the orphans it was built to contain."""

    messages: list[Message] = field(default_factory=list)
    unanswered: list[str] = field(default_factory=list)
    strays: list[str] = field(default_factory=list)


@st.composite
def conversations(draw: st.DrawFn) -> Conversation:
    """Random conversations: parallel calls, dropped, reordered and late results, strays."""
    conv = Conversation()
    counter = 0
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["system", "user", "assistant", "calls", "stray"]))
        if kind == "system":
            conv.messages.append(system("s"))
        elif kind == "user":
            conv.messages.append(user("u"))
        elif kind == "assistant":
            conv.messages.append(assistant("a"))
        elif kind == "stray":
            conv.messages.append(tool_result(f"stray{counter}", "?"))
            conv.strays.append(f"stray{counter}")
            counter += 1
        else:
            ids = [f"c{counter + k}" for k in range(draw(st.integers(1, 4)))]
            counter += len(ids)
            conv.messages.append(assistant(None, [call(i) for i in ids]))
            answered = draw(st.lists(st.sampled_from(ids), unique=True, max_size=len(ids)))
            answered = draw(st.permutations(answered))
            # Results after ``cut`` arrive late, behind an interrupting user message.
            cut = draw(st.integers(0, len(answered)))
            on_time, late = answered[:cut], answered[cut:]
            conv.messages.extend(tool_result(i, f"r{i}") for i in on_time)
            conv.unanswered.extend(i for i in ids if i not in on_time)
            if late:
                conv.messages.append(user("interrupt"))
                conv.messages.extend(tool_result(i, f"late {i}") for i in late)
                conv.strays.extend(late)
    return conv


@settings(max_examples=300)
@given(conversations())
def test_rounds_cover_every_index_once_in_order(conv: Conversation) -> None:
    messages = conv.messages
    rounds = group_rounds(messages)
    position = 0
    for r in rounds:
        assert r.start == position, "rounds must be contiguous and in order"
        assert r.end > r.start, "no empty rounds"
        position = r.end
    assert position == len(messages)
    covered = [i for r in rounds for i in range(r.start, r.end)]
    assert covered == list(range(len(messages)))

    for r in rounds:
        head = messages[r.start]
        if r.size > 1:
            assert head.role == "assistant" and head.tool_calls
            ids = {c.id for c in head.tool_calls}
            tail = messages[r.start + 1 : r.end]
            assert all(m.role == "tool" and m.tool_call_id in ids for m in tail)
            assert len({m.tool_call_id for m in tail}) == len(tail)
        if r.orphan:
            assert head.role == "tool" and r.size == 1
        for missing in r.missing:
            assert missing in {c.id for c in head.tool_calls}

    if not find_orphans(messages):
        assert all(r.complete for r in rounds)


@settings(max_examples=300)
@given(conversations())
def test_find_orphans_finds_exactly_the_planted_ones(conv: Conversation) -> None:
    orphans = find_orphans(conv.messages)
    assert orphans.calls == tuple(conv.unanswered)
    assert orphans.results == tuple(conv.strays)
    assert bool(orphans) == bool(conv.unanswered or conv.strays)
    assert all(r.complete for r in group_rounds(conv.messages)) == (not orphans)


# ---------------------------------------------------------------------------
# Wire format


def test_tool_calls_wire_shape() -> None:
    a = assistant("calling", [call("c1", "grep", '{"q": "x"}'), call("c2", "ls")])
    wire = message_to_wire(a)
    assert wire == {
        "role": "assistant",
        "content": "calling",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "grep", "arguments": '{"q": "x"}'},
            },
            {"id": "c2", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
        ],
    }
    # No id, meta or reasoning leaks onto the wire.
    assert "id" not in wire and "meta" not in wire


def test_assistant_without_calls_has_no_tool_calls_key() -> None:
    assert message_to_wire(assistant("hi")) == {"role": "assistant", "content": "hi"}
    assert message_to_wire(assistant(None)) == {"role": "assistant", "content": None}


def test_tool_message_carries_tool_call_id() -> None:
    wire = message_to_wire(tool_result("c9", "output", name="grep"))
    assert wire == {"role": "tool", "content": "output", "tool_call_id": "c9"}


def test_system_and_user_wire() -> None:
    assert message_to_wire(system("sys")) == {"role": "system", "content": "sys"}
    named = Message(role="user", content="hey", name="alice")
    assert message_to_wire(named) == {"role": "user", "content": "hey", "name": "alice"}


def test_image_parts_wire_shape() -> None:
    m = user(
        [
            TextPart("what is this?"),
            ImagePart("https://example.com/a.png"),
            ImagePart("data:image/png;base64,AAAA", detail="high"),
        ]
    )
    assert message_to_wire(m) == {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
            {
                "type": "image_url",
                "image_url": {"url": "data:image/png;base64,AAAA", "detail": "high"},
            },
        ],
    }


def test_reasoning_dropped_by_default() -> None:
    a = assistant("answer", reasoning="secret chain of thought")
    wire = message_to_wire(a)
    assert "reasoning" not in wire and "reasoning_content" not in wire
    assert all("secret" not in json.dumps(w) for w in to_wire([a]))


def test_reasoning_sent_under_requested_field() -> None:
    a = assistant("answer", [call("c1")], reasoning="because")
    wire = message_to_wire(a, reasoning_field="reasoning_content")
    assert wire["reasoning_content"] == "because"
    assert "reasoning" not in wire
    assert to_wire([a], reasoning_field="reasoning_content")[0]["reasoning_content"] == "because"
    # No reasoning → no field, even when asked for.
    assert "reasoning_content" not in message_to_wire(
        assistant("x"), reasoning_field="reasoning_content"
    )


def test_compact_summary_goes_out_as_user() -> None:
    summary = Message(
        role="system",
        content="<summary>…</summary>",
        meta=MessageMeta(kind=KIND_COMPACT_SUMMARY, synthetic=True),
    )
    assert message_to_wire(summary) == {"role": "user", "content": "<summary>…</summary>"}
    as_assistant = Message(
        role="assistant", content="sum", meta=MessageMeta(kind=KIND_COMPACT_SUMMARY)
    )
    assert message_to_wire(as_assistant)["role"] == "user"


def test_hidden_messages_are_still_sent() -> None:
    hidden = user("handoff reminder", kind=KIND_HANDOFF, hidden=True, synthetic=True)
    msgs = [system("s"), user("u"), hidden, assistant("a")]
    wire = to_wire(msgs)
    assert len(wire) == 4
    assert wire[2] == {"role": "user", "content": "handoff reminder"}


def test_to_wire_preserves_order_and_length() -> None:
    msgs = [
        system("s"),
        user("u"),
        assistant(None, [call("a"), call("b")]),
        tool_result("b", "rb"),
        tool_result("a", "ra"),
        assistant("done"),
    ]
    wire = to_wire(msgs)
    assert [w["role"] for w in wire] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert [w.get("tool_call_id") for w in wire[3:5]] == ["b", "a"]
    assert to_wire([]) == []
    assert to_wire(iter(msgs)) == wire


def test_wire_output_is_json_serialisable() -> None:
    msgs = [
        user([TextPart("t"), ImagePart("u", "low")]),
        assistant(None, [call("a")], reasoning="r"),
        tool_result("a", "x"),
    ]
    wire = to_wire(msgs, reasoning_field="reasoning_content")
    assert json.loads(json.dumps(wire)) == wire


# ---------------------------------------------------------------------------
# from_wire


def test_from_wire_openai_assistant_with_reasoning_content() -> None:
    data = {
        "role": "assistant",
        "content": None,
        "reasoning_content": "let me think",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "grep", "arguments": '{"pattern": "x"}'},
            }
        ],
    }
    m = from_wire(data, id="msg_fixed")
    assert m.id == "msg_fixed"
    assert m.role == "assistant"
    assert m.content is None
    assert m.reasoning == "let me think"
    assert m.tool_calls == (ToolCall("call_1", "grep", '{"pattern": "x"}'),)
    assert m.meta == MessageMeta()


def test_from_wire_reasoning_alias_and_default_arguments() -> None:
    m = from_wire(
        {
            "role": "assistant",
            "content": "x",
            "reasoning": "r",
            "tool_calls": [{"id": "c", "function": {"name": "ls"}}],
        }
    )
    assert m.reasoning == "r"
    assert m.tool_calls == (ToolCall("c", "ls", "{}"),)
    assert m.id.startswith("msg_")


def test_from_wire_tool_and_user_messages() -> None:
    t = from_wire({"role": "tool", "tool_call_id": "c1", "content": "out", "id": "m7"})
    assert (t.role, t.tool_call_id, t.text, t.id) == ("tool", "c1", "out", "m7")
    u = from_wire(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "see"},
                {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "auto"}},
            ],
        }
    )
    assert u.content == (TextPart("see"), ImagePart("https://x/y.png", "auto"))
    assert from_wire({"role": "assistant", "tool_calls": None}).tool_calls == ()


def test_from_wire_inverts_to_wire() -> None:
    msgs = [
        system("s"),
        user([TextPart("a"), ImagePart("u", "high")]),
        assistant("x", [call("c1", "f", '{"a":1}')], reasoning="why"),
        tool_result("c1", "res"),
    ]
    for m in msgs:
        back = from_wire(message_to_wire(m, reasoning_field="reasoning_content"), id=m.id)
        assert back.role == m.role
        assert back.content == m.content
        assert back.tool_calls == m.tool_calls
        assert back.tool_call_id == m.tool_call_id
        assert back.reasoning == m.reasoning


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"role": "robot", "content": "x"}, "role must be one of"),
        ({"content": "x"}, "role must be one of"),
        ({"role": ["user"], "content": "x"}, "role must be one of"),
        ({"role": "assistant", "tool_calls": {"id": "c"}}, "tool_calls must be a list"),
        ({"role": "assistant", "tool_calls": ["c"]}, "each tool call must be an object"),
        ({"role": "assistant", "tool_calls": [{"id": "c"}]}, "missing its 'function'"),
        (
            {"role": "assistant", "tool_calls": [{"id": 1, "function": {"name": "f"}}]},
            "string 'id'",
        ),
        (
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"a": 1}}}],
            },
            "'arguments' must be a JSON string",
        ),
        ({"role": "user", "content": 5}, "content: must be a string, a list of parts"),
        ({"role": "user", "content": [{"type": "audio"}]}, "content[0]: must be an object whose"),
        ({"role": "tool", "content": "x", "tool_call_id": 3}, "'tool_call_id' must be a string"),
    ],
)
def test_from_wire_errors(data: dict[str, Any], fragment: str) -> None:
    with pytest.raises(MessageFormatError, match=re.escape(fragment)):
        from_wire(data)


# ---------------------------------------------------------------------------
# Storage format


ROUND_TRIP_CASES: list[Message] = [
    system("you are terse"),
    user("hello"),
    user(""),
    Message(role="user", content=None, id="m-null"),
    Message(role="user", content=(), id="m-empty-parts"),
    user([TextPart("look"), ImagePart("https://x/img.png"), ImagePart("data:,", "low")]),
    assistant("ok"),
    assistant(None, [call("a", "f", '{"x": [1, 2]}'), call("b", "g")], reasoning="hmm"),
    assistant("", reasoning=""),
    assistant("x", usage=Usage()),
    assistant(
        "x",
        usage=Usage(
            prompt_tokens=10,
            completion_tokens=5,
            total_tokens=15,
            cached_tokens=0,
            cache_read_input_tokens=7,
            cache_creation_input_tokens=3,
        ),
    ),
    tool_result("a", "result text"),
    tool_result("b", '{"ok": true}', name="g"),
    Message(role="tool", content="", tool_call_id=""),
    Message(role="user", content="named", name="bob"),
    Message(
        role="user",
        content="handoff",
        meta=MessageMeta(kind=KIND_HANDOFF, hidden=True, synthetic=True),
    ),
    Message(
        role="user",
        content="summary",
        meta=MessageMeta(
            kind=KIND_COMPACT_SUMMARY,
            synthetic=True,
            extra={"covers": ["m1", "m9"], "n": 3, "nested": {"a": None, "b": 1.5, "c": False}},
        ),
    ),
    Message(role="assistant", content="custom", meta=MessageMeta(kind="some_future_kind")),
    Message(role="user", content="中文 and emoji 😀", meta=MessageMeta(extra={"k": "ü"})),
]


@pytest.mark.parametrize("message", ROUND_TRIP_CASES, ids=lambda m: f"{m.role}-{m.id[-6:]}")
def test_storage_round_trip_is_lossless(message: Message) -> None:
    stored = message_to_dict(message)
    assert message_from_dict(stored) == message
    # Also through real JSON text, as the store writes it.
    assert message_from_dict(json.loads(json.dumps(stored))) == message


def test_stored_form_is_compact() -> None:
    m = Message(role="user", content="hi", id="m1")
    assert message_to_dict(m) == {"id": "m1", "role": "user", "content": "hi"}
    a = assistant(None, [call("c", "f", "{}")], reasoning="r", usage=Usage(total_tokens=9))
    d = message_to_dict(a)
    assert d["tool_calls"] == [{"id": "c", "name": "f", "arguments": "{}"}]
    assert d["reasoning"] == "r"
    assert d["meta"] == {
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 9},
    }


def test_default_meta_is_omitted_and_restored() -> None:
    m = user("x")
    assert "meta" not in message_to_dict(m)
    assert message_from_dict({"id": "i", "role": "user", "content": "x", "meta": {}}).meta == (
        MessageMeta()
    )


message_strategy = st.builds(
    Message,
    role=st.sampled_from(["system", "user", "assistant", "tool"]),
    content=st.one_of(
        st.none(),
        st.text(),
        st.lists(
            st.one_of(
                st.builds(TextPart, st.text()),
                st.builds(ImagePart, st.text(), st.one_of(st.none(), st.sampled_from(["low"]))),
            ),
            max_size=3,
        ).map(tuple),
    ),
    id=st.text(min_size=1, max_size=10),
    tool_calls=st.lists(st.builds(ToolCall, st.text(), st.text(), st.text()), max_size=3).map(
        tuple
    ),
    tool_call_id=st.one_of(st.none(), st.text()),
    name=st.one_of(st.none(), st.text()),
    reasoning=st.one_of(st.none(), st.text()),
    meta=st.builds(
        MessageMeta,
        kind=st.text(max_size=12),
        hidden=st.booleans(),
        synthetic=st.booleans(),
        usage=st.one_of(
            st.none(),
            st.builds(
                Usage,
                st.integers(0, 10**9),
                st.integers(0, 10**9),
                st.integers(0, 10**9),
                st.one_of(st.none(), st.integers(0, 10**6)),
                st.one_of(st.none(), st.integers(0, 10**6)),
                st.one_of(st.none(), st.integers(0, 10**6)),
            ),
        ),
        extra=st.dictionaries(
            st.text(max_size=5),
            st.recursive(
                st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                lambda inner: (
                    st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=3), inner, max_size=3)
                ),
                max_leaves=6,
            ),
            max_size=3,
        ),
    ),
)


@settings(max_examples=200)
@given(message_strategy)
def test_storage_round_trip_property(message: Message) -> None:
    assert message_from_dict(message_to_dict(message)) == message


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ("not a dict", "must be a JSON object"),
        (["role", "user"], "must be a JSON object"),
        ({"id": "m", "role": "wizard"}, "role: Input should be 'system', 'user'"),
        ({"id": "m", "role": {"x": 1}}, "role: Input should be 'system'"),
        ({"id": "m"}, "role: required key is missing"),
        ({"role": "user"}, "non-empty string 'id'"),
        ({"id": "", "role": "user"}, "id: String should have at least 1 character"),
        ({"id": 7, "role": "user"}, "id: Input should be a valid string (got 7)"),
        ({"id": "m", "role": "assistant", "tool_calls": "c1"}, "tool_calls: must be a JSON array"),
        (
            {"id": "m", "role": "assistant", "tool_calls": [1]},
            "tool_calls[0]: must be a JSON object",
        ),
        (
            {"id": "m", "role": "assistant", "tool_calls": [{"id": "c", "name": 3}]},
            "tool_calls[0].name: Input should be a valid string (got 3)",
        ),
        (
            {"id": "m", "role": "user", "content": {"text": "x"}},
            "content: must be a string, a list of parts, or null",
        ),
        ({"id": "m", "role": "user", "content": ["x"]}, "content[0]: must be an object whose"),
        (
            {"id": "m", "role": "user", "content": [{"type": "text"}]},
            "content[0].text: required key is missing",
        ),
        (
            {"id": "m", "role": "user", "content": [{"type": "image_url", "image_url": {}}]},
            "content[0].url: required key is missing",
        ),
        (
            {"id": "m", "role": "user", "content": [{"type": "video"}]},
            "content[0]: must be an object whose 'type' is 'text' or 'image_url'",
        ),
        ({"id": "m", "role": "user", "meta": [1]}, "meta: must be a JSON object"),
        (
            {"id": "m", "role": "user", "meta": {"kind": 3}},
            "meta.kind: Input should be a valid string (got 3)",
        ),
        ({"id": "m", "role": "user", "meta": {"extra": [1]}}, "meta.extra: must be a JSON object"),
        (
            {"id": "m", "role": "user", "meta": {"usage": 5}},
            "meta.usage: must be a JSON object (got 5)",
        ),
        (
            {"id": "m", "role": "assistant", "meta": {"usage": {"total_tokens": -1}}},
            "meta.usage.total_tokens: Input should be greater than or equal to 0",
        ),
        (
            {"id": "m", "role": "assistant", "meta": {"usage": {"prompt_tokens": 1.5}}},
            "meta.usage.prompt_tokens: Input should be a valid integer (got 1.5)",
        ),
        (
            {"id": "m", "role": "assistant", "meta": {"usage": {"cached_tokens": True}}},
            "meta.usage.cached_tokens: Input should be a valid integer (got true)",
        ),
        (
            {"id": "m", "role": "user", "reasoning": 1},
            "reasoning: Input should be a valid string (got 1)",
        ),
        ({"id": "m", "role": "user", "name": ["n"]}, "name: Input should be a valid string"),
    ],
)
def test_message_from_dict_errors(data: object, fragment: str) -> None:
    with pytest.raises(MessageFormatError, match=re.escape(fragment)):
        message_from_dict(data)


def test_error_is_a_value_error() -> None:
    assert issubclass(MessageFormatError, ValueError)
    with pytest.raises(ValueError, match=re.escape('(got "nobody")')):
        message_from_dict({"id": "m", "role": "nobody"})


def test_legacy_string_image_url_is_accepted() -> None:
    m = message_from_dict(
        {"id": "m", "role": "user", "content": [{"type": "image_url", "image_url": "https://i"}]}
    )
    assert m.content == (ImagePart("https://i"),)


def test_user_constructor_meta_keywords_are_validated() -> None:
    with pytest.raises(
        MessageFormatError, match=re.escape("meta: kind: Input should be a valid string")
    ):
        user("x", kind=5)
