"""Replay every recorded session under four windows and three policies, side by side.

Run from the repository root::

    .venv/bin/python benchmarks/replay.py

Reads the sessions in ``../shared/data/sessions/`` and the Claude Code and
Codex samples in ``../shared/data/formats/`` (override the root with
``CAIRN_SESSIONS``; without them it replays the fixtures shipped in
``tests/fixtures/sessions``), replays each with the policies ``cairn``,
``none`` and ``post-response`` at windows 8k, 16k, 32k and 128k with the
fixed context the recorded agent really had (``--fixed-tokens auto``), and
writes ``benchmarks/results/replay.json`` and the Markdown tables in
``docs/benchmarks.md``. Every figure comes from the same run; the pipeline
time is reported per request, never judged. A session that fails (the window
cannot hold its fixed context, or the pipeline refused a request it could not
bring under the budget) is counted and named with its reason, never shown as
"0 overflows". After every compaction the replay checks continuity (latest
instruction, exact records, todo list, files written, call/result pairing);
the share of checks passed is reported per file and in the totals, "–" where
nothing was compacted.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import orjson
from rich.console import Console
from rich.table import Table

from _markdown import update_section
from cairn.messages import JSONObject, JSONValue
from cairn.replay.continuity import Continuity, format_pct
from cairn.replay.engine import ReplayOptions, replay_sessions
from cairn.replay.importers import import_sessions
from cairn.replay.metrics import POLICIES, ReplaySummary, SessionReport

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
FIXTURES = REPO / "tests" / "fixtures" / "sessions"
WINDOWS = (8_192, 16_384, 32_768, 131_072)
SUFFIXES = (".json", ".jsonl", ".traj")
#: The policy every other one is compared with for billed tokens.
BASELINE = "post-response"
#: Continuity failures listed per window and policy in the Markdown.
CONTINUITY_FAILURES_SHOWN = 5


def session_files(root: Path) -> list[Path]:
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and p.suffix in SUFFIXES and p.name != "manifest.json"
    )


def corpus_files() -> tuple[str, list[Path]]:
    """The session files to replay and the corpus's name."""
    override = os.environ.get("CAIRN_SESSIONS")
    if override:
        return "CAIRN_SESSIONS", session_files(Path(override))
    sessions, formats = SHARED_DATA / "sessions", SHARED_DATA / "formats"
    if sessions.is_dir():
        samples = session_files(formats) if formats.is_dir() else []
        return "shared", session_files(sessions) + samples
    return "fixtures", session_files(FIXTURES)


def run(files: list[Path], windows: tuple[int, ...], tokenizer: str) -> list[JSONObject]:
    rows: list[JSONObject] = []
    # A fixed directory, not a random one: the replayed workspace's path is in
    # the restoration message after every compaction, so a random name of a
    # different token count would change the figures from one run to the next.
    tmp = Path(tempfile.gettempdir()) / "cairn-bench-replay"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _replay_files(files, windows, tokenizer, tmp, rows)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


def _replay_files(
    files: list[Path], windows: tuple[int, ...], tokenizer: str, tmp: Path, rows: list[JSONObject]
) -> None:
    for path in files:
        imported = import_sessions(path)
        source = str(path.relative_to(path.parents[1]))
        for window in windows:
            for policy in POLICIES:
                options = ReplayOptions(window, policy, tokenizer)
                started = time.perf_counter()
                reports = asyncio.run(replay_sessions(imported.sessions, options, tmp / "t"))
                wall = time.perf_counter() - started
                summary = ReplaySummary(
                    source, imported.format, window, tokenizer, policy, tuple(reports)
                ).to_dict()
                requests = _int(summary["requests"])
                seconds = float(str(summary["pipeline_seconds"]))
                summary["pipeline_us_per_request"] = (
                    round(1e6 * seconds / requests, 1) if requests else 0
                )
                summary["wall_seconds"] = round(wall, 3)
                summary["session_billed"] = _session_billed(reports)
                summary["session_missed"] = _session_missed(reports)
                rows.append(summary)


