"""Issue 25 item 8: a compaction sub-agent's transcript replays with the documented fixed context.

Claude Code writes the sub-agent that summarizes a session to its own file
(``agent-acompact-<id>.jsonl``): the compaction instruction and the summary.
Its one request also carried the whole conversation it summarized, so its
recorded usage (~168k prompt tokens) says nothing about the fixed context:
inferred from it, the system prompt and tools alone took 167,491 tokens and
the file failed at every window as "window too small". Such files, and any
session whose first recorded prompt is far beyond what the file carries, get
the format's documented default fixed context, and the import and the
replay say so.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from rich.console import Console

from cairn.messages import Message, MessageMeta, Usage, assistant, system, user
from cairn.replay.engine import MessageTokens, ReplayOptions, replay_session
from cairn.replay.fixed_context import (
    CONTEXT_NOT_RECORDED,
    ELSEWHERE_RATIO,
    UNRECORDED_TOKENS,
    ResolvedFixedContext,
    context_not_recorded,
    resolve_fixed_context,
    usage_exceeds_recording,
    usage_fixed_tokens,
)
from cairn.replay.importers import import_sessions
from cairn.replay.importers._session_builder import (
    carried_tokens,
    check_context_not_recorded,
    mark_context_not_recorded,
)
from cairn.replay.importers.claude_code import compaction_agent
from cairn.replay.metrics import ReplaySummary, SessionReport
from cairn.replay.report import render_summary, write_report
from cairn.replay.session import RecordedSession

ROOT = Path(__file__).resolve().parents[2]
FORMATS = ROOT / "tests" / "fixtures" / "sessions" / "formats"
COMPACTION_AGENT = FORMATS / "agent-acompact-7d41e9b2c05a.jsonl"
CLAUDE = FORMATS / "claude-code.jsonl"
COUNT = MessageTokens("cl100k")
DEFAULT = UNRECORDED_TOKENS["claude-code"]
#: The fixture's first (only) response: input 6 + cache read 164,318 + cache creation 3,562.
RECORDED_PROMPT = 167_886
#: "Within a few tokens": the last filler schema is sized word by word.
CLOSE = 8


def resolve(session: RecordedSession, requested: int | None = None) -> ResolvedFixedContext:
    return resolve_fixed_context(session, requested, COUNT, COUNT.fixed)


def replay(session: RecordedSession, tmp_path: Path, window: int) -> SessionReport:
    options = ReplayOptions(window=window)
    return asyncio.run(replay_session(session, options, tmp_path / f"w{window}.jsonl"))


def records(path: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def write(path: Path, lines: list[dict[str, object]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in lines))
    return path


def without_agent_id(lines: list[dict[str, object]]) -> list[dict[str, object]]:
    return [{k: v for k, v in r.items() if k != "agentId"} for r in lines]


def with_prompt(lines: list[dict[str, object]], prompt: int) -> list[dict[str, object]]:
    """The records with every recorded usage's context (input + cache) set to ``prompt``."""
    changed: list[dict[str, object]] = []
    for record in lines:
        message = record.get("message")
        if isinstance(message, dict) and isinstance(message.get("usage"), dict):
            usage = {
                **message["usage"],
                "input_tokens": prompt,
                "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 0,
            }
            record = {**record, "message": {**message, "usage": usage}}
        changed.append(record)
    return changed


# ---------------------------------------------------------------------------
# The fixture


def test_the_fixture_is_a_compaction_agent_transcript() -> None:
    lines = records(COMPACTION_AGENT)
    assert [r["type"] for r in lines] == ["user", "assistant", "assistant"]
    assert all(r["isSidechain"] is True for r in lines)
    assert {r["agentId"] for r in lines} == {"acompact-7d41e9b2c05a"}
    usage = lines[-1]["message"]["usage"]  # type: ignore[index]
    context = sum(
        usage[k] for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    )
    assert context == RECORDED_PROMPT
    session = import_sessions(COMPACTION_AGENT).sessions[0]
    assert [m.role for m in session.messages] == ["user", "assistant"]
    assert "<summary>" in session.messages[1].text
    # The file carries about 1.5k tokens: the recorded prompt is the summarized conversation.
    assert sum(COUNT(m) for m in session.messages) < 2_000
    assert "agent-acompact-7d41e9b2c05a.jsonl" in (FORMATS / "SOURCE.md").read_text()


# ---------------------------------------------------------------------------
# Item 8


