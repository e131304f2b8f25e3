"""One property test for both transcript stores (DESIGN §6: identical views).

A random session — rounds of messages with tool calls and results, hidden
messages, context edits, state records, handoffs, valid checkpoints,
checkpoints that break a rule (refused when saved, ignored when loaded),
error blocks, closes and reopens — is driven through the JSONL store and the
PostgreSQL store side by side, the same record objects into both. After every
step each store must agree with the pure views of the records written so far
(the reference): the API view, the UI view (whole, and the pages asked for)
and the writer's resumption, which after a reopen is the one read back. After
each reopen and at the end, ``transcript()`` and a follower must read back
exactly the records written: the two stores hold the same records.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cairn.messages import (
    KIND_COMPACT_SUMMARY,
    KIND_HANDOFF,
    JSONValue,
    Message,
    MessageMeta,
    ToolCall,
    Usage,
    group_rounds,
    new_id,
)
from cairn.store import (
    MAX_REPLACEMENT_MESSAGES,
    CheckpointFormatError,
    CompactionRecord,
    ContentEdit,
    ContextEditRecord,
    ErrorRecord,
    HandoffRecord,
    JsonlStoreFactory,
    MessageRecord,
    Record,
    Resumption,
    SessionDigest,
    SessionRecord,
    StateRecord,
    StoreFactory,
    TranscriptStore,
    UiPage,
    api_view,
    resumption,
    ui_page,
    ui_view,
)
from cairn.store.postgres import PostgresStoreFactory
from cairn.store.records import encode_line
from support.postgres_server import (  # noqa: F401  (the fixtures register themselves by import)
    postgres_server_fixture,
    postgres_url_fixture,
)

texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)


@dataclass(frozen=True)
class Round:
    """A user message (maybe hidden), then an assistant turn calling ``calls`` tools."""

    calls: int
    text: str
    hidden: bool
    usage: bool


@dataclass(frozen=True)
class Edit:
    pick: int


@dataclass(frozen=True)
class State:
    key: str
    value: JSONValue


@dataclass(frozen=True)
class Handoff:
    epoch: int


@dataclass(frozen=True)
class Compact:
    keep_rounds: int


@dataclass(frozen=True)
class BadCheckpoint:
    """A checkpoint that breaks a rule: saved (refused) or appended as it is (ignored on load)."""

    rule: Literal["orphan", "version", "count"]
    saved: bool


@dataclass(frozen=True)
class Error:
    text: str


@dataclass(frozen=True)
class Reopen:
    pass


@dataclass(frozen=True)
class Page:
    before: int | None
    limit: int | None


rounds = st.builds(Round, st.integers(0, 3), texts, st.booleans(), st.booleans())
compactions = st.builds(Compact, st.integers(0, 3))
operations = st.lists(
    st.one_of(
        # Rounds and compactions twice: most of a session is conversation, and
        # the interesting resumes come after a checkpoint or two.
        rounds,
        rounds,
        compactions,
        compactions,
        st.builds(Edit, st.integers(0, 10**6)),
        st.builds(State, st.sampled_from(["plan_mode", "skills", "tasks"]), json_values),
        st.builds(Handoff, st.integers(0, 5)),
        # The 4,097-message checkpoint is the slow one: drawn less often.
        st.builds(
            BadCheckpoint,
            st.sampled_from(["orphan", "version", "orphan", "version", "orphan", "count"]),
            st.booleans(),
        ),
        st.builds(Error, texts),
        st.just(Reopen()),
        st.builds(Page, st.none() | st.integers(0, 40), st.none() | st.integers(0, 8)),
    ),
    min_size=8,
    max_size=24,
)


def make_round(op: Round) -> list[Message]:
    meta = MessageMeta(hidden=True, synthetic=True) if op.hidden else MessageMeta()
    out = [Message(role="user", content=op.text, meta=meta)]
    calls = tuple(ToolCall(new_id("call"), "grep", '{"q": "x"}') for _ in range(op.calls))
    usage = MessageMeta(usage=Usage(100, 10, 110)) if op.usage else MessageMeta()
    out.append(Message(role="assistant", content=f"on {op.text}", tool_calls=calls, meta=usage))
    # Results come back in reverse order, as parallel tools may finish.
    out += [
        Message(role="tool", content=f"hit {i}", tool_call_id=c.id)
        for i, c in reversed(list(enumerate(calls)))
    ]
    return out


def summary_block() -> Message:
    return Message(role="user", content="ledger", meta=MessageMeta(kind=KIND_COMPACT_SUMMARY))


def checkpoint(replacement: list[Message], *, version: int = 1) -> CompactionRecord:
    return CompactionRecord(
        "auto", "fallback", 10, 1, "ledger", tuple(replacement), version=version
    )


def bad_checkpoint(op: BadCheckpoint, api: list[Message]) -> CompactionRecord:
    if op.rule == "version":
        return checkpoint([summary_block()], version=2)
    if op.rule == "count":
        return checkpoint([Message(role="user", content="") for _ in range(4_097)])
    call = ToolCall(new_id("call"), "grep", "{}")
    return checkpoint([*api, Message(role="assistant", content="", tool_calls=(call,))])


class Session:
    """The same session in every store, and the records it should hold (the reference)."""

    def __init__(self, factories: dict[str, StoreFactory], workspace: Path) -> None:
        self.factories = factories
        self.workspace = workspace
        self.session_id = uuid.uuid4().hex
        first = SessionRecord(self.session_id, str(workspace))
        self.stores: dict[str, TranscriptStore] = {
            name: factory.create(workspace, first) for name, factory in factories.items()
        }
        self.records: list[Record] = [first]

    def append(self, record: Record) -> None:
        for store in self.stores.values():
            store.append(record)
        self.records.append(encode_line(record)[1])

    def compact(self, record: CompactionRecord) -> None:
        expected = replace(record, history=resumption(self.records).history())
        refused = []
        for store in self.stores.values():
            try:
                store.save_compaction(record)
            except CheckpointFormatError as exc:
                refused.append(str(exc))
        assert len(refused) in (0, len(self.stores)), refused  # both stores, or neither
        if not refused:
            self.records.append(encode_line(expected)[1])

    def reopen(self) -> None:
        for name, store in self.stores.items():
            store.close()
            self.stores[name] = self.factories[name].open(self.workspace, self.session_id)

    def close(self) -> None:
        for store in self.stores.values():
            store.close()

    def step(self, op: object) -> None:
        api = api_view(self.records).messages
        match op:
            case Round():
                for message in make_round(op):
                    self.append(MessageRecord(message))
            case Edit(pick=pick) if api:
                target = api[pick % len(api)]
                self.append(ContextEditRecord((ContentEdit(target.id, "[elided]"),)))
            case State(key=key, value=value):
                self.append(StateRecord(key, value))
            case Handoff(epoch=epoch):
                hidden = MessageMeta(kind=KIND_HANDOFF, hidden=True, synthetic=True)
                self.append(
                    HandoffRecord(Message(role="user", content="frontier", meta=hidden), epoch)
                )
            case Compact(keep_rounds=keep):
                rounds = group_rounds(api)
                start = rounds[-keep].start if 0 < keep <= len(rounds) else len(api)
                self.compact(checkpoint([summary_block(), *api[start:]]))
            case BadCheckpoint(saved=True):
                self.compact(bad_checkpoint(op, api))
            case BadCheckpoint(saved=False):
                self.append(bad_checkpoint(op, api))
            case Error(text=text):
                self.append(ErrorRecord(text, source="compact"))
            case Reopen():
                self.reopen()  # ``check`` then compares each resumption read back
                self.check_stored()
            case Page(before=before, limit=limit):
                expected = ui_page(self.records, before=before, limit=limit)
                for name, store in self.stores.items():
                    assert store.ui_page(before, limit) == expected, name
            case _:
                pass

    def check(self) -> None:
        """After every step: the API view, the UI view, and the writer's resumption."""
        expected = resumption(self.records)
        api = api_view(self.records).messages
        assert expected.api.messages == api
        ui = ui_view(self.records, expected.api.ignored_checkpoints)
        for name, store in self.stores.items():
            assert store.api_view.messages == api, name
            assert store.ui_page() == UiPage(ui, 0, len(ui)), name
            assert summary(store.resumption) == summary(expected), name

    def check_stored(self) -> None:
        """What each store reads back is the records written (after a reopen, and at the end),
        and what a session picker shows of it is what the whole UI view shows."""
        ui = [m for m in ui_view(self.records) if m.meta.kind != KIND_COMPACT_SUMMARY]
        prompts = (m.text for m in ui if m.role == "user" and not m.meta.synthetic)
        digest = SessionDigest(next(prompts, ""), len(ui))
        for name, store in self.stores.items():
            assert store.transcript().records == self.records, name
            assert self.factories[name].describe(self.workspace, self.session_id) == digest, name
            # A follower reads the same records, numbered alike in both stores.
            followed = list(self.factories[name].follow(self.workspace, self.session_id, timeout=0))
            assert [seq for seq, _ in followed] == list(range(1, len(self.records) + 1)), name
            assert [record for _, record in followed] == self.records, name


