"""Resuming from the last checkpoint: what a writer keeps, and what opening a file reads.

A writer keeps a ``Resumption`` (the API view and the records since the last
valid checkpoint), and opening a session reads the header, scans back to the
last valid checkpoint and parses only what follows. These tests check that
this shortcut always agrees with folding the whole file from its start, and
that it really skips the history before the checkpoint.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cairn.messages import (
    KIND_COMPACT_SUMMARY,
    Message,
    MessageMeta,
    Usage,
    find_orphans,
    group_rounds,
    message_to_dict,
    user,
)
from cairn.store import (
    CompactionRecord,
    ContentEdit,
    ContextEditRecord,
    ErrorRecord,
    JsonlTranscriptStore,
    MessageRecord,
    NotATranscriptError,
    Resumption,
    SessionDigest,
    SessionRecord,
    StateRecord,
    describe_transcript,
    read_transcript,
    resumption,
    ui_page,
    ui_view,
)
from cairn.store.jsonl import lines as jsonl_module
from cairn.store.records import encode_record, record_to_dict
from store.test_store_properties import make_round

texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=30)
json_ints = st.integers(-(2**53), 2**53)


@dataclass(frozen=True)
class Round:
    calls: int
    text: str
    usage: bool


@dataclass(frozen=True)
class Edit:
    pick: int


@dataclass(frozen=True)
class Compact:
    keep_rounds: int


@dataclass(frozen=True)
class OverLimit:
    """A checkpoint that breaks a limit, written by hand (an older or damaged writer)."""


@dataclass(frozen=True)
class OldCheckpoint:
    """A valid checkpoint without its history, as Cairn wrote them before it had one."""


@dataclass(frozen=True)
class State:
    key: str
    value: int


@dataclass(frozen=True)
class Error:
    text: str


@dataclass(frozen=True)
class Reopen:
    pass


@dataclass(frozen=True)
class Aside:
    """A user-role message the user did not type (a reminder), shown or hidden."""

    hidden: bool


operations = st.lists(
    st.one_of(
        st.builds(Round, st.integers(0, 2), texts, st.booleans()),
        st.builds(Edit, st.integers(0, 10**6)),
        st.builds(Compact, st.integers(0, 2)),
        st.just(OverLimit()),
        st.just(OldCheckpoint()),
        st.builds(State, st.sampled_from(["session", "calibration", "other"]), json_ints),
        st.builds(Error, texts),
        st.just(Reopen()),
        st.builds(Aside, st.booleans()),
    ),
    max_size=30,
)


def _block() -> Message:
    return Message(
        role="user", content="ledger", meta=MessageMeta(kind=KIND_COMPACT_SUMMARY, synthetic=True)
    )


def _raw_line(record: CompactionRecord, **changes: object) -> bytes:
    data = record_to_dict(record)
    data.update(changes)  # type: ignore[arg-type]
    return orjson.dumps(data) + b"\n"


class Driver:
    """Applies operations to a real store, reopening it from its file when asked."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.store = JsonlTranscriptStore.create(path, SessionRecord("s", "/ws"))

    def apply(self, op: object) -> None:
        store = self.store
        api = store.api_view.messages
        match op:
            case Round(calls=calls, text=text, usage=usage):
                messages = make_round(calls, text)
                if usage and messages[0].role == "assistant":
                    meta = MessageMeta(usage=Usage(100, 10, 110))
                    messages[0] = Message(
                        role="assistant",
                        content=messages[0].content,
                        tool_calls=messages[0].tool_calls,
                        id=messages[0].id,
                        meta=meta,
                    )
                for message in messages:
                    store.append(MessageRecord(message))
            case Edit(pick=pick) if api:
                target = api[pick % len(api)]
                store.append(ContextEditRecord((ContentEdit(target.id, "[elided]"),)))
            case Compact(keep_rounds=keep):
                store.save_compaction(self._checkpoint(keep))
            case OverLimit():
                record = self._checkpoint(0)
                self._write_raw(_raw_line(record, version=99))
            case OldCheckpoint():
                self._write_raw(_raw_line(self._checkpoint(1)))
            case State(key=key, value=value):
                store.append(StateRecord(key, {"n": value}))
            case Error(text=text):
                store.append(ErrorRecord(text))
            case Reopen():
                store.close()
                self.store = JsonlTranscriptStore.open(self.path)
            case Aside(hidden=hidden):
                meta = MessageMeta(synthetic=True, hidden=hidden)
                store.append(MessageRecord(Message(role="user", content="reminder", meta=meta)))
            case _:
                pass

    def _checkpoint(self, keep: int) -> CompactionRecord:
        api = self.store.api_view.messages
        rounds = group_rounds(api)
        start = rounds[-keep].start if 0 < keep <= len(rounds) else len(api)
        return CompactionRecord("auto", "fallback", 10, 1, "ledger", (_block(), *api[start:]))

    def _write_raw(self, line: bytes) -> None:
        """Append a line behind the store's back, then reopen (as another writer would)."""
        self.store.close()
        with self.path.open("ab") as handle:
            handle.write(line)
        self.store = JsonlTranscriptStore.open(self.path)


