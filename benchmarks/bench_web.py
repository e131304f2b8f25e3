"""Browser UI benchmark: what a ``list`` costs the server's event loop, before and after.

Run from the repository root::

    .venv/bin/python benchmarks/bench_web.py

At 50, 200 and 500 stored sessions (JSONL, each a realistic short session of
about 40 messages), side by side in one run:

* ``on_loop_ms`` — ``Runtime.list_sessions()``, the listing the server used
  to run on its event loop: every pane of every page waited this long for
  each ``list`` frame (median of ``REPEATS``);
* ``lag_cold_ms`` / ``lag_warm_ms`` — the longest the event loop went
  without running a 1 ms ticker while ``SessionList.listing()`` read the
  store on its worker thread, first with nothing known, then with every
  digest kept (the sessions are quiet: only their stat is read);
* ``listing_cold_ms`` / ``listing_warm_ms`` — how long those listings took;
* ``flood_reads`` / ``flood_ms`` — 2,000 ``listing()`` calls at once (a page
  that floods ``list`` frames): how many times the store was read, and how
  long until all were answered.

Ratios: ``on_loop ÷ lag_cold`` (how much less the loop is held up) and
``warm ÷ cold`` (what the kept digests save). No targets: the figures are
for the closing notes and ``docs/benchmarks.md``.
"""

from __future__ import annotations

import asyncio
import json
import platform
import random
import statistics
import tempfile
import time
from collections.abc import Awaitable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from _markdown import update_section
from bench_transcript import SEED, Generator
from cairn.agent.runtime import Runtime
from cairn.provider import ModelConfig, OpenAIProvider
from cairn.store import JsonlTranscriptStore, MessageRecord, SessionRecord
from cairn.store.paths import new_session_id, session_path
from cairn.surfaces.web import listing as listing_module
from cairn.surfaces.web.listing import SessionList

RESULTS = Path(__file__).resolve().parent / "results" / "web.json"
SIZES = (50, 200, 500)
MESSAGES = 40
REPEATS = 5
FLOOD = 2_000
TICK_S = 0.001


def write_sessions(home: Path, workspace: Path, count: int) -> None:
    gen = Generator(random.Random(SEED))
    for _ in range(count):
        session_id = new_session_id()
        path = session_path(workspace, session_id, home)
        path.parent.mkdir(parents=True, exist_ok=True)
        store = JsonlTranscriptStore.create(path, SessionRecord(session_id, str(workspace)))
        try:
            written, prompt_tokens = 0, 4_000
            while written < MESSAGES:
                call = gen.call()
                prompt_tokens += 800
                for message in (
                    gen.user(),
                    gen.assistant((call,), prompt_tokens),
                    gen.result(call),
                    gen.assistant((), prompt_tokens),
                ):
                    store.append(MessageRecord(message))
                    written += 1
            store.sync()
        finally:
            store.close()


async def loop_lag(work: Awaitable[Any]) -> tuple[float, float]:
    """Run ``work``; the longest gap between ticks of a 1 ms ticker meanwhile, and its time."""
    longest = 0.0
    done = False

    async def ticker() -> None:
        nonlocal longest
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(TICK_S)
            now = time.perf_counter()
            longest = max(longest, now - last - TICK_S)
            last = now

    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(TICK_S)  # the ticker is running before the work starts
    start = time.perf_counter()
    await work
    elapsed = time.perf_counter() - start
    done = True
    await ticking
    return longest, elapsed


