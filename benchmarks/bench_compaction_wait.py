"""Benchmark the wait a compaction costs the user, with the summary prepared or not (issue 28).

Run from the repository root::

    .venv/bin/python benchmarks/bench_compaction_wait.py [--quick]

Long interactive sessions through the real agent loop (``run_turn``, one
turn after another in one event loop): each turn pastes a build log (a
user's message, which snip never elides) and the model reruns its step with
a real ``bash`` call that takes 0.5–5 s, then answers. The model is the
local OpenAI-compatible server of the tests (``tests/support/openai_server.py``)
with realistic timing: every answer starts after a first-byte delay of 1–2 s
and streams at 30–60 tokens/s, the summary (about 600 tokens) included. For
each window (16k, 32k, 128k), the same seeded session runs with
``compaction.precompute`` off and on, side by side; every delay is scaled by
``--time-scale`` (default 0.25), which keeps their ratios. Reported per
configuration:

- the user-visible wait at each compaction — from the moment a request had
  to wait for it (``compactionStateChange`` true) until it could be sent
  (false) — p50 / p95 / max; and apart, the waits of the compactions whose
  summary was ready when the line came (the band lasted at least one
  summary's time: the issue's goal is their p95 under 1 s) and their share;
- the share of compactions that committed a summary prepared in the
  background (ready, or waited for);
- the tokens spent on prepared summaries that were not used, as a share of
  every token billed (each such fork's prompt and summary);
- continuity: the replay's checks on every checkpoint of the transcript;
- the share of the compaction forks' prompt served from the prompt cache
  (the Responses API's automatic cache by default, ``--api``).

The six configurations run at once, each in its own process (``--jobs``):
they are mostly waiting, and off and on then share the machine's load.

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
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _markdown import update_section
from cairn.agent.events import CompactionStateChange, Event, SummaryPrepared
from cairn.agent.loop import run_turn
from cairn.agent.runtime import Runtime
from cairn.agent.settings import Settings
from cairn.context import CompactionConfig
from cairn.messages import Message
from cairn.provider import WIRE_APIS, ModelConfig, WireAPI, open_provider
from cairn.replay.continuity import SessionSoFar, check_continuity
from cairn.store import CompactionRecord, MessageRecord, read_transcript

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.counting_provider import prompt_tokens  # the tests' helpers
from support.openai_server import OpenAIServer, Reply, ToolCallSpec

RESULTS = Path(__file__).resolve().parent / "results" / "compaction_wait.json"
SUMMARY = (
    "<summary>\n## Objective and constraints\nSurvey the build logs; change nothing.\n"
    "## Decisions and rationale\nRead each log once, in order.\n"
    "## Workspace mutations\n(none)\n## Verification evidence\nEvery log ends in OK.\n"
    "## Active tasks and background work\nThe survey, log by log.\n"
    "## Open problems\n(none)\n## Exact next action\nRead the next log.\n</summary>\n"
) + "".join(f"Log {n} was read and summarised: the build step passed.\n" for n in range(40))
#: (window, turns, lines per log): logs sized so that the handoff band spans
#: two to five turns, as in a long session; turns for ten or more compactions
#: each, so that p95 is a percentile of ten waits, not the largest of two.
WINDOWS = ((16_384, 150, 15), (32_768, 250, 40), (131_072, 300, 160))


@dataclass
class Run:
    window: int
    precompute: bool
    api: str = "chat"
    waits: list[float] = field(default_factory=list)
    #: The waits of the compactions whose summary was ready when the line came
    #: (the band lasted at least the summary's time).
    ready_waits: list[float] = field(default_factory=list)
    compactions: int = 0
    prepared_used: int = 0
    billed_tokens: int = 0
    unused_tokens: int = 0
    continuity_checks: int = 0
    continuity_passed: int = 0
    seconds: float = 0.0
    #: Prompt tokens of the compaction forks, and how many of them the cache served.
    fork_prompt: int = 0
    fork_cached: int = 0
    #: The same for the main requests.
    main_prompt: int = 0
    main_cached: int = 0

    def to_json(self) -> dict[str, Any]:
        waits = sorted(self.waits)
        return {
            "window": self.window,
            "precompute": self.precompute,
            "compactions": self.compactions,
            "wait_p50_s": round(statistics.median(waits), 3) if waits else None,
            "wait_p95_s": round(_percentile(waits, 0.95), 3) if waits else None,
            "wait_max_s": round(max(waits), 3) if waits else None,
            "ready_at_line_share": round(len(self.ready_waits) / len(waits), 3) if waits else None,
            "wait_p95_ready_s": round(_percentile(self.ready_waits, 0.95), 3)
            if self.ready_waits
            else None,
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
            "api": self.api,
            "fork_cache_share": round(self.fork_cached / self.fork_prompt, 3)
            if self.fork_prompt
            else None,
            "main_cache_share": round(self.main_cached / self.main_prompt, 3)
            if self.main_prompt
            else None,
            "seconds": round(self.seconds, 1),
        }


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def is_fork(body: dict[str, Any]) -> bool:
    return any(
        m["role"] == "user" and "TEXT ONLY" in str(m.get("content")) for m in body["messages"]
    )


@dataclass(frozen=True)
class Config:
    """One configuration of the run (a process of its own: see ``main``)."""

    window: int
    rounds: int
    lines: int
    precompute: bool
    seed: int
    scale: float
    api: WireAPI


def play(config: Config) -> Run:
    window, rounds, lines = config.window, config.rounds, config.lines
    precompute, seed, scale = config.precompute, config.seed, config.scale
    rng = random.Random(seed)
    run = Run(window, precompute, config.api)
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
        model_config = ModelConfig(
            model="m", base_url=server.base_url, context_window=window, api=config.api
        )
        runtime = Runtime(
            workspace,
            model_config,
            open_provider(model_config),
            settings=Settings(compaction=CompactionConfig(precompute=precompute)),
            home=root / "home",
            permission_mode="bypass",
        )
        session = runtime.new_session()
        opened: list[tuple[float, bool]] = []
        ready = [False]  # a summary prepared in the background is ready now

        def on_event(event: Event) -> None:
            if isinstance(event, SummaryPrepared):
                ready[0] = event.state == "ready"
            elif isinstance(event, CompactionStateChange):
                if event.is_compacting:
                    opened.append((time.perf_counter(), ready[0]))
                elif opened:
                    since, was_ready = opened.pop()
                    wait = time.perf_counter() - since
                    run.waits.append(wait)
                    if was_ready:
                        run.ready_waits.append(wait)

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
        requests = server.requests
        for stat in server.cache_stats:
            run.billed_tokens += stat.prompt_tokens + stat.output_tokens
            if is_fork(requests[stat.request].body):
                run.fork_prompt += stat.prompt_tokens
                run.fork_cached += stat.cache_read
            else:
                run.main_prompt += stat.prompt_tokens
                run.main_cached += stat.cache_read
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
    parser.add_argument("--quick", action="store_true", help="a fifth of the turns, time / 10")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--time-scale",
        type=float,
        default=0.25,
        help="every delay, tool sleep and token interval times this (default 0.25: the "
        "ratios between them, which decide the waits, are those of the issue)",
    )
    parser.add_argument(
        "--api",
        choices=WIRE_APIS,
        default="responses",
        help="the wire API (default responses: its automatic prompt cache is measured)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=len(WINDOWS) * 2,
        help="configurations run at once, each in its own process (default: all, so that "
        "off and on share the machine's load side by side)",
    )
    args = parser.parse_args()
    scale = 0.1 if args.quick else args.time_scale
    configs = [
        Config(window, rounds // 5 if args.quick else rounds, size, on, args.seed, scale, args.api)
        for window, rounds, size in WINDOWS
        for on in (False, True)
    ]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        runs = list(pool.map(play, configs))
    for run in runs:
        print(json.dumps(run.to_json()))
    rows = [run.to_json() for run in runs]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "date": datetime.now(UTC).isoformat(timespec="seconds"),
                "machine": platform.platform(),
                "time_scale": scale,
                "api": args.api,
                "runs": rows,
            },
            indent=2,
        )
        + "\n"
    )
    lines = [
        "## Compaction wait, summary prepared or not (`bench_compaction_wait.py`)",
        "",
        f"Wire API `{args.api}`, delays × {scale}, all six configurations at once.",
        "",
        "| window | precompute | compactions | wait p50 / p95 / max (s) | ready at the line | "
        "wait p95 when ready (s) | prepared used | unused tokens | forks' prompt from cache | "
        "continuity |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        cell = {key: "–" if value is None else value for key, value in row.items()}
        lines.append(
            f"| {row['window']:,} | {'on' if row['precompute'] else 'off'} | "
            f"{row['compactions']} | {cell['wait_p50_s']} / {cell['wait_p95_s']} / "
            f"{cell['wait_max_s']} | {cell['ready_at_line_share']} | {cell['wait_p95_ready_s']} | "
            f"{cell['prepared_share']} | {cell['unused_token_share']} | "
            f"{cell['fork_cache_share']} | {cell['continuity_pct']} % of "
            f"{row['continuity_checks']} |"
        )
    update_section("compaction-wait", "\n".join(lines))


if __name__ == "__main__":
    main()
