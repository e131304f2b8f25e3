"""``cairn`` with no arguments opens the terminal app; ``--resume ID`` and ``--continue``
pick the session; ``-p`` and ``--help`` are unchanged."""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
from collections.abc import Sequence
from pathlib import Path

from cairn import AgentSession
from cairn.agent.runtime import Runtime
from cairn.agent.settings import Settings
from cairn.provider import ModelConfig, OpenAIProvider
from cairn.surfaces.terminal.run import TerminalArgs, open_session
from support.cli_run import cairn_p
from support.openai_server import (
    OpenAIServer,
    Reply,
)


def env(server: OpenAIServer, home: Path) -> dict[str, str]:
    return {
        "CAIRN_MODEL": "test-model",
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "sk-test",
        "CAIRN_CONTEXT_WINDOW": "32768",
        "CAIRN_HOME": str(home),
    }


def test_help_lists_continue_and_p_still_runs(tmp_path: Path, openai_server: OpenAIServer) -> None:
    helped = cairn_p("--help", cwd=tmp_path, env={})
    assert helped.returncode == 0 and "--continue" in helped.stdout and "-p" in helped.stdout
    openai_server.script(Reply(text="Four."))
    printed = cairn_p("-p", "2+2?", cwd=tmp_path, env=env(openai_server, tmp_path / "home"))
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == "Four.\n"
    both = cairn_p("-p", "x", "--continue", cwd=tmp_path, env={})
    assert both.returncode == 2 and "--continue is for the terminal app" in both.stderr


def test_opening_errors_are_one_line_and_an_exit_code(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    unconfigured, output = on_a_terminal([], tmp_path, {"CAIRN_HOME": str(tmp_path / "home")})
    assert unconfigured == 2 and output.startswith(b"cairn: no model configured")
    environ = env(openai_server, tmp_path / "home")
    latest, output = on_a_terminal(["--continue"], tmp_path, environ)
    assert latest == 2 and b"no session to resume" in output
    missing, output = on_a_terminal(["--resume", "nope"], tmp_path, environ)
    assert missing == 2 and b"no session 'nope'" in output and b"Traceback" not in output


def test_without_a_terminal_cairn_says_what_works_instead(tmp_path: Path) -> None:
    bare = cairn_p(cwd=tmp_path, env={})
    assert bare.returncode == 2 and "inspect" in bare.stderr
    assert "the terminal app needs a terminal; use cairn -p" in bare.stderr


def test_resume_and_continue_open_the_session_they_name(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    model = ModelConfig(model="test-model", base_url=openai_server.base_url, context_window=32_768)

    def runtime() -> Runtime:  # one per process, as the command has
        return Runtime(tmp_path, model, OpenAIProvider(model), settings=Settings(), home=tmp_path)

    earlier = runtime()
    older = AgentSession.new(earlier)
    asyncio.run(older.prompt("first"))
    newer = older.clear()
    asyncio.run(newer.prompt("second"))
    earlier.close()
    for args, expected in (
        (TerminalArgs(resume=older.id), older),
        (TerminalArgs(latest=True), newer),
    ):
        rt = runtime()
        opened = open_session(rt, args)
        assert opened.id == expected.id
        assert next(m.text for m in opened.ui_messages()) == (
            "first" if expected is older else "second"
        )
        rt.close()
    rt = runtime()
    fresh = open_session(rt, TerminalArgs())
    assert fresh.id not in (older.id, newer.id) and fresh.ui_messages() == []
    rt.close()


def test_cairn_with_no_arguments_opens_the_app_and_ctrl_d_quits(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """The real command on a pseudo-terminal: the app draws, Ctrl+D exits with 0."""
    code, seen = on_a_terminal(
        [],
        tmp_path,
        env(openai_server, tmp_path / "home"),
        script=[(b"compactions", b"\x04")],
    )
    assert code == 0, seen[-2000:]
    assert b"sk Cairn, or /help" in seen  # the input placeholder (the cursor sits on "A")
    sessions = list((tmp_path / "home").rglob("*.jsonl"))
    assert len(sessions) == 1  # a new session in this directory


def test_resume_with_no_id_picks_a_session_then_opens_it(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    model = ModelConfig(model="test-model", base_url=openai_server.base_url, context_window=32_768)
    home = tmp_path / "home"
    earlier = Runtime(tmp_path, model, OpenAIProvider(model), settings=Settings(), home=home)
    openai_server.script(Reply(text="The answer is in zebra.txt"))
    asyncio.run(AgentSession.new(earlier).prompt("where is the quokka note"))
    earlier.close()
    code, seen = on_a_terminal(
        ["--resume"],
        tmp_path,
        env(openai_server, home),
        # The picker lists it; Enter opens it in the app, which draws its messages.
        script=[(b"quokka", b"\r"), (b"zebra", b"\x04")],
    )
    assert code == 0, seen[-3000:]
    assert b"compactions" in seen  # the app, not only the picker
    nothing, output = on_a_terminal(["--resume"], tmp_path / "home", env(openai_server, home))
    assert nothing == 2 and b"no session to resume" in output


def on_a_terminal(
    args: list[str],
    cwd: Path,
    environ: dict[str, str],
    *,
    script: Sequence[tuple[bytes, bytes]] = (),
) -> tuple[int, bytes]:
    """``python -m cairn ARGS`` on a pseudo-terminal: its exit code and everything it wrote.

    ``script``: (drawn, typed) steps — once ``drawn`` appears in what the app wrote
    after the previous step's keys were typed, ``typed`` is typed.
    """
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CAIRN_", "OPENAI_"))}
    process = subprocess.Popen(
        [sys.executable, "-m", "cairn", *args],
        cwd=cwd,
        env={**clean, **environ, "TERM": "xterm-256color"},
        stdin=follower,
        stdout=follower,
        stderr=follower,
        close_fds=True,
    )
    os.close(follower)
    seen = b""
    steps = list(script)
    since = 0
    try:
        for _ in range(600):  # bounded: at most ~60 s of reading
            ready, _, _ = select.select([leader], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # the process closed the terminal
                    break
                if not chunk:
                    break
                seen += chunk
            if steps and steps[0][0] in seen[since:]:
                since = len(seen)
                os.write(leader, steps.pop(0)[1])
            if process.poll() is not None and not ready:
                break
        code = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(leader)
    return code, seen
