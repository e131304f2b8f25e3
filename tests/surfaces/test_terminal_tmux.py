"""The real ``cairn`` in a real terminal: tmux runs it, ``send-keys`` types, ``capture-pane`` reads.

One smoke test of the whole path a person takes — start, prompt, the streamed
answer, ``/compact`` with its ``✻ Compacting`` tail and the compact block,
Ctrl+D — against the local OpenAI server. tmux comes from Debian's packages
(the Makefile's ``test`` target installs it).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from openai_server import (  # noqa: F401  (the fixture registers itself by import)
    OpenAIServer,
    Reply,
    openai_server_fixture,
)

SUMMARY = "<summary>\n## Objective and constraints\nAnswer the questions.\n</summary>"
#: Polls of the pane before a wait gives up (a bound, not a timing assertion).
POLLS = 600


class Pane:
    """A tmux server of the test's own (``-S``) with one window running ``command``."""

    def __init__(self, socket: Path, command: str, cwd: Path) -> None:
        tmux = shutil.which("tmux")
        if tmux is None:
            pytest.fail("tmux is not installed: `make test` installs it from Debian's packages")
        self._base = [tmux, "-S", str(socket)]
        size = ["-x", "140", "-y", "45"]
        subprocess.run(
            [*self._base, "new-session", "-d", *size, "-c", str(cwd), command], check=True
        )

    def text(self) -> str:
        done = subprocess.run(
            [*self._base, "capture-pane", "-p", "-J"], capture_output=True, text=True
        )
        return done.stdout

    def send(self, *keys: str) -> None:
        subprocess.run([*self._base, "send-keys", *keys], check=True)

    def type(self, text: str) -> None:
        subprocess.run([*self._base, "send-keys", "-l", text], check=True)
        self.send("Enter")

    def wait_for(self, wanted: str | Callable[[str], bool]) -> str:
        check = wanted if callable(wanted) else (lambda screen: wanted in screen)
        screen = ""
        for _ in range(POLLS):
            screen = self.text()
            if check(screen):
                return screen
            time.sleep(0.1)
        pytest.fail(f"the terminal never showed {wanted!r}; it shows:\n{screen}")

    def close(self) -> None:
        subprocess.run([*self._base, "kill-server"], capture_output=True)


def _trimmed(screen: str) -> str:
    return "\n".join(line.rstrip() for line in screen.splitlines()).strip("\n") + "\n"


def meter(screen: str) -> int:
    """The footer's context size (``context 3,918 tokens``), 0 before the first response."""
    found = re.search(r"context ([\d,]+) tokens", screen)
    return int(found.group(1).replace(",", "")) if found else 0


def is_fork(body: dict[str, Any]) -> bool:
    last = body["messages"][-1]
    return last["role"] == "user" and "TEXT ONLY" in str(last.get("content"))


def start_cairn(tmp_path: Path, server: OpenAIServer, workspace: Path, **env: str) -> Pane:
    """``cairn`` in a tmux pane against ``server``, with nothing of this shell's
    ``CAIRN_``/``OPENAI_`` variables; its stderr goes to ``cairn.stderr``."""
    env = {
        "CAIRN_MODEL": "test-model",
        "OPENAI_BASE_URL": server.base_url,
        "CAIRN_HOME": str(tmp_path / "home"),
        "TERM": "xterm-256color",
        **env,
    }
    cleared = [k for k in os.environ if k.startswith(("CAIRN_", "OPENAI_"))]
    command = " ".join(
        [
            "env",
            *(f"-u {shlex.quote(k)}" for k in cleared),
            *(f"{k}={shlex.quote(v)}" for k, v in env.items()),
            shlex.quote(sys.executable),
            "-m cairn 2>cairn.stderr; echo cairn exited $?; sleep 60",
        ]
    )
    return Pane(tmp_path / "tmux.sock", command, workspace)


