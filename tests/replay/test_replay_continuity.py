"""Continuity after every compaction of a replay (DESIGN §10; issue 11 item 3).

Each invariant on contexts made here — each test shows the check failing on
a context that lost the thing — then the engine's wiring on a synthetic
session, then every shared recording at 8k, 16k, 32k and 128k with the
deterministic fallback, which must keep 100 % wherever it compacted.
"""

from __future__ import annotations

import asyncio
import csv
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from cairn.context.checkpoint import active_task_of
from cairn.context.ledger import build_compact_block, render_ledger
from cairn.messages import (
    KIND_COMPACT_SUMMARY,
    Message,
    MessageMeta,
    ToolCall,
    assistant,
    message_to_wire,
    system,
    tool_result,
    user,
)
from cairn.replay.continuity import (
    Continuity,
    Expected,
    SessionSoFar,
    broken_pairs,
    check_continuity,
    format_pct,
    missing_files,
    missing_instruction,
    missing_records,
    missing_todos,
    todo_items,
    written_forms,
)
from cairn.replay.engine import (
    KNOWN_READ_ONLY_TOOLS,
    ReplayOptions,
    read_saved,
    replay_session,
    replay_sessions,
)
from cairn.replay.importers import import_sessions
from cairn.replay.metrics import ReplaySummary
from cairn.replay.report import CSV_FIELDS, summary_json, write_report
from cairn.replay.session import RecordedSession

REPO = Path(__file__).resolve().parents[2]
#: The shared data's recordings, shipped with their licenses in the tests' fixtures.
SHARED_DATA = REPO / "tests" / "fixtures" / "recorded"
SUFFIXES = (".json", ".jsonl", ".traj")


def block(
    ledger_body: str, messages: list[Message] | None = None, artifacts_dir: Path | None = None
) -> Message:
    """A compact block built by the real ledger code."""
    task = active_task_of(
        messages or [], cap_tokens=None, input_budget=16_000, artifacts_dir=artifacts_dir
    )
    return build_compact_block(
        render_ledger({"Active tasks and background work": ledger_body}), task
    )


def checkpoint_entry(compact: Message) -> dict[str, object]:
    entries = compact.meta.extra["active_task"]
    assert isinstance(entries, list) and isinstance(entries[0], dict)
    return dict(entries[0])


# ---------------------------------------------------------------------------
# The latest user instruction


def test_the_instruction_holds_verbatim_and_is_missing_when_cut() -> None:
    ask = user("Rename parse_row to read_row everywhere; keep the CLI flags.")
    assert missing_instruction([block("", [ask])], ask) == []  # in the checkpoint
    assert missing_instruction([block("x"), ask], ask) == []  # in the kept tail
    cut = user(ask.text[:30] + "…")
    lost = missing_instruction([block("x"), cut], ask)
    assert len(lost) == 1 and "latest user instruction" in lost[0] and "not in" in lost[0]
    assert missing_instruction([block("x")], None) == []


def test_an_oversized_instruction_holds_through_its_saved_file(tmp_path: Path) -> None:
    paste = user("Here is the log:\n" + "\n".join(f"line {i}: ok" for i in range(3_000)))
    compact = block("", [paste], artifacts_dir=tmp_path)
    entry = checkpoint_entry(compact)
    assert entry["oversized"] is True and isinstance(entry["saved"], str)
    assert paste.text not in compact.text
    assert missing_instruction([compact], paste, read_saved) == []

    # The file must hold the message: a truncated file is a loss.
    saved = Path(str(entry["saved"]))
    saved.write_text(paste.text[:100], encoding="utf-8")
    lost = missing_instruction([compact], paste, read_saved)
    assert len(lost) == 1 and "does not hold it" in lost[0]

    # The context must name the file.
    unnamed = Message("user", compact.text.replace(str(saved), "<gone>"), meta=compact.meta)
    lost = missing_instruction([unnamed], paste)
    assert len(lost) == 1 and "does not name" in lost[0]


def test_a_stub_without_a_saved_file_is_a_loss() -> None:
    paste = user("x = 1\n" * 5_000)
    compact = block("", [paste])  # no artifacts folder: nothing saved
    assert missing_instruction([compact], paste) != []


# ---------------------------------------------------------------------------
# Exact continuation records


RECORD = ("Verification evidence", "pytest -q tests/test_csv.py: 14 passed")


