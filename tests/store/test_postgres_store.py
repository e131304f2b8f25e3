"""The PostgreSQL transcript store against a real server: order, views, the pointer, the lock,
limits, resume, followers, bad URLs, and a server killed in the middle of a compaction.

Every test gets a fresh database on a throwaway server (``postgres_server``);
nothing of psycopg or the server is mocked. A test that must kill a server
starts one of its own.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cairn.agent.loop import run_turn
from cairn.agent.runtime import Runtime
from cairn.agent.settings import Settings
from cairn.context import CompactionConfig, ContextPipeline
from cairn.messages import (
    KIND_COMPACT_SUMMARY,
    KIND_HANDOFF,
    Message,
    MessageMeta,
    message_to_dict,
    user,
)
from cairn.provider import ModelConfig, OpenAIProvider
from cairn.store import (
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
    SessionDigest,
    SessionRecord,
    StateRecord,
    StoreError,
    TranscriptLockedError,
    TranscriptWriteError,
    api_view,
    read_transcript,
    resumption,
    ui_view,
)
from cairn.store.paths import normalize_workspace, session_path
from cairn.store.postgres import (
    PostgresStoreFactory,
    PostgresTranscriptStore,
    task_key,
)
from cairn.store.records import encode_line, record_to_dict
from cairn.store.selection import mask_url
from store.rounds import chat_round, tool_round
from support.openai_server import (
    OpenAIServer,
    Reply,
    ToolCallSpec,
)
from support.postgres_server import (  # noqa: F401  (the fixtures register themselves by import)
    PostgresServer,
    new_server,
    postgres_server_fixture,
    postgres_url_fixture,
)

#: Bounded waits for what another process or the server does; never a timing assertion.
WAIT_S = 60.0


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder


@pytest.fixture
def stores(postgres_url: str, tmp_path: Path) -> Iterator[PostgresStoreFactory]:
    factory = PostgresStoreFactory(postgres_url, tmp_path / "home")
    yield factory
    factory.close()


def header(session_id: str, workspace: Path) -> SessionRecord:
    return SessionRecord(session_id, normalize_workspace(workspace))


def append_all(
    store: PostgresTranscriptStore | JsonlTranscriptStore, messages: list[Message]
) -> None:
    for message in messages:
        store.append(MessageRecord(message))


def summary_message(text: str = "ledger") -> Message:
    return Message(
        role="user", content=text, meta=MessageMeta(kind=KIND_COMPACT_SUMMARY, synthetic=True)
    )


def compaction(replacement: list[Message], summary: str = "summary") -> CompactionRecord:
    return CompactionRecord("auto", "fallback", 1000, 100, summary, tuple(replacement))


def database(url: str) -> str:
    """The database name of a test URL (``postgresql:///<name>?host=…``)."""
    return url.split("///", 1)[1].split("?", 1)[0]


def rows(url: str, session_id: str) -> list[tuple[int, str, str]]:
    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute(
            "SELECT seq, type, line FROM cairn_records WHERE session_id = %s ORDER BY seq",
            (session_id,),
        ).fetchall()
    return [(int(seq), str(kind), str(line)) for seq, kind, line in found]


def pointer(url: str, session_id: str) -> int | None:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT checkpoint_seq FROM cairn_sessions WHERE session_id = %s", (session_id,)
        ).fetchone()
    assert row is not None
    return None if row[0] is None else int(row[0])