def assert_same(kept: Resumption, folded: Resumption) -> None:
    assert kept.header == folded.header
    assert kept.api.messages == folded.api.messages
    assert kept.api.valid_checkpoints == folded.api.valid_checkpoints
    assert kept.api.checkpoint_id == folded.api.checkpoint_id
    assert kept.records == folded.records
    assert kept.state == folded.state
    assert kept.last_response_ts == folded.last_response_ts


pages = st.lists(st.tuples(st.none() | st.integers(0, 40), st.integers(0, 12)), max_size=3)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations, st.sampled_from([5, 64, 1 << 20]), pages)
def test_the_kept_resumption_equals_folding_the_whole_file_at_every_point(
    ops: list[object], chunk: int, asked: list[tuple[int | None, int]]
) -> None:
    # Small chunks put line boundaries everywhere in the backward scan.
    with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryDirectory() as tmp:
        patch.setattr(jsonl_module, "_CHUNK", chunk)
        driver = Driver(Path(tmp) / "s.jsonl")
        try:
            for op in ops:
                driver.apply(op)
                whole = read_transcript(driver.path)
                folded = resumption(whole.records)
                assert_same(driver.store.resumption, folded)
                assert not find_orphans(driver.store.api_view.messages)
                # The UI view is read back from the file, the same as a fold of it,
                # and every page (from memory, read backward, or streamed) is its slice.
                everything = ui_view(whole.records)
                assert driver.store.ui_page().messages == everything
                assert driver.store.resumption.ui_entries in (None, len(everything))
                # What a session picker shows, read without the history.
                shown = [m for m in everything if m.meta.kind != KIND_COMPACT_SUMMARY]
                typed = (m.text for m in shown if m.role == "user" and not m.meta.synthetic)
                digest = SessionDigest(next(typed, ""), len(shown))
                assert describe_transcript(driver.path) == digest
                for before, limit in asked:
                    page = driver.store.ui_page(before, limit)
                    end = len(everything) if before is None else min(before, len(everything))
                    start = max(0, end - limit)
                    assert (page.start, page.total) == (start, len(everything))
                    assert page.messages == everything[start:end]
        finally:
            driver.store.close()


def _session_with_history(path: Path, rounds_before: int) -> JsonlTranscriptStore:
    store = JsonlTranscriptStore.create(path, SessionRecord("s", "/ws"))
    store.append(StateRecord("session", {"plan_mode": True}))
    for index in range(rounds_before):
        store.append(MessageRecord(user(f"question {index}")))
    store.save_compaction(
        CompactionRecord("auto", "llm", 100, 10, "ledger", (_block(), user("latest")))
    )
    store.append(MessageRecord(user("after the checkpoint")))
    return store