def summary(state: Resumption) -> tuple[object, ...]:
    """What a resume depends on (warnings and ignored checkpoints depend on what was read)."""
    return (
        state.header,
        state.api.messages,
        state.api.valid_checkpoints,
        state.api.checkpoint_id,
        state.records,
        state.state,
        state.last_response_ts,
    )


@pytest.fixture
def postgres_stores(postgres_url: str) -> Iterator[PostgresStoreFactory]:
    factory = PostgresStoreFactory(postgres_url)
    yield factory
    factory.close()


# One database for all examples (each example is a session of its own): the
# fixture is function-scoped on purpose.
@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=operations)
def test_both_stores_agree_with_the_views_of_their_records_at_every_step(
    postgres_stores: PostgresStoreFactory, ops: list[object]
) -> None:
    assert MAX_REPLACEMENT_MESSAGES < 4_097  # the "count" checkpoint breaks the limit
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        factories: dict[str, StoreFactory] = {
            "jsonl": JsonlStoreFactory(Path(tmp) / "home"),
            "postgres": postgres_stores,
        }
        session = Session(factories, workspace)
        try:
            session.check()
            for op in ops:
                session.step(op)
                session.check()
            session.check_stored()
            records = [store.transcript().records for store in session.stores.values()]
            assert records[0] == records[1]
        finally:
            session.close()
