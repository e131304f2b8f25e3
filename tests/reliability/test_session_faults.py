"""Issue 12, findings 1, 4 (the CLI side), 5 and 9: what a user of ``cairn -p`` hits.

- a session killed while a tool ran reopens with the call answered
  "interrupted", durably, and its next request is accepted;
- a transcript another process holds, or one that is not a transcript, is a
  one-line error on ``--resume``, never a traceback, and the file is unchanged;
- lone surrogates (a file name that is not UTF-8, a model answer with a bad
  ``\\ud800`` escape) never crash a request, the transcript or ``--output-format json``;
- ``--max-turns`` reached says so and exits non-zero; ``/compact`` with
  nothing to compact says so.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from cairn.context import CompactionConfig, ContextPipeline
from cairn.context.pipeline import CRASH_INTERRUPTED
from cairn.messages import ToolCall, Usage, assistant, find_orphans, user
from cairn.provider import ModelConfig
from cairn.store import JsonlTranscriptStore, MessageRecord, read_transcript
from cairn.store.paths import session_path
from reliability.test_kills import split_rounds, strict_provider
from support.cli_run import cairn_p
from support.openai_server import (
    OpenAIServer,
    Reply,
    ToolCallSpec,
)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "project"
    ws.mkdir()
    (ws / "notes.txt").write_text("remember the milk\n")
    return ws


def env_for(server: OpenAIServer, tmp_path: Path) -> dict[str, str]:
    return {
        "CAIRN_MODEL": "test-model",
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "test",
        "CAIRN_HOME": str(tmp_path / "home"),
    }


def crashed_mid_tool(home: Path, workspace: Path, session_id: str) -> Path:
    """A session whose last record is an answer with two calls and no results (a SIGKILL)."""
    model = ModelConfig(model="test-model", context_window=32_768)
    p = ContextPipeline.open(
        workspace, CompactionConfig(), model=model, session_id=session_id, home=home
    )
    p.add(user("read both files"))
    calls = (ToolCall("call_a", "read_file", '{"path": "a"}'), ToolCall("call_b", "bash", "{}"))
    p.add(assistant("reading", list(calls), usage=Usage(100, 10, 110)))
    p.close()
    return session_path(workspace, session_id, home)


def test_a_session_killed_during_a_tool_call_reopens_with_the_calls_answered(
    tmp_path: Path, workspace: Path
) -> None:
    """Regression: the round stayed split, and every later --resume got HTTP 400."""
    home = tmp_path / "home"
    path = crashed_mid_tool(home, workspace, "s1")
    model = ModelConfig(model="test-model", context_window=32_768)
    p = ContextPipeline.open(workspace, CompactionConfig(), model=model, session_id="s1", home=home)
    answered = [m for m in p.messages if m.role == "tool"]
    p.close()
    assert [m.tool_call_id for m in answered] == ["call_a", "call_b"]
    assert all(m.text == CRASH_INTERRUPTED and m.meta.tool_error for m in answered)
    # Durable: in the file, once, and a second open adds nothing.
    records = read_transcript(path).records
    on_disk = [r.message for r in records if isinstance(r, MessageRecord)]
    assert [m.id for m in on_disk[-2:]] == [m.id for m in answered]
    again = ContextPipeline.open(
        workspace, CompactionConfig(), model=model, session_id="s1", home=home
    )
    assert not find_orphans(again.messages)
    again.close()
    assert len(read_transcript(path).records) == len(records)


def test_cairn_p_resumes_a_session_killed_during_a_tool_call(
    tmp_path: Path, workspace: Path, openai_server: OpenAIServer
) -> None:
    crashed_mid_tool(tmp_path / "home", workspace.resolve(), "s1")
    strict_provider(openai_server, lambda body: Reply(text="Resumed."))
    done = cairn_p(
        "-p", "go on", "--resume", "s1", cwd=workspace, env=env_for(openai_server, tmp_path)
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Resumed."
    body = openai_server.requests[-1].body
    assert not split_rounds(body["messages"])
    assert any(CRASH_INTERRUPTED in str(m.get("content")) for m in body["messages"])


def test_resume_errors_are_one_line_and_leave_the_file_alone(
    tmp_path: Path, workspace: Path, openai_server: OpenAIServer
) -> None:
    """Regression: TranscriptLockedError and NotATranscriptError were tracebacks."""
    env = env_for(openai_server, tmp_path)
    home = tmp_path / "home"
    first = cairn_p("-p", "hi", "--output-format", "json", cwd=workspace, env=env)
    assert first.returncode == 0, first.stderr
    session_id = json.loads(first.stdout)["session_id"]
    path = session_path(workspace.resolve(), session_id, home)
    held = JsonlTranscriptStore.open(path)  # another Cairn process has it open
    try:
        before = path.read_bytes()
        locked = cairn_p("-p", "again", "--resume", session_id, cwd=workspace, env=env)
    finally:
        held.close()
    assert locked.returncode == 1 and "Traceback" not in locked.stderr
    assert len(locked.stderr.strip().splitlines()) == 1 and session_id in locked.stderr
    assert path.read_bytes() == before
    garbage = path.with_name("garbage.jsonl")
    garbage.write_bytes(b"this is not a transcript\n")
    broken = cairn_p("-p", "again", "--resume", "garbage", cwd=workspace, env=env)
    assert broken.returncode == 1 and "Traceback" not in broken.stderr
    assert len(broken.stderr.strip().splitlines()) == 1 and "garbage" in broken.stderr
    assert garbage.read_bytes() == b"this is not a transcript\n"


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS refuses file names that are not UTF-8")
def test_lone_surrogates_never_crash_a_request_or_the_json_output(
    tmp_path: Path, workspace: Path, openai_server: OpenAIServer
) -> None:
    """Regression: a non-UTF-8 file name put \\udce9 in a tool result and the next request
    raised UnicodeEncodeError in the SDK; a \\ud800 in an answer crashed --output-format json."""
    os.close(os.open(os.fsencode(workspace) + b"/caf\xe9.txt", os.O_CREAT | os.O_WRONLY, 0o644))

    def model(body: dict[str, Any]) -> Reply:
        if not any(m["role"] == "tool" for m in body["messages"]):
            return Reply(tool_calls=[ToolCallSpec("list_files", json.dumps({"path": "."}))])
        return Reply(text="Listed: caf\ud800 done")

    openai_server.respond_with(model)
    env = env_for(openai_server, tmp_path)
    for output in ("json", "stream-json", "text"):
        done = cairn_p("-p", "list the files", "--output-format", output, cwd=workspace, env=env)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        assert "Listed: caf\ufffd done" in done.stdout or "Listed: caf\\ufffd done" in done.stdout
    listing = next(m for m in openai_server.requests[1].body["messages"] if m["role"] == "tool")
    assert "caf\ufffd.txt" in listing["content"]
    for path in (tmp_path / "home").rglob("*.jsonl"):
        read_transcript(path)  # every line readable


def test_max_turns_reached_says_so_and_exits_non_zero(
    tmp_path: Path, workspace: Path, openai_server: OpenAIServer
) -> None:
    """Regression: stopping at --max-turns exited 0 with an empty result."""
    openai_server.respond_with(
        lambda body: Reply(
            tool_calls=[ToolCallSpec("read_file", json.dumps({"path": "notes.txt"}))]
        )
    )
    env = env_for(openai_server, tmp_path)
    text = cairn_p("-p", "loop", "--max-turns", "2", cwd=workspace, env=env)
    assert text.returncode == 1 and text.stdout == ""
    assert "--max-turns 2" in text.stderr and "--resume" in text.stderr
    as_json = cairn_p(
        "-p", "loop", "--max-turns", "1", "--output-format", "json", cwd=workspace, env=env
    )
    assert as_json.returncode == 1
    result = json.loads(as_json.stdout)
    assert result["is_error"] is True and "--max-turns 1" in result["error"]
    zero = cairn_p("-p", "loop", "--max-turns", "0", cwd=workspace, env=env)
    assert zero.returncode == 2 and "--max-turns must be at least 1" in zero.stderr


def test_compact_with_nothing_to_compact_says_so(
    tmp_path: Path, workspace: Path, openai_server: OpenAIServer
) -> None:
    """Regression: /compact on a tiny session reported '7,174 → 7,174 tokens'."""
    env = env_for(openai_server, tmp_path)
    first = cairn_p("-p", "hi", "--output-format", "json", cwd=workspace, env=env)
    session_id = json.loads(first.stdout)["session_id"]
    done = cairn_p("-p", "/compact", "--resume", session_id, cwd=workspace, env=env)
    # A notice, not an error (issue 25 item 4): exit 0, the reason, no sizes "compacted".
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not smaller" in done.stdout and "→" not in done.stdout
