"""The JSONL transcript store: round trips, views, limits, damage and durability."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from cairn.messages import (
    KIND_COMPACT_SUMMARY,
    KIND_HANDOFF,
    ImagePart,
    JSONObject,
    Message,
    MessageMeta,
    TextPart,
    assistant,
    message_to_dict,
    user,
)
from cairn.store import (
    MAX_REPLACEMENT_BYTES,
    MAX_REPLACEMENT_MESSAGES,
    CheckpointFormatError,
    CompactionRecord,
    ContentEdit,
    ContextEditRecord,
    ErrorRecord,
    HandoffRecord,
    JsonlTranscriptStore,
    MessageRecord,
    NotATranscriptError,
    Record,
    SessionRecord,
    StateRecord,
    TranscriptLockedError,
    TranscriptWriteError,
    read_transcript,
)
from cairn.store.records import encode_record, record_from_dict, record_to_dict
from store.rounds import chat_round, tool_round


def append_all(store: JsonlTranscriptStore, messages: list[Message]) -> None:
    for message in messages:
        store.append(MessageRecord(message))


def summary_message(text: str = "ledger") -> Message:
    return Message(
        role="user", content=text, meta=MessageMeta(kind=KIND_COMPACT_SUMMARY, synthetic=True)
    )


def compaction(replacement: list[Message], summary: str = "summary") -> CompactionRecord:
    return CompactionRecord(
        trigger="auto",
        strategy="fallback",
        pre_tokens=1000,
        post_tokens=100,
        summary=summary,
        replacement_messages=tuple(replacement),
    )


def raw_compaction_line(replacement: list[JSONObject]) -> bytes:
    """A checkpoint written by hand, bypassing the save-time checks."""
    record = record_to_dict(compaction([]))
    record["replacement_messages"] = [*replacement]
    return orjson.dumps(record) + b"\n"


# ---------------------------------------------------------------------------
# Round trips


def test_every_record_type_round_trips_through_the_file(store: JsonlTranscriptStore) -> None:
    image = user([TextPart("look"), ImagePart("data:image/png;base64,AAAA", "low")])
    rounds = [*chat_round("fix the bug 修复错误"), image, *tool_round(2)]
    thinking = assistant("done", reasoning="I should check the tests first")
    handoff = Message(
        role="user",
        content='<token-budget-handoff version="1">write down the frontier</token-budget-handoff>',
        meta=MessageMeta(kind=KIND_HANDOFF, hidden=True, synthetic=True),
    )
    records: list[Record] = [
        *(MessageRecord(m) for m in [*rounds, thinking]),
        HandoffRecord(handoff, epoch=0),
        ContextEditRecord((ContentEdit(rounds[-1].id, "[snipped]"),)),
        StateRecord("plan_mode", {"active": True, "plan_file": "/ws/.cairn/plan.md"}),
        ErrorRecord("compaction failed: model timed out", source="compact"),
    ]
    for record in records:
        store.append(record)
    store.save_compaction(compaction([summary_message(), *tool_round(1)]))
    store.close()

    loaded = read_transcript(store.path)
    assert loaded.warnings == []
    assert loaded.session_id == "s1"
    assert loaded.records == store.transcript().records
    assert [record_to_dict(r) for r in loaded.records[1:-1]] == [record_to_dict(r) for r in records]


def test_reopen_appends_after_existing_records(store: JsonlTranscriptStore) -> None:
    append_all(store, chat_round("one"))
    store.close()
    with JsonlTranscriptStore.open(store.path) as again:
        append_all(again, chat_round("two"))
    texts = [m.text for m in read_transcript(store.path).api().messages]
    assert texts == ["one", "two"]


def test_create_refuses_an_existing_file(store: JsonlTranscriptStore) -> None:
    with pytest.raises(TranscriptWriteError, match="already exists"):
        JsonlTranscriptStore.create(store.path, SessionRecord(session_id="x", workspace="/ws"))


def test_a_closed_store_refuses_writes(store: JsonlTranscriptStore) -> None:
    store.close()
    with pytest.raises(TranscriptWriteError, match="closed"):
        store.append(MessageRecord(user("late")))


# ---------------------------------------------------------------------------
# Views across compactions


def test_views_without_compaction(store: JsonlTranscriptStore) -> None:
    messages = [*chat_round("task"), *tool_round(2), assistant("finished")]
    append_all(store, messages)
    loaded = read_transcript(store.path)
    assert loaded.api().messages == messages
    assert loaded.ui() == messages


def test_views_after_one_compaction(store: JsonlTranscriptStore) -> None:
    old = [*chat_round("task"), *tool_round(1, tag="a"), *tool_round(1, tag="b")]
    append_all(store, old)
    kept = old[-2:]
    block = summary_message("the ledger")
    store.save_compaction(compaction([block, *kept], summary="the ledger"))
    after = [*chat_round("next"), assistant("ok")]
    append_all(store, after)

    loaded = read_transcript(store.path)
    api = loaded.api()
    assert api.messages == [block, *kept, *after]
    assert api.valid_checkpoints == 1
    ui = loaded.ui(api)
    # Old messages stay, the block is appended where compaction happened, new ones follow.
    assert ui[: len(old)] == old
    assert ui[len(old)].meta.kind == KIND_COMPACT_SUMMARY
    assert ui[len(old)].text == "the ledger"
    assert ui[len(old) + 1 :] == after
    # Kept rounds live inside the checkpoint only: every message record is unique.
    ids = [r.id for r in loaded.records if isinstance(r, MessageRecord)]
    assert len(ids) == len(set(ids)) == len(old) + len(after)


def test_views_after_three_compactions(store: JsonlTranscriptStore) -> None:
    ui_expected: list[str] = []
    api_expected: list[Message] = []
    for epoch in range(3):
        batch = [*chat_round(f"step {epoch}"), *tool_round(1, tag=str(epoch))]
        append_all(store, batch)
        ui_expected += [m.id for m in batch]
        replacement = [summary_message(f"ledger {epoch}"), *batch[-2:]]
        record = compaction(replacement, summary=f"ledger {epoch}")
        store.save_compaction(record)
        ui_expected.append(record.id)
        api_expected = replacement
    tail = chat_round("after all")
    append_all(store, tail)
    api_expected = [*api_expected, *tail]
    ui_expected += [m.id for m in tail]

    loaded = read_transcript(store.path)
    api = loaded.api()
    assert api.messages == api_expected
    assert api.valid_checkpoints == 3
    assert [m.id for m in loaded.ui(api)] == ui_expected
    blocks = [m.text for m in loaded.ui(api) if m.meta.kind == KIND_COMPACT_SUMMARY]
    assert blocks == ["ledger 0", "ledger 1", "ledger 2"]
    assert store.api_view.messages == api.messages


def test_hidden_handoff_reaches_the_model_but_not_the_ui(store: JsonlTranscriptStore) -> None:
    append_all(store, chat_round("task"))
    handoff = Message(
        role="user", content="write down", meta=MessageMeta(kind=KIND_HANDOFF, hidden=True)
    )
    store.append(HandoffRecord(handoff, epoch=0))
    loaded = read_transcript(store.path)
    assert handoff in loaded.api().messages
    assert handoff not in loaded.ui()


def test_context_edits_apply_to_the_api_view_only(store: JsonlTranscriptStore) -> None:
    rounds = tool_round(1, text="x" * 500)
    append_all(store, rounds)
    result = rounds[1]
    store.append(ContextEditRecord((ContentEdit(result.id, "[read_file result elided]"),)))
    loaded = read_transcript(store.path)
    api = loaded.api().messages
    assert api[1].text == "[read_file result elided]"
    assert api[1].tool_call_id == result.tool_call_id
    assert loaded.ui()[1].text == result.text
    assert store.api_view.messages == api


def test_an_edit_of_a_message_replaced_by_a_checkpoint_is_moot(
    store: JsonlTranscriptStore,
) -> None:
    old = tool_round(1)
    append_all(store, old)
    block = summary_message()
    store.save_compaction(compaction([block]))
    store.append(ContextEditRecord((ContentEdit(old[1].id, "stub"),)))
    assert read_transcript(store.path).api().messages == [block]


def test_error_blocks_show_in_the_ui_in_order(store: JsonlTranscriptStore) -> None:
    append_all(store, chat_round("task"))
    store.append(ErrorRecord("manual /compact failed: timeout", source="compact"))
    append_all(store, chat_round("again"))
    ui = read_transcript(store.path).ui()
    assert [m.meta.kind for m in ui] == ["chat", "error", "chat"]
    assert ui[1].text == "manual /compact failed: timeout"


# ---------------------------------------------------------------------------
# Checkpoint limits, on save and on load


def many_messages(n: int) -> list[Message]:
    return [user(f"m{i}") for i in range(n)]


def test_save_accepts_exactly_4096_replacement_messages(store: JsonlTranscriptStore) -> None:
    store.save_compaction(compaction(many_messages(MAX_REPLACEMENT_MESSAGES)))
    assert len(read_transcript(store.path).api().messages) == 4096


def test_save_refuses_4097_replacement_messages_and_writes_nothing(
    store: JsonlTranscriptStore,
) -> None:
    before = store.path.read_bytes()
    with pytest.raises(CheckpointFormatError, match="4097 replacement messages; the limit is 4096"):
        store.save_compaction(compaction(many_messages(MAX_REPLACEMENT_MESSAGES + 1)))
    assert store.path.read_bytes() == before
    assert store.api_view.messages == []


def _payload_for(total_bytes: int) -> list[Message]:
    """One message whose serialized replacement list is exactly ``total_bytes``."""
    probe = Message(role="user", content="", id="m")
    overhead = len(orjson.dumps([message_to_dict(probe)]))
    return [Message(role="user", content="a" * (total_bytes - overhead), id="m")]


def test_save_accepts_16_mib_and_refuses_one_byte_more(store: JsonlTranscriptStore) -> None:
    store.save_compaction(compaction(_payload_for(MAX_REPLACEMENT_BYTES)))
    with pytest.raises(CheckpointFormatError, match="the limit is 16,777,216"):
        store.save_compaction(compaction(_payload_for(MAX_REPLACEMENT_BYTES + 1)))
    assert read_transcript(store.path).api().valid_checkpoints == 1


def test_save_refuses_a_checkpoint_that_splits_a_tool_call(
    store: JsonlTranscriptStore,
) -> None:
    head, result = tool_round(1)
    with pytest.raises(CheckpointFormatError, match="split tool calls"):
        store.save_compaction(compaction([summary_message(), head]))
    with pytest.raises(CheckpointFormatError, match="split tool calls"):
        store.save_compaction(compaction([summary_message(), result]))


@pytest.mark.parametrize(
    ("count", "valid"), [(MAX_REPLACEMENT_MESSAGES, True), (MAX_REPLACEMENT_MESSAGES + 1, False)]
)
def test_load_uses_the_previous_checkpoint_when_one_breaks_the_count_limit(
    store: JsonlTranscriptStore, count: int, valid: bool
) -> None:
    first = [*chat_round("task"), *tool_round(1)]
    append_all(store, first)
    good = [summary_message("good")]
    store.save_compaction(compaction(good))
    later = chat_round("later")
    append_all(store, later)
    store.close()
    with store.path.open("ab") as handle:
        handle.write(raw_compaction_line([message_to_dict(m) for m in many_messages(count)]))
    after = chat_round("after the big checkpoint")
    with JsonlTranscriptStore.open(store.path) as again:
        append_all(again, after)

    loaded = read_transcript(store.path)
    api = loaded.api()
    if valid:
        assert len(api.messages) == count + 1
        assert loaded.warnings == []
    else:
        # Nothing is dropped: the previous checkpoint plus every later message.
        assert api.messages == [*good, *later, *after]
        assert len(api.ignored_checkpoints) == 1
        assert any("limit is 4096" in w for w in api.warnings)


def test_load_ignores_a_checkpoint_over_16_mib(store: JsonlTranscriptStore) -> None:
    append_all(store, chat_round("task"))
    store.close()
    big = [message_to_dict(m) for m in _payload_for(MAX_REPLACEMENT_BYTES + 1)]
    with store.path.open("ab") as handle:
        handle.write(raw_compaction_line(big))
    api = read_transcript(store.path).api()
    assert [m.text for m in api.messages] == ["task"]
    assert any("16 MiB" in w for w in api.warnings)


# ---------------------------------------------------------------------------
# Damaged files


def test_torn_last_line_is_skipped_on_read_and_the_file_is_untouched(
    store: JsonlTranscriptStore,
) -> None:
    append_all(store, chat_round("kept"))
    store.close()
    torn = encode_record(MessageRecord(user("cut short")))[:-9]
    with store.path.open("ab") as handle:
        handle.write(torn)
    before = store.path.read_bytes()

    loaded = read_transcript(store.path)
    assert [m.text for m in loaded.api().messages] == ["kept"]
    assert any("torn last line" in w for w in loaded.warnings)
    assert store.path.read_bytes() == before


def test_opening_moves_a_torn_line_aside_and_appends_cleanly(
    store: JsonlTranscriptStore,
) -> None:
    append_all(store, chat_round("kept"))
    store.close()
    torn = encode_record(MessageRecord(user("cut short")))[:-9]
    with store.path.open("ab") as handle:
        handle.write(torn)

    with JsonlTranscriptStore.open(store.path) as again:
        assert any("moved to" in w for w in again.transcript().warnings)
        append_all(again, chat_round("next"))

    asides = list(store.path.parent.glob(store.path.name + ".torn-*"))
    assert len(asides) == 1
    assert asides[0].read_bytes() == torn
    loaded = read_transcript(store.path)
    assert loaded.warnings == []
    assert [m.text for m in loaded.api().messages] == ["kept", "next"]


def test_a_complete_last_record_without_newline_is_kept(store: JsonlTranscriptStore) -> None:
    store.close()
    with store.path.open("ab") as handle:
        handle.write(encode_record(MessageRecord(user("whole")))[:-1])
    assert [m.text for m in read_transcript(store.path).api().messages] == ["whole"]
    with JsonlTranscriptStore.open(store.path) as again:
        append_all(again, chat_round("more"))
    assert [m.text for m in read_transcript(store.path).api().messages] == ["whole", "more"]


def test_garbage_in_the_middle_is_reported_and_skipped(store: JsonlTranscriptStore) -> None:
    append_all(store, chat_round("before"))
    store.close()
    with store.path.open("ab") as handle:
        handle.write(b"{not json at all\n")
        handle.write(b'{"v": 1, "type": "mystery", "id": "x", "ts": "t"}\n')
        handle.write(b'{"v": 1, "type": "message", "id": "y", "ts": "t", "message": {}}\n')
        handle.write(encode_record(MessageRecord(user("after"))))
    loaded = read_transcript(store.path)
    assert [m.text for m in loaded.api().messages] == ["before", "after"]
    assert loaded.bad_lines == 3
    assert [w.split(":")[0] for w in loaded.warnings] == ["line 3", "line 4", "line 5"]
    assert "unknown record type 'mystery'" in loaded.warnings[1]


@pytest.mark.parametrize(
    ("content", "problem"),
    [(b"# README\nplain text\n", "not a Cairn transcript"), (b'{"a": 1}\n', "not a Cairn")],
)
def test_a_file_that_is_not_a_transcript_is_refused(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    path = tmp_path / "other.jsonl"
    path.write_bytes(content)
    with pytest.raises(NotATranscriptError, match=problem):
        read_transcript(path)
    with pytest.raises(NotATranscriptError, match=problem):
        JsonlTranscriptStore.open(path)
    assert path.read_bytes() == content


def test_missing_paths_and_directories_are_refused(tmp_path: Path) -> None:
    with pytest.raises(NotATranscriptError, match="no such file"):
        read_transcript(tmp_path / "nope.jsonl")
    with pytest.raises(NotATranscriptError, match="is a directory"):
        read_transcript(tmp_path)
    with pytest.raises(NotATranscriptError, match="no such file"):
        JsonlTranscriptStore.open(tmp_path / "nope.jsonl")


def test_record_parsing_names_the_bad_field() -> None:
    from cairn.store import RecordFormatError

    with pytest.raises(RecordFormatError, match="unsupported record version 2"):
        record_from_dict({"v": 2, "type": "message"})
    with pytest.raises(RecordFormatError, match="record field 'id' must be a string"):
        record_from_dict({"v": 1, "type": "compaction", "ts": "t", "trigger": "auto"})
    with pytest.raises(
        RecordFormatError, match="compaction record: trigger: Input should be 'auto', 'manual'"
    ):
        record_from_dict(
            {"v": 1, "type": "compaction", "id": "r", "ts": "t", "trigger": "sometimes"}
        )
    with pytest.raises(RecordFormatError, match=r"message record: message\.role: Input should be"):
        record_from_dict(
            {
                "v": 1,
                "type": "message",
                "id": "m",
                "ts": "t",
                "message": {"id": "m", "role": "robot"},
            }
        )


# ---------------------------------------------------------------------------
# One writer, durability


def test_a_second_writer_in_the_same_process_is_refused(store: JsonlTranscriptStore) -> None:
    with pytest.raises(TranscriptLockedError, match="already open for writing"):
        JsonlTranscriptStore.open(store.path)
    store.close()
    JsonlTranscriptStore.open(store.path).close()  # the lock goes with the writer


def test_a_second_writer_in_another_process_is_refused(store: JsonlTranscriptStore) -> None:
    code = textwrap.dedent(
        f"""
        import sys
        from cairn.store import JsonlTranscriptStore, TranscriptLockedError
        try:
            JsonlTranscriptStore.open({str(store.path)!r})
        except TranscriptLockedError as exc:
            print(exc)
            sys.exit(3)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 3, done.stderr
    assert "one writer per session file" in done.stdout


