"""Benchmark the wait a compaction costs the user, with the summary prepared or not (issue 28).

Run from the repository root::

    .venv/bin/python benchmarks/bench_compaction_wait.py [--quick]

Long interactive sessions through the real agent loop (``run_turn``, one
turn after another in one event loop): each turn pastes a build log (a
user's message, which snip never elides) and the model reruns its step with
a real ``bash`` call that takes 0.5–5 s, then answers. The model is the
local OpenAI-compatible server of the tests (``tests/openai_server.py``)
with realistic timing: every answer starts after a first-byte delay of 1–2 s
and streams at 30–60 tokens/s, the summary (about 600 tokens) included. For
each window (16k, 32k, 128k), the same seeded session runs with
``compaction.precompute`` off and on, side by side; every delay is scaled by
``--time-scale`` (default 0.25), which keeps their ratios. Reported per
configuration:

- the user-visible wait at each compaction — from the moment a request had
  to wait for it (``compactionStateChange`` true) until it could be sent
  (false) — p50 / p95 / max;
- the share of compactions that committed a summary prepared in the
  background (ready, or waited for);
- the tokens spent on prepared summaries that were not used, as a share of
  every token billed (each such fork's prompt and summary);
- continuity: the replay's checks on every checkpoint of the transcript.

Writes ``benchmarks/results/compaction_wait.json`` and the
``compaction-wait`` section of ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _markdown import update_section
from cairn.agent.events import CompactionStateChange, Event
from cairn.agent.loop import run_turn
from cairn.agent.session import Runtime
from cairn.agent.settings import Settings
from cairn.context import CompactionConfig
from cairn.messages import Message
from cairn.provider import ModelConfig, open_provider
from cairn.replay.continuity import SessionSoFar, check_continuity
from cairn.store import CompactionRecord, MessageRecord, read_transcript

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from counting_provider import prompt_tokens  # the tests' helpers
from openai_server import OpenAIServer, Reply, ToolCallSpec

RESULTS = Path(__file__).resolve().parent / "results" / "compaction_wait.json"
SUMMARY = (
    "<summary>\n## Objective and constraints\nSurvey the build logs; change nothing.\n"
    "## Decisions and rationale\nRead each log once, in order.\n"
    "## Workspace mutations\n(none)\n## Verification evidence\nEvery log ends in OK.\n"
    "## Active tasks and background work\nThe survey, log by log.\n"
    "## Open problems\n(none)\n## Exact next action\nRead the next log.\n</summary>\n"
) + "".join(f"Log {n} was read and summarised: the build step passed.\n" for n in range(40))
#: (window, turns, lines per log): logs sized so that the handoff band spans
#: several turns, as in a long session; turns for two to six compactions.
WINDOWS = ((16_384, 30, 15), (32_768, 60, 40), (131_072, 72, 160))


@dataclass
class Run:
    window: int
    precompute: bool
    waits: list[float] = field(default_factory=list)
    compactions: int = 0
    prepared_used: int = 0
    billed_tokens: int = 0
    unused_tokens: int = 0
    continuity_checks: int = 0
    continuity_passed: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        waits = sorted(self.waits)
        return {
            "window": self.window,
            "precompute": self.precompute,
            "compactions": self.compactions,
            "wait_p50_s": round(statistics.median(waits), 3) if waits else None,
            "wait_p95_s": round(_percentile(waits, 0.95), 3) if waits else None,
            "wait_max_s": round(max(waits), 3) if waits else None,
            "prepared_share": round(self.prepared_used / self.compactions, 3)
            if self.compactions
            else None,
            "unused_token_share": round(self.unused_tokens / self.billed_tokens, 4)
            if self.billed_tokens
            else None,
            "continuity_pct": round(100 * self.continuity_passed / self.continuity_checks, 1)
            if self.continuity_checks
            else None,
            "continuity_checks": self.continuity_checks,
            "seconds": round(self.seconds, 1),
        }


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def is_fork(body: dict[str, Any]) -> bool:
    return any(
        m["role"] == "user" and "TEXT ONLY" in str(m.get("content")) for m in body["messages"]
    )


def play(window: int, rounds: int, lines: int, precompute: bool, seed: int, scale: float) -> Run:
    rng = random.Random(seed)
    run = Run(window, precompute)
    sleeps = [round(rng.uniform(0.5, 5.0) * scale, 2) for _ in range(rounds)]
    delays = random.Random(seed + 1)
    forks: list[int] = []  # each fork's prompt + summary tokens, in order
    calls = [0]

    def model(body: dict[str, Any]) -> Reply:
        # The first byte after 1–2 s; then 30–60 tokens/s (a token: about 4 characters).
        time.sleep(delays.uniform(1.0, 2.0) * scale)
        interval = scale / delays.uniform(30, 60)
        if is_fork(body):
            forks.append(prompt_tokens(body) + len(SUMMARY) // 4)
            return Reply(text=SUMMARY, delta_chars=4, chunk_interval=interval)
        if body["messages"][-1]["role"] == "tool":
            return Reply(text="Noted; the step passed.", delta_chars=4, chunk_interval=interval)
        # A tool round of 0.5–5 s: the build step the pasted log came from, run again.
        n = calls[0] % len(sleeps)
        calls[0] += 1
        command = f"sleep {sleeps[n]}; echo step {n} OK"
        return Reply(tool_calls=[ToolCallSpec("bash", json.dumps({"command": command}))])

    with tempfile.TemporaryDirectory() as folder, OpenAIServer() as server:
        root = Path(folder)
        workspace = root / "ws"
        workspace.mkdir()
        server.respond_with(model)
        config = ModelConfig(model="m", base_url=server.base_url, context_window=window)
        runtime = Runtime(
            workspace,
            config,
            open_provider(config),
            settings=Settings(compaction=CompactionConfig(precompute=precompute)),
            home=root / "home",
            permission_mode="bypass",
        )
        session = runtime.new_session()
        opened: list[float] = []

        def on_event(event: Event) -> None:
            if isinstance(event, CompactionStateChange):
                if event.is_compacting:
                    opened.append(time.perf_counter())
                elif opened:
                    run.waits.append(time.perf_counter() - opened.pop())

        session.events.on(on_event)
        start = time.perf_counter()

        async def turns() -> None:
            # Pasted logs (a user's message is never snipped): the context grows to the
            # line turn after turn, in one event loop, as in an interactive session.
            for n in range(rounds):
                log = "".join(
                    f"[{n}:{i:04}] step {i} of build {n}: compiled, tested, OK\n"
                    for i in range(lines)
                )
                await run_turn(session, f"Build {n}'s log; rerun its step:\n{log}")

        asyncio.run(turns())
        run.seconds = time.perf_counter() - start
        stats = session.pipeline.precompute_stats
        runtime.close()
        records = read_transcript(session.path).records
        for stat in server.cache_stats:
            run.billed_tokens += stat.prompt_tokens + stat.output_tokens
        checkpoints = [r for r in records if isinstance(r, CompactionRecord)]
        run.compactions = len(checkpoints)
        run.prepared_used = sum(r.precomputed for r in checkpoints)
        # The forks whose summary was never used: every started one not committed.
        unused = stats.started - stats.committed
        run.unused_tokens = int(unused * statistics.mean(forks)) if forks and unused else 0
        so_far = SessionSoFar({"bash": "write"})
        for record in records:
            if isinstance(record, MessageRecord):
                so_far.add(record.message)
            elif isinstance(record, CompactionRecord):
                context: list[Message] = list(record.replacement_messages)
                result = check_continuity(context, so_far.expected())
                run.continuity_checks += result.checks
                run.continuity_passed += result.passed
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16k and 32k only, time / 10")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--time-scale",
        type=float,
        default=0.25,
        help="every delay, tool sleep and token interval times this (default 0.25: the "
        "ratios between them, which decide the waits, are those of the issue)",
    )
    args = parser.parse_args()
    windows = WINDOWS[:2] if args.quick else WINDOWS
    scale = 0.1 if args.quick else args.time_scale
    runs: list[Run] = []
    for window, rounds, size in windows:
        for precompute in (False, True):
            run = play(window, rounds, size, precompute, args.seed, scale)
            runs.append(run)
            print(json.dumps(run.to_json()))
    rows = [run.to_json() for run in runs]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "date": datetime.now(UTC).isoformat(timespec="seconds"),
                "machine": platform.platform(),
                "time_scale": scale,
                "runs": rows,
            },
            indent=2,
        )
        + "\n"
    )
    lines = [
        "## Compaction wait, summary prepared or not (`bench_compaction_wait.py`)",
        "",
        "| window | precompute | compactions | wait p50 / p95 / max (s) | prepared used | "
        "unused tokens | continuity |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['window']:,} | {'on' if row['precompute'] else 'off'} | "
            f"{row['compactions']} | {row['wait_p50_s']} / {row['wait_p95_s']} / "
            f"{row['wait_max_s']} | {row['prepared_share']} | {row['unused_token_share']} | "
            f"{row['continuity_pct']} % of {row['continuity_checks']} |"
        )
    update_section("compaction-wait", "\n".join(lines))


if __name__ == "__main__":
    main()
