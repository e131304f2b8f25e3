"""Store benchmark: append and checkpoint latency, the JSONL store against the PostgreSQL store.

    python benchmarks/bench_store.py        # needs Debian's postgresql (make postgresql)

Both stores are measured side by side in one run, in alternating blocks (the
order flips every block, which evens out drift: CPU clocks, the page cache,
the other work on the machine), on the same records:

1. Append latency of a typical message record (a user prompt, an assistant
   turn with a tool call and usage, a tool result of 1–6 KB, as in
   ``bench_transcript.py``), ``APPENDS`` calls per store:
   - JSONL, the default: the line reaches the OS (survives the process, not a
     power cut);
   - JSONL with ``fsync_every_record``: durable before ``append`` returns;
   - PostgreSQL with the server's default ``synchronous_commit = on``: each
     record is one transaction, flushed to the server's disk before
     ``append`` returns;
   - PostgreSQL with ``synchronous_commit = off`` (set in the URL): committed,
     but flushed by the server a moment later (``sync()`` flushes it).
2. Checkpoint latency: ``save_compaction`` of a realistic checkpoint (the
   ledger and the kept rounds, about 12k tokens: 48 KB of replacement
   messages), ``CHECKPOINTS`` per store; both stores make it durable (fsync;
   a synchronous commit) before returning.

3. Follow latency: from ``append`` returning in the writer to the record
   reaching a follower (``StoreFactory.follow``) in another process,
   ``FOLLOWED`` records a few milliseconds apart (a random gap, so the JSONL
   follower's 0.1 s poll is met at every phase): LISTEN/NOTIFY against a
   file polled for new lines. Both processes read ``CLOCK_MONOTONIC``, one
   clock for the whole machine.

The PostgreSQL server is a throwaway one, started by the tests' own code
(``tests/support/postgres_server.py``): PostgreSQL's defaults (``fsync`` on), reached
through a Unix socket. The targets — PostgreSQL append p99 ≤ 5 ms (a record
per message must go unnoticed beside a model's reply) and checkpoint p99 ≤
50 ms — are printed as PASS/MISS, never enforced: these machines are noisy.
Writes ``benchmarks/results/store.json`` and prints a table.
"""

from __future__ import annotations

import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import orjson
import psycopg
from rich.console import Console
from rich.table import Table

from _markdown import update_section
from bench_transcript import Generator, _compaction
from cairn.messages import Message, group_rounds
from cairn.store import (
    CompactionRecord,
    JsonlStoreFactory,
    MessageRecord,
    SessionRecord,
    StoreFactory,
    TranscriptStore,
    new_session_id,
)
from cairn.store.postgres import PostgresStoreFactory
from cairn.store.records import encode_line

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.postgres_server import PostgresServer, ServerMissingError

APPENDS = 2_000
CHECKPOINTS = 200
BLOCK = 100
#: Replacement messages of a realistic checkpoint: about 12k tokens at ~4 bytes a token.
CHECKPOINT_BYTES = 48_000
WARMUP = 20
SEED = 20_251_201
APPEND_P99_TARGET_MS = 5.0
CHECKPOINT_P99_TARGET_MS = 50.0
RESULTS = Path(__file__).resolve().parent / "results" / "store.json"

T = TypeVar("T")

FOLLOWED = 100
#: The follower: prints ``seq monotonic_ns`` for each record, until the last one.
FOLLOWER = """
import sys, time
from pathlib import Path
from cairn.store.selection import open_store_factory
url, home, workspace, session_id, last = sys.argv[1:]
factory = open_store_factory(url or None, Path(home))
for seq, _ in factory.follow(Path(workspace), session_id, timeout=60):
    print(seq, time.monotonic_ns(), flush=True)
    if seq == int(last):
        break
"""


def typical_records(n: int, seed: int) -> list[MessageRecord]:
    gen = Generator(random.Random(seed))
    records: list[MessageRecord] = []
    while len(records) < n:
        call = gen.call()
        records += [
            MessageRecord(gen.user()),
            MessageRecord(gen.assistant((call,), 30_000)),
            MessageRecord(gen.result(call)),
        ]
    return records[:n]


