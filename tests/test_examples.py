"""The examples run as a user would run them: real subprocesses, a real local endpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cairn.messages import Message
from cairn.store import MessageRecord, read_transcript
from support.openai_server import (
    OpenAIServer,
    Reply,
    ToolCallSpec,
)

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "agent_library.py"


def run_example(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python examples/agent_library.py ARGS`` with only the CAIRN_*/OPENAI_* given."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("CAIRN_", "OPENAI_"))}
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        cwd=cwd,
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_agent_library_example_runs(tmp_path: Path, openai_server: OpenAIServer) -> None:
    workspace = tmp_path / "project"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("The launch code is 4417.\n")
    openai_server.script(
        Reply(tool_calls=[ToolCallSpec("read_file", json.dumps({"path": "notes.txt"}))]),
        Reply(text="The notes say the launch code is 4417."),
    )
    home = tmp_path / "home"
    env = {
        "CAIRN_MODEL": "test-model",
        "OPENAI_BASE_URL": openai_server.base_url,
        "CAIRN_HOME": str(home),
    }
    done = run_example("What do the notes say?", cwd=workspace, env=env)
    assert done.returncode == 0, done.stderr
    answer, where = done.stdout.splitlines()
    assert answer == "The notes say the launch code is 4417."
    assert where.startswith("transcript: ")
    path = Path(where.removeprefix("transcript: "))
    assert path.is_relative_to(home) and path.suffix == ".jsonl"

    # The tool really ran: the model's second request carried the file's text.
    bodies = openai_server.bodies
    assert len(bodies) == 2 and all(b["model"] == "test-model" for b in bodies)
    tool_messages = [m for m in bodies[1]["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 1 and "4417" in tool_messages[0]["content"]

    # The transcript holds the whole turn, durably, and opens again.
    messages: list[Message] = [
        r.message for r in read_transcript(path).records if isinstance(r, MessageRecord)
    ]
    roles = [m.role for m in messages if m.role != "system"]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert messages[-1].text == answer


def test_the_agent_library_example_reports_a_provider_failure_in_one_line(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(lambda body: Reply.http_error(500, "the model is down"))
    env = {
        "CAIRN_MODEL": "test-model",
        "OPENAI_BASE_URL": openai_server.base_url,
        "CAIRN_HOME": str(tmp_path / "home"),
    }
    failed = run_example("hello", cwd=tmp_path, env=env)
    assert failed.returncode == 1, failed.stderr
    assert "Traceback" not in failed.stderr
    (line,) = failed.stderr.splitlines()
    assert line.startswith("agent_library.py: ") and "the model is down" in line
    assert failed.stdout == ""


def test_the_agent_library_example_needs_a_model(tmp_path: Path) -> None:
    no_model = run_example("hello", cwd=tmp_path, env={"CAIRN_HOME": str(tmp_path / "home")})
    assert no_model.returncode == 2 and "CAIRN_MODEL" in no_model.stderr
    assert "Traceback" not in no_model.stderr
    assert not (tmp_path / "home").exists()  # nothing was started