def measure(home: Path, workspace: Path, count: int) -> dict[str, float | int]:
    model = ModelConfig(model="bench", base_url="http://127.0.0.1:9/v1", context_window=32_768)
    provider = OpenAIProvider(model)

    def runtime() -> Runtime:
        return Runtime(workspace, model, provider, home=home)

    def on_loop() -> float:
        held = runtime()
        try:
            start = time.perf_counter()
            listed = held.list_sessions()
            elapsed = time.perf_counter() - start
        finally:
            held.close()
        assert len(listed) == count, (len(listed), count)
        return elapsed

    on_loop_s = statistics.median(on_loop() for _ in range(REPEATS))

    async def listings() -> dict[str, float | int]:
        sessions = SessionList(runtime)
        lag_cold, cold = await loop_lag(sessions.listing())
        lag_warm, warm = await loop_lag(sessions.listing())
        reads = 0
        real_read = sessions._read

        def counted() -> list[Any]:
            nonlocal reads
            reads += 1
            return real_read()

        sessions._read = counted  # type: ignore[method-assign]
        start = time.perf_counter()
        answers = await asyncio.gather(*(sessions.listing() for _ in range(FLOOD)))
        flood = time.perf_counter() - start
        assert all(len(a) == count for a in answers)
        return {
            "lag_cold_ms": lag_cold * 1e3,
            "lag_warm_ms": lag_warm * 1e3,
            "listing_cold_ms": cold * 1e3,
            "listing_warm_ms": warm * 1e3,
            "flood_reads": reads,
            "flood_ms": flood * 1e3,
        }

    figures = asyncio.run(listings())
    return {"sessions": count, "on_loop_ms": on_loop_s * 1e3, **figures}


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "## Browser UI: listing sessions (`benchmarks/bench_web.py`)",
        "",
        f"Run {results['timestamp']}, Python {results['python']}. `on loop`: the listing "
        "the server used to run on its event loop (every page waited that long); `lag`: the "
        "longest the loop went without running a 1 ms ticker while `SessionList` read the "
        "store on its thread; `warm`: every digest kept. "
        f"Flood: {FLOOD:,} `listing()` calls at once.",
        "",
        "| sessions | on loop ms | lag cold ms | lag warm ms | on loop ÷ lag cold "
        "| listing cold ms | listing warm ms | warm ÷ cold | flood reads | flood ms |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results["sizes"]:
        lines.append(
            f"| {row['sessions']} | {row['on_loop_ms']:.1f} | {row['lag_cold_ms']:.2f} "
            f"| {row['lag_warm_ms']:.2f} | {row['on_loop_over_lag_cold']:.0f}× "
            f"| {row['listing_cold_ms']:.1f} | {row['listing_warm_ms']:.1f} "
            f"| {row['warm_over_cold']:.3f} | {row['flood_reads']} | {row['flood_ms']:.1f} |"
        )
    return "\n".join(lines)


def main() -> int:
    console = Console()
    rows = []
    with tempfile.TemporaryDirectory(prefix="cairn-web-") as tmp:
        for count in SIZES:
            home, workspace = Path(tmp) / f"home-{count}", Path(tmp) / f"ws-{count}"
            workspace.mkdir()
            console.print(f"web listing: {count} sessions …")
            write_sessions(home, workspace, count)
            time.sleep(listing_module.SETTLED_S + 0.1)  # quiet sessions: their digests are kept
            row = measure(home, workspace, count)
            row["on_loop_over_lag_cold"] = float(row["on_loop_ms"]) / max(
                float(row["lag_cold_ms"]), 1e-3
            )
            row["warm_over_cold"] = float(row["listing_warm_ms"]) / float(row["listing_cold_ms"])
            rows.append(row)
    results = {
        "benchmark": "web",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "sizes": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    update_section("web", markdown(results))
    table = Table(title="cairn web: listing sessions")
    for name in ("sessions", "on loop ms", "lag cold ms", "lag warm ms", "on loop ÷ lag"):
        table.add_column(name, justify="right")
    for name in ("cold ms", "warm ms", "warm ÷ cold", "flood reads", "flood ms"):
        table.add_column(name, justify="right")
    for row in rows:
        table.add_row(
            str(row["sessions"]),
            f"{row['on_loop_ms']:.1f}",
            f"{row['lag_cold_ms']:.2f}",
            f"{row['lag_warm_ms']:.2f}",
            f"{row['on_loop_over_lag_cold']:.0f}×",
            f"{row['listing_cold_ms']:.1f}",
            f"{row['listing_warm_ms']:.1f}",
            f"{row['warm_over_cold']:.3f}",
            str(row["flood_reads"]),
            f"{row['flood_ms']:.1f}",
        )
    console.print(table)
    console.print(f"results: {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