def test_the_real_cairn_in_tmux_streams_compacts_with_the_tail_and_exits(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    workspace = tmp_path / "project"
    workspace.mkdir()
    release = threading.Event()
    # Long answers: a compaction must have more to replace than its summary costs.
    detail = " ".join(f"Step {i}: the ledger balances." for i in range(300))
    answers = iter([f"{detail} END-ONE", f"{detail} END-TWO"])

    def responder(body: dict[str, Any]) -> Reply:
        if is_fork(body):
            # Stall the fork after five deltas (20 characters) so the tail can be read.
            return Reply(text=SUMMARY, hold=release, hold_after=6)
        return Reply(text=next(answers, "Done."))

    openai_server.respond_with(responder)
    pane = start_cairn(tmp_path, openai_server, workspace)
    try:
        pane.wait_for("Ask Cairn")
        pane.type("What is the answer?")
        first = meter(pane.wait_for(lambda screen: "END-ONE" in screen and meter(screen) > 0))
        pane.type("And the second one?")
        pane.wait_for(lambda screen: "END-TWO" in screen and meter(screen) > first)

        pane.type("/compact")
        # The first 20 characters of the summary, newlines spelled out, after the marker.
        tail = pane.wait_for("✻ Compacting <summary>\\n## Object")
        assert "Conversation compacted" not in tail
        release.set()
        after = pane.wait_for("Conversation compacted")
        assert "✻ Compacting" not in after
        # The conversation before the compaction is still on screen, above the block.
        assert after.index("END-TWO") < after.index("Conversation compacted")

        # CAIRN_CAPTURE_DIR=docs/terminal keeps the two screens (the README shows them).
        if captures := os.environ.get("CAIRN_CAPTURE_DIR"):
            folder = Path(captures)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "compacting.txt").write_text(_trimmed(tail), encoding="utf-8")
            (folder / "compacted.txt").write_text(_trimmed(after), encoding="utf-8")
        pane.send("C-d")
        final = pane.wait_for("cairn exited")
        assert "cairn exited 0" in final
    finally:
        release.set()
        pane.close()
    stderr = (workspace / "cairn.stderr").read_text(encoding="utf-8", errors="replace")
    assert "Traceback" not in stderr, stderr


def test_a_summary_prepared_in_the_band_is_a_quiet_word_in_the_footer_not_the_hint(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """Issue 28 in the real terminal: ``preparing summary``, then ``summary ready`` in
    the footer while the user goes on; no ``✻ Compacting`` until the line, which
    commits it without asking the model again."""
    workspace = tmp_path / "project"
    workspace.mkdir()
    release = threading.Event()
    detail = " ".join(f"Step {i}: the ledger balances." for i in range(40))

    def responder(body: dict[str, Any]) -> Reply:
        if is_fork(body):
            return Reply(text=SUMMARY, hold=release, hold_after=6)
        # The prompt's number (a hidden handoff reminder may follow the prompt).
        asked = re.findall(r"part (\d+)", json.dumps(body["messages"]))
        return Reply(text=f"{detail} END-{asked[-1]}")

    openai_server.respond_with(responder)
    pane = start_cairn(tmp_path, openai_server, workspace, CAIRN_CONTEXT_WINDOW="16384")
    try:
        pane.wait_for("Ask Cairn")
        screen = ""
        for turn in range(60):
            pane.type(f"Tell me more, part {turn}")
            screen = pane.wait_for(f"END-{turn}")
            if "preparing summary" in screen:
                break
        screen = pane.wait_for("· 0 compactions · preparing summary")
        assert "✻ Compacting" not in screen  # nobody waits: no hint
        release.set()
        screen = pane.wait_for("· 0 compactions · summary ready")
        assert "✻ Compacting" not in screen
        for turn in range(100, 120):
            pane.type(f"Tell me more, part {turn}")
            screen = pane.wait_for(f"END-{turn}")
            if "· 1 compaction" in screen:
                break
        screen = pane.wait_for("· 1 compaction")
        assert "summary ready" not in screen and "preparing summary" not in screen
        pane.send("C-d")
        assert "cairn exited 0" in pane.wait_for("cairn exited")
    finally:
        release.set()
        pane.close()
    assert sum(is_fork(b) for b in openai_server.bodies) == 1  # committed, not asked again
    stderr = (workspace / "cairn.stderr").read_text(encoding="utf-8", errors="replace")
    assert "Traceback" not in stderr, stderr