def test_opening_does_not_parse_the_history_before_the_last_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    _session_with_history(path, 50).close()
    # Damage every message line before the checkpoint (same length, not JSON):
    # reading them would report 50 bad lines.
    data = path.read_bytes()
    lines = data.split(b"\n")
    damaged = [
        b"#" * len(line) if b'"question ' in line and b'"type":"message"' in line else line
        for line in lines
    ]
    path.write_bytes(b"\n".join(damaged))

    with JsonlTranscriptStore.open(path) as store:
        assert store.warnings == []
        assert [m.text for m in store.api_view.messages] == [
            "ledger",
            "latest",
            "after the checkpoint",
        ]
        # The state written before the checkpoint survives through its history.
        assert store.resumption.state == {"session": {"plan_mode": True}}
        assert store.api_view.valid_checkpoints == 1
    assert read_transcript(path).bad_lines == 50


def test_a_checkpoint_without_history_is_resumed_by_reading_the_whole_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.jsonl"
    header = SessionRecord("s", "/ws")
    state = StateRecord("session", {"plan_mode": True})
    old = CompactionRecord("auto", "llm", 100, 10, "ledger", (_block(),))
    path.write_bytes(
        encode_record(header)
        + encode_record(state)
        + b"not json\n"
        + _raw_line(old)
        + encode_record(MessageRecord(user("after")))
    )
    with JsonlTranscriptStore.open(path) as store:
        # The whole file was read: the bad line before the checkpoint is reported.
        assert len(store.warnings) == 1
        assert store.warnings[0].startswith("line 3: not valid JSON")
        assert store.resumption.state == {"session": {"plan_mode": True}}
        assert [m.text for m in store.api_view.messages] == ["ledger", "after"]
        # The next checkpoint this writer saves carries the history again.
        store.save_compaction(CompactionRecord("manual", "llm", 10, 5, "again", (_block(),)))
    saved = read_transcript(path).records[-1]
    assert isinstance(saved, CompactionRecord) and saved.history is not None
    assert saved.history.checkpoints == 2
    assert saved.history.state == {"session": {"plan_mode": True}}