def _session_billed(reports: Sequence[SessionReport]) -> list[JSONValue]:
    """Billed prompt tokens per session, in session order; ``None`` for a failed one."""
    return [None if r.failed else r.billed_prompt_tokens for r in reports]


def _session_missed(reports: Sequence[SessionReport]) -> list[JSONValue]:
    """Billed tokens outside the previous request's prefix (a cache miss) per session."""
    return [None if r.failed else r.billed_prompt_tokens - r.cache_eligible_tokens for r in reports]


def _int(value: JSONValue) -> int:
    return int(str(value))


# ---------------------------------------------------------------------------
# Totals


def totals(rows: list[JSONObject], window: int, policy: str) -> JSONObject:
    """One window and policy over every session file."""
    group = [r for r in rows if r["window"] == window and r["policy"] == policy]

    def total(key: str) -> int:
        return sum(_int(r[key]) for r in group)

    requests = total("requests")
    compactions = total("compactions")
    weighted_error = sum(
        float(str(_dict(r["projection_error"])["mean_abs_pct"])) * _int(r["requests"])
        for r in group
    )
    headroom = [_dict(r["wasted_headroom"]) for r in group]
    counted = sum(_int(h["compactions"]) for h in headroom)
    wasted = sum(float(str(h["mean"])) * _int(h["compactions"]) for h in headroom)
    billed = total("billed_prompt_tokens")
    continuity = continuity_of(group)
    return {
        "window": window,
        "policy": policy,
        "sessions": total("sessions"),
        "failed_sessions": total("failed_sessions"),
        "requests": requests,
        "overflows": total("overflows"),
        "compactions": compactions,
        "compactions_per_100_requests": round(100 * compactions / requests, 2) if requests else 0,
        "wasted_headroom_mean": round(wasted / counted, 4) if counted else 0.0,
        "snips": total("snips"),
        "handoffs": total("handoffs"),
        "billed_prompt_tokens": billed,
        "billed_vs_post_response": versus(rows, window, policy, "session_billed"),
        "cache_eligible_share": round(total("cache_eligible_tokens") / billed, 4) if billed else 0,
        "cache_missed_tokens": billed - total("cache_eligible_tokens"),
        "cache_missed_vs_post_response": versus(rows, window, policy, "session_missed"),
        "projection_error_mean_abs_pct": round(weighted_error / requests, 2) if requests else 0,
        "continuity": continuity.to_dict(max_failures=CONTINUITY_FAILURES_SHOWN),
    }


def continuity_of(rows: Sequence[JSONObject]) -> Continuity:
    """The continuity checks of several rows added up (failures: each row's first few)."""
    summed = Continuity()
    for row in rows:
        c = _dict(row["continuity"])
        failures = tuple(f"{row['source']}: {f}" for f in _list(c["failures"]))
        checks, passed = _int(c["checks"]), _int(c["passed"])
        summed += Continuity(checks, passed, failures, _int(c["compactions"]))
    return summed


def _pct_of(continuity: JSONValue) -> float | None:
    pct = _dict(continuity)["pct"]
    return None if pct is None else float(str(pct))


def _continuity_cell(continuity: JSONValue) -> str:
    """``100 %`` or ``97.5 % (3 lost)``; ``–`` where nothing was compacted."""
    c = _dict(continuity)
    lost = _int(c["checks"]) - _int(c["passed"])
    text = format_pct(_pct_of(c))
    return f"{text} ({lost} lost)" if lost else text


def versus(rows: list[JSONObject], window: int, policy: str, key: str) -> float | None:
    """A per-session figure (``key``) of ``policy`` ÷ that of ``post-response``, minus 1.

    Only over sessions both policies replayed to the end, so a session that
    failed early under one of them does not make it look cheap.
    """
    mine = {r["source"]: r for r in rows if r["window"] == window and r["policy"] == policy}
    base = {r["source"]: r for r in rows if r["window"] == window and r["policy"] == BASELINE}
    ours = theirs = 0
    for source, row in mine.items():
        other = base.get(source)
        if other is None:
            continue
        pairs = zip(_list(row[key]), _list(other[key]), strict=True)
        for a, b in pairs:
            if a is not None and b is not None:
                ours, theirs = ours + _int(a), theirs + _int(b)
    return round(ours / theirs - 1, 4) if theirs else None


