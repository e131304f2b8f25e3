"""Drive the real ``cairn`` in tmux against the real local model for a while, like a user.

    .venv/bin/python scripts/terminal_soak.py MODEL.gguf --minutes 30

It starts llama.cpp's server (SmolLM2, an 8,192-token window, so compactions
come often), opens ``cairn`` in a tmux window and, until the time is up,
types what a person would: short questions, long pasted reports, ``/compact``
with instructions, ``/status``, an Esc in the middle of an answer, a
``/clear`` and a ``/resume``, and a quit and ``--continue`` now and then. After
every step it reads the screen: the prompt box must be back (the app is
alive) and nothing may say ``Traceback``. At the end the transcripts must load
(``cairn inspect`` exits 0) and the figures go to
``benchmarks/results/terminal_soak.json``. It needs the ``e2e`` extra and tmux.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CAIRN = REPO / ".venv" / "bin" / "cairn"
RESULTS = REPO / "benchmarks" / "results" / "terminal_soak.json"
REPORT = (
    "The nightly build of the invoice service ran the full test matrix again. "
    "Worker {n} reported its timings, the cache hit rate and the slowest steps. "
)
QUESTIONS = (
    "What does calc.py do?",
    "Which step of the build was the slowest?",
    "Summarize what we found so far in two sentences.",
    "What should we fix first?",
    "Read calc.py and tell me whether add() is right.",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Window:
    def __init__(self, socket_path: Path) -> None:
        tmux = shutil.which("tmux")
        if tmux is None:
            sys.exit("terminal_soak: tmux is not installed")
        self.base = [tmux, "-S", str(socket_path)]

    def start(self, command: str, cwd: Path) -> None:
        # Right after kill-server the old server may still hold the socket: try again.
        for _ in range(20):
            done = subprocess.run(
                [*self.base, "new-session", "-d", "-x", "120", "-y", "40", "-c", str(cwd), command],
                capture_output=True,
                text=True,
            )
            if done.returncode == 0:
                return
            time.sleep(0.5)
        raise RuntimeError(f"tmux new-session failed 20 times: {done.stderr.strip()}")

    def screen(self) -> str:
        return subprocess.run(
            [*self.base, "capture-pane", "-p"], capture_output=True, text=True
        ).stdout

    def type(self, text: str) -> None:
        subprocess.run([*self.base, "send-keys", "-l", text], check=True)
        subprocess.run([*self.base, "send-keys", "Enter"], check=True)

    def key(self, key: str) -> None:
        subprocess.run([*self.base, "send-keys", key], check=True)

    def wait(self, check: object, polls: int = 3_600) -> bool:
        held = 0
        for _ in range(polls):
            # Twice in a row: a screen between two frames can look idle.
            held = held + 1 if callable(check) and check(self.screen()) else 0
            if held == 2:
                return True
            time.sleep(0.25)
        return False

    def kill(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True)


def idle(screen: str) -> bool:
    # No spinner, no compaction hint, and the prompt box is empty (its placeholder shows).
    return (
        "Ask Cairn" in screen
        and "✻ Compacting" not in screen
        and not re.search(r"[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏]", screen)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="cairn-soak-"))
    workspace, home = root / "ws", root / "home"
    workspace.mkdir()
    (workspace / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(args.model), "--host",
         "127.0.0.1", "--port", str(port), "--n_ctx", "8192", "--model_alias", "smollm2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    for _ in range(240):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)
            break
        except OSError:
            time.sleep(0.5)
    env = {
        "CAIRN_MODEL": "smollm2",
        "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1",
        "OPENAI_API_KEY": "local",
        "CAIRN_CONTEXT_WINDOW": "8192",
        "CAIRN_HOME": str(home),
        "TERM": "xterm-256color",
    }
    cleared = [k for k in os.environ if k.startswith(("CAIRN_", "OPENAI_"))]
    stderr = root / "cairn.stderr"

    def command(*flags: str) -> str:
        return " ".join(
            [
                "env",
                *(f"-u {shlex.quote(k)}" for k in cleared),
                *(f"{k}={shlex.quote(v)}" for k, v in env.items()),
                shlex.quote(str(CAIRN)),
                *flags,
                f"2>>{shlex.quote(str(stderr))}; echo cairn exited $?; sleep 3600",
            ]
        )

    window = Window(root / "tmux.sock")
    counts = {"prompts": 0, "pastes": 0, "compact_commands": 0, "cancels": 0, "clears": 0}
    counts |= {"resumes": 0, "restarts": 0, "refused": 0, "stuck": 0}
    counts |= {"tracebacks": 0, "traceback_screens": 0, "bad_exits": 0}
    window.start(command(), workspace)
    started = time.monotonic()
    #: (seconds in, the screen's last lines) before each step: the log of the run.
    steps: list[tuple[int, str]] = []
    deadline = started + args.minutes * 60
    try:
        window.wait(idle)
        while time.monotonic() < deadline:
            steps.append((round(time.monotonic() - started), window.screen()[-400:]))
            roll = rng.random()
            if roll < 0.40:
                window.type(rng.choice(QUESTIONS))
                counts["prompts"] += 1
            elif roll < 0.65:
                report = "".join(REPORT.format(n=n) for n in range(rng.randint(10, 40)))
                window.type(report + "What failed?")
                counts["pastes"] += 1
            elif roll < 0.75:
                window.type("/compact keep the build failures and the open question")
                counts["compact_commands"] += 1
            elif roll < 0.83:
                window.type("Write a long story about the build server.")
                time.sleep(rng.uniform(0.5, 3.0))
                window.key("Escape")
                counts["cancels"] += 1
            elif roll < 0.88:
                window.type("/status")
            elif roll < 0.92:
                window.type("/clear")
                counts["clears"] += 1
            elif roll < 0.96:
                window.type("/resume")
                if window.wait(lambda s: "Resume a session" in s, polls=40):
                    window.key("Enter")
                counts["resumes"] += 1
            else:
                window.key("C-d")
                if not window.wait(lambda s: "cairn exited" in s, polls=120):
                    counts["stuck"] += 1
                    (root / f"stuck-screen-{counts['stuck']}.txt").write_text(window.screen())
                screen = window.screen()
                if "cairn exited 0" not in screen:
                    counts["bad_exits"] += 1
                window.kill()
                window.start(command("--continue"), workspace)
                counts["restarts"] += 1
            if not window.wait(idle):
                screen = window.screen()
                if "wait for it" in screen and "Ask Cairn" not in screen:
                    # Sent while the agent worked: refused, and kept in the box. Clear it.
                    counts["refused"] += 1
                    window.key("C-c")
                if not window.wait(idle):
                    # Not back after 30 minutes in all: kept for a look.
                    counts["stuck"] += 1
                    (root / f"stuck-screen-{counts['stuck']}.txt").write_text(window.screen())
                    window.key("Escape")
            screen = window.screen()
            if "Traceback" in screen:
                # Kept for a look: the app draws none, but a model can write the word.
                counts["traceback_screens"] += 1
                (root / f"traceback-screen-{counts['traceback_screens']}.txt").write_text(screen)
        window.key("C-d")
        window.wait(lambda s: "cairn exited" in s, polls=120)
    finally:
        window.kill()
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()  # llama.cpp's server can outlive a SIGTERM
            server.wait()
    minutes = round((time.monotonic() - started) / 60, 1)
    (root / "steps.log").write_text(
        "".join(f"--- {at} s ---\n{screen}\n" for at, screen in steps), encoding="utf-8"
    )
    errors = stderr.read_text(errors="replace") if stderr.exists() else ""
    counts["tracebacks"] = errors.count("Traceback")  # cairn's own stderr
    sessions = sorted(home.rglob("*.jsonl"))
    unreadable = [
        p.name
        for p in sessions
        if subprocess.run([str(CAIRN), "inspect", str(p)], capture_output=True).returncode != 0
    ]
    compactions = sum(p.read_text(errors="replace").count('"type":"compaction"') for p in sessions)
    result = {
        "benchmark": "terminal soak (real cairn in tmux, SmolLM2-135M behind llama.cpp, 8k window)",
        "date": dt.date.today().isoformat(),
        "minutes": minutes,
        "seed": args.seed,
        **counts,
        "compactions_written": compactions,
        "sessions": len(sessions),
        "unreadable_sessions": unreadable,
    }
    RESULTS.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2, ensure_ascii=False))
    bad = counts["tracebacks"] or counts["traceback_screens"] or counts["stuck"]
    bad = bad or counts["bad_exits"] or unreadable
    if bad:
        print(f"kept for a look: {root} (cairn's stderr: {stderr})", file=sys.stderr)
        print(errors[-4000:], file=sys.stderr)
        return 1
    print(f"the run's screens before each step: {root / 'steps.log'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