@pytest.mark.parametrize("window", [8_192, 16_384, 32_768, 131_072])
def test_item8_compaction_agent_transcript_replays_with_the_documented_fixed_context(
    window: int, tmp_path: Path
) -> None:
    imported = import_sessions(COMPACTION_AGENT)
    session = imported.sessions[0]
    # Inferred from the usage (before item 8), the fixed context filled every window.
    inferred = usage_fixed_tokens(session.messages, COUNT)
    assert inferred is not None and inferred > 160_000
    resolved = resolve(session)
    assert resolved.source == "default"
    assert DEFAULT - CLOSE <= resolved.tokens <= DEFAULT
    assert resolved.note == (
        "compaction sub-agent transcript (agentId acompact-7d41e9b2c05a): the conversation it "
        f"summarized is not in the file; fixed context = the format's documented default, "
        f"{resolved.tokens:,} tokens"
    )
    (warning,) = imported.warnings
    assert "compaction sub-agent transcript" in warning and "documented default" in warning
    report = replay(session, tmp_path, window)
    assert (report.fixed_source, report.fixed_tokens) == ("default", resolved.tokens)
    # The report says so (report.json's per-session warnings, the table's notes).
    assert report.warnings == (resolved.note,)
    if report.input_budget <= DEFAULT:  # 8k and 16k: 20k of fixed context cannot fit
        assert report.failure is not None
        assert report.failure.startswith("window too small") and "the format's default" in (
            report.failure
        )
        return
    assert report.failure is None, report.failure
    assert len(report.requests) == 1 and report.overflows == 0
    assert report.peak_tokens < 21_000


