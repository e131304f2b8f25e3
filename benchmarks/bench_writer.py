"""Transcript writer benchmark: memory bounded by the API view, resume bounded by the tail.

    python benchmarks/bench_writer.py

Two figures, each a ratio of two sizes measured side by side in one run:

1. **Peak RSS of a writer** appending 10,000 and then 100,000 messages of a
   realistic session (the content of ``bench_transcript.py``: tool results of
   a few KB, a compaction every ~600 KB, about 150k tokens). Each size runs in
   a fresh subprocess that reports its own ``ru_maxrss``; the baseline (the
   interpreter and Cairn imported, before the first record) is reported too.
   Target: 100,000 ÷ 10,000 < 1.5. The store keeps the API view and the
   records since the last checkpoint, never the transcript.
2. **Resume time against the history before the last checkpoint**: two
   sessions with the same 2,000 messages after their last checkpoint, one
   with 10,000 messages before it and one with 100,000. ``JsonlTranscriptStore.open``
   (the writer's open: header, backward scan, parse of what follows),
   best of 9. Target: the ratio stays near 1 (≤ 1.5), where reading the whole
   file (``read_transcript``, also timed) grows with the history.
3. **What a session picker reads** of the same two sessions
   (``describe_transcript``: the first prompt and the message count, which
   ``Runtime.list_sessions`` shows), best of 9. Target ≤ 1.5 too; before it,
   the picker read every session whole (the ``read_transcript`` row).

Writes ``benchmarks/results/writer.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import gc
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from _markdown import update_section
from bench_transcript import COMPACT_EVERY_BYTES, SEED, Generator, _compaction
from cairn.store import (
    JsonlTranscriptStore,
    MessageRecord,
    SessionRecord,
    describe_transcript,
    new_session_id,
    read_transcript,
)

RESULTS = Path(__file__).resolve().parent / "results" / "writer.json"
RSS_SIZES = (10_000, 100_000)
RSS_TARGET = 1.5
RESUME_BEFORE = (10_000, 100_000)
RESUME_AFTER = 2_000
RESUME_TARGET = 1.5
REPEATS = 9


def write_session(
    path: Path, messages: int, *, compact: bool = True, rng_seed: int = SEED
) -> dict[str, int]:
    """Append ``messages`` messages of a realistic session, compacting every ~600 KB."""
    gen = Generator(random.Random(rng_seed))
    store = JsonlTranscriptStore.create(path, SessionRecord(new_session_id(), "/bench"))
    written = compactions = 0
    prompt_tokens = 4_000
    since = 0
    try:
        while written < messages:
            round_ = [gen.user()]
            for _ in range(gen.rng.randint(1, 4)):
                calls = tuple(gen.call() for _ in range(2 if gen.rng.random() < 0.25 else 1))
                prompt_tokens += gen.rng.randint(300, 2_000)
                round_.append(gen.assistant(calls, prompt_tokens))
                round_ += [gen.result(call) for call in calls]
            round_.append(gen.assistant((), prompt_tokens))
            for message in round_[: messages - written]:
                store.append(MessageRecord(message))
                since += len(message.text)
            written += min(len(round_), messages - written)
            store.sync()
            if compact and since >= COMPACT_EVERY_BYTES:
                store.save_compaction(_compaction(store.api_view.messages, prompt_tokens))
                compactions += 1
                prompt_tokens, since = 12_000, 0
    finally:
        store.close()
    return {"messages": written, "compactions": compactions, "file_bytes": path.stat().st_size}


def child_rss(messages: int) -> None:
    """In a fresh process: write a session, print the peak RSS before and after (JSON)."""
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with tempfile.TemporaryDirectory(prefix="cairn-writer-") as tmp:
        info = write_session(Path(tmp) / "s.jsonl", messages)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(orjson.dumps({**info, "baseline_kib": baseline, "peak_kib": peak}).decode())


def measure_rss(messages: int) -> dict[str, int]:
    done = subprocess.run(
        [sys.executable, __file__, "--child-rss", str(messages)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parent,
    )
    result: dict[str, int] = orjson.loads(done.stdout.strip().splitlines()[-1])
    return result


def resume_session(path: Path, before: int) -> dict[str, int]:
    """``before`` messages, a last checkpoint, then ``RESUME_AFTER`` messages."""
    history = write_session(path, before)
    store = JsonlTranscriptStore.open(path)
    gen = Generator(random.Random(SEED + 1))
    try:
        store.save_compaction(_compaction(store.api_view.messages, 100_000))
        written = 0
        while written < RESUME_AFTER:
            call = gen.call()
            for message in (gen.user(), gen.assistant((call,), 20_000), gen.result(call)):
                store.append(MessageRecord(message))
            written += 3
    finally:
        store.close()
    return {**history, "after": written, "file_bytes": path.stat().st_size}


def best_of(repeats: int, action: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - start)
    return best


def open_and_close(path: Path) -> None:
    JsonlTranscriptStore.open(path).close()


def markdown(results: dict[str, Any]) -> str:
    """The section of ``docs/benchmarks.md`` this benchmark owns."""
    small, large = (results["rss"][str(size)] for size in RSS_SIZES)
    first, second = (results["resume"][str(before)] for before in RESUME_BEFORE)
    return "\n".join(
        [
            "# Transcript writer: memory and resume",
            "",
            f"Generated by `benchmarks/bench_writer.py` on {results['timestamp']} "
            f"(Python {results['python']}); raw figures in `benchmarks/results/writer.json`.",
            "",
            "| measure | smaller | larger | larger ÷ smaller |",
            "|---|---:|---:|---:|",
            f"| writer peak RSS, {small['messages']:,} vs {large['messages']:,} messages "
            f"({small['compactions']} vs {large['compactions']} compactions, "
            f"{small['file_mb']} vs {large['file_mb']} MB) | {small['peak_mb']} MB | "
            f"{large['peak_mb']} MB | **{results['rss_ratio']}** "
            f"(target < {results['rss_target']:g}: {results['rss_verdict']}) |",
            f"| of which the interpreter and imports | {small['baseline_mb']} MB | "
            f"{large['baseline_mb']} MB | |",
            f"| open (resume), {first['messages_before']:,} vs {second['messages_before']:,} "
            f"messages before the last checkpoint, {first['messages_after']:,} after | "
            f"{first['open_ms']} ms | {second['open_ms']} ms | **{results['open_ratio']}** "
            f"(target ≤ {results['resume_target']:g}: {results['resume_verdict']}) |",
            f"| reading the whole file (`read_transcript`) | {first['read_whole_ms']} ms | "
            f"{second['read_whole_ms']} ms | {results['read_whole_ratio']} |",
            f"| a session picker's line (`describe_transcript`) | {first['describe_ms']} ms | "
            f"{second['describe_ms']} ms | **{results['describe_ratio']}** "
            f"(target ≤ {results['resume_target']:g}: {results['describe_verdict']}) |",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child-rss", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_rss:
        child_rss(args.child_rss)
        return 0
    console = Console()
    rss = {}
    for size in RSS_SIZES:
        console.print(f"writer RSS: {size:,} messages in a fresh process …")
        rss[size] = measure_rss(size)
    small, large = (rss[s] for s in RSS_SIZES)
    rss_ratio = large["peak_kib"] / small["peak_kib"]

    resume: dict[int, dict[str, float | int]] = {}
    with tempfile.TemporaryDirectory(prefix="cairn-resume-") as tmp:
        for before in RESUME_BEFORE:
            console.print(f"resume: {before:,} messages before the last checkpoint …")
            path = Path(tmp) / f"before-{before}.jsonl"
            info = resume_session(path, before)
            open_s = best_of(REPEATS, partial(open_and_close, path))
            whole_s = best_of(REPEATS, partial(read_transcript, path))
            describe_s = best_of(REPEATS, partial(describe_transcript, path))
            resume[before] = {
                **info,
                "open_s": open_s,
                "read_whole_s": whole_s,
                "describe_s": describe_s,
            }
    first, second = (resume[b] for b in RESUME_BEFORE)
    open_ratio = float(second["open_s"]) / float(first["open_s"])
    whole_ratio = float(second["read_whole_s"]) / float(first["read_whole_s"])
    describe_ratio = float(second["describe_s"]) / float(first["describe_s"])

    results = {
        "benchmark": "writer",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "rss": {
            str(size): {
                "messages": info["messages"],
                "compactions": info["compactions"],
                "file_mb": round(info["file_bytes"] / 1e6, 1),
                "baseline_mb": round(info["baseline_kib"] / 1024, 1),
                "peak_mb": round(info["peak_kib"] / 1024, 1),
            }
            for size, info in rss.items()
        },
        "rss_ratio": round(rss_ratio, 3),
        "rss_target": RSS_TARGET,
        "rss_verdict": "PASS" if rss_ratio < RSS_TARGET else "MISS",
        "resume": {
            str(before): {
                "messages_before": info["messages"],
                "messages_after": info["after"],
                "file_mb": round(float(info["file_bytes"]) / 1e6, 1),
                "open_ms": round(float(info["open_s"]) * 1000, 2),
                "read_whole_ms": round(float(info["read_whole_s"]) * 1000, 1),
                "describe_ms": round(float(info["describe_s"]) * 1000, 2),
            }
            for before, info in resume.items()
        },
        "resume_repeats": REPEATS,
        "open_ratio": round(open_ratio, 3),
        "read_whole_ratio": round(whole_ratio, 3),
        "resume_target": RESUME_TARGET,
        "resume_verdict": "PASS" if open_ratio <= RESUME_TARGET else "MISS",
        "describe_ratio": round(describe_ratio, 3),
        "describe_verdict": "PASS" if describe_ratio <= RESUME_TARGET else "MISS",
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2) + b"\n")
    update_section("writer", markdown(results))

    table = Table(title="Transcript writer — memory and resume")
    table.add_column("measure")
    table.add_column(f"{RSS_SIZES[0]:,} / {RESUME_BEFORE[0]:,}", justify="right")
    table.add_column(f"{RSS_SIZES[1]:,} / {RESUME_BEFORE[1]:,}", justify="right")
    table.add_column("ratio", justify="right")
    table.add_row(
        "writer peak RSS (MB)",
        f"{small['peak_kib'] / 1024:.1f}",
        f"{large['peak_kib'] / 1024:.1f}",
        f"{rss_ratio:.3f} {results['rss_verdict']}",
    )
    table.add_row(
        "  of which baseline (MB)",
        f"{small['baseline_kib'] / 1024:.1f}",
        f"{large['baseline_kib'] / 1024:.1f}",
        "",
    )
    table.add_row(
        "open (resume), ms",
        f"{float(first['open_s']) * 1000:.2f}",
        f"{float(second['open_s']) * 1000:.2f}",
        f"{open_ratio:.3f} {results['resume_verdict']}",
    )
    table.add_row(
        "read the whole file, ms",
        f"{float(first['read_whole_s']) * 1000:.1f}",
        f"{float(second['read_whole_s']) * 1000:.1f}",
        f"{whole_ratio:.3f}",
    )
    table.add_row(
        "a picker's line (describe), ms",
        f"{float(first['describe_s']) * 1000:.2f}",
        f"{float(second['describe_s']) * 1000:.2f}",
        f"{describe_ratio:.3f} {results['describe_verdict']}",
    )
    console.print(table)
    console.print(f"results written to {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