def test_an_exact_record_holds_as_placed_or_as_written_and_is_missing_when_clipped() -> None:
    placed = f"EXACT CONTINUATION RECORD [{RECORD[0]}] :: {RECORD[1]}"
    assert missing_records([user(f"## Verification evidence\n{placed}")], [RECORD]) == []
    # As the source wrote it, in a kept message: heading case and spacing are free.
    source = f"note\nEXACT CONTINUATION RECORD [ verification EVIDENCE ] :: {RECORD[1]}\n"
    assert missing_records([assistant(source)], [RECORD]) == []
    clipped = user(placed[:-6] + "…")
    lost = missing_records([clipped], [RECORD])
    assert len(lost) == 1 and "exact record [Verification evidence]" in lost[0]
    # The payload must match whole: a longer line is another record.
    assert missing_records([user(placed + " and 2 failed")], [RECORD]) != []


# ---------------------------------------------------------------------------
# The todo list


def todo_call(*items: str, name: str = "TodoWrite") -> ToolCall:
    todos = [{"content": t, "status": "pending", "activeForm": t} for t in items]
    return ToolCall("call_todo", name, orjson.dumps({"todos": todos}).decode())


def test_todo_items_of_the_known_shapes() -> None:
    assert todo_items(todo_call("a", "b").arguments) == ["a", "b"]
    assert todo_items('{"todos": [{"content": "x", "status": "pending"}, "y"]}') == ["x", "y"]
    assert todo_items('{"plan": [{"step": "first"}, {"text": "second"}]}') == ["first", "second"]
    assert todo_items('["one", "two"]') == ["one", "two"]
    assert todo_items("write the tests") == ["write the tests"]
    assert todo_items('{"todos": []}') == []


def test_every_todo_item_must_survive() -> None:
    call = todo_call('Fix the "unicode" export', "Run the CSV tests", "Update the changelog")
    kept = [assistant(None, [call]), tool_result(call.id, "ok")]
    assert missing_todos(kept, call) == []  # JSON-escaped inside the kept call
    ledger = block('- [ ] Fix the "unicode" export\n- [ ] Run the CSV tests\n- [ ] Update the…')
    lost = missing_todos([ledger], call)
    assert lost == ["todo item 'Update the changelog' (from TodoWrite) is missing"]
    assert missing_todos([ledger], None) == []


def test_non_ascii_todo_items_hold_in_either_json_style() -> None:
    call = ToolCall(
        "t", "todo_write", '{"todos": [{"content": "修复导出 ✓", "status": "pending"}]}'
    )
    ascii_args = '{"todos": [{"content": "\\u4fee\\u590d\\u5bfc\\u51fa \\u2713"}]}'
    assert missing_todos([assistant(None, [ToolCall("u", "todo_write", ascii_args)])], call) == []
    assert missing_todos([user("something else")], call) != []
    assert written_forms("😀") == ("😀", "\\ud83d\\ude00")
    assert written_forms('a "b"') == ('a "b"', 'a \\"b\\"')


# ---------------------------------------------------------------------------
# Files written


def test_every_written_path_must_be_named() -> None:
    files = ["src/export/csv_writer.py", "C:\\work\\notes.md"]
    edit = ToolCall("e", "edit_file", orjson.dumps({"path": files[1]}).decode())
    context = [block(""), user("- src/export/csv_writer.py"), assistant(None, [edit])]
    assert missing_files(context, files) == []  # the Windows path JSON-escaped in the call
    lost = missing_files([block(""), user("- src/export/csv_wr…")], files)
    assert lost == [
        "written file 'src/export/csv_writer.py' is not named",
        "written file 'C:\\\\work\\\\notes.md' is not named",
    ]


# ---------------------------------------------------------------------------
# Calls and results


def test_calls_and_results_must_pair() -> None:
    call = ToolCall("c1", "bash", '{"command": "ls"}')
    ok = [user("go"), assistant(None, [call]), tool_result("c1", "a.py")]
    assert broken_pairs(ok) == []
    lonely = broken_pairs([user("go"), tool_result("c1", "a.py")])
    assert lonely == ["1 tool result(s) without their call: c1"]
    hanging = broken_pairs([user("go"), assistant(None, [call])])
    assert hanging == ["1 tool call(s) without results: c1"]


def test_a_call_awaiting_its_results_must_stay() -> None:
    call = ToolCall("c1", "bash", '{"command": "ls"}')
    # Compacted between the call and its results: the results come next.
    assert broken_pairs([block(""), assistant(None, [call])], ["c1"]) == []
    dropped = broken_pairs([block("")], ["c1"])
    assert len(dropped) == 1 and "dropped before their results came" in dropped[0]