def test_item8_the_terminal_says_why_the_fixed_context_is_the_default(tmp_path: Path) -> None:
    environ = {k: v for k, v in os.environ.items() if k != "CAIRN_MODEL"}
    done = subprocess.run(
        [sys.executable, "-m", "cairn", "replay", str(COMPACTION_AGENT), "--window", "32768"],
        capture_output=True,
        text=True,
        env=environ,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "compaction sub-agent transcript" in " ".join(done.stderr.split())
    assert "(default)" in done.stdout


def test_item8_a_first_request_far_beyond_the_file_is_recognised_whatever_its_name(
    tmp_path: Path,
) -> None:
    # No agentId, an ordinary name: the size rule alone recognises it.
    renamed = write(tmp_path / "0f3e9a.jsonl", without_agent_id(records(COMPACTION_AGENT)))
    imported = import_sessions(renamed)
    session = imported.sessions[0]
    reason = context_not_recorded(session.messages)
    assert reason is not None
    assert reason.startswith(
        f"the first request's recorded usage ({RECORDED_PROMPT:,} prompt tokens) is over "
        f"{ELSEWHERE_RATIO}x what the file carries"
    )
    assert len(imported.warnings) == 1 and reason in imported.warnings[0]
    resolved = resolve(session)
    assert resolved.source == "default" and DEFAULT - CLOSE <= resolved.tokens <= DEFAULT
    assert resolved.note is not None and resolved.note.startswith(reason)
    assert replay(session, tmp_path, 32_768).failure is None


def test_item8_the_name_or_agent_id_alone_recognises_a_compaction_agent(tmp_path: Path) -> None:
    # A small conversation compacted: 30k prompt tokens, under the size rule's 4x.
    small = with_prompt(records(COMPACTION_AGENT), 30_000)
    by_id = import_sessions(write(tmp_path / "renamed.jsonl", small)).sessions[0]
    by_name = import_sessions(
        write(tmp_path / "agent-acompact-0a1b2c.jsonl", without_agent_id(small))
    ).sessions[0]
    neither = import_sessions(write(tmp_path / "agent-a1b2c3.jsonl", without_agent_id(small)))
    assert not usage_exceeds_recording(30_000, carried_tokens(by_id, 1))
    assert "agentId acompact-7d41e9b2c05a" in (context_not_recorded(by_id.messages) or "")
    assert "agent-acompact-0a1b2c.jsonl" in (context_not_recorded(by_name.messages) or "")
    for session in (by_id, by_name):
        assert resolve(session).source == "default"
    # An ordinary sub-agent's file is inferred from its usage as before.
    assert neither.warnings == ()
    assert resolve(neither.sessions[0]).source == "usage"


def test_item8_a_normal_session_keeps_its_inferred_fixed_context(tmp_path: Path) -> None:
    imported = import_sessions(CLAUDE)
    session = imported.sessions[0]
    assert imported.warnings == ()
    assert context_not_recorded(session.messages) is None
    assert all(CONTEXT_NOT_RECORDED not in m.meta.extra for m in session.messages)
    resolved = resolve(session)
    inferred = usage_fixed_tokens(session.messages, COUNT)
    assert resolved.source == "usage" and resolved.note is None
    assert inferred is not None and inferred - CLOSE <= resolved.tokens <= inferred
    # Sidechain records of a compaction agent inside a parent session's file are
    # not its conversation, and do not make it a compaction agent's transcript.
    parent = write(tmp_path / "parent.jsonl", records(CLAUDE) + records(COMPACTION_AGENT))
    again = import_sessions(parent)
    assert again.warnings == () and resolve(again.sessions[0]) == resolved
    assert compaction_agent("5b0c2e7a.jsonl", {"a1b2c3"}) is None


def test_item8_the_flag_still_wins_over_the_documented_default() -> None:
    session = import_sessions(COMPACTION_AGENT).sessions[0]
    resolved = resolve(session, 5_000)
    assert resolved.source == "flag" and resolved.note is None
    assert 5_000 - CLOSE <= resolved.tokens <= 5_000


# ---------------------------------------------------------------------------
# The rule, a pure function


def test_usage_exceeds_recording_is_over_four_times_what_the_file_carries() -> None:
    assert ELSEWHERE_RATIO == 4
    assert not usage_exceeds_recording(88_000, 22_000)
    assert usage_exceeds_recording(88_001, 22_000)
    assert usage_exceeds_recording(RECORDED_PROMPT, DEFAULT + 1_500)
    # A normal first request: the documented fixed context and the first message.
    assert not usage_exceeds_recording(23_500, DEFAULT + 400)
    # A fixed context three times the documented one is still not taken for it.
    assert not usage_exceeds_recording(3 * DEFAULT + 2_000, DEFAULT + 1_000)
    assert usage_exceeds_recording(5, 0) and not usage_exceeds_recording(4, 0)


def test_carried_tokens_adds_the_documented_default_to_the_messages_before() -> None:
    ask = user("Summarize the conversation so far.")
    answer = Message(
        role="assistant", content="ok", meta=MessageMeta(usage=Usage(100_000, 5, 100_005))
    )
    claude = RecordedSession("s", (ask, answer), format="claude-code")
    assert carried_tokens(claude, 1) == DEFAULT + carried_tokens(replace(claude, format=""), 1)
    assert carried_tokens(replace(claude, format="openai"), 0) == 0


def test_the_rule_marks_the_first_response_with_usage_only() -> None:
    messages = (
        user("go"),
        assistant("no usage recorded"),
        answer_with(200_000),
        answer_with(201_000),
    )
    session = RecordedSession("s", messages, format="claude-code")
    checked, warning = check_context_not_recorded(session)
    assert warning is not None and warning.startswith("session s: the first request's")
    assert [CONTEXT_NOT_RECORDED in m.meta.extra for m in checked.messages] == [
        False,
        False,
        True,
        False,
    ]
    assert resolve(checked).source == "default"
    # A mark set in code is obeyed in any format: without a default, what is recorded.
    marked = mark_context_not_recorded(RecordedSession("o", messages, format="openai"), "why")
    assert resolve(marked).source == "recorded"
    assert resolve(marked).note == (
        "why; fixed context = what the file records, 0 tokens (no documented default)"
    )
    instructions = (system("Base instructions."),)
    codex = mark_context_not_recorded(
        RecordedSession("c", messages, system=instructions, format="codex"), "why"
    )
    note = resolve(codex).note or ""
    assert note.startswith("why; fixed context = the format's documented default, ")
    assert note.endswith(f"recorded + {UNRECORDED_TOKENS['codex']:,})")
    # Without usage there is nothing to mark, and nothing to say.
    bare = RecordedSession("b", (user("go"), assistant("ok")))
    assert mark_context_not_recorded(bare, "why") is bare
    assert check_context_not_recorded(bare) == (bare, None)


# ---------------------------------------------------------------------------
# The report


def test_session_warnings_reach_report_json_and_the_terminal(tmp_path: Path) -> None:
    note = (
        "compaction sub-agent transcript (agentId acompact-1): the conversation it summarized "
        "is not in the file; fixed context = the format's documented default, 20,000 tokens"
    )
    session = SessionReport(
        "s1", "cairn", 32_768, 24_576, fixed_tokens=20_000, fixed_source="default", warnings=(note,)
    )
    summary = ReplaySummary(
        "agent-acompact-1.jsonl", "claude-code", 32_768, "cl100k", "cairn", (session,)
    )
    written = write_report(tmp_path, [summary], handoff_ratio=0.7, compact_ratio=0.85)
    report = orjson.loads(written[0].read_bytes())
    assert report["details"][0]["sessions"][0]["warnings"] == [note]
    console = Console(record=True, width=400)
    render_summary(console, summary)
    assert f"note s1: {note}" in console.export_text()


def test_the_size_rule_leaves_formats_without_a_documented_default_to_their_usage() -> None:
    # An OpenAI chat log that does not record its tool schemas: the usage is the only
    # measure of them, however far beyond the messages it goes.
    messages = (
        user("go"),
        Message(role="assistant", content="a", meta=MessageMeta(usage=Usage(12_000, 5, 0))),
    )
    for fmt in ("openai", "cairn", ""):
        session = RecordedSession("s", messages, format=fmt)
        assert usage_exceeds_recording(12_000, carried_tokens(session, 1))
        assert check_context_not_recorded(session) == (session, None)
        assert resolve(session).source == "usage" and resolve(session).note is None
    # Codex documents one: the same usage over 4x its 5,400 tokens is beyond the file.
    codex = RecordedSession("s", (user("go"), answer_with(30_000)), format="codex")
    assert check_context_not_recorded(codex)[1] is not None
    assert resolve(check_context_not_recorded(codex)[0]).source == "default"


def answer_with(prompt: int) -> Message:
    return Message(role="assistant", content="a", meta=MessageMeta(usage=Usage(prompt, 5, 0)))
