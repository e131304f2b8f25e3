"""The README's examples run as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.openai_server import (
    OpenAIServer,
    Reply,
)

README = Path(__file__).resolve().parents[1] / "README.md"


def example(name: str) -> str:
    match = re.search(
        rf"<!-- readme-example: {name} -->\n```python\n(.*?)```", README.read_text(), re.S
    )
    assert match, f"README example {name!r} not found"
    return match.group(1)


@pytest.mark.parametrize("name", ["pipeline"])
def test_readme_example_runs(name: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", example(name)], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 15
    # In the handoff band the model gets the handoff reminder and nothing is snipped ...
    assert any("handoff_band" in line and "handoff=True" in line for line in lines)
    assert all(" 0 results elided" in line for line in lines[:-1])
    # ... at the line the fallback compacts (a snip would not pay against it) ...
    assert any("compaction_due" in line and "compaction=fallback" in line for line in lines)
    # ... and a manual /compact shrinks the context with the deterministic fallback.
    pre, post = re.findall(r"(\d+) → (\d+) tokens \(fallback\)", lines[-1])[0]
    assert int(post) < int(pre)


def test_readme_agent_example_runs_against_the_local_server(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("CAIRN_", "OPENAI_"))},
        "CAIRN_MODEL": "test-model",
        "OPENAI_BASE_URL": openai_server.base_url,
        "OPENAI_API_KEY": "test",
    }
    openai_server.script(Reply(text="Hello!"))
    done = subprocess.run(
        [sys.executable, "-c", example("agent")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "messageAdded" in lines and "statusChange" in lines
    assert "answer: Hello!" in lines
    assert any(line.startswith("usage: SessionUsage(latest_total_tokens=") for line in lines)
    # One exchange: the compaction runs, and its result would not be smaller (a notice).
    assert any("not smaller" in line and "ok=True" in line for line in lines)


def test_readme_testing_example_runs_the_agent_on_the_scripted_provider(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", example("testing")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["tool result sent: True", "answer: The notes say 42."]