def failures(rows: list[JSONObject]) -> list[JSONObject]:
    """Every failed session, once per window and reason, with the policies it failed under."""
    found: dict[tuple[str, int, str, str], list[str]] = {}
    for row in rows:
        for failure in _list(row["failures"]):
            item = _dict(failure)
            key = (str(row["source"]), _int(row["window"]), str(item["name"]), str(item["reason"]))
            found.setdefault(key, []).append(str(row["policy"]))
    return [
        {"source": s, "window": w, "session": n, "reason": r, "policies": list(p)}
        for (s, w, n, r), p in found.items()
    ]


def _dict(value: JSONValue) -> JSONObject:
    assert isinstance(value, dict)
    return value


def _list(value: JSONValue) -> list[JSONValue]:
    assert isinstance(value, list)
    return value


# ---------------------------------------------------------------------------
# Markdown


def _pct(value: JSONValue, digits: int = 1) -> str:
    if value is None:
        return "–"
    return f"{float(str(value)):+.{digits}%}" if digits else f"{float(str(value)):.0%}"


def _fixed(row: JSONObject) -> str:
    fixed = _dict(row["fixed_context"])
    low, high = _int(fixed["min_tokens"]), _int(fixed["max_tokens"])
    size = f"{low:,}" if low == high else f"{low:,}–{high:,}"
    return f"{size} {', '.join(_dict(fixed['sources']))}"


