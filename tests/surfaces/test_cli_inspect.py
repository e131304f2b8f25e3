"""``cairn inspect`` run as a real subprocess on transcripts written with the store API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from cairn.messages import (
    KIND_COMPACT_SUMMARY,
    KIND_HANDOFF,
    Message,
    MessageMeta,
    ToolCall,
    Usage,
    assistant,
    find_orphans,
    group_rounds,
    message_from_dict,
    message_to_dict,
    new_id,
    tool_result,
    user,
)
from cairn.store import (
    CompactionRecord,
    ContentEdit,
    ContextEditRecord,
    ErrorRecord,
    HandoffRecord,
    JsonlTranscriptStore,
    MessageRecord,
    SessionRecord,
    read_transcript,
)
from cairn.tokens import estimate_messages_tokens

REPO = Path(__file__).resolve().parents[2]
SAMPLE_SCRIPT = REPO / "examples" / "sample_session.py"
SUMMARY_KEYS = {
    "session_id",
    "records",
    "record_types",
    "ui_messages",
    "compact_blocks",
    "api_messages",
    "api_tokens_estimate",
    "checkpoints",
    "warnings",
    "bad_lines",
}


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "COLUMNS": "80", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, *map(str, args)],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def inspect(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return run("-m", "cairn", "inspect", *args)


def inspect_json(*args: str | Path) -> Any:
    result = inspect(*args, "--json")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return json.loads(result.stdout)


def summary_of(path: Path) -> dict[str, Any]:
    data = inspect_json(path)
    assert isinstance(data, dict)
    return data


def assert_unusable(result: subprocess.CompletedProcess[str], *, mentions: str) -> None:
    assert result.returncode == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("cairn inspect: ")
    assert mentions in lines[0]


def call_round(*names: str, text: str | None = None) -> list[Message]:
    calls = [ToolCall(new_id("call"), name, '{"path": "app.py"}') for name in names]
    head = assistant(text, calls, usage=Usage(1_000, 50, 1_050))
    return [head, *(tool_result(c.id, f"{c.name} output for {c.id}", name=c.name) for c in calls)]


def summary_block(text: str) -> Message:
    return Message(
        role="user",
        content=text,
        meta=MessageMeta(kind=KIND_COMPACT_SUMMARY, synthetic=True),
    )


# ---------------------------------------------------------------------------
# A session with two compactions, a context edit, a hidden handoff and an error block


@dataclass
class Session:
    path: Path
    session_id: str
    ui_ids: list[str]
    api: list[Message]
    handoff_id: str
    snipped_id: str
    original_snipped_content: str
    compaction_ids: list[str]


SNIP = "[snipped: read_file app.py, 120 lines]"


@pytest.fixture
def session(tmp_path: Path) -> Session:
    path = tmp_path / "projects" / "ws" / "sess-inspect-1.jsonl"
    store = JsonlTranscriptStore.create(
        path, SessionRecord("sess-inspect-1", "/work/app", model="test-model")
    )
    ui_ids: list[str] = []

    def say(*messages: Message) -> None:
        for m in messages:
            store.append(MessageRecord(m))
            ui_ids.append(m.id)

    u1 = user("fix the failing test in app.py — 请保持接口不变")
    round1 = call_round("read_file")
    a2 = assistant("I found the bug.", usage=Usage(1_200, 20, 1_220))
    say(u1, *round1, a2)

    handoff = Message(
        role="user",
        content="<system-reminder>context budget at 72%</system-reminder>",
        meta=MessageMeta(kind=KIND_HANDOFF, hidden=True, synthetic=True),
    )
    store.append(HandoffRecord(handoff, epoch=0))

    c1 = CompactionRecord(
        trigger="auto",
        strategy="llm",
        pre_tokens=9_000,
        post_tokens=2_000,
        summary="first summary",
        replacement_messages=(summary_block("first summary"), *round1, a2),
    )
    store.save_compaction(c1)
    ui_ids.append(c1.id)

    u2 = user("now run the tests")
    round3 = call_round("read_file", "bash", text="Reading and testing in parallel.")
    a4 = assistant("Tests pass.")
    say(u2, *round3, a4)

    error = ErrorRecord("provider returned 503; retried", source="provider")
    store.append(error)
    ui_ids.append(error.id)

    block2 = summary_block("second summary")
    c2 = CompactionRecord(
        trigger="manual",
        strategy="fallback",
        pre_tokens=8_000,
        post_tokens=1_500,
        summary="second summary",
        replacement_messages=(block2, *round3, a4),
    )
    store.save_compaction(c2)
    ui_ids.append(c2.id)

    u3 = user("thanks, one more thing")
    say(u3)
    snipped = round3[1]
    store.append(ContextEditRecord((ContentEdit(snipped.id, SNIP),)))
    a5 = assistant("Sure.")
    say(a5)
    store.sync()
    store.close()

    api = [block2, round3[0], round3[1].with_content(SNIP), round3[2], a4, u3, a5]
    return Session(
        path=path,
        session_id="sess-inspect-1",
        ui_ids=ui_ids,
        api=api,
        handoff_id=handoff.id,
        snipped_id=snipped.id,
        original_snipped_content=snipped.text,
        compaction_ids=[c1.id, c2.id],
    )


def test_summary_mentions_the_session(session: Session) -> None:
    result = inspect(session.path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    out = result.stdout
    assert session.session_id in out
    assert "/work/app" in out
    assert "API view" in out and "UI view" in out
    assert "fallback" in out and "manual" in out  # the compaction table
    assert "8,000 → 1,500" in out
    assert "No warnings." in out
    assert "Traceback" not in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_json_summary_counts(session: Session) -> None:
    data = summary_of(session.path)
    assert data.keys() >= SUMMARY_KEYS
    assert data["session_id"] == "sess-inspect-1"
    assert data["workspace"] == "/work/app"
    assert data["model"] == "test-model"
    # header + 11 messages + handoff + 2 compactions + context edit + error
    assert data["records"] == 17
    assert data["record_types"] == {
        "session": 1,
        "message": 11,
        "handoff": 1,
        "context_edit": 1,
        "compaction": 2,
        "state": 0,
        "error": 1,
    }
    assert data["ui_messages"] == len(session.ui_ids) == 14
    assert data["compact_blocks"] == 2
    assert data["api_messages"] == len(session.api) == 7
    assert data["api_tokens_estimate"] == estimate_messages_tokens(session.api)
    assert isinstance(data["api_tokens_estimate"], int)
    assert data["checkpoints"] == {"valid": 2, "invalid": 0}
    assert data["api_checkpoint_id"] == session.compaction_ids[1]
    assert data["warnings"] == []
    assert data["bad_lines"] == 0
    assert [c["trigger"] for c in data["compactions"]] == ["auto", "manual"]
    assert [c["strategy"] for c in data["compactions"]] == ["llm", "fallback"]
    assert [(c["pre_tokens"], c["post_tokens"]) for c in data["compactions"]] == [
        (9_000, 2_000),
        (8_000, 1_500),
    ]
    assert data["orphans"] == {"calls": [], "results": []}


def test_view_api_json_is_the_checkpoint_then_later_messages(session: Session) -> None:
    data = inspect_json(session.path, "--view", "api")
    assert isinstance(data, list)
    assert data == [message_to_dict(m) for m in session.api]
    messages = [message_from_dict(d) for d in data]
    assert messages[0].meta.kind == KIND_COMPACT_SUMMARY
    snipped = next(m for m in messages if m.id == session.snipped_id)
    assert snipped.text == SNIP
    assert not find_orphans(messages)


def test_view_ui_json_hides_the_handoff_and_keeps_compact_blocks_in_order(
    session: Session,
) -> None:
    data = inspect_json(session.path, "--view", "ui")
    assert isinstance(data, list)
    ids = [d["id"] for d in data]
    assert ids == session.ui_ids
    assert session.handoff_id not in ids
    blocks = [d for d in data if d.get("meta", {}).get("kind") == KIND_COMPACT_SUMMARY]
    assert [b["id"] for b in blocks] == session.compaction_ids
    assert [b["content"] for b in blocks] == ["first summary", "second summary"]
    assert [b["meta"]["extra"]["trigger"] for b in blocks] == ["auto", "manual"]
    # The UI keeps what the person saw: context edits only change the API view.
    snipped = next(d for d in data if d["id"] == session.snipped_id)
    assert snipped["content"] == session.original_snipped_content
    errors = [d for d in data if d.get("meta", {}).get("kind") == "error"]
    assert [e["content"] for e in errors] == ["provider returned 503; retried"]


@pytest.mark.parametrize("view", ["ui", "api"])
def test_view_table(session: Session, view: str) -> None:
    result = inspect(session.path, "--view", view)
    assert result.returncode == 0, result.stderr
    assert f"{view.upper()} view" in result.stdout
    assert "compact" in result.stdout
    assert "← bash" in result.stdout  # a tool result names the tool it answers
    assert max(len(line) for line in result.stdout.splitlines()) <= 80


def test_main_in_process_matches_the_subprocess(session: Session, capsys: Any) -> None:
    from cairn.cli import main

    assert main(["inspect", str(session.path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == summary_of(session.path)


# ---------------------------------------------------------------------------
# Damaged files: reported, never repaired by inspect


def write_simple(path: Path, *messages: Message) -> JsonlTranscriptStore:
    store = JsonlTranscriptStore.create(path, SessionRecord("sess-2", "/ws"))
    for m in messages:
        store.append(MessageRecord(m))
    return store


def test_checkpoint_over_the_message_limit_is_invalid_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    u1, a1 = user("start"), assistant("ok")
    store = write_simple(path, u1, a1)
    good = CompactionRecord(
        trigger="auto",
        strategy="llm",
        pre_tokens=100,
        post_tokens=50,
        summary="good",
        replacement_messages=(summary_block("good"), a1),
    )
    store.save_compaction(good)
    u2 = user("after the good checkpoint")
    store.append(MessageRecord(u2))
    store.close()

    # save_compaction refuses this checkpoint, so write its line by hand.
    too_many = [message_to_dict(user(f"m{i}")) for i in range(4_097)]
    line = {
        "v": 1,
        "type": "compaction",
        "id": "rec_too_big",
        "ts": "2025-06-03T10:00:00.000Z",
        "version": 1,
        "trigger": "auto",
        "strategy": "fallback",
        "pre_tokens": 90_000,
        "post_tokens": 80_000,
        "summary": "too big",
        "files": [],
        "replacement_messages": too_many,
    }
    u3 = user("after the bad checkpoint")
    with path.open("ab") as handle:
        handle.write(orjson.dumps(line) + b"\n")
        record = {"v": 1, "type": "message", "id": u3.id, "ts": "t", "message": message_to_dict(u3)}
        handle.write(orjson.dumps(record) + b"\n")

    data = summary_of(path)
    assert data["checkpoints"] == {"valid": 1, "invalid": 1}
    assert data["compact_blocks"] == 1
    assert data["api_checkpoint_id"] == good.id
    assert data["api_messages"] == 4  # the good checkpoint's 2 + u2 + u3: nothing dropped
    assert data["ui_messages"] == 5  # u1, a1, the good block, u2, u3
    assert len(data["warnings"]) == 1
    assert "rec_too_big" in data["warnings"][0] and "4097" in data["warnings"][0]
    assert [c["valid"] for c in data["compactions"]] == [True, False]

    api = inspect_json(path, "--view", "api")
    assert [d["id"] for d in api] == [good.replacement_messages[0].id, a1.id, u2.id, u3.id]
    summary = inspect(path).stdout
    assert "ignored" in summary and "rec_too_big" in summary


def test_torn_last_line_is_a_warning_and_the_file_is_not_modified(tmp_path: Path) -> None:
    path = tmp_path / "torn.jsonl"
    store = write_simple(path, user("hello"), assistant("hi"))
    store.close()
    with path.open("ab") as handle:
        handle.write(b'{"v": 1, "type": "message", "id": "msg_torn", "ts": "2025-06-')
    before = path.read_bytes()
    siblings = sorted(p.name for p in tmp_path.iterdir())

    data = summary_of(path)
    assert data["records"] == 3
    assert data["api_messages"] == 2
    assert len(data["warnings"]) == 1 and "torn" in data["warnings"][0]
    summary = inspect(path)
    assert summary.returncode == 0 and "torn" in summary.stdout
    assert inspect(path, "--view", "api").returncode == 0

    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == siblings  # nothing moved aside


def test_bad_line_in_the_middle_is_counted_and_skipped(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    store = write_simple(path, user("one"))
    store.close()
    with path.open("ab") as handle:
        handle.write(b"this is not json\n")
    store = JsonlTranscriptStore.open(path)
    store.append(MessageRecord(user("two")))
    store.close()

    data = summary_of(path)
    assert data["bad_lines"] == 1
    assert data["api_messages"] == 2
    assert any("line 3" in w for w in data["warnings"])


def test_orphan_tool_call_in_the_api_view_is_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "orphan.jsonl"
    head = call_round("bash")[0]
    write_simple(path, user("run it"), head).close()
    data = summary_of(path)
    assert data["orphans"]["calls"] == [head.tool_calls[0].id]
    assert any("without a result" in w for w in data["warnings"])


@pytest.mark.parametrize(
    "line",
    [
        b'{"v": 1, "type": "compaction", "id": "r", "ts": "t", "trigger": ["auto"]}',
        b'{"v": 1, "type": "message", "ts": "t", "message": {"id": "m", "role": ["user"]}}',
        b'{"v": 1, "type": "message", "ts": "t", "message": {"id": "m", "role": "user", '
        b'"content": [{"type": "text", "text": 1}]}}',
        b'{"v": 1, "type": "context_edit", "id": "r", "ts": "t", "edits": [null]}',
        b'{"v": 2, "type": "message"}',
        b"[" * 2_000,
    ],
)
def test_hostile_lines_never_cause_a_traceback(tmp_path: Path, line: bytes) -> None:
    path = tmp_path / "hostile.jsonl"
    write_simple(path, user("hello")).close()
    with path.open("ab") as handle:
        handle.write(line + b"\n")
    # The header and the first message are intact: the file is inspected, with the
    # hostile line counted as bad — never a traceback, never a refusal.
    for args in ((), ("--json",), ("--view", "ui")):
        result = inspect(path, *args)
        assert "Traceback" not in result.stderr + result.stdout
        assert result.returncode == 0, result.stderr
    data = json.loads(inspect(path, "--json").stdout)
    assert data["bad_lines"] == 1 and data["warnings"]


# ---------------------------------------------------------------------------
# Paths that cannot be inspected


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    assert_unusable(inspect(missing), mentions="no such file")
    assert_unusable(inspect(missing, "--json"), mentions="nope.jsonl")


def test_directory(tmp_path: Path) -> None:
    assert_unusable(inspect(tmp_path), mentions="is a directory")
    assert_unusable(inspect(tmp_path, "--view", "api", "--json"), mentions="is a directory")


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("README.md", b"# My project\n\nThis is a README, not a session.\n"),
        ("data.json", b'{"a": 1}'),
        ("lines.jsonl", b'{"a": 1}\n{"b": 2}\n'),
        ("binary.bin", bytes(range(256)) * 4),
    ],
)
def test_not_a_transcript(tmp_path: Path, name: str, content: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    assert_unusable(inspect(path), mentions="not a Cairn transcript")
    assert_unusable(inspect(path, "--json"), mentions=name)
    assert path.read_bytes() == content


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    assert_unusable(inspect(path), mentions="is empty")


def test_unreadable_path(tmp_path: Path) -> None:
    """A path through a regular file cannot be read, even by root (ENOTDIR)."""
    blocker = tmp_path / "plain-file"
    blocker.write_text("x")
    assert_unusable(inspect(blocker / "session.jsonl"), mentions="cannot read")


def test_usage_errors_and_version() -> None:
    version = run("-m", "cairn", "--version")
    assert version.returncode == 0
    assert version.stdout.strip().startswith("cairn ")
    no_path = run("-m", "cairn", "inspect")
    assert no_path.returncode == 2 and "PATH" in no_path.stderr
    bad_view = run("-m", "cairn", "inspect", "x.jsonl", "--view", "both")
    assert bad_view.returncode == 2 and "Traceback" not in bad_view.stderr
    bare = run("-m", "cairn")
    assert bare.returncode == 2 and "inspect" in bare.stderr


# ---------------------------------------------------------------------------
# The sample session of ``make demo``


def test_sample_session_script(tmp_path: Path) -> None:
    out = tmp_path / "demo" / "sample-session.jsonl"
    for _ in range(2):  # a second run replaces the file
        written = run(SAMPLE_SCRIPT, out, cwd=tmp_path)
        assert written.returncode == 0, written.stderr
        assert written.stdout.strip() == str(out)

    data = summary_of(out)
    assert data["checkpoints"] == {"valid": 1, "invalid": 0}
    assert data["warnings"] == []
    assert data["bad_lines"] == 0
    assert data["compact_blocks"] == 1
    types = data["record_types"]
    assert types["session"] == 1 and types["handoff"] == 1
    assert types["context_edit"] == 1 and types["compaction"] == 1 and types["error"] == 1
    (compaction,) = data["compactions"]
    assert (compaction["trigger"], compaction["strategy"]) == ("auto", "fallback")
    assert compaction["post_tokens"] < compaction["pre_tokens"]

    api = [message_from_dict(d) for d in inspect_json(out, "--view", "api")]
    assert len(api) == data["api_messages"]
    assert not find_orphans(api)
    assert api[0].meta.kind == KIND_COMPACT_SUMMARY
    ledger = api[0].text
    headings = [
        "Objective and constraints",
        "Decisions and rationale",
        "Workspace mutations",
        "Verification evidence",
        "Active tasks and background work",
        "Open risks or blockers",
        "Exact next action",
    ]
    positions = [ledger.index(f"## {h}") for h in headings]
    assert positions == sorted(positions)

    transcript = read_transcript(out)
    records = transcript.records
    (checkpoint,) = [r for r in records if isinstance(r, CompactionRecord)]
    handoff = next(r for r in records if isinstance(r, HandoffRecord))
    assert handoff.message.meta.hidden and handoff.message.meta.synthetic
    assert handoff.message.meta.kind == KIND_HANDOFF
    # The kept tail is the last two complete rounds of the API view before the compaction.
    position = records.index(checkpoint)
    before = read_transcript(out)
    before.records = records[:position]
    context = before.api().messages
    tail = list(checkpoint.replacement_messages[1:])
    assert tail == context[len(context) - len(tail) :]
    assert len(group_rounds(tail)) == 2
    assert not find_orphans(tail)
    # Some user text is Chinese, and the UI never shows the hidden handoff.
    ui = inspect_json(out, "--view", "ui")
    assert handoff.message.id not in {d["id"] for d in ui}
    assert any("请" in (d.get("content") or "") for d in ui if d["role"] == "user")

    summary = inspect(out)
    assert summary.returncode == 0
    assert data["session_id"] in summary.stdout