# ---------------------------------------------------------------------------
# One compaction's result, and how results add up


def test_check_continuity_counts_every_expected_item() -> None:
    ask = user("Fix the export; keep the API.")
    call = todo_call("Fix export", "Run tests")
    expected = Expected(ask, (RECORD,), call, ("src/a.py", "src/b.py"))
    good = [
        block(
            "Fix export\nRun tests\n- src/a.py\n- src/b.py\n"
            f"EXACT CONTINUATION RECORD [{RECORD[0]}] :: {RECORD[1]}",
            [ask],
        )
    ]
    result = check_continuity(good, expected)
    assert (result.checks, result.passed, result.failures, result.pct) == (7, 7, (), 100.0)
    bad = check_continuity([block("Fix export\n- src/a.py", [ask])], expected)
    assert (bad.checks, bad.passed) == (7, 4)
    assert len(bad.failures) == 3 and bad.pct == 57.14
    # With nothing to carry, the pairing is still checked: one check.
    assert check_continuity([block("")], Expected()).checks == 1


def test_percentages_round_down_and_no_check_is_no_figure() -> None:
    assert Continuity().pct is None and format_pct(None) == "–"
    assert Continuity(10_000, 9_999).pct == 99.99
    assert format_pct(Continuity(10_000, 9_999).pct) == "99.99 %"
    assert format_pct(Continuity(4, 4).pct) == "100 %"
    assert format_pct(Continuity(8, 6).pct) == "75 %"
    summed = Continuity(2, 2, (), 1) + Continuity(3, 1, ("x", "y"), 1).prefixed("s: ")
    assert summed == Continuity(5, 3, ("s: x", "s: y"), 2)


def test_the_session_so_far_keeps_the_newest_of_each() -> None:
    so_far = SessionSoFar(KNOWN_READ_ONLY_TOOLS)
    typed = user("first request")
    newer = user("second request")
    reminder = Message("user", "<ide_selection>…</ide_selection>", meta=MessageMeta(synthetic=True))
    old_block = Message("user", "summary", meta=MessageMeta(kind=KIND_COMPACT_SUMMARY))
    write = ToolCall("w", "Edit", '{"file_path": "src/a.py"}')
    read = ToolCall("r", "Read", '{"file_path": "src/b.py"}')
    for message in (
        typed,
        assistant(None, [todo_call("old item"), write, read]),
        newer,
        reminder,
        old_block,
        assistant(f"EXACT CONTINUATION RECORD [{RECORD[0]}] :: {RECORD[1]}", [todo_call("new")]),
    ):
        so_far.add(message)
    expected = so_far.expected(["w"])
    assert expected.instruction is newer
    assert expected.todo_call is not None and todo_items(expected.todo_call.arguments) == ["new"]
    assert expected.files == ("src/a.py",)  # Read only reads
    assert expected.records == (RECORD,)
    assert expected.awaiting == ("w",)


# ---------------------------------------------------------------------------
# The engine and the report


def coding_session(rounds: int = 30) -> RecordedSession:
    """Writes to files, a todo list and a record; long enough to compact at 8k."""
    messages: list[Message] = [
        user("Port the exporter to the new API; keep the CLI flags."),
        assistant(None, [todo_call("Port exporter", "Run tests")]),
        tool_result("call_todo", "Todos updated"),
        user(f"EXACT CONTINUATION RECORD [{RECORD[0]}] :: {RECORD[1]}"),
    ]
    for i in range(rounds):
        call = ToolCall(f"c{i}", "write_file", f'{{"path": "src/m{i}.py", "content": "x"}}')
        messages.append(assistant(f"Writing module {i}.", [call]))
        messages.append(tool_result(call.id, "\n".join(f"{i}: line {j}" for j in range(90))))
    messages.append(assistant("Done."))
    return RecordedSession("coding", tuple(messages), (system("You are a coding agent."),))


def test_each_compaction_carries_its_continuity_result(tmp_path: Path) -> None:
    report = asyncio.run(
        replay_session(coding_session(), ReplayOptions(8_192), tmp_path / "t.jsonl")
    )
    assert report.failure is None and report.compactions >= 1
    compacted = [r for r in report.requests if r.compaction is not None]
    assert all(r.continuity is not None for r in compacted)
    assert all(r.continuity is None for r in report.requests if r.compaction is None)
    for r in compacted:
        assert r.continuity is not None
        # Request n (from 0) follows the todo call and n - 1 writes of one file each:
        # instruction + record + 2 todo items + the files written so far + pairing.
        assert r.continuity.checks == 1 + 1 + 2 + (r.index - 1) + 1
    assert report.continuity.compactions == report.compactions
    assert report.continuity.checks == sum(r.continuity.checks for r in compacted if r.continuity)