def markdown(rows: list[JSONObject], summary: list[JSONObject], meta: JSONObject) -> str:
    lines = [
        "# Replay benchmark",
        "",
        "Every recorded session in `../shared/data/sessions/`, and the Claude Code and Codex",
        "samples in `../shared/data/formats/`, replayed request by request through the same",
        "engine under each window and policy, with exact token counts",
        f"(`{meta['tokenizer']}`). Generated by `benchmarks/replay.py` on {meta['timestamp']}",
        f"(Python {meta['python']}); raw figures in `benchmarks/results/replay.json`.",
        "",
        "- **cairn**: `check_and_compact` before every request (projection, snip, handoff,",
        "  deterministic fallback compaction).",
        "- **none**: no context management.",
        "- **post-response**: the old behaviour — compaction decided from the previous",
        "  response's usage, after the response, with no projection of new messages.",
        "",
        "Every request carries the fixed context (system prompt and tool schemas) the",
        "recorded agent really had (`cairn replay --fixed-tokens auto`). Its *source*: `usage`",
        "— inferred from the recorded provider usage (prompt tokens of the first responses",
        "minus the exact size of the messages sent before them; OpenHands, Claude Code,",
        "Codex); `default` — the format records no usage, so its documented default for what",
        "it leaves out; `recorded` — the recording carries all of it (SWE-agent, tau-bench).",
        "Where the recording carries less, deterministic host filler shaped like real tool",
        "schemas makes up the difference.",
        "",
        "Columns:",
        "",
        "- *failed*: sessions that could not be replayed to their end, with the reasons",
        "  below: the window cannot hold the fixed context at all, or the pipeline refused a",
        "  request it could not bring under the input budget (the session stops there). A",
        "  failed session counts as a failure; its requests before the failure still count.",
        "- *overflows*: requests whose exact prompt size exceeds the input budget (window −",
        "  output reserve): the provider would have rejected them. Must be 0 for cairn.",
        "- *comp./100 req*: compactions per 100 requests.",
        "- *wasted headroom*: for each compaction, (compaction line − exact size of the",
        "  request that triggered it) ÷ input budget, clipped at 0; the mean over all",
        "  compactions. For cairn the triggering size is the exact size of the context as it",
        "  stood when the check began (before snip); for post-response, the answered",
        "  request's prompt + completion it judged. A compaction that comes early because",
        "  the estimate over-counts (before the fixed context is calibrated, or text the",
        "  estimate over-counts) throws this share of the budget away; 0 means every",
        "  compaction came at or past the line.",
        '- A session *failed* as "window too small" cannot run under any policy: the',
        "  agent's own system prompt and tools do not fit the input budget (at 8k the",
        "  default output reserve is half the window). It is listed, never counted as 0.",
        "- *billed vs post-resp.*: prompt tokens billed ÷ those of the post-response policy,",
        "  − 1, over the sessions both policies replayed to the end.",
        "- *cached*: the share of billed prompt tokens that repeat the previous request's",
        "  prefix (what a provider's prefix cache can serve). It is a ratio: a policy that",
        "  bills fewer tokens for the same misses shows a lower share.",
        "- *missed*: billed prompt tokens outside that prefix (each a cache miss: the",
        "  tokens a provider bills in full); *missed vs post-resp.* as for billed.",
        "- *proj. err*: the mean |projected − exact| ÷ exact of the size Cairn projected",
        "  before sending; *under* is the worst under-estimate.",
        "- *continuity*: after every compaction, the share of checks the new context passed",
        "  (one check per item: the latest user instruction verbatim or, if it was saved",
        "  to a file for its size, that file named; each exact continuation record",
        "  verbatim; each item of the newest todo list; each path a writing tool touched;",
        "  no call without its results and no result without its call), rounded down, with",
        "  the number of checks lost. *–*: no compaction, so nothing to check.",
        "",
        "## Totals over every session",
        "",
        "| window | policy | sessions | failed | requests | overflows | compactions "
        "| comp./100 req | wasted headroom | snips | handoffs | billed prompt tokens "
        "| billed vs post-resp. | cached | missed | missed vs post-resp. | mean proj. err "
        "| continuity |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for t in summary:
        billed = t["billed_vs_post_response"]
        lines.append(
            f"| {_int(t['window']) // 1024}k | {t['policy']} | {t['sessions']} "
            f"| {t['failed_sessions']} | {_int(t['requests']):,} | {t['overflows']} "
            f"| {t['compactions']} | {t['compactions_per_100_requests']} "
            f"| {float(str(t['wasted_headroom_mean'])):.1%} | {t['snips']} | {t['handoffs']} "
            f"| {_int(t['billed_prompt_tokens']):,} "
            f"| {'–' if t['policy'] == BASELINE else _pct(billed)} "
            f"| {float(str(t['cache_eligible_share'])):.2%} "
            f"| {_int(t['cache_missed_tokens']):,} "
            f"| {'–' if t['policy'] == BASELINE else _pct(t['cache_missed_vs_post_response'])} "
            f"| {t['projection_error_mean_abs_pct']}% "
            f"| {_continuity_cell(t['continuity'])} |"
        )
    failed = failures(rows)
    lines += ["", "## Failed sessions", ""]
    if failed:
        for f in failed:
            lines.append(
                f"- {f['source']} at {_int(f['window']) // 1024}k, {f['session']} "
                f"({', '.join(str(p) for p in _list(f['policies']))}): {f['reason']}"
            )
    else:
        lines.append("None: every session was replayed to its end under every window and policy.")
    lines += ["", "## Continuity failures", ""]
    lost = [t for t in summary if _dict(t["continuity"])["failures"]]
    for t in lost:
        c = _dict(t["continuity"])
        shown = _list(c["failures"])
        lines.append(
            f"- {_int(t['window']) // 1024}k, {t['policy']}: "
            f"{_int(c['checks']) - _int(c['passed'])} of {_int(c['checks']):,} checks lost; "
            f"the first {len(shown)}:"
        )
        lines += [f"  - {f}" for f in shown]
    if not lost:
        lines.append("None: every compaction kept everything checked.")
    lines += [
        "",
        "## Per session file",
        "",
        "| session file | window | policy | fixed context | failed | requests | overflows "
        "| peak | compactions | wasted headroom | snips | handoffs | billed | cached "
        "| proj. err | under | µs/request | continuity |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        error = _dict(row["projection_error"])
        headroom = _dict(row["wasted_headroom"])
        lines.append(
            f"| {row['source']} | {_int(row['window']) // 1024}k | {row['policy']} "
            f"| {_fixed(row)} | {row['failed_sessions']} | {row['requests']} "
            f"| {row['overflows']} | {_int(row['peak_tokens']):,} | {row['compactions']} "
            f"| {float(str(headroom['mean'])):.1%} | {row['snips']} | {row['handoffs']} "
            f"| {_int(row['billed_prompt_tokens']):,} "
            f"| {_pct(row['cache_eligible_share'], 0)} "
            f"| {error['mean_abs_pct']}% | {error['max_under_pct']}% "
            f"| {row['pipeline_us_per_request']} | {_continuity_cell(row['continuity'])} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tokenizer", default="cl100k")
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks/results/replay.json")
    parser.add_argument("--markdown", type=Path, default=REPO / "docs/benchmarks.md")
    args = parser.parse_args()
    corpus, files = corpus_files()
    started = time.perf_counter()
    rows = run(files, WINDOWS, args.tokenizer)
    summary = [totals(rows, window, policy) for window in WINDOWS for policy in POLICIES]
    meta: JSONObject = {
        "benchmark": "replay",
        "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "tokenizer": args.tokenizer,
        "corpus": corpus,
        "files": [str(f.relative_to(f.parents[1])) for f in files],
        "windows": list(WINDOWS),
        "elapsed_s": round(time.perf_counter() - started, 1),
    }
    failed = failures(rows)
    report: dict[str, object] = {**meta, "totals": summary, "failures": failed, "rows": rows}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    update_section("replay", markdown(rows, summary, meta), args.markdown)

    table = Table(title=f"replay benchmark totals ({corpus}, {meta['elapsed_s']} s)")
    columns = (
        "window", "policy", "failed", "req", "overflows", "comp/100", "wasted", "billed",
        "vs post-resp.", "cached", "missed vs", "continuity",
    )  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column == "policy" else "right")
    for t in summary:
        table.add_row(
            f"{_int(t['window']) // 1024}k",
            str(t["policy"]),
            f"{t['failed_sessions']}/{t['sessions']}",
            f"{_int(t['requests']):,}",
            str(t["overflows"]),
            str(t["compactions_per_100_requests"]),
            f"{float(str(t['wasted_headroom_mean'])):.1%}",
            f"{_int(t['billed_prompt_tokens']):,}",
            "–" if t["policy"] == BASELINE else _pct(t["billed_vs_post_response"]),
            f"{float(str(t['cache_eligible_share'])):.2%}",
            "–" if t["policy"] == BASELINE else _pct(t["cache_missed_vs_post_response"]),
            format_pct(_pct_of(t["continuity"])),
        )
    Console(width=120).print(table)
    for f in failed:
        print(
            f"FAILED {f['source']} {_int(f['window']) // 1024}k {f['session']} "
            f"({', '.join(str(p) for p in _list(f['policies']))}): {f['reason']}",
            file=sys.stderr,
        )
    cairn = [t for t in summary if t["policy"] == "cairn"]
    overflows = sum(_int(t["overflows"]) for t in cairn)
    cairn_failed = sum(_int(t["failed_sessions"]) for t in cairn)
    kept = continuity_of([r for r in rows if r["policy"] == "cairn"])
    print(
        f"cairn overflows: {overflows} (must be 0); "
        f"cairn failed sessions: {cairn_failed} (must be 0); "
        f"cairn continuity: {format_pct(kept.pct)} of {kept.checks:,} checks "
        f"over {kept.compactions} compactions (must be 100 %)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
