"""The real ``cairn`` in a real terminal: tmux runs it, ``send-keys`` types, ``capture-pane`` reads.

One smoke test of the whole path a person takes — start, prompt, the streamed
answer, ``/compact`` with its ``✻ Compacting`` tail and the compact block,
Ctrl+D — against the local OpenAI server; and issue 29's gestures: a bracketed
paste (``load-buffer`` + ``paste-buffer -p``) folded to its label, the list
following the answer after it, Ctrl+End, a wide-character tool result on one
row, the ``cairn --resume <id>`` line left in the shell on exit, ``@path``
completion on Tab, a ``!command`` block, Shift+Tab (``BTab``) cycling the mode,
a line queued while the answer streams (Esc takes it back), Esc Esc's rewind
picker, ``/fork`` and ``/rewind 1``, and the meter past the budget. tmux
comes from Debian's packages (the Makefile's ``test`` target installs it).
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

from cairn.agent.paste import FOLDED_HEAD_LINES
from support.openai_server import (
    OpenAIServer,
    Reply,
    ToolCallSpec,
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

    def paste(self, text: str, scratch: Path) -> None:
        """A bracketed paste as a terminal sends one (``-p``; line breaks as CR, by default)."""
        scratch.write_text(text, encoding="utf-8")
        subprocess.run([*self._base, "load-buffer", str(scratch)], check=True)
        subprocess.run([*self._base, "paste-buffer", "-p", "-d"], check=True)

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


def cairn_stderr(workspace: Path) -> str:
    """What ``cairn`` wrote to its stderr (``start_cairn`` sends it to ``cairn.stderr``)."""
    return (workspace / "cairn.stderr").read_text(encoding="utf-8", errors="replace")


def capture(name: str, screen: str) -> None:
    """``CAIRN_CAPTURE_DIR=docs/terminal`` keeps the screen (the README shows them)."""
    if captures := os.environ.get("CAIRN_CAPTURE_DIR"):
        folder = Path(captures)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(_trimmed(screen), encoding="utf-8")


def test_the_real_cairn_in_tmux_streams_compacts_with_the_tail_and_exits(
    tmp_path: Path, workspace: Path, openai_server: OpenAIServer
) -> None:
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

        capture("compacting.txt", tail)
        capture("compacted.txt", after)
        pane.send("C-d")
        final = pane.wait_for("cairn exited")
        assert "cairn exited 0" in final
    finally:
        release.set()
        pane.close()
    stderr = cairn_stderr(workspace)
    assert "Traceback" not in stderr, stderr


def test_a_summary_prepared_in_the_band_is_a_quiet_word_in_the_footer_not_the_hint(
    tmp_path: Path, workspace: Path, openai_server: OpenAIServer
) -> None:
    """Issue 28 in the real terminal: ``preparing summary``, then ``summary ready`` in
    the footer while the user goes on; no ``✻ Compacting`` until the line, which
    commits it without asking the model again."""
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
    stderr = cairn_stderr(workspace)
    assert "Traceback" not in stderr, stderr


def screen_row(screen: str, marker: str) -> int:
    """The index of the first line of ``screen`` holding ``marker``."""
    return next(n for n, line in enumerate(screen.splitlines()) if marker in line)


def test_a_large_paste_is_folded_the_answer_followed_and_the_exit_says_how_to_resume(
    tmp_path: Path, workspace: Path, openai_server: OpenAIServer
) -> None:
    """Issue 29 in the real terminal: a 2,000-line bracketed paste shows as its label,
    goes to the model whole, is folded in the list with the answer on the screen after
    it; Ctrl+Home and Ctrl+End move through the list; a wide-character tool result
    stays one row; quitting leaves ``cairn --resume <id>`` in the shell."""
    # 90 wide characters: 180 cells, more than the 140 columns of the pane.
    (workspace / "账本.txt").write_text("账本平衡。" * 18 + "\n", encoding="utf-8")
    pasted = "\n".join(f"PASTED line {n}: the ledger balances" for n in range(1, 2_001))
    findings = "\n\n".join(f"Finding {n}: the ledger balances." for n in range(60))
    plan = [
        Reply(text=f"START-ANSWER\n\n{findings}\n\nEND-ANSWER", delta_chars=200),
        Reply(tool_calls=[ToolCallSpec("read_file", json.dumps({"path": "账本.txt"}))]),
        Reply(text="WIDE-DONE"),
    ]
    openai_server.respond_with(lambda body: plan.pop(0) if plan else None)
    pane = start_cairn(tmp_path, openai_server, workspace)
    try:
        pane.wait_for("Ask Cairn")
        pane.send("-l", "Look at this: ")
        pane.paste(pasted, tmp_path / "paste.txt")
        pane.wait_for("Look at this: [Pasted text #1 · 2,000 lines]")
        pane.send("-l", " thanks")
        screen = pane.wait_for("[Pasted text #1 · 2,000 lines] thanks")
        assert "PASTED line 2" not in screen and openai_server.requests == []
        pane.send("Enter")
        # The list follows the end: the answer's last line shows, under the folded paste.
        screen = pane.wait_for(lambda s: "END-ANSWER" in s and meter(s) > 0)
        assert "PASTED line 2000" not in screen
        capture("pasted.txt", screen)
        sent = [m["content"] for m in openai_server.bodies[0]["messages"] if m["role"] == "user"]
        assert sent == [f"Look at this: {pasted} thanks"]  # whole, its line breaks kept
        # Ctrl+Home goes up to the folded paste; Ctrl+End back to the end of the answer.
        pane.send("C-Home")
        top = pane.wait_for(
            lambda s: "› Look at this: PASTED line 1" in s and "END-ANSWER" not in s
        )
        # Folded: its first lines and the label (the message's: 2,000 lines too).
        assert "[Pasted text #1 · 2,000 lines]" in top
        assert f"PASTED line {FOLDED_HEAD_LINES}:" in top
        assert f"PASTED line {FOLDED_HEAD_LINES + 1}:" not in top
        pane.send("C-End")
        pane.wait_for(lambda s: "END-ANSWER" in s and "› Look at this" not in s)

        # A wide-character result is one row, cut by cells: the next row is its fold's title.
        pane.type("Read the ledger")
        screen = pane.wait_for("WIDE-DONE")
        row = screen_row(screen, "⎿")
        assert (
            "账本平衡" in screen.splitlines()[row] and screen.splitlines()[row].rstrip()[-1] == "…"
        )
        assert "full result" in screen.splitlines()[row + 1]

        pane.send("C-d")
        final = pane.wait_for("cairn exited")
        found = re.search(r"Resume this session with: cairn --resume (\S+)\n", final)
        assert found is not None, final
        assert list((tmp_path / "home" / "projects").glob(f"*/{found.group(1)}.jsonl"))
        assert "cairn exited 0" in final and final.index(found.group(0)) < final.index("exited")
    finally:
        pane.close()
    stderr = cairn_stderr(workspace)
    assert "Traceback" not in stderr, stderr


def test_quitting_a_session_with_no_message_says_nothing_of_resuming(
    tmp_path: Path, workspace: Path, openai_server: OpenAIServer
) -> None:
    pane = start_cairn(tmp_path, openai_server, workspace)
    try:
        pane.wait_for("Ask Cairn")
        pane.send("C-d")
        final = pane.wait_for("cairn exited")
        assert "cairn exited 0" in final and "--resume" not in final
    finally:
        pane.close()


def test_at_path_completion_a_bang_command_and_shift_tab_in_the_real_terminal(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """Issue 29's gestures, typed: ``@sr`` Tab Tab completes to a file the sent prompt
    attaches; ``!command`` is its block; Shift+Tab (``BTab``) cycles the footer's mode."""
    workspace = tmp_path / "project"
    (workspace / "src").mkdir(parents=True)
    (workspace / "src" / "ledger.py").write_text("MARKER_LEDGER = 1\n", encoding="utf-8")
    openai_server.respond_with(lambda body: Reply(text="READ-DONE"))
    pane = start_cairn(tmp_path, openai_server, workspace)
    try:
        pane.wait_for("mode accept-edits · Shift+Tab")
        pane.send("BTab")
        pane.wait_for("mode bypass · Shift+Tab")
        pane.send("BTab")
        screen = pane.wait_for("mode plan · Shift+Tab")
        assert "mode bypass" not in screen
        pane.send("BTab", "BTab")
        pane.wait_for("mode accept-edits · Shift+Tab")

        pane.send("-l", "look at @sr")
        pane.wait_for(lambda s: "@src/" in s and "look at @src/" not in s)  # the line under
        pane.send("Tab")
        pane.wait_for("look at @src/")
        pane.wait_for("@src/ledger.py")  # the folder's files, offered next
        pane.send("Tab")
        pane.wait_for("look at @src/ledger.py")
        pane.send("-l", " please")
        pane.send("Enter")
        pane.wait_for("READ-DONE")
        sent = json.dumps(openai_server.bodies[0]["messages"])
        assert "MARKER_LEDGER" in sent  # attached by the core, read as a tool result

        pane.type("!echo shell-says-hi")
        pane.wait_for("bash needs your permission")  # as the model's bash, in accept-edits
        pane.send("y")
        screen = pane.wait_for("⎿ shell-says-hi")
        assert "! echo shell-says-hi" in screen
        assert "› !echo" not in screen  # a block, not a prompt
        assert len(openai_server.requests) == 1  # no turn
        pane.send("C-d")
        assert "cairn exited 0" in pane.wait_for("cairn exited")
    finally:
        pane.close()
    stderr = cairn_stderr(workspace)
    assert "Traceback" not in stderr, stderr


