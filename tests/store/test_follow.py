"""Following a JSONL session another process writes (``StoreFactory.follow``).

The PostgreSQL store's followers are tested with its server
(``test_postgres_store.py``); the contract test checks that both stores
number the same records alike.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from cairn.messages import user
from cairn.store import (
    JsonlStoreFactory,
    JsonlTranscriptStore,
    MessageRecord,
    NotATranscriptError,
    SessionRecord,
    read_transcript,
)
from cairn.store.jsonl import follow_transcript
from cairn.store.records import encode_record
from store.rounds import chat_round, tool_round

WAIT_S = 60


def records_of(path: Path, after: int = 0) -> list[tuple[int, str]]:
    return [(seq, record.id) for seq, record in follow_transcript(path, after, timeout=0)]


def test_another_process_is_followed_as_it_writes(tmp_path: Path) -> None:
    home, workspace = tmp_path / "home", tmp_path / "ws"
    workspace.mkdir()
    factory = JsonlStoreFactory(home)
    store = factory.create(workspace, SessionRecord("s1", str(workspace)))
    store.append(MessageRecord(user("before the follower")))
    store.close()
    writer = """
        import sys
        from pathlib import Path
        from cairn.messages import user
        from cairn.store import JsonlStoreFactory, MessageRecord
        store = JsonlStoreFactory(Path(sys.argv[1])).open(Path(sys.argv[2]), "s1")
        for line in sys.stdin:  # one record per line it is told, once it is told
            store.append(MessageRecord(user(line.strip())))
            print("written", flush=True)
        store.close()
    """
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(writer), str(home), str(workspace)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stdin is not None and child.stdout is not None
    seen: list[tuple[int, str]] = []
    try:
        for seq, record in factory.follow(workspace, "s1", timeout=WAIT_S):
            seen.append((seq, record.id))
            if len(seen) == 2 + 3:
                break
            if len(seen) >= 2:
                # Caught up: the next record exists only once the writer is told to write it.
                child.stdin.write(f"after {len(seen)}\n")
                child.stdin.flush()
                assert child.stdout.readline() == "written\n"
    finally:
        child.stdin.close()
        child.stdout.close()
        assert child.wait(WAIT_S) == 0
    stored = read_transcript(factory.path(workspace, "s1")).records
    assert seen == [(seq, record.id) for seq, record in enumerate(stored, start=1)]
    texts = [r.message.text for r in stored if isinstance(r, MessageRecord)]
    assert texts == ["before the follower", "after 2", "after 3", "after 4"]


def test_follow_starts_after_a_line_and_ends_after_its_timeout(
    store: JsonlTranscriptStore, store_path: Path
) -> None:
    for message in [*chat_round("one"), *tool_round(2), *chat_round("two")]:
        store.append(MessageRecord(message))
    everything = records_of(store_path)
    # The header, "one", the call, its two results, "two".
    assert [seq for seq, _ in everything] == list(range(1, 7))
    assert records_of(store_path, after=3) == everything[3:]
    assert records_of(store_path, after=6) == []
    assert list(follow_transcript(store_path, after=6, timeout=0.2)) == []


def test_a_line_is_followed_only_once_its_newline_is_written(
    store: JsonlTranscriptStore, store_path: Path
) -> None:
    store.append(MessageRecord(user("whole")))
    line = encode_record(MessageRecord(user("half written")))
    with store_path.open("ab") as handle:
        handle.write(line[:20])
    before = records_of(store_path)
    assert len(before) == 2
    with store_path.open("ab") as handle:
        handle.write(line[20:])  # the rest, and its newline
    after = records_of(store_path)
    assert after[:2] == before and len(after) == 3


def test_a_line_longer_than_a_read_is_followed_whole(
    store: JsonlTranscriptStore, store_path: Path
) -> None:
    paste = "x" * (3 << 20)  # a 3 MiB paste: three reads' worth in one line
    store.append(MessageRecord(user(paste)))
    store.append(MessageRecord(user("after it")))
    followed = list(follow_transcript(store_path, timeout=0))
    texts = [r.message.text for _, r in followed if isinstance(r, MessageRecord)]
    assert texts == [paste, "after it"]


def test_a_torn_line_cut_off_by_a_reopening_writer_is_never_read(
    store: JsonlTranscriptStore, store_path: Path
) -> None:
    """A writer that crashed mid-line leaves a torn tail; the next writer moves it aside,
    cuts it off and writes there. A follower reads on from the cut, not past it."""
    store.append(MessageRecord(user("kept")))
    store.close()
    with store_path.open("ab") as handle:
        handle.write(b'{"v":1,"type":"message","id":"torn","message":{"role":"user","con')
    stop = threading.Event()
    follower = follow_transcript(store_path, timeout=WAIT_S, stop=stop)
    assert [seq for seq, _ in (next(follower), next(follower))] == [1, 2]
    reopened = JsonlTranscriptStore.open(store_path)
    reopened.append(MessageRecord(user("after the crash")))
    seq, record = next(follower)
    stop.set()
    assert list(follower) == []
    reopened.close()
    assert seq == 3
    assert isinstance(record, MessageRecord) and record.message.text == "after the crash"
    assert [r.id for _, r in follow_transcript(store_path, timeout=0)] == [
        r.id for r in read_transcript(store_path).records
    ]


def test_a_follower_waiting_for_ever_ends_soon_after_its_stop_event_is_set(
    store: JsonlTranscriptStore, store_path: Path
) -> None:
    stop = threading.Event()
    seen: list[int] = []

    def follow() -> None:
        seen.extend(seq for seq, _ in follow_transcript(store_path, stop=stop))

    follower = threading.Thread(target=follow)
    follower.start()
    store.append(MessageRecord(user("while it waits")))
    stop.set()
    follower.join(WAIT_S)
    assert not follower.is_alive()
    assert seen[:1] == [1]  # the header; the message, if it was read before the stop


def test_bad_lines_are_skipped_but_keep_their_numbers(
    store: JsonlTranscriptStore, store_path: Path
) -> None:
    store.close()
    with store_path.open("ab") as handle:
        handle.write(b"not json\n" + json.dumps({"v": 1, "type": "nonsense"}).encode() + b"\n")
        handle.write(encode_record(MessageRecord(user("after the bad ones"))))
    assert [seq for seq, _ in records_of(store_path)] == [1, 4]


def test_what_cannot_be_followed_is_one_line_at_once(tmp_path: Path) -> None:
    factory = JsonlStoreFactory(tmp_path / "home")
    with pytest.raises(NotATranscriptError, match="no such file"):
        factory.follow(tmp_path, "nosuch")
    with pytest.raises(NotATranscriptError, match="is a directory"):
        follow_transcript(tmp_path)
    with pytest.raises(ValueError, match="invalid session id"):
        factory.follow(tmp_path, "../etc")
    with pytest.raises(ValueError, match="after must be at least 0"):
        follow_transcript(tmp_path / "x.jsonl", after=-1)
    with pytest.raises(ValueError, match="timeout must be at least 0"):
        follow_transcript(tmp_path / "x.jsonl", timeout=-1)