def test_the_report_the_csv_and_the_json_carry_continuity(tmp_path: Path) -> None:
    summaries = []
    for window in (8_192, 131_072):
        reports = asyncio.run(
            replay_sessions([coding_session()], ReplayOptions(window), tmp_path / str(window))
        )
        summaries.append(ReplaySummary("s", "openai", window, "cl100k", "cairn", tuple(reports)))
    small, large = (summary_json([s])["continuity"] for s in summaries)
    assert isinstance(small, dict) and isinstance(large, dict)
    assert small["compactions"] == summaries[0].sessions[0].compactions >= 1
    assert small["checks"] and small["pct"] is not None
    # No compaction, no figure: never 100 % by default.
    assert large == {"compactions": 0, "checks": 0, "passed": 0, "pct": None, "failures": []}

    write_report(tmp_path / "out", summaries[:1], handoff_ratio=0.7, compact_ratio=0.8)
    rows = list(csv.DictReader((tmp_path / "out" / "requests.csv").open()))
    assert {"continuity_checks", "continuity_passed", "continuity_failures"} <= set(CSV_FIELDS)
    compacted = [r for r in rows if r["compaction"]]
    assert compacted and all(int(r["continuity_checks"]) >= 1 for r in compacted)
    assert all(r["continuity_checks"] == "" for r in rows if not r["compaction"])
    data = orjson.loads((tmp_path / "out" / "report.json").read_bytes())
    assert data["continuity"]["checks"] == small["checks"]
    assert data["details"][0]["sessions"][0]["continuity"]["checks"] == small["checks"]


def cairn_replay(*args: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "CAIRN_MODEL"}
    return subprocess.run(
        [sys.executable, "-m", "cairn", "replay", *args],
        capture_output=True,
        text=True,
        env={**environ, "COLUMNS": "200"},
    )


def test_the_command_shows_continuity_and_a_dash_without_compaction(tmp_path: Path) -> None:
    session = coding_session()
    path = tmp_path / "chat.json"
    path.write_bytes(
        orjson.dumps([message_to_wire(m) for m in (*session.system, *session.messages)])
    )
    done = cairn_replay(str(path), "--window", "8192", "--json")
    assert done.returncode == 0, done.stderr
    continuity = orjson.loads(done.stdout)["continuity"]
    assert continuity["compactions"] >= 1 and continuity["checks"] >= continuity["compactions"]
    table = cairn_replay(str(path), "--window", "8192")
    line = next(x for x in table.stdout.splitlines() if "continuity after compaction" in x)
    assert " %" in line and f"{continuity['checks']:,} checks" in line
    roomy = cairn_replay(str(path), "--window", "131072")
    line = next(x for x in roomy.stdout.splitlines() if "continuity after compaction" in x)
    assert line.rstrip(" │|").endswith("–") and "%" not in line


# ---------------------------------------------------------------------------
# Every shared recording


def shared_files() -> list[Path]:
    found: list[Path] = []
    for folder in (SHARED_DATA / "sessions", SHARED_DATA / "formats"):
        found += sorted(
            p
            for p in folder.rglob("*")
            if p.is_file() and p.suffix in SUFFIXES and p.name != "manifest.json"
        )
    assert found, f"no recordings under {SHARED_DATA}"
    return found


@pytest.mark.parametrize("window", [8_192, 16_384, 32_768, 131_072])
@pytest.mark.parametrize("path", shared_files(), ids=lambda p: p.name)
def test_every_shared_session_keeps_full_continuity(
    path: Path, window: int, tmp_path: Path
) -> None:
    imported = import_sessions(path)
    reports = asyncio.run(replay_sessions(imported.sessions, ReplayOptions(window), tmp_path))
    lost: list[str] = []
    for report in reports:
        result = report.continuity
        assert result.compactions == report.compactions
        if not report.compactions:
            assert result.checks == 0 and result.pct is None
            continue
        assert result.checks >= report.compactions  # the pairing, at least, every time
        lost += [f"{report.name}: {f}" for f in result.failures]
    assert not lost, f"{len(lost)} continuity failure(s):\n" + "\n".join(lost[:10])
