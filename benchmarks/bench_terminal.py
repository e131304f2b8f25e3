"""Benchmark the terminal agent's resume: a session of 10,000 messages against one of 100.

Run from the repository root::

    .venv/bin/python benchmarks/bench_terminal.py

For each size, a real transcript is written through the JSONL store, then
timed from ``AgentSession.resume`` to the app's first settled screen
(``App.run_test`` and one ``pilot.pause()``, headless): opening the session
(the store scans back to its last checkpoint), reading the last page of the
UI view (``AgentSession.ui_page``, at most 300 entries: the store still
streams the whole file to find them, holding only the page), building the
app's entries from that page, and mounting what is rendered — the latest 30
whatever the size. Best of ``--repeat`` runs.

Writes ``benchmarks/results/terminal.json`` (per size: the best time, the
entries the app held and the widgets it mounted). The figure to read is the
ratio of the two sizes, measured side by side in one run: reading one page
and rendering only the latest 30 keep it far below the 100× growth of the
message count; what still grows with the size is the file the store reads.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import platform
import tempfile
import time
from pathlib import Path

from cairn import AgentSession
from cairn.agent.runtime import Runtime
from cairn.agent.settings import Settings
from cairn.messages import assistant, user
from cairn.provider import ModelConfig, OpenAIProvider
from cairn.store import JsonlStoreFactory, MessageRecord, SessionRecord
from cairn.surfaces.terminal import CairnApp
from cairn.surfaces.terminal.widgets import MessageList

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = REPO_ROOT / "benchmarks" / "results" / "terminal.json"
SIZES = (100, 10_000)


def _write_session(root: Path, messages: int) -> tuple[Path, Path]:
    workspace, home = root / "ws", root / "home"
    workspace.mkdir()
    with JsonlStoreFactory(home).create(workspace, SessionRecord("s", str(workspace))) as store:
        for n in range(messages // 2):
            store.append(MessageRecord(user(f"question {n}: what does line {n} of the log say?")))
            store.append(MessageRecord(assistant(f"Line {n} says the build passed. " * 4)))
    return workspace, home


def _resume_seconds(workspace: Path, home: Path) -> tuple[float, int, int]:
    """The time to the first settled screen, the entries the app held, the widgets mounted."""
    model = ModelConfig(model="m", base_url="http://127.0.0.1:9/v1", context_window=32_768)
    rt = Runtime(workspace, model, OpenAIProvider(model), settings=Settings(), home=home)
    held = rendered = 0

    async def first_screen() -> None:
        nonlocal held, rendered
        agent = AgentSession.resume(rt, "s")
        app = CairnApp(rt, agent)
        async with app.run_test() as pilot:
            await pilot.pause()
            held = len(app.transcript.entries)
            rendered = len(app.query_one(MessageList).mounted())

    start = time.perf_counter()
    asyncio.run(first_screen())
    elapsed = time.perf_counter() - start
    rt.close()
    return elapsed, held, rendered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()
    sizes: dict[str, dict[str, float | int]] = {}
    for size in SIZES:
        runs: list[float] = []
        held = rendered = 0
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as tmp:
                workspace, home = _write_session(Path(tmp), size)
                seconds, held, rendered = _resume_seconds(workspace, home)
                runs.append(seconds)
        sizes[str(size)] = {"best_s": round(min(runs), 4), "held": held, "rendered": rendered}
        print(
            f"{size:>6} messages: resume to first screen {min(runs):.3f} s,"
            f" {held} held, {rendered} rendered"
        )
    small, large = (sizes[str(s)]["best_s"] for s in SIZES)
    ratio = round(float(large) / float(small), 2)
    print(f"10,000 / 100 messages: {ratio}× the time for 100× the messages")
    result = {
        "benchmark": "terminal resume",
        "date": dt.date.today().isoformat(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "repeat": args.repeat,
        "sizes": sizes,
        "ratio_10000_to_100": ratio,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