def test_a_line_queued_while_the_agent_works_esc_and_rewinding_in_the_real_terminal(
    tmp_path: Path, workspace: Path, openai_server: OpenAIServer
) -> None:
    """A line sent while the answer streams shows as queued and goes when the turn
    ends; Esc takes it back into the box first. Then Esc Esc on the empty prompt opens
    the rewind picker, ``/fork`` and ``/rewind 1`` switch to the new session."""
    release = threading.Event()
    answers = iter(["FIRST-ANSWER " * 20, "SECOND-ANSWER", "FORKED-ANSWER"])

    def responder(body: dict[str, Any]) -> Reply:
        text = next(answers, "MORE")
        hold = release if text.startswith("FIRST") else None
        return Reply(text=text, hold=hold, hold_after=4)

    openai_server.respond_with(responder)
    pane = start_cairn(tmp_path, openai_server, workspace)
    try:
        pane.wait_for("Ask Cairn")
        pane.type("first question")
        pane.wait_for("⠋")  # the spinner: the answer streams and waits
        pane.type("second question")
        capture("queued.txt", pane.wait_for("queued › second question   (Esc edits)"))
        pane.send("Escape")
        screen = pane.wait_for(lambda s: "queued ›" not in s and "▊ second question" in s)
        assert "interrupted" not in screen  # taken back, not cancelled
        pane.send("Enter")  # queued again
        pane.wait_for("queued › second question")
        release.set()
        screen = pane.wait_for(lambda s: "SECOND-ANSWER" in s and "queued ›" not in s)
        assert screen.index("FIRST-ANSWER") < screen.index("› second question")
        assert "interrupted" not in screen

        pane.send("Escape")
        pane.wait_for("Press Esc again to rewind")
        pane.send("Escape")
        pane.wait_for("Rewind to before a prompt")
        pane.wait_for("2. second question")
        pane.send("Enter")  # the latest; no file changed since, so no question
        screen = pane.wait_for("rewound: new session")
        assert "▊ second question" in screen  # back in the box
        pane.send("C-u")  # the box emptied for the next command
        pane.type("/fork")
        pane.wait_for("this is the copy")
        pane.type("/rewind 1")
        screen = pane.wait_for("rewound to before prompt 1")
        assert "▊ first question" in screen
        pane.send("C-d")
        assert "cairn exited 0" in pane.wait_for("cairn exited")
    finally:
        release.set()
        pane.close()
    stderr = cairn_stderr(workspace)
    assert "Traceback" not in stderr, stderr


def test_the_meter_past_the_budget_says_the_context_is_full_in_the_real_terminal(
    tmp_path: Path, workspace: Path, openai_server: OpenAIServer
) -> None:
    """A server that reports no usage, a 4,096-token window and a long answer: the
    estimate is past the budget, so the footer says the next request compacts first
    instead of ``~4,297 / 4,096 (104%)``."""
    detail = " ".join(f"Step {i}: the ledger balances." for i in range(700))
    openai_server.respond_with(lambda body: Reply(text=f"{detail} END", omit_usage=True))
    pane = start_cairn(tmp_path, openai_server, workspace, CAIRN_CONTEXT_WINDOW="4096")
    try:
        screen = pane.wait_for("Ask Cairn")
        assert re.search(r"context ~[\d,]+ / [\d,]+ tokens", screen)  # under it: a number
        pane.type("Tell me everything")
        screen = pane.wait_for("context full · compacts before the next request")
        assert not re.search(r"context ~?[\d,]+ / ", screen)
        pane.send("C-d")
        assert "cairn exited 0" in pane.wait_for("cairn exited")
    finally:
        pane.close()
    stderr = cairn_stderr(workspace)
    assert "Traceback" not in stderr, stderr