def test_a_torn_checkpoint_at_the_end_resumes_from_the_one_before(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    _session_with_history(path, 3).close()
    torn = CompactionRecord("manual", "llm", 10, 5, "cut", (_block(),))
    with path.open("ab") as handle:
        handle.write(encode_record(torn)[:-40])  # the crash came mid-write
    with JsonlTranscriptStore.open(path) as store:
        assert store.api_view.checkpoint_id != torn.id
        assert [m.text for m in store.api_view.messages][-1] == "after the checkpoint"
        assert any("moved to" in w for w in store.warnings)
        store.append(MessageRecord(user("next")))
    assert read_transcript(path).warnings == []


def test_an_invalid_last_checkpoint_is_scanned_past(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    _session_with_history(path, 3).close()
    bad = CompactionRecord("auto", "llm", 10, 5, "bad", (user("x"),))
    line = _raw_line(bad, replacement_messages=[message_to_dict(user("x"))] * 4097)
    with path.open("ab") as handle:
        handle.write(line)
    with JsonlTranscriptStore.open(path) as store:
        assert [m.text for m in store.api_view.messages] == [
            "ledger",
            "latest",
            "after the checkpoint",
        ]
        assert store.api_view.ignored_checkpoints == {bad.id}
        assert any("4097 replacement messages" in w for w in store.api_view.warnings)


def test_the_writer_keeps_only_the_records_since_the_last_checkpoint(tmp_path: Path) -> None:
    with _session_with_history(tmp_path / "s.jsonl", 200) as store:
        kept = store.resumption.records
        assert [type(r).__name__ for r in kept] == ["CompactionRecord", "MessageRecord"]
        # The UI view still has everything, read back from the file.
        page = store.ui_page()
        assert page.total == 200 + 1 + 1
        assert page.messages[0].text == "question 0"


def test_ui_pages_slice_the_ui_view(tmp_path: Path) -> None:
    with _session_with_history(tmp_path / "s.jsonl", 10) as store:
        everything = store.ui_page().messages
        assert len(everything) == 12
        last = store.ui_page(limit=5)
        assert (last.start, last.total, last.earlier) == (7, 12, 7)
        assert last.messages == everything[7:]
        before = store.ui_page(before=last.start, limit=5)
        assert before.start == 2 and before.messages == everything[2:7]
        first = store.ui_page(before=before.start, limit=5)
        assert first.start == 0 and first.messages == everything[0:2]
        assert store.ui_page(before=0, limit=5).messages == []
        assert store.ui_page(before=100, limit=3).messages == everything[9:]
        assert store.ui_page(limit=0).messages == []


@given(st.integers(0, 30), st.none() | st.integers(0, 40), st.none() | st.integers(0, 12))
def test_ui_page_is_the_slice_before_a_position(
    count: int, before: int | None, limit: int | None
) -> None:
    records = [MessageRecord(user(str(i))) for i in range(count)]
    everything = ui_view(records)
    page = ui_page(records, before=before, limit=limit)
    end = count if before is None else min(before, count)
    start = 0 if limit is None else max(0, end - limit)
    assert (page.messages, page.start, page.total) == (everything[start:end], start, count)


def test_ui_page_refuses_negative_positions() -> None:
    with pytest.raises(ValueError, match="limit must be at least 0"):
        ui_page([], limit=-1)
    with pytest.raises(ValueError, match="before must be at least 0"):
        ui_page([], before=-1)


def test_describing_a_session_does_not_parse_the_history_before_the_last_checkpoint(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.jsonl"
    store = JsonlTranscriptStore.create(path, SessionRecord("s", "/ws"))
    store.append(MessageRecord(user("the task")))
    for index in range(200):
        store.append(MessageRecord(user(f"question {index}")))
    store.save_compaction(CompactionRecord("auto", "llm", 100, 10, "ledger", (_block(),)))
    store.append(MessageRecord(user("after the checkpoint")))
    store.close()
    # Damage every line between the first prompt and the checkpoint: had they
    # been read, they could not have been counted.
    data = path.read_bytes()
    damaged = [
        b"#" * len(line) if b'"question ' in line and b'"type":"message"' in line else line
        for line in data.split(b"\n")
    ]
    path.write_bytes(b"\n".join(damaged))
    assert read_transcript(path).bad_lines == 200
    # 1 + 200 + 1 messages, the compact block not counted.
    assert describe_transcript(path) == SessionDigest("the task", 202)


def test_a_checkpoint_that_does_not_count_the_ui_is_described_by_streaming(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.jsonl"
    with JsonlTranscriptStore.create(path, SessionRecord("s", "/ws")) as store:
        for index in range(3):
            store.append(MessageRecord(user(f"question {index}")))
        store.save_compaction(CompactionRecord("auto", "llm", 100, 10, "ledger", (_block(),)))
        store.append(MessageRecord(user("after")))
    # As a development build wrote them for a while: a history without ``ui_entries``.
    lines = path.read_bytes().split(b"\n")
    for index, line in enumerate(lines):
        if line.startswith(b'{"v":1,"type":"compaction",'):
            data = orjson.loads(line)
            del data["history"]["ui_entries"]
            lines[index] = orjson.dumps(data)
    path.write_bytes(b"\n".join(lines))
    assert describe_transcript(path) == SessionDigest("question 0", 4)


def test_describing_refuses_what_reading_refuses(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(b"not a transcript\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    for path, message in (
        (tmp_path, "is a directory"),
        (tmp_path / "missing.jsonl", "no such file"),
        (garbage, "is not a Cairn transcript"),
    ):
        with pytest.raises(NotATranscriptError, match=message):
            read_transcript(path)
        with pytest.raises(NotATranscriptError, match=message):
            describe_transcript(path)
    assert read_transcript(empty).records == []
    assert describe_transcript(empty) == SessionDigest("", 0)