def test_records_written_before_a_sigkill_all_survive(tmp_path: Path) -> None:
    path = tmp_path / "crash.jsonl"
    code = textwrap.dedent(
        f"""
        import sys
        from cairn.messages import user
        from cairn.store import JsonlTranscriptStore, MessageRecord, SessionRecord
        store = JsonlTranscriptStore.create({str(path)!r}, SessionRecord("s", "/ws"))
        i = 0
        while True:
            store.append(MessageRecord(user(f"record {{i}} " + "x" * 3000)))
            print(i, flush=True)
            i += 1
        """
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    acknowledged = -1
    for line in child.stdout:
        acknowledged = int(line)
        if acknowledged >= 200:
            break
    os.kill(child.pid, signal.SIGKILL)
    child.wait()

    loaded = read_transcript(path)
    texts = [m.text.split(" ")[1] for m in loaded.api().messages]
    # Every record acknowledged before the kill is there, in order; at most the
    # one being written when the signal landed is lost, as a torn line.
    assert texts[: acknowledged + 1] == [str(i) for i in range(acknowledged + 1)]
    assert all(w.endswith("skipped") or "torn" in w for w in loaded.warnings)
    with JsonlTranscriptStore.open(path) as again:
        append_all(again, chat_round("resumed"))
    assert read_transcript(path).api().messages[-1].text == "resumed"


def test_a_failed_write_leaves_no_partial_record(store: JsonlTranscriptStore) -> None:
    """A real write failure (file size limit, like a full disk) rolls the file back."""
    append_all(store, chat_round("before"))
    store.sync()
    before = store.path.read_bytes()
    code = textwrap.dedent(
        f"""
        import resource, signal, sys
        from cairn.messages import user
        from cairn.store import (CompactionRecord, JsonlTranscriptStore, MessageRecord,
                                 TranscriptWriteError)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        store = JsonlTranscriptStore.open({str(store.path)!r})
        limit = store.path.stat().st_size + 1000
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
        try:
            store.append(MessageRecord(user("y" * 50_000)))
        except TranscriptWriteError as exc:
            print("append failed:", exc)
        try:
            store.save_compaction(CompactionRecord("auto", "fallback", 1, 1, "s",
                                                   (user("z" * 50_000),)))
        except TranscriptWriteError as exc:
            print("checkpoint failed:", exc)
        print("api", len(store.api_view.messages))
        """
    )
    store.close()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "append failed" in done.stdout
    assert "checkpoint failed" in done.stdout
    assert "api 1" in done.stdout  # memory did not change either
    assert store.path.read_bytes() == before
    assert resource.getrlimit(resource.RLIMIT_FSIZE)[0] == resource.RLIM_INFINITY


def test_new_files_are_created_with_their_directories(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "c.jsonl"
    with JsonlTranscriptStore.create(path, SessionRecord("s", "/ws")):
        pass
    assert read_transcript(path).session_id == "s"


def test_lone_surrogates_are_stored_as_replacement_characters(
    store: JsonlTranscriptStore,
) -> None:
    """Undecodable tool output must not make a record unwritable."""
    append_all(store, [user("bytes: \udcff\udc80 end")])
    assert read_transcript(store.path).api().messages[0].text == "bytes: \ufffd\ufffd end"


@pytest.mark.parametrize("field", ["trigger", "strategy", "type"])
def test_a_field_of_the_wrong_json_type_is_a_bad_line_not_a_crash(field: str) -> None:
    from cairn.store import RecordFormatError

    data = record_to_dict(compaction([]))
    data[field] = ["auto"]
    # ``type`` is the envelope's, checked before the record's own fields.
    expected = rf"compaction record: {field}: Input should be|record field '{field}' must be a"
    with pytest.raises(RecordFormatError, match=expected):
        record_from_dict(data)


def test_an_empty_file_loads_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    loaded = read_transcript(path)
    assert loaded.records == []
    assert loaded.warnings == ["the file is empty: no session header"]