def insert_row(url: str, session_id: str, seq: int, kind: str, line: bytes) -> None:
    """A row written by hand, bypassing every check of the store."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO cairn_records (session_id, seq, type, line) VALUES (%s, %s, %s, %s)",
            (session_id, seq, kind, line.decode()),
        )


def wait_for(what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what} after {WAIT_S:.0f} s")
        time.sleep(0.02)


def python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code), *args]


def every_kind_of_record() -> list[Record]:
    rounds = [*chat_round("fix the bug 修复错误"), *tool_round(2)]
    handoff = Message(
        role="user", content="frontier", meta=MessageMeta(kind=KIND_HANDOFF, hidden=True)
    )
    return [
        *(MessageRecord(m) for m in rounds),
        HandoffRecord(handoff, epoch=0),
        ContextEditRecord((ContentEdit(rounds[-1].id, "[snipped]"),)),
        StateRecord("plan_mode", {"active": True, "plan_file": "/ws/.cairn/plan.md"}),
        ErrorRecord("compaction failed: model timed out", source="compact"),
        MessageRecord(user("bytes: \udcff end")),  # a lone surrogate is stored as U+FFFD
    ]


# ---------------------------------------------------------------------------
# Records and views


def test_records_are_stored_in_order_each_row_the_exact_jsonl_line(
    stores: PostgresStoreFactory, postgres_url: str, workspace: Path, tmp_path: Path
) -> None:
    records = every_kind_of_record()
    first = header("s1", workspace)
    files = JsonlTranscriptStore.create(tmp_path / "s1.jsonl", first)
    store = stores.create(workspace, first)
    checkpoint = compaction([summary_message(), *tool_round(1)])
    for target in (store, files):
        for record in records:
            target.append(record)
        target.save_compaction(checkpoint)
        target.close()

    stored = rows(postgres_url, "s1")
    assert [seq for seq, _, _ in stored] == list(range(1, len(records) + 3))
    assert [kind for _, kind, _ in stored] == [
        "session",
        *(r.TYPE for r in records),
        "compaction",
    ]
    # Exported in seq order, the rows are the JSONL file, byte for byte.
    exported = b"".join(line.encode() + b"\n" for _, _, line in stored)
    assert exported == files.path.read_bytes()
    loaded = stores.read(workspace, "s1")
    assert loaded.warnings == []
    assert loaded.path == store.path == Path("postgresql") / database(postgres_url) / "s1"
    assert loaded.records == read_transcript(files.path).records
    assert loaded.records[-2] == encode_line(records[-1])[1]
    # A closed store still reads (on a connection of its own), and refuses writes.
    assert store.transcript().records == loaded.records
    assert store.ui_page() == files.ui_page()
    with pytest.raises(TranscriptWriteError, match="the store is closed"):
        store.append(MessageRecord(user("late")))


def test_with_asynchronous_commits_the_store_syncs_closes_and_keeps_its_records(
    postgres_url: str, workspace: Path
) -> None:
    relaxed = PostgresStoreFactory(postgres_url + "&options=-c%20synchronous_commit%3Doff")
    store = relaxed.create(workspace, header("s1", workspace))
    append_all(store, tool_round(2))
    store.sync()
    append_all(store, chat_round("after the turn"))
    store.close()
    assert [m.text for m in relaxed.read(workspace, "s1").api().messages][-1] == "after the turn"
    relaxed.close()


def test_views_equal_the_jsonl_stores_for_the_same_session(
    stores: PostgresStoreFactory, workspace: Path, tmp_path: Path
) -> None:
    first = header("s1", workspace)
    files = JsonlTranscriptStore.create(tmp_path / "s1.jsonl", first)
    store = stores.create(workspace, first)
    both = (store, files)
    for epoch in range(3):
        batch = [*chat_round(f"step {epoch}"), *tool_round(1, tag=str(epoch))]
        hidden = Message(
            role="user", content=f"hand {epoch}", meta=MessageMeta(kind=KIND_HANDOFF, hidden=True)
        )
        records: list[Record] = [
            *(MessageRecord(m) for m in batch),
            HandoffRecord(hidden, epoch=epoch),
            StateRecord("tasks", {"epoch": epoch}),
        ]
        checkpoint = compaction(
            [summary_message(f"ledger {epoch}"), *batch[-2:]], f"ledger {epoch}"
        )
        edit = ContextEditRecord((ContentEdit(batch[-1].id, "[elided]"),))
        for target in both:
            for record in records:
                target.append(record)
            target.save_compaction(checkpoint)
            target.append(edit)
    tail = MessageRecord(user("after all"))
    for target in both:
        target.append(tail)

    assert store.api_view.messages == files.api_view.messages
    assert store.api_view.valid_checkpoints == files.api_view.valid_checkpoints == 3
    assert store.ui_page() == files.ui_page()
    assert store.ui_page(before=5, limit=3) == files.ui_page(before=5, limit=3)
    assert store.transcript().records == files.transcript().records
    for target in both:
        target.close()
    again, files_again = stores.open(workspace, "s1"), JsonlTranscriptStore.open(files.path)
    assert again.resumption == files_again.resumption
    assert again.ui_page(limit=4) == files_again.ui_page(limit=4)
    again.close()
    files_again.close()


def test_the_pipeline_runs_on_the_postgres_store(
    stores: PostgresStoreFactory, postgres_url: str, workspace: Path
) -> None:
    model = ModelConfig(model="m", context_window=32_768)
    opened = ContextPipeline.open(
        workspace, CompactionConfig(), model=model, session_id="p1", store_factory=stores
    )
    opened.add(user("hi"))
    opened.close()
    again = ContextPipeline.open(
        workspace, CompactionConfig(), model=model, session_id="p1", store_factory=stores
    )
    assert [m.text for m in again.messages] == ["hi"]
    assert again.transcript_path == Path("postgresql") / database(postgres_url) / "p1"
    again.close()


# ---------------------------------------------------------------------------
# The checkpoint and its pointer


def test_the_pointer_moves_with_its_checkpoint_and_never_without_it(
    stores: PostgresStoreFactory, postgres_url: str, workspace: Path
) -> None:
    store = stores.create(workspace, header("s1", workspace))
    append_all(store, tool_round(1))
    assert pointer(postgres_url, "s1") is None
    store.save_compaction(compaction([summary_message("first")]))
    checkpoint_seq = store.last_seq
    assert pointer(postgres_url, "s1") == checkpoint_seq
    assert rows(postgres_url, "s1")[-1][:2] == (checkpoint_seq, "compaction")
    append_all(store, chat_round("more"))
    store.append(StateRecord("plan_mode", {"active": False}))
    assert pointer(postgres_url, "s1") == checkpoint_seq  # other records leave it
    # A checkpoint that a resume could not start from (it splits a tool call)
    # is stored as it is given, and leaves the pointer too.
    head, _ = tool_round(1)
    store.append(compaction([summary_message(), head]))
    assert pointer(postgres_url, "s1") == checkpoint_seq
    store.close()


def test_a_connection_killed_between_the_checkpoint_and_its_pointer_commits_neither(
    stores: PostgresStoreFactory, postgres_url: str, workspace: Path
) -> None:
    store = stores.create(workspace, header("s1", workspace))
    append_all(store, tool_round(1))
    store.save_compaction(compaction([summary_message("first")]))
    first = store.last_seq
    append_all(store, chat_round("more"))
    view, last = list(store.api_view.messages), store.last_seq

    # Hold the session row, so the writer's transaction stops at the pointer's
    # update with its checkpoint row already inserted; then kill its connection.
    blocker = psycopg.connect(postgres_url)
    blocker.execute("SELECT 1 FROM cairn_sessions WHERE session_id = 's1' FOR NO KEY UPDATE")
    failures: list[BaseException] = []

    def compact() -> None:
        try:
            store.save_compaction(compaction([summary_message("second")]))
        except BaseException as exc:
            failures.append(exc)

    writer = threading.Thread(target=compact)
    writer.start()
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        waiting: list[int] = []

        def stopped_at_the_pointer() -> bool:
            found = admin.execute(
                "SELECT pid, query FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            ).fetchall()
            waiting[:] = [pid for pid, query in found if "checkpoint_seq" in query]
            return bool(waiting)

        wait_for("the writer to wait at the pointer's update", stopped_at_the_pointer)
        # The checkpoint row is inserted but not committed: nobody else sees it.
        assert rows(postgres_url, "s1")[-1][0] == last
        admin.execute("SELECT pg_terminate_backend(%s)", (waiting[0],))
    writer.join(WAIT_S)
    blocker.rollback()
    blocker.close()

    assert len(failures) == 1 and isinstance(failures[0], TranscriptWriteError)
    message = str(failures[0])
    assert "\n" not in message
    assert (
        message.startswith("postgresql/cairn_test_")
        and "/s1: could not write checkpoint (" in message
    )
    assert "terminating connection" in message
    # Memory is unchanged, and so is storage: neither the row nor the pointer moved.
    assert store.api_view.messages == view and store.last_seq == last
    assert rows(postgres_url, "s1")[-1][0] == last and pointer(postgres_url, "s1") == first
    # Nothing changed meanwhile, so the writer carries on over a new connection,
    # its lock taken again: the compaction can be retried at once.
    store.save_compaction(compaction([summary_message("second")]))
    assert pointer(postgres_url, "s1") == store.last_seq == last + 1
    with pytest.raises(TranscriptLockedError, match="already open for writing"):
        stores.open(workspace, "s1")
    store.close()

    again = stores.open(workspace, "s1")
    assert [m.text for m in again.api_view.messages] == ["second"]
    again.close()


def _writer_backend(url: str) -> int:
    """The server process holding the (only) session lock of the test's database."""
    with psycopg.connect(url, autocommit=True) as admin:
        row = admin.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND objsubid = 1 AND database = (SELECT oid FROM pg_database "
            "WHERE datname = current_database())"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _terminate(url: str, pid: int) -> None:
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


def test_a_writer_whose_connection_was_lost_reconnects_and_goes_on(
    stores: PostgresStoreFactory, postgres_url: str, workspace: Path
) -> None:
    store = stores.create(workspace, header("s1", workspace))
    append_all(store, chat_round("before"))
    _terminate(postgres_url, _writer_backend(postgres_url))  # as a server restart would
    with pytest.raises(TranscriptWriteError, match="could not write record"):
        store.append(MessageRecord(user("lost with the connection")))
    store.append(MessageRecord(user("after")))
    assert [r.message.text for r in store.transcript().records if isinstance(r, MessageRecord)] == [
        "before",
        "after",
    ]
    store.close()
    assert [kind for _, kind, _ in rows(postgres_url, "s1")] == ["session", "message", "message"]


def test_a_writer_does_not_reconnect_to_a_session_another_writer_changed(
    stores: PostgresStoreFactory, postgres_url: str, workspace: Path
) -> None:
    store = stores.create(workspace, header("s1", workspace))
    append_all(store, chat_round("before"))
    _terminate(postgres_url, _writer_backend(postgres_url))
    with pytest.raises(TranscriptWriteError, match="could not write record"):
        store.append(MessageRecord(user("lost")))
    # Meanwhile another writer opened the session, wrote and went.
    other = stores.open(workspace, "s1")
    other.append(MessageRecord(user("by the other writer")))
    other.close()
    view = list(store.api_view.messages)
    with pytest.raises(TranscriptWriteError) as refused:
        store.append(MessageRecord(user("mine")))
    message = str(refused.value)
    assert "the connection to the database was lost" in message and "\n" not in message
    assert message.endswith(
        "now ends at line 3, not at line 2 where this writer left it; reopen the session"
    )
    # Nothing was written and memory is unchanged; the next try within the
    # retry interval fails at once, without connecting.
    assert store.api_view.messages == view and store.last_seq == 2
    with pytest.raises(TranscriptWriteError, match="will retry shortly"):
        store.append(MessageRecord(user("mine")))
    assert [kind for _, kind, _ in rows(postgres_url, "s1")] == ["session", "message", "message"]
    store.close()


def test_a_database_error_rolls_the_record_back_and_the_writer_goes_on(
    stores: PostgresStoreFactory, postgres_url: str, workspace: Path
) -> None:
    store = stores.create(workspace, header("s1", workspace))
    append_all(store, chat_round("small"))
    # A real refusal by the server, as a full disk would be.
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(
            "ALTER TABLE cairn_records ADD CONSTRAINT short_lines CHECK (length(line) < 2000)"
        )
    view, last = list(store.api_view.messages), store.last_seq
    with pytest.raises(TranscriptWriteError) as failed:
        store.append(MessageRecord(user("x" * 5000)))
    assert "\n" not in str(failed.value) and "short_lines" in str(failed.value)
    assert "/s1: could not write record (" in str(failed.value)
    with pytest.raises(TranscriptWriteError, match="could not write checkpoint"):
        store.save_compaction(compaction([summary_message("y" * 5000)]))
    assert store.api_view.messages == view and store.last_seq == last
    append_all(store, chat_round("still small"))
    assert [seq for seq, _, _ in rows(postgres_url, "s1")] == [1, 2, 3]
    assert [m.text for m in stores.read(workspace, "s1").api().messages] == [
        "small",
        "still small",
    ]
    store.close()


# ---------------------------------------------------------------------------
# One writer


def test_a_second_writer_gets_a_clear_error_in_this_process_and_in_another(
    stores: PostgresStoreFactory, postgres_url: str, workspace: Path, tmp_path: Path
) -> None:
    store = stores.create(workspace, header("s1", workspace))
    with pytest.raises(TranscriptLockedError) as here:
        stores.open(workspace, "s1")
    assert str(here.value) == (
        f"cannot resume {store.path}: it is already open for writing by this Cairn process "
        f"(pid {os.getpid()}); close it there first (one writer per session)"
    )
    code = """
        import sys
        from pathlib import Path
        from cairn.store import TranscriptLockedError
        from cairn.store.postgres import PostgresStoreFactory
        try:
            PostgresStoreFactory(sys.argv[1]).open(Path(sys.argv[2]), "s1")
        except TranscriptLockedError as exc:
            print(exc)
            sys.exit(3)
    """
    done = subprocess.run(
        python(code, postgres_url, str(workspace)), capture_output=True, text=True, timeout=WAIT_S
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout.startswith(f"cannot resume {store.path}: it is already open for writing by ")
    assert f"another Cairn process (pid {os.getpid()} on " in done.stdout
    assert done.stdout.endswith("; close it there first (one writer per session)\n")
    store.close()
    stores.open(workspace, "s1").close()  # the lock went with close()


def test_the_lock_goes_with_a_writer_process_killed_by_sigkill(
    stores: PostgresStoreFactory, postgres_url: str, workspace: Path
) -> None:
    stores.create(workspace, header("s1", workspace)).close()
    code = """
        import sys, time
        from pathlib import Path
        from cairn.store.postgres import PostgresStoreFactory
        store = PostgresStoreFactory(sys.argv[1]).open(Path(sys.argv[2]), "s1")
        print("open", flush=True)
        time.sleep(600)
    """
    child = subprocess.Popen(
        python(code, postgres_url, str(workspace)), stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline() == "open\n"
    with pytest.raises(TranscriptLockedError, match="another Cairn process"):
        stores.open(workspace, "s1")
    os.kill(child.pid, signal.SIGKILL)
    child.wait(WAIT_S)
    opened: list[PostgresTranscriptStore] = []

    def reopened() -> bool:
        # The server notices the dead client's socket and ends its session, lock and all.
        try:
            opened.append(stores.open(workspace, "s1"))
        except TranscriptLockedError:
            return False
        return True

    wait_for("the killed writer's lock to be released", reopened)
    append_all(opened[0], chat_round("after the kill"))
    opened[0].close()


# ---------------------------------------------------------------------------
# Limits on save and on load


def test_save_refuses_an_over_limit_checkpoint_and_writes_nothing(
    stores: PostgresStoreFactory, postgres_url: str, workspace: Path
) -> None:
    store = stores.create(workspace, header("s1", workspace))
    append_all(store, chat_round("task"))
    before = rows(postgres_url, "s1")
    too_many = [user(f"m{i}") for i in range(MAX_REPLACEMENT_MESSAGES + 1)]
    with pytest.raises(CheckpointFormatError, match="4097 replacement messages; the limit is 4096"):
        store.save_compaction(compaction(too_many))
    head, _ = tool_round(1)
    with pytest.raises(CheckpointFormatError, match="split tool calls"):
        store.save_compaction(compaction([summary_message(), head]))
    assert rows(postgres_url, "s1") == before and pointer(postgres_url, "s1") is None
    assert [m.text for m in store.api_view.messages] == ["task"]
    store.save_compaction(compaction([user(f"m{i}") for i in range(MAX_REPLACEMENT_MESSAGES)]))
    assert len(store.api_view.messages) == MAX_REPLACEMENT_MESSAGES
    store.close()


def test_an_over_limit_checkpoint_row_is_ignored_on_load_and_nothing_is_dropped(
    stores: PostgresStoreFactory, postgres_url: str, workspace: Path
) -> None:
    store = stores.create(workspace, header("s1", workspace))
    append_all(store, [*chat_round("task"), *tool_round(1)])
    good = [summary_message("good")]
    store.save_compaction(compaction(good))
    later = chat_round("later")
    append_all(store, later)
    seq = store.last_seq
    store.close()
    # An over-limit checkpoint, as an older or foreign writer might have left it.
    big = record_to_dict(compaction([]))
    big["replacement_messages"] = [
        message_to_dict(user(f"m{i}")) for i in range(MAX_REPLACEMENT_MESSAGES + 1)
    ]
    line = json.dumps(big, ensure_ascii=False, separators=(",", ":")).encode()
    insert_row(postgres_url, "s1", seq + 1, "compaction", line)

    again = stores.open(workspace, "s1")
    after = chat_round("after the big checkpoint")
    append_all(again, after)
    # The previous checkpoint plus every later message: nothing is dropped.
    assert again.api_view.messages == [*good, *later, *after]
    assert again.api_view.valid_checkpoints == 1
    assert any("ignored checkpoint" in w and "limit is 4096" in w for w in again.api_view.warnings)
    again.close()
    loaded = stores.read(workspace, "s1")
    assert loaded.api().messages == [*good, *later, *after]
    assert len(loaded.api().ignored_checkpoints) == 1


# ---------------------------------------------------------------------------
# Resume


def test_resume_reads_only_from_the_pointers_checkpoint_on(
    stores: PostgresStoreFactory, postgres_url: str, workspace: Path
) -> None:
    store = stores.create(workspace, header("s1", workspace))
    append_all(store, [*chat_round("old"), *tool_round(1)])
    store.append(StateRecord("plan_mode", {"active": True}))
    kept = [summary_message("ledger")]
    store.save_compaction(compaction(kept))
    append_all(store, chat_round("new"))
    expected = resumption(store.transcript().records)
    store.close()
    # Damage a row before the checkpoint: a resume from the pointer never reads it.
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(
            "UPDATE cairn_records SET line = '{damaged' WHERE session_id = 's1' AND seq = 2"
        )

    again = stores.open(workspace, "s1")
    assert again.warnings == []
    assert again.resumption.api.messages == expected.api.messages
    assert again.resumption.state == expected.state == {"plan_mode": {"active": True}}
    assert again.resumption.last_response_ts == expected.last_response_ts is not None
    assert again.resumption.api.valid_checkpoints == 1
    # Reading everything (the UI, a transcript) does meet the damaged row.
    assert again.transcript().warnings[0].startswith("line 2: not valid JSON")
    again.close()

    # Without a pointer, the whole history is read, damaged row included.
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("UPDATE cairn_sessions SET checkpoint_seq = NULL")
    whole = stores.open(workspace, "s1")
    assert [w.split(":")[0] for w in whole.warnings] == ["line 2"]
    assert whole.resumption.api.messages == expected.api.messages
    whole.close()


def test_a_pointer_to_no_valid_checkpoint_falls_back_to_the_whole_history(
    stores: PostgresStoreFactory, postgres_url: str, workspace: Path
) -> None:
    store = stores.create(workspace, header("s1", workspace))
    append_all(store, tool_round(1))
    store.save_compaction(compaction([summary_message()]))
    append_all(store, chat_round("new"))
    expected = resumption(store.transcript().records)
    store.close()
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("UPDATE cairn_sessions SET checkpoint_seq = 2")  # a message row
    again = stores.open(workspace, "s1")
    assert again.warnings == [
        "the checkpoint pointer names line 2, which holds no valid checkpoint with its "
        "history; the whole session was read"
    ]
    assert again.resumption.api.messages == expected.api.messages
    assert again.resumption.api.valid_checkpoints == 1
    again.close()


def test_describing_a_session_reads_from_the_pointers_checkpoint_on(
    stores: PostgresStoreFactory, postgres_url: str, workspace: Path, tmp_path: Path
) -> None:
    store = stores.create(workspace, header("s1", workspace))
    store.append(MessageRecord(user("the task")))
    append_all(store, [user(f"question {n}") for n in range(20)])
    store.save_compaction(compaction([summary_message()]))
    append_all(store, chat_round("new"))
    store.close()
    # Damage every row between the first prompt and the checkpoint: had they
    # been read, they could not have been counted.
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(
            "UPDATE cairn_records SET line = '{damaged' WHERE session_id = 's1' "
            "AND seq BETWEEN 3 AND 22"
        )
    # 1 + 20 messages, then the new one; the compact block not counted.
    assert stores.describe(workspace, "s1") == SessionDigest("the task", 22)

    # A checkpoint whose history does not count the UI: the whole session is
    # read, and the damaged rows are not counted.
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(
            "UPDATE cairn_records SET line = (line::jsonb #- '{history,ui_entries}')::text "
            "WHERE session_id = 's1' AND type = 'compaction'"
        )
    assert stores.describe(workspace, "s1") == SessionDigest("the task", 2)

    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(NotATranscriptError, match="no such session"):
        stores.describe(other, "s1")
    with pytest.raises(NotATranscriptError, match="no such session"):
        stores.describe(workspace, "nobody")


# ---------------------------------------------------------------------------
# Sessions, subagents, reading by id


def test_sessions_are_the_workspaces_top_level_ones_newest_first(
    stores: PostgresStoreFactory, workspace: Path, tmp_path: Path
) -> None:
    older = stores.create(workspace, header("older", workspace))
    newer = stores.create(workspace, header("newer", workspace))
    task = stores.create_subagent(workspace, "newer", header("task1", workspace))
    other = tmp_path / "other"
    other.mkdir()
    elsewhere = stores.create(other, header("elsewhere", other))
    append_all(older, chat_round("touched last"))
    for store in (older, newer, task, elsewhere):
        store.close()

    assert [s.session_id for s in stores.sessions(workspace)] == ["older", "newer"]
    assert stores.sessions(workspace)[0].location == older.path
    assert stores.exists(workspace, "newer") and not stores.exists(workspace, "task1")
    assert not stores.exists(workspace, "elsewhere")
    assert stores.find("elsewhere") == normalize_workspace(other)
    assert stores.find("task1") is None and stores.find("nobody") is None
    assert stores.read_session("newer/task1").session_id == "task1"
    assert stores.read(other, "elsewhere").session_id == "elsewhere"
    with pytest.raises(NotATranscriptError, match="no such session"):
        stores.read(workspace, "elsewhere")
    with pytest.raises(NotATranscriptError, match="background task of session newer"):
        stores.open(workspace, "newer/task1")
    with pytest.raises(NotATranscriptError, match=r"/task1: no such session$"):
        stores.open(workspace, "task1")
    with pytest.raises(NotATranscriptError, match="no such session in"):
        stores.open(workspace, "elsewhere")
    with pytest.raises(NotATranscriptError, match=r"no such session$"):
        stores.open(workspace, "nobody")
    with pytest.raises(TranscriptWriteError, match="already exists; open it to resume"):
        stores.create(workspace, header("older", workspace))
    home = tmp_path / "home"
    assert stores.artifacts_dir(workspace, "newer") == session_path(
        workspace, "newer", home
    ).with_suffix("")


def test_background_tasks_of_different_sessions_may_share_an_id(
    stores: PostgresStoreFactory, workspace: Path
) -> None:
    # Task ids are numbered per session (task_1, task_2, ...), as the JSONL
    # store keeps each session's tasks in that session's own folder.
    for parent in ("first", "second"):
        stores.create(workspace, header(parent, workspace)).close()
        task = stores.create_subagent(workspace, parent, header("task_1", workspace))
        task.append(MessageRecord(user(f"the task of {parent}")))
        assert task.path.as_posix().endswith(f"/{parent}/task_1")
        task.close()
    for parent in ("first", "second"):
        transcript = stores.read_session(f"{parent}/task_1")
        assert transcript.header is not None and transcript.header.session_id == "task_1"
        assert [r.message.text for r in transcript.records if isinstance(r, MessageRecord)] == [
            f"the task of {parent}"
        ]
    assert [s.session_id for s in stores.sessions(workspace)] == ["second", "first"]
    with pytest.raises(TranscriptWriteError, match="already exists"):
        stores.create_subagent(workspace, "first", header("task_1", workspace))


def test_two_sessions_on_the_postgres_store_each_run_a_background_task(
    stores: PostgresStoreFactory, workspace: Path, tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """Regression: the second session's task_1 collided with the first's ("already exists").

    Task ids count from 1 in each runtime, so two ``cairn`` runs in one
    workspace each start a task_1.
    """

    def responder(body: dict[str, Any]) -> Reply:
        if "You are a Cairn subagent" in str(body["messages"][0]["content"]):
            return Reply(text="The tests are in tests/.")
        if body["messages"][-1]["role"] == "user":
            arguments = json.dumps(
                {
                    "description": "survey",
                    "prompt": "Where are the tests?",
                    "run_in_background": False,
                }
            )
            return Reply(tool_calls=[ToolCallSpec("task", arguments)])
        return Reply(text="Done.")

    openai_server.respond_with(responder)
    model = ModelConfig(model="test-model", base_url=openai_server.base_url, context_window=32_768)
    reports = []
    for _ in range(2):
        rt = Runtime(
            workspace,
            model,
            OpenAIProvider(model),
            settings=Settings(),
            home=tmp_path / "home",
            permission_mode="bypass",
            store_factory=stores,
        )
        session = rt.new_session()
        asyncio.run(run_turn(session, "find the tests"))
        task = next(iter(session.state.tasks.values()))
        reports.append((task.id, task.status))
        transcript = stores.read_session(task_key(session.id, task.id))
        assert transcript.header is not None and transcript.header.session_id == task.id
        rt.close()
    assert reports == [("task_1", "completed: The tests are in tests/.")] * 2


def test_a_damaged_row_is_reported_as_the_jsonl_loader_reports_a_bad_line(
    stores: PostgresStoreFactory, postgres_url: str, workspace: Path
) -> None:
    store = stores.create(workspace, header("s1", workspace))
    append_all(store, chat_round("before"))
    store.close()
    insert_row(
        postgres_url, "s1", 3, "mystery", b'{"v": 1, "type": "mystery", "id": "x", "ts": "t"}'
    )
    insert_row(postgres_url, "s1", 4, "message", encode_line(MessageRecord(user("after")))[0][:-1])
    loaded = stores.read(workspace, "s1")
    assert [m.text for m in loaded.api().messages] == ["before", "after"]
    assert loaded.bad_lines == 1
    assert loaded.warnings == ["line 3: unknown record type 'mystery'; skipped"]
    again = stores.open(workspace, "s1")
    assert again.warnings == loaded.warnings
    append_all(again, chat_round("appended after the damage"))
    assert again.last_seq == 5
    again.close()


# ---------------------------------------------------------------------------
# Live followers


def test_another_process_follows_a_session_live(
    stores: PostgresStoreFactory, postgres_url: str, workspace: Path
) -> None:
    store = stores.create(workspace, header("s1", workspace))
    append_all(store, chat_round("before the follower"))
    expected_total = 2 + 3 + 1  # the header and a message, a round of three, a checkpoint
    code = """
        import json, sys
        from cairn.store.postgres import PostgresStoreFactory
        from pathlib import Path
        factory = PostgresStoreFactory(sys.argv[1])
        followed = factory.follow(Path(sys.argv[3]), "s1", timeout=60)
        for count, (seq, record) in enumerate(followed, start=1):
            print(json.dumps([seq, record.id]), flush=True)
            if count == int(sys.argv[2]):
                break
    """
    child = subprocess.Popen(
        python(code, postgres_url, str(expected_total), str(workspace)),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    seen = [json.loads(child.stdout.readline()) for _ in range(2)]  # what was stored before
    # Written only now that the follower has caught up: it can learn of them
    # only through the notifications.
    append_all(store, tool_round(2))
    store.save_compaction(compaction([summary_message()]))
    seen += [json.loads(line) for line in child.stdout]
    assert child.wait(WAIT_S) == 0
    stored = store.transcript().records
    assert seen == [[seq, record.id] for seq, record in enumerate(stored, start=1)]
    store.close()


def test_follow_starts_after_a_seq_and_stops_after_its_timeout_of_silence(
    stores: PostgresStoreFactory, workspace: Path
) -> None:
    store = stores.create(workspace, header("s1", workspace))
    append_all(store, [*chat_round("one"), *chat_round("two"), *chat_round("three")])
    followed = list(stores.follow(workspace, "s1", after=2, timeout=0.2))
    assert [seq for seq, _ in followed] == [3, 4]
    assert [r.message.text for _, r in followed if isinstance(r, MessageRecord)] == ["two", "three"]
    assert list(stores.follow(workspace, "s1", after=store.last_seq, timeout=0)) == []
    with pytest.raises(ValueError, match="invalid session id"):
        stores.follow(workspace, "../etc")
    # Only a session of that workspace, and one that is stored.
    with pytest.raises(NotATranscriptError, match="no such session"):
        stores.follow(workspace / "elsewhere", "s1")
    with pytest.raises(NotATranscriptError, match="no such session"):
        stores.follow(workspace, "s2")
    # Waiting for ever, it ends soon after its stop event is set.
    stop = threading.Event()
    waiting = threading.Thread(target=lambda: list(stores.follow(workspace, "s1", stop=stop)))
    waiting.start()
    stop.set()
    waiting.join(WAIT_S)
    assert not waiting.is_alive()
    store.close()


# ---------------------------------------------------------------------------
# Bad input


def test_bad_urls_refusing_servers_and_missing_databases_are_one_line_errors(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    socket_dir = postgres_server.socket_dir
    nobody = tmp_path / "no-server"
    nobody.mkdir()
    cases = [
        ("not a url", 'invalid transcript database URL not a url: missing "=" after "not"'),
        (
            f"postgresql://cairn:hunter2@/cairn?host={nobody}",
            "cannot connect to the transcript database "
            f"postgresql://cairn:***@/cairn?host={nobody}: "
            f'connection to server on socket "{nobody}/.s.PGSQL.5432" failed: No such file',
        ),
        (
            f"host={socket_dir} user=postgres dbname=nope password=hunter2",
            f"cannot connect to the transcript database host={socket_dir} user=postgres "
            "dbname=nope password=***: connection to server on socket "
            f'"{socket_dir}/.s.PGSQL.5432" failed: FATAL: database "nope" does not exist',
        ),
        (
            f"postgresql:///db?host={nobody}&port=notaport",
            'invalid integer value "notaport" for connection option "port"',
        ),
        ("postgresql:///db?nonsense=1", 'invalid URI query parameter: "nonsense"'),
    ]
    for url, expected in cases:
        with pytest.raises(StoreError) as failed:
            factory = PostgresStoreFactory(url)
            factory.sessions(tmp_path)
        message = str(failed.value)
        assert "\n" not in message and "hunter2" not in message, message
        assert expected in message, message
    assert mask_url("postgresql://u:p%40ss@host/db?password=x&sslmode=require") == (
        "postgresql://u:***@host/db?password=***&sslmode=require"
    )


def test_without_psycopg_the_store_says_to_install_the_extra() -> None:
    code = """
        import sys
        sys.modules["psycopg"] = None  # as if the extra were not installed
        import cairn, cairn.store.postgres
        from cairn.store import StoreError
        try:
            cairn.store.postgres.PostgresStoreFactory("postgresql:///x")
        except StoreError as exc:
            print(exc)
    """
    done = subprocess.run(python(code), capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "the PostgreSQL transcript store needs psycopg 3, which is not installed: "
        "install cairn[postgres] (pip install 'cairn[postgres]')\n"
    )
    lazy = "import sys, cairn.store.postgres; print('psycopg' in sys.modules)"
    assert subprocess.run(python(lazy), capture_output=True, text=True).stdout == "False\n"


def test_two_processes_creating_the_tables_at_once_both_succeed(postgres_url: str) -> None:
    code = """
        import sys
        from pathlib import Path
        from cairn.store.postgres import PostgresStoreFactory
        sys.stdin.readline()  # start together
        print(PostgresStoreFactory(sys.argv[1]).sessions(Path("/")), flush=True)
    """
    children = [
        subprocess.Popen(
            python(code, postgres_url),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    for child in children:
        out, err = child.communicate(timeout=WAIT_S)
        assert child.returncode == 0 and out == "[]\n", err


# ---------------------------------------------------------------------------
# The server killed in the middle of a compaction


WRITER = """
    import json, sys
    from pathlib import Path
    from cairn.messages import Message, MessageMeta, KIND_COMPACT_SUMMARY, ToolCall, Usage
    from cairn.messages import assistant, new_id, tool_result, user
    from cairn.store import CompactionRecord, MessageRecord, SessionRecord, StoreError
    from cairn.store.postgres import PostgresStoreFactory

    url, workspace = sys.argv[1], Path(sys.argv[2])
    factory = PostgresStoreFactory(url)
    store = factory.create(workspace, SessionRecord("crash", str(workspace)))

    def ack(record_id):
        print(json.dumps(["ack", store.last_seq, record_id]), flush=True)

    ack(store.resumption.header.id)
    try:
        for i in range(10_000):
            call = ToolCall(new_id("call"), "read_file", '{"path": "f.py"}')
            for message in (
                user(f"step {i}"),
                assistant("reading", [call], usage=Usage(100, 10, 110)),
                tool_result(call.id, "x" * 3000),
            ):
                store.append(MessageRecord(message))
                ack(message.id)
            if i % 3 == 2:
                block = Message(role="user", content="ledger " * 50_000,
                                meta=MessageMeta(kind=KIND_COMPACT_SUMMARY, synthetic=True))
                record = CompactionRecord("auto", "llm", 9000, 100, f"ledger {i}",
                                          (block, *store.api_view.messages[-2:]))
                print(json.dumps(["compacting", store.last_seq + 1, record.id]), flush=True)
                sys.stdin.readline()  # the test says when
                store.save_compaction(record)
                ack(record.id)
    except StoreError as exc:
        print(json.dumps(["failed", str(exc)]), flush=True)
"""


def waiting_at_pointer(url: str) -> Callable[[], bool]:
    def check() -> bool:
        with psycopg.connect(url, autocommit=True) as admin:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE '%%checkpoint_seq%%'"
            ).fetchone()
        return row == (1,)

    return check


def test_sigkill_of_the_server_in_the_middle_of_a_compaction_keeps_every_acknowledged_record(
    tmp_path: Path, workspace: Path
) -> None:
    with new_server() as server:
        url = server.create_database("crash")
        child = subprocess.Popen(
            python(WRITER, url, str(workspace)),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdin is not None and child.stdout is not None
        acknowledged: list[tuple[int, str]] = []
        in_flight: tuple[int, str] | None = None
        compactions = 0
        blocker: psycopg.Connection[tuple[object, ...]] | None = None
        for line in child.stdout:
            kind, *rest = json.loads(line)
            if kind == "ack":
                acknowledged.append((rest[0], rest[1]))
                continue
            assert kind == "compacting", line
            compactions += 1
            if compactions == 3:
                # The third compaction stops inside its transaction, with the
                # checkpoint inserted and the pointer not yet moved: the server
                # dies right there.
                in_flight = (rest[0], rest[1])
                blocker = psycopg.connect(url)
                blocker.execute(
                    "SELECT 1 FROM cairn_sessions WHERE session_id = 'crash' FOR NO KEY UPDATE"
                )
            child.stdin.write("go\n")
            child.stdin.flush()
            if blocker is not None:
                wait_for("the compaction to wait at the pointer's update", waiting_at_pointer(url))
                server.kill()
                break
        rest = [json.loads(line) for line in child.stdout]
        assert child.wait(WAIT_S) == 0
        assert blocker is not None and in_flight is not None
        blocker.close()
        assert len(rest) == 1 and rest[0][0] == "failed", rest
        assert "\n" not in rest[0][1] and "/crash: could not write checkpoint (" in rest[0][1]

        server.start()  # crash recovery
        factory = PostgresStoreFactory(url, tmp_path / "home")
        loaded = factory.read(workspace, "crash")
        assert loaded.warnings == []
        stored = [(seq, record.id) for seq, record in enumerate(loaded.records, start=1)]
        # Every acknowledged record is there, in order; the checkpoint that was
        # never committed is not, and the pointer names the one before it.
        assert stored == acknowledged and len(acknowledged) >= 20
        assert in_flight[0] == acknowledged[-1][0] + 1
        assert in_flight[1] not in {record_id for _, record_id in stored}
        checkpoints = [seq for seq, r in enumerate(loaded.records, 1) if r.TYPE == "compaction"]
        assert len(checkpoints) == 2 and pointer(url, "crash") == checkpoints[-1]

        again = factory.open(workspace, "crash")
        assert again.api_view.messages == api_view(loaded.records).messages
        assert again.ui_page().messages == ui_view(loaded.records)
        append_all(again, chat_round("after the crash"))
        again.save_compaction(compaction([summary_message("after the crash")]))
        again.close()
        factory.close()
