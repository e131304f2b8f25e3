"""Property tests: records round-trip, and the API view never splits a round."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cairn.messages import (
    KIND_COMPACT_SUMMARY,
    KIND_HANDOFF,
    ImagePart,
    Message,
    MessageMeta,
    TextPart,
    ToolCall,
    Usage,
    find_orphans,
    group_rounds,
    new_id,
)
from cairn.store import (
    CompactionRecord,
    ContentEdit,
    ContextEditRecord,
    ErrorRecord,
    HandoffRecord,
    JsonlTranscriptStore,
    MessageRecord,
    Record,
    SessionRecord,
    StateRecord,
    read_transcript,
)
from cairn.store.records import encode_record, record_from_dict

# Lone surrogates cannot be UTF-8; the store replaces them (tested separately).
texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
ids = st.uuids().map(lambda u: u.hex)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
usages = st.builds(
    Usage,
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.none() | st.integers(0, 10**6),
    st.none() | st.integers(0, 10**6),
    st.none() | st.integers(0, 10**6),
)
metas = st.builds(
    MessageMeta,
    kind=st.sampled_from(["chat", KIND_COMPACT_SUMMARY, KIND_HANDOFF, "skill", "error"]),
    hidden=st.booleans(),
    synthetic=st.booleans(),
    usage=st.none() | usages,
    extra=st.dictionaries(texts, json_values, max_size=2),
)
parts = st.one_of(
    st.builds(TextPart, texts),
    st.builds(ImagePart, texts, st.none() | st.sampled_from(["low", "high"])),
)
messages = st.builds(
    Message,
    role=st.sampled_from(["system", "user", "assistant", "tool"]),
    content=st.none() | texts | st.lists(parts, max_size=3).map(tuple),
    id=ids,
    tool_calls=st.lists(st.builds(ToolCall, ids, texts, texts), max_size=3).map(tuple),
    tool_call_id=st.none() | ids,
    name=st.none() | texts,
    reasoning=st.none() | texts,
    meta=metas,
)
records: st.SearchStrategy[Record] = st.one_of(
    st.builds(MessageRecord, messages, ts=texts),
    st.builds(HandoffRecord, messages, epoch=st.integers(0, 100), ts=texts),
    st.builds(
        ContextEditRecord,
        st.lists(st.builds(ContentEdit, ids, texts, texts), max_size=3).map(tuple),
        id=ids,
        ts=texts,
    ),
    st.builds(
        CompactionRecord,
        trigger=st.sampled_from(["auto", "manual", "reactive"]),
        strategy=st.sampled_from(["llm", "fallback"]),
        pre_tokens=st.integers(0, 10**7),
        post_tokens=st.integers(0, 10**7),
        summary=texts,
        replacement_messages=st.lists(messages, max_size=4).map(tuple),
        files=st.lists(texts, max_size=3).map(tuple),
        id=ids,
        ts=texts,
    ),
    st.builds(StateRecord, texts, json_values, id=ids, ts=texts),
    st.builds(ErrorRecord, texts, source=texts, id=ids, ts=texts),
    st.builds(SessionRecord, texts, texts, id=ids, ts=texts, model=st.none() | texts),
)


@given(st.lists(records, max_size=12))
def test_any_sequence_of_records_round_trips(sequence: list[Record]) -> None:
    lines = b"".join(encode_record(r) for r in sequence)
    decoded = [record_from_dict(orjson.loads(line)) for line in lines.splitlines()]
    assert decoded == sequence


# ---------------------------------------------------------------------------
# A model of a live session: complete rounds, edits, handoffs and compactions


@dataclass(frozen=True)
class AppendRound:
    calls: int
    text: str


@dataclass(frozen=True)
class Edit:
    pick: int


@dataclass(frozen=True)
class Compact:
    keep_rounds: int


@dataclass(frozen=True)
class Handoff:
    epoch: int


operations = st.lists(
    st.one_of(
        st.builds(AppendRound, st.integers(0, 3), texts),
        st.builds(Edit, st.integers(0, 10**6)),
        st.builds(Compact, st.integers(0, 3)),
        st.builds(Handoff, st.integers(0, 5)),
    ),
    max_size=25,
)


def make_round(calls: int, text: str) -> list[Message]:
    if calls == 0:
        return [Message(role="user", content=text)]
    tool_calls = tuple(ToolCall(new_id("call"), "grep", '{"q": "x"}') for _ in range(calls))
    head = Message(role="assistant", content=text, tool_calls=tool_calls)
    # Results come back in reverse order, as parallel tools may finish.
    results = [
        Message(role="tool", content=f"hit {i}", tool_call_id=c.id)
        for i, c in reversed(list(enumerate(tool_calls)))
    ]
    return [head, *results]


def apply(store: JsonlTranscriptStore, op: object) -> None:
    api = store.api_view.messages
    match op:
        case AppendRound(calls=calls, text=text):
            for message in make_round(calls, text):
                store.append(MessageRecord(message))
        case Edit(pick=pick) if api:
            target = api[pick % len(api)]
            store.append(ContextEditRecord((ContentEdit(target.id, "[elided]"),)))
        case Compact(keep_rounds=keep):
            rounds = group_rounds(api)
            start = rounds[-keep].start if 0 < keep <= len(rounds) else len(api)
            block = Message(
                role="user", content="ledger", meta=MessageMeta(kind=KIND_COMPACT_SUMMARY)
            )
            store.save_compaction(
                CompactionRecord("auto", "fallback", 10, 1, "ledger", (block, *api[start:]))
            )
        case Handoff(epoch=epoch):
            hidden = MessageMeta(kind=KIND_HANDOFF, hidden=True, synthetic=True)
            store.append(
                HandoffRecord(Message(role="user", content="frontier", meta=hidden), epoch)
            )
        case _:
            pass


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(operations)
def test_api_view_is_whole_rounds_and_matches_the_file_at_every_point(ops: list[object]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.jsonl"
        with JsonlTranscriptStore.create(path, SessionRecord("s", "/ws")) as store:
            for op in ops:
                apply(store, op)
                in_memory = store.api_view.messages
                assert not find_orphans(in_memory)
                rebuilt = read_transcript(path)
                assert rebuilt.warnings == []
                assert rebuilt.api().messages == in_memory
            ui = rebuilt.ui() if ops else []
            assert all(not m.meta.hidden for m in ui)