def checkpoint(context: list[Message]) -> CompactionRecord:
    """The ledger and as many whole rounds from the end as make ``CHECKPOINT_BYTES``."""
    record = _compaction(context, 150_000)
    rounds = [r for r in group_rounds(context) if r.complete]
    kept: list[Message] = []
    size = 0
    for r in reversed(rounds):
        messages = context[r.start : r.end]
        size += sum(len(encode_line(MessageRecord(m))[0]) for m in messages)
        kept[:0] = messages
        if size >= CHECKPOINT_BYTES:
            break
    return CompactionRecord(
        record.trigger,
        record.strategy,
        record.pre_tokens,
        record.post_tokens,
        record.summary,
        (record.replacement_messages[0], *kept),
    )


class Subject:
    """One store under measurement: a session of its own, and the latencies it gave (µs)."""

    def __init__(self, name: str, factory: StoreFactory, workspace: Path) -> None:
        self.name = name
        self.store: TranscriptStore = factory.create(
            workspace, SessionRecord(new_session_id(), str(workspace))
        )
        self.appends: list[float] = []
        self.checkpoints: list[float] = []
        self.checkpoint_bytes: list[int] = []

    def append(self, records: Sequence[MessageRecord], *, measure: bool = True) -> None:
        latencies = timed(self.store.append, records)
        if measure:
            self.appends += latencies

    def compact(self, turns: Sequence[Sequence[MessageRecord]]) -> None:
        for turn in turns:
            self.append(turn, measure=False)  # the turn between two checkpoints
            record = checkpoint(self.store.api_view.messages)
            self.checkpoint_bytes.append(len(encode_line(record)[0]))
            self.checkpoints += timed(self.store.save_compaction, [record])


def follow_latency(
    factory: StoreFactory, url: str, home: Path, workspace: Path, seed: int
) -> list[float]:
    """Microseconds from each ``append`` returning to another process's follower yielding it."""
    session_id = new_session_id()
    store = factory.create(workspace, SessionRecord(session_id, str(workspace)))
    records = typical_records(FOLLOWED, seed)
    last = 1 + FOLLOWED  # the header is record 1; both stores number records alike
    argv = [url, str(home), str(workspace), session_id, str(last)]
    child = subprocess.Popen(
        [sys.executable, "-c", FOLLOWER, *argv], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    child.stdout.readline()  # the header: the follower is caught up and waiting
    rng = random.Random(seed)
    appended: dict[int, int] = {}
    for seq, record in enumerate(records, start=2):
        time.sleep(rng.uniform(0.005, 0.03))
        store.append(record)
        appended[seq] = time.monotonic_ns()
    seen: dict[int, int] = {}
    for line in child.stdout:
        number, at = line.split()
        seen[int(number)] = int(at)
    child.wait(60)
    store.close()
    return [(seen[seq] - appended[seq]) / 1_000 for seq in appended]


def timed(call: Callable[[T], None], items: Sequence[T]) -> list[float]:
    """Microseconds per ``call(item)``."""
    clock = time.perf_counter_ns
    latencies = []
    for item in items:
        start = clock()
        call(item)
        latencies.append((clock() - start) / 1_000)
    return latencies


def alternating(subjects: Sequence[Subject], block: int) -> Sequence[Subject]:
    """The subjects in the order of measurement block ``block``: flipped every other block."""
    return subjects if block % 2 == 0 else list(reversed(subjects))


def percentile(values: Sequence[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(values), q)), 1)


