"""Hooks as Claude Code users expect them, end to end: sessions, /compact and ``cairn -p``.

Every hook is a real script in ``tmp_path``; the model is the real local SSE
server of ``openai_server``; ``cairn -p`` runs as a real subprocess.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agent.test_hooks import ESCAPE, escaped_child, hooks_of, script, wait_gone
from cairn.agent.commands import run_command
from cairn.agent.events import ErrorEvent, Event, MessageAdded, Notice
from cairn.agent.loop import TurnError, run_turn
from cairn.agent.runtime import Runtime, Session
from cairn.agent.settings import HooksSettings, Settings
from cairn.context import CompactionConfig
from cairn.context.hooks import KIND_SESSION_START
from cairn.messages import KIND_COMPACT_SUMMARY
from cairn.provider import ModelConfig, OpenAIProvider
from support.cli_run import cairn_p
from support.openai_server import (
    OpenAIServer,
    Reply,
)

SUMMARY = "<summary>\n## Objective and constraints\nExplain calc.py.\n</summary>"
FORK_MARK = "Respond with TEXT ONLY"
RULE = "Project rule: indent with tabs, never spaces."
#: A SessionStart hook that logs its stdin JSON (one line per run) and prints a rule.
LOG_START = (
    f'input=$(cat)\nprintf \'%s\\n\' "$input" >> "$CAIRN_PROJECT_DIR/starts.jsonl"\necho "{RULE}"\n'
)


def is_fork(body: dict[str, Any]) -> bool:
    last = body["messages"][-1]
    return last["role"] == "user" and FORK_MARK in str(last.get("content"))


def answer(text: str = "ok") -> Any:
    return lambda body: Reply(text=SUMMARY if is_fork(body) else text)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "project"
    ws.mkdir()
    (ws / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    return ws


def runtime(workspace: Path, server: OpenAIServer, home: Path, hooks: HooksSettings) -> Runtime:
    model = ModelConfig(model="test-model", base_url=server.base_url, context_window=16_384)
    return Runtime(
        workspace,
        model,
        OpenAIProvider(model),
        settings=Settings(hooks=hooks, compaction=CompactionConfig()),
        home=home,
        permission_mode="bypass",
    )


def record(session: Session) -> list[Event]:
    events: list[Event] = []
    session.events.on(events.append)
    return events


def warm_up(session: Session, server: OpenAIServer, turns: int = 4) -> None:
    """Earlier exchanges, so a compaction has history to summarize and shrink."""
    server.respond_with(answer("calc.py defines add(), which subtracts. " * 20))
    for n in range(turns):
        asyncio.run(run_turn(session, f"question {n} about calc.py"))


def starts(workspace: Path) -> list[dict[str, Any]]:
    lines = (workspace / "starts.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def cli_env(server: OpenAIServer, home: Path, **extra: str) -> dict[str, str]:
    return {
        "CAIRN_MODEL": "test-model",
        "OPENAI_BASE_URL": server.base_url,
        "CAIRN_HOME": str(home),
        # A window: the notices counted are the hooks' (no "automatic compaction is off").
        "CAIRN_CONTEXT_WINDOW": "128000",
        **extra,
    }


def project_hooks(workspace: Path, hooks: dict[str, list[dict[str, Any]]]) -> None:
    path = workspace / ".cairn" / "settings.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"hooks": hooks}), encoding="utf-8")


def command_hook(
    command: str, matcher: str | None = None, timeout: float = 60.0
) -> list[dict[str, Any]]:
    group: dict[str, Any] = {"hooks": [{"type": "command", "command": command, "timeout": timeout}]}
    if matcher is not None:
        group["matcher"] = matcher
    return [group]


# --- SessionStart sources ----------------------------------------------------


def test_session_start_fires_with_startup_clear_and_resume(
    workspace: Path, tmp_path: Path, bin_dir: Path, openai_server: OpenAIServer
) -> None:
    hooks = hooks_of({"SessionStart": [(None, [script(bin_dir, "start.sh", LOG_START)])]})
    home = tmp_path / "home"
    openai_server.respond_with(answer())
    rt = runtime(workspace, openai_server, home, hooks)
    first = rt.new_session()
    asyncio.run(first.start())
    asyncio.run(first.start())  # once per opening, however often it is called
    asyncio.run(run_turn(first, "hello"))
    asyncio.run(run_command(rt, "/clear", ""))
    cleared = rt.current
    asyncio.run(run_command(rt, "/resume", first.id))
    rt.close()
    again = runtime(workspace, openai_server, home, hooks).resume(first.id)
    asyncio.run(again.start())
    again.close()

    received = starts(workspace)
    assert [(s["source"], s["session_id"]) for s in received] == [
        ("startup", first.id),
        ("clear", cleared.id),
        ("resume", first.id),
        ("resume", first.id),
    ]
    for start, session in zip(received, (first, cleared, first, again), strict=True):
        assert start["hook_event_name"] == "SessionStart"
        assert start["cwd"] == str(rt.workspace)
        assert start["transcript_path"] == str(session.path)


def test_session_start_stdout_is_a_hidden_reminder_in_the_api_view_only(
    workspace: Path, tmp_path: Path, bin_dir: Path, openai_server: OpenAIServer
) -> None:
    hooks = hooks_of({"SessionStart": [(None, [script(bin_dir, "start.sh", LOG_START)])]})
    home = tmp_path / "home"
    openai_server.respond_with(answer("Understood."))
    rt = runtime(workspace, openai_server, home, hooks)
    session = rt.new_session()
    events = record(session)
    asyncio.run(session.start())
    asyncio.run(run_turn(session, "hello"))

    # The model got the rule, as a user message before the prompt.
    sent = openai_server.bodies[0]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "user"]
    assert RULE in sent[1]["content"] and sent[2]["content"] == "hello"
    reminders = [m for m in session.api_messages if m.meta.kind == KIND_SESSION_START]
    assert len(reminders) == 1
    assert reminders[0].meta.hidden and reminders[0].meta.synthetic
    # Nobody renders it: not the UI view, not the event stream, not the session list.
    assert [m.text for m in session.ui_messages()] == ["hello", "Understood."]
    assert not any(isinstance(e, MessageAdded) and RULE in e.message.text for e in events)
    assert rt.list_sessions()[0].first_prompt == "hello"
    # Durable: the API view rebuilt from the transcript still holds it.
    api = list(session.api_messages)
    rt.close()
    again = runtime(workspace, openai_server, home, hooks).resume(session.id)
    assert list(again.api_messages) == api
    again.close()


def test_session_start_notices_are_published(
    workspace: Path, tmp_path: Path, bin_dir: Path, openai_server: OpenAIServer
) -> None:
    failing = script(bin_dir, "fail.sh", 'echo "NOTES.md is missing" >&2\nexit 2\n')
    slow = script(bin_dir, "slow.sh", "sleep 30\n")
    hooks = hooks_of({"SessionStart": [(None, [failing, (slow, 0.5)])]})
    session = runtime(workspace, openai_server, tmp_path / "home", hooks).new_session()
    events = record(session)
    asyncio.run(session.start())
    notices = [e.text for e in events if isinstance(e, Notice)]
    assert len(notices) == 2
    assert "NOTES.md is missing" in notices[0]
    assert "timed out after 0.5 s" in notices[1]
    # Nothing was printed for the model: no reminder.
    assert not any(m.meta.kind == KIND_SESSION_START for m in session.api_messages)
    session.close()


# --- manual /compact ---------------------------------------------------------


@pytest.mark.parametrize("fork", ["succeeds", "fails"])
def test_notices_of_a_manual_compact_reach_the_event_stream(
    workspace: Path, tmp_path: Path, bin_dir: Path, openai_server: OpenAIServer, fork: str
) -> None:
    pre = script(bin_dir, "pre.sh", 'echo "notes directory is missing" >&2\nexit 2\n')
    post = script(bin_dir, "post.sh", 'echo "upload failed" >&2\nexit 1\n')
    hooks = hooks_of({"PreCompact": [(None, [pre])], "PostCompact": [(None, [post])]})
    rt = runtime(workspace, openai_server, tmp_path / "home", hooks)
    session = rt.new_session()
    warm_up(session, openai_server)
    if fork == "fails":
        openai_server.respond_with(
            lambda body: Reply.http_error(500, "summarizer down") if is_fork(body) else Reply()
        )
    events = record(session)

    outcome = asyncio.run(run_command(rt, "/compact", ""))

    notices = [e.text for e in events if isinstance(e, Notice)]
    assert any("PreCompact" in n and "notes directory is missing" in n for n in notices)
    if fork == "succeeds":
        assert outcome.ok and outcome.text.startswith("compacted (llm)")
        assert any(
            "PostCompact" in n and "exit code 1" in n and "upload failed" in n for n in notices
        )
    else:
        assert not outcome.ok and "compaction failed" in outcome.text
    rt.close()


def test_a_compact_a_hook_refuses_is_a_notice_not_an_error(
    workspace: Path, tmp_path: Path, bin_dir: Path, openai_server: OpenAIServer
) -> None:
    """Issue 29 defect 13: a /compact a PreCompact hook blocked showed as a red error block."""
    block = script(
        bin_dir, "block.sh", 'echo \'{"decision": "block", "reason": "release freeze"}\'\n'
    )
    rt = runtime(
        workspace, openai_server, tmp_path / "home", hooks_of({"PreCompact": [(None, [block])]})
    )
    session = rt.new_session()
    warm_up(session, openai_server)
    before = session.api_messages

    outcome = asyncio.run(run_command(rt, "/compact", ""))

    assert outcome.ok and outcome.compaction is None
    assert outcome.text == (
        "/compact refused: compaction blocked by a PreCompact hook: release freeze; "
        "the context is unchanged"
    )
    assert session.api_messages == before
    rt.close()


def test_a_hook_blocking_the_reactive_compaction_ends_the_turn_with_its_own_code(
    workspace: Path, tmp_path: Path, bin_dir: Path, openai_server: OpenAIServer
) -> None:
    """Issue 30: the loop handles the context's refusals as one family. When the provider
    says "too long" and a PreCompact hook blocks the reactive compaction, the turn ends
    with the refusal's own code (``compaction_blocked``), the user sees it as an error
    event, and nothing more is sent."""
    block = script(
        bin_dir, "block.sh", 'echo \'{"decision": "block", "reason": "release freeze"}\'\n'
    )
    rt = runtime(
        workspace, openai_server, tmp_path / "home", hooks_of({"PreCompact": [(None, [block])]})
    )
    session = rt.new_session()
    warm_up(session, openai_server)
    before = session.api_messages
    sent = len(openai_server.requests)
    openai_server.respond_with(
        lambda body: Reply.http_error(
            400, "maximum context length exceeded", code="context_length_exceeded"
        )
    )
    events = record(session)

    with pytest.raises(TurnError) as caught:
        asyncio.run(run_turn(session, "one more question"))

    assert caught.value.code == "compaction_blocked"
    errors = [e for e in events if isinstance(e, ErrorEvent)]
    assert [e.code for e in errors] == ["compaction_blocked"]
    assert "release freeze" in errors[0].message
    # One main request, refused; no fork, no retry.
    assert len(openai_server.requests) == sent + 1
    assert session.api_messages[: len(before)] == before
    rt.close()


def test_session_start_compact_output_is_a_hidden_reminder_after_compaction(
    workspace: Path, tmp_path: Path, bin_dir: Path, openai_server: OpenAIServer
) -> None:
    hook = script(bin_dir, "start.sh", LOG_START)
    hooks = hooks_of({"SessionStart": [("compact", [hook])]})
    rt = runtime(workspace, openai_server, tmp_path / "home", hooks)
    session = rt.new_session()
    warm_up(session, openai_server)

    assert asyncio.run(run_command(rt, "/compact", "")).ok

    assert [s["source"] for s in starts(workspace)] == ["compact"]
    api = list(session.api_messages)
    assert api[0].meta.kind == KIND_COMPACT_SUMMARY
    assert api[-1].meta.kind == KIND_SESSION_START and RULE in api[-1].text
    assert not any(RULE in m.text for m in session.ui_messages())
    rt.close()


# --- cairn -p ----------------------------------------------------------------


def test_cairn_p_text_and_json_print_notices_on_stderr_and_only_the_answer_on_stdout(
    workspace: Path, tmp_path: Path, bin_dir: Path, openai_server: OpenAIServer
) -> None:
    hook = script(
        bin_dir, "fail.sh", 'echo "NOTES.md is missing" >&2\necho "run make" >&2\nexit 2\n'
    )
    project_hooks(workspace, {"SessionStart": command_hook(hook)})
    openai_server.respond_with(answer("Hello."))
    env = cli_env(openai_server, tmp_path / "home")

    text = cairn_p("-p", "hi", cwd=workspace, env=env)
    as_json = cairn_p("-p", "hi", "--output-format", "json", cwd=workspace, env=env)

    assert text.returncode == 0, text.stderr
    assert text.stdout == "Hello.\n"
    assert json.loads(as_json.stdout)["result"] == "Hello."
    for done in (text, as_json):
        notices = [line for line in done.stderr.splitlines() if line.startswith("cairn: notice: ")]
        assert len(notices) == 1, done.stderr
        assert "SessionStart hook" in notices[0]
        assert notices[0].endswith("NOTES.md is missing\\nrun make")


def test_cairn_p_prints_the_notices_of_a_manual_compact_on_stderr(
    workspace: Path, tmp_path: Path, bin_dir: Path, openai_server: OpenAIServer
) -> None:
    home = tmp_path / "home"
    rt = runtime(workspace, openai_server, home, HooksSettings())
    session = rt.new_session()
    warm_up(session, openai_server)
    rt.close()
    pre = script(bin_dir, "pre.sh", 'echo "notes directory is missing" >&2\nexit 2\n')
    project_hooks(workspace, {"PreCompact": command_hook(pre, "manual")})

    done = cairn_p(
        "-p", "/compact", "--resume", session.id, cwd=workspace, env=cli_env(openai_server, home)
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("compacted (llm)")
    lines = done.stderr.splitlines()
    assert any(
        line.startswith("cairn: notice: PreCompact hook") and "notes directory is missing" in line
        for line in lines
    ), done.stderr


def test_cairn_p_with_a_hook_that_leaves_background_children_exits_cleanly(
    workspace: Path, tmp_path: Path, bin_dir: Path, openai_server: OpenAIServer
) -> None:
    hook = script(
        bin_dir,
        "start.sh",
        ESCAPE + "nohup sleep 30 > /dev/null 2>&1 &\n"
        'echo $! > "$CAIRN_PROJECT_DIR/nohup.pid"\n'
        f'echo "{RULE}"\n',
    )
    # Shorter than the escaped child's sleep: a runner that waits for its EOF times out.
    project_hooks(workspace, {"SessionStart": command_hook(hook, "startup", timeout=10)})
    openai_server.respond_with(answer("Hello."))
    # Development mode shows every unclosed transport and unawaited task.
    env = cli_env(openai_server, tmp_path / "home", PYTHONDEVMODE="1")

    done = cairn_p("-p", "hi", cwd=workspace, env=env)

    assert done.returncode == 0, done.stderr
    assert done.stdout == "Hello.\n"
    for trouble in ("Event loop is closed", "ResourceWarning", "Traceback", "was never awaited"):
        assert trouble not in done.stderr, done.stderr
    assert RULE in openai_server.bodies[0]["messages"][1]["content"]
    assert wait_gone([escaped_child(workspace), int((workspace / "nohup.pid").read_text())])