def markdown(results: dict[str, Any]) -> str:
    """The section of ``docs/benchmarks.md`` this benchmark owns."""
    rows = (
        [
            f"| append, {name} | {v['p50']:,.1f} | {v['p99']:,.1f} |"
            for name, v in results["append_us"].items()
        ]
        + [
            f"| save_compaction, {name} | {v['p50']:,.1f} | {v['p99']:,.1f} |"
            for name, v in results["checkpoint_us"].items()
        ]
        + [
            f"| follow (append → another process's follower), {name} | "
            f"{v['p50']:,.1f} | {v['p99']:,.1f} |"
            for name, v in results["follow_us"].items()
        ]
    )
    r = results["ratios"]
    return "\n".join(
        [
            "# Transcript stores: JSONL and PostgreSQL",
            "",
            f"Generated by `benchmarks/bench_store.py` on {results['timestamp']} "
            f"(Python {results['python']}, PostgreSQL {results['postgresql']}, "
            f"{results['server']}, {results['cpus']} CPUs); raw figures in "
            "`benchmarks/results/store.json`. Latency in µs of "
            f"{results['appends']:,} appends of typical message records (median "
            f"{results['record_bytes_p50']:,} bytes) and {results['checkpoints']:,} "
            f"checkpoints (median {results['checkpoint_bytes_p50']:,} bytes), the stores "
            "measured in alternating blocks in one run; then "
            f"{results['followed']:,} records, 5–30 ms apart, from `append` returning to "
            "a follower in another process yielding them.",
            "",
            "| measure | p50 | p99 |",
            "|---|---:|---:|",
            *rows,
            "",
            "PostgreSQL ÷ JSONL, p50 / p99: append "
            f"{r['append_p50_postgres_to_jsonl']}× / {r['append_p99_postgres_to_jsonl']}×; "
            "append against JSONL with an fsync per record "
            f"{r['append_p50_postgres_to_jsonl_fsync']}× / "
            f"{r['append_p99_postgres_to_jsonl_fsync']}× (both durable per record); "
            f"save_compaction {r['checkpoint_p50_postgres_to_jsonl']}× / "
            f"{r['checkpoint_p99_postgres_to_jsonl']}×; a follower in another process "
            f"sees a record {r['follow_p50_jsonl_to_postgres']}× / "
            f"{r['follow_p99_jsonl_to_postgres']}× later from the JSONL file (polled "
            "every 0.1 s) than through PostgreSQL's NOTIFY. Targets: append p99 ≤ "
            f"{results['append_p99_target_ms']:g} ms **{results['append_verdict']}**, "
            f"save_compaction p99 ≤ {results['checkpoint_p99_target_ms']:g} ms "
            f"**{results['checkpoint_verdict']}**.",
        ]
    )


def main() -> int:
    console = Console()
    try:
        server = PostgresServer()
    except ServerMissingError as exc:
        console.print(f"[red]{exc}[/red]")
        return 1
    with server, tempfile.TemporaryDirectory(prefix="cairn-bench-") as tmp:
        url = server.create_database("bench")
        with psycopg.connect(url) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            server_version = str(row[0]) if row else "?"
        durable = PostgresStoreFactory(url)
        relaxed = PostgresStoreFactory(url + "&options=-c%20synchronous_commit%3Doff")
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        jsonl = Subject("jsonl", JsonlStoreFactory(Path(tmp) / "a"), workspace)
        jsonl_fsync = Subject(
            "jsonl, fsync every record",
            JsonlStoreFactory(Path(tmp) / "b", fsync_every_record=True),
            workspace,
        )
        postgres = Subject("postgres", durable, workspace)
        postgres_relaxed = Subject("postgres, synchronous_commit off", relaxed, workspace)
        subjects = [jsonl, jsonl_fsync, postgres, postgres_relaxed]

        console.print(f"append: {APPENDS:,} typical message records per store …")
        records = typical_records(WARMUP + APPENDS, SEED)
        for subject in subjects:
            subject.append(records[:WARMUP], measure=False)  # caches, prepared statements
        for block, start in enumerate(range(WARMUP, WARMUP + APPENDS, BLOCK)):
            for subject in alternating(subjects, block):
                subject.append(records[start : start + BLOCK])

        console.print(f"checkpoint: {CHECKPOINTS} save_compaction calls per store …")
        turns = [typical_records(6, SEED + 1 + i) for i in range(CHECKPOINTS)]
        for block, start in enumerate(range(0, CHECKPOINTS, 10)):
            for subject in alternating([jsonl, postgres], block):
                subject.compact(turns[start : start + 10])
        for subject in subjects:
            subject.store.close()

        console.print(f"follow: {FOLLOWED} records to a follower in another process per store …")
        followed = {
            "jsonl": follow_latency(
                JsonlStoreFactory(Path(tmp) / "c"), "", Path(tmp) / "c", workspace, SEED + 2
            ),
            "postgres": follow_latency(durable, url, Path(tmp) / "d", workspace, SEED + 3),
        }
        durable.close()
        relaxed.close()

    record_bytes = [len(encode_line(r)[0]) for r in records[WARMUP:]]
    append = {
        s.name: {"p50": percentile(s.appends, 50), "p99": percentile(s.appends, 99)}
        for s in subjects
    }
    saved = {
        s.name: {"p50": percentile(s.checkpoints, 50), "p99": percentile(s.checkpoints, 99)}
        for s in (jsonl, postgres)
    }

    follow = {
        name: {"p50": percentile(values, 50), "p99": percentile(values, 99)}
        for name, values in followed.items()
    }

    def ratio(table: dict[str, dict[str, float]], a: str, b: str, q: str) -> float:
        return round(table[a][q] / table[b][q], 2)

    ratios = {
        f"append_{q}_postgres_to_jsonl": ratio(append, "postgres", "jsonl", q)
        for q in ("p50", "p99")
    }
    ratios |= {
        f"append_{q}_postgres_to_jsonl_fsync": ratio(
            append, "postgres", "jsonl, fsync every record", q
        )
        for q in ("p50", "p99")
    }
    ratios |= {
        f"checkpoint_{q}_postgres_to_jsonl": ratio(saved, "postgres", "jsonl", q)
        for q in ("p50", "p99")
    }
    ratios |= {
        f"follow_{q}_jsonl_to_postgres": ratio(follow, "jsonl", "postgres", q)
        for q in ("p50", "p99")
    }
    append_verdict = "PASS" if append["postgres"]["p99"] <= APPEND_P99_TARGET_MS * 1000 else "MISS"
    checkpoint_verdict = (
        "PASS" if saved["postgres"]["p99"] <= CHECKPOINT_P99_TARGET_MS * 1000 else "MISS"
    )
    results = {
        "benchmark": "store",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "orjson": orjson.__version__,
        "psycopg": psycopg.__version__,
        "libpq": psycopg.pq.version(),
        "postgresql": server_version,
        "server": "throwaway, PostgreSQL defaults (fsync on), Unix socket",
        "appends": APPENDS,
        "record_bytes_p50": int(np.median(record_bytes)),
        "append_us": append,
        "checkpoints": CHECKPOINTS,
        "checkpoint_bytes_p50": int(np.median(postgres.checkpoint_bytes)),
        "checkpoint_us": saved,
        "followed": FOLLOWED,
        "follow_us": follow,
        "ratios": ratios,
        "append_p99_target_ms": APPEND_P99_TARGET_MS,
        "append_verdict": append_verdict,
        "checkpoint_p99_target_ms": CHECKPOINT_P99_TARGET_MS,
        "checkpoint_verdict": checkpoint_verdict,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2) + b"\n")
    update_section("store", markdown(results))

    table = Table(title=f"Transcript stores — PostgreSQL {server_version}, latency in µs")
    table.add_column("measure")
    table.add_column("p50", justify="right")
    table.add_column("p99", justify="right")
    for name, values in append.items():
        table.add_row(f"append, {name}", f"{values['p50']:,.1f}", f"{values['p99']:,.1f}")
    for name, values in saved.items():
        table.add_row(f"save_compaction, {name}", f"{values['p50']:,.1f}", f"{values['p99']:,.1f}")
    for name, values in follow.items():
        table.add_row(f"follow, {name}", f"{values['p50']:,.1f}", f"{values['p99']:,.1f}")
    table.add_row(
        "postgres / jsonl, append",
        f"{ratios['append_p50_postgres_to_jsonl']}×",
        f"{ratios['append_p99_postgres_to_jsonl']}×",
    )
    table.add_row(
        "postgres / jsonl with fsync, append",
        f"{ratios['append_p50_postgres_to_jsonl_fsync']}×",
        f"{ratios['append_p99_postgres_to_jsonl_fsync']}×",
    )
    table.add_row(
        "postgres / jsonl, save_compaction",
        f"{ratios['checkpoint_p50_postgres_to_jsonl']}×",
        f"{ratios['checkpoint_p99_postgres_to_jsonl']}×",
    )
    table.add_row(
        "jsonl / postgres, follow",
        f"{ratios['follow_p50_jsonl_to_postgres']}×",
        f"{ratios['follow_p99_jsonl_to_postgres']}×",
    )
    console.print(table)
    for label, verdict, target in (
        ("postgres append p99", append_verdict, f"≤ {APPEND_P99_TARGET_MS:g} ms"),
        ("postgres save_compaction p99", checkpoint_verdict, f"≤ {CHECKPOINT_P99_TARGET_MS:g} ms"),
    ):
        style = "green" if verdict == "PASS" else "yellow"
        console.print(f"{label} (target {target}): [{style}]{verdict}[/{style}]")
    console.print(f"results written to {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
