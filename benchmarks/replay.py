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

The dense variant (``cairn.replay.dense``) replays the same sessions with every
tool result's text replaced by dense content of the same length (hex hashes,
base64, JSON with numbers, CJK mixed with code) under ``cairn`` at every
window, and reports per window the requests over the budget (must be 0; a
failed session is counted and named beside it), the worst under-estimate
(exact size ÷ the projection the request went out with) and the compactions.

For iteration, ``--only recorded|dense``, ``--windows 8192,16384`` and
``--match TEXT`` (session files whose path holds TEXT) run a part: a partial
run prints its tables and writes JSON only to an ``--output`` given
explicitly, never the Markdown.
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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import orjson
from rich.console import Console
from rich.table import Table

from _markdown import DOC, update_section
from cairn.messages import JSONObject, JSONValue
from cairn.replay.continuity import Continuity, format_pct
from cairn.replay.dense import DenseColumn, densify_sessions, tool_result_chars
from cairn.replay.engine import ReplayOptions, replay_sessions
from cairn.replay.importers import import_sessions
from cairn.replay.metrics import POLICIES, ReplaySummary, SessionReport
from cairn.replay.session import ImportResult

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


Imported = list[tuple[str, ImportResult]]
T = TypeVar("T")


def run(files: list[Path], windows: tuple[int, ...], tokenizer: str) -> list[JSONObject]:
    """The recorded sessions under every window and policy: one row per file, window, policy."""
    return _in_tmp(lambda tmp: _replay_files(_import(files), windows, tokenizer, tmp))


def run_dense(
    files: list[Path], windows: tuple[int, ...], tokenizer: str
) -> tuple[list[JSONObject], list[DenseColumn]]:
    """The densified sessions under ``cairn``: a row per file and window, a column per window."""
    return _in_tmp(lambda tmp: _replay_dense(_import(files), windows, tokenizer, tmp))


def _import(files: list[Path]) -> Imported:
    return [(str(path.relative_to(path.parents[1])), import_sessions(path)) for path in files]


def _in_tmp(replay: Callable[[Path], T]) -> T:
    # A fixed directory, not a random one: the replayed workspace's path is in
    # the restoration message after every compaction, so a random name of a
    # different token count would change the figures from one run to the next.
    tmp = Path(tempfile.gettempdir()) / "cairn-bench-replay"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        return replay(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _replay_files(
    files: Imported, windows: tuple[int, ...], tokenizer: str, tmp: Path
) -> list[JSONObject]:
    rows: list[JSONObject] = []
    for source, imported in files:
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
    return rows


def _replay_dense(
    files: Imported, windows: tuple[int, ...], tokenizer: str, tmp: Path
) -> tuple[list[JSONObject], list[DenseColumn]]:
    rows: list[JSONObject] = []
    runs: dict[int, list[tuple[str, Sequence[SessionReport]]]] = {w: [] for w in windows}
    for source, imported in files:
        sessions = densify_sessions(imported.sessions)
        results, chars = tool_result_chars(sessions)
        for window in windows:
            options = ReplayOptions(window, "cairn", tokenizer)
            started = time.perf_counter()
            # The fixed context each recording really had: inferred from the
            # recorded usage against the recorded messages, not the dense ones.
            replayed = replay_sessions(sessions, options, tmp / "t", fixed_from=imported.sessions)
            reports = asyncio.run(replayed)
            wall = time.perf_counter() - started
            summary = ReplaySummary(
                source, imported.format, window, tokenizer, "cairn", tuple(reports)
            ).to_dict()
            summary["dense_tool_results"] = results
            summary["dense_chars"] = chars
            summary["wall_seconds"] = round(wall, 3)
            rows.append(summary)
            runs[window].append((source, reports))
    return rows, [DenseColumn.of(window, runs[window]) for window in windows]


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


def _ratio(value: JSONValue, *, where: bool = True) -> str:
    """A worst under-estimate: ``1.9204× (session, request 7)``, or only the ratio
    without ``where``; ``–`` without one."""
    if value is None:
        return "–"
    worst = _dict(value)
    ratio = f"{float(str(worst['ratio'])):.4f}×"
    return f"{ratio} ({worst['session']}, request {worst['request']})" if where else ratio


def _over_budget(row: JSONObject) -> str:
    """Requests over the budget; never a bare 0 when a session failed."""
    failed = _int(row["failed_sessions"])
    return f"{row['overflows']} + {failed} failed" if failed else str(row["overflows"])


def dense_markdown(dense: JSONObject) -> list[str]:
    lines = [
        "",
        "## Dense tool results (cairn)",
        "",
        "The same sessions with every tool result's text replaced by dense content of the",
        "same length in characters (`cairn.replay.dense`: `sha256sum` lines, base64 blocks,",
        "JSON records with hex ids, base64 digests and numbers — bare or after an HTTP",
        "status line — and Python with Chinese identifiers and comments, in turn; seeded from",
        "each message's session, index and id, so every run replays the same content);",
        "user and assistant text, tool calls, ids and pairing as recorded. Replayed under",
        "`cairn` at every window. *over budget*: requests whose exact size exceeds the input",
        "budget (must be 0), with the sessions that failed beside it, never a bare 0;",
        "*worst under-estimate*: the largest exact size ÷ the projection the request went out",
        "with (the snapshot `check_and_compact` decided on, re-projected after a compaction;",
        "at most 1: no request under-counted), with where it happened.",
        f"The dense part took {dense['elapsed_s']} s.",
        "",
        "| window | sessions | failed | requests | over budget | worst under-estimate "
        "| compactions |",
        "|---:|---:|---:|---:|---:|---|---:|",
    ]
    for t in _list(dense["totals"]):
        c = _dict(t)
        lines.append(
            f"| {_int(c['window']) // 1024}k | {c['sessions']} | {c['failed_sessions']} "
            f"| {_int(c['requests']):,} | {c['over_budget']} "
            f"| {_ratio(c['worst_under_estimate'])} | {c['compactions']} |"
        )
    failed = [
        (_dict(t), _dict(f)) for t in _list(dense["totals"]) for f in _list(_dict(t)["failures"])
    ]
    lines += ["", "Failed sessions (dense):", ""]
    if failed:
        lines += [
            f"- {_int(t['window']) // 1024}k, {f['session']}: {f['reason']}" for t, f in failed
        ]
    else:
        lines.append("None: every densified session was replayed to its end at every window.")
    lines += [
        "",
        "| session file | window | tool results | failed | requests | over budget "
        "| worst under-estimate | compactions | proj. err |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in _list(dense["rows"]):
        row = _dict(r)
        ratio = _ratio(row["worst_under_estimate"], where=False)
        lines.append(
            f"| {row['source']} | {_int(row['window']) // 1024}k | {row['dense_tool_results']} "
            f"| {row['failed_sessions']} | {row['requests']} | {_over_budget(row)} | {ratio} "
            f"| {row['compactions']} | {_dict(row['projection_error'])['mean_abs_pct']}% |"
        )
    return lines


def markdown(
    rows: list[JSONObject],
    summary: list[JSONObject],
    meta: JSONObject,
    dense: JSONObject | None = None,
) -> str:
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
    if dense is not None:
        lines += dense_markdown(dense)
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
    parser.add_argument(
        "--output", type=Path, help="default: benchmarks/results/replay.json on a full run"
    )
    parser.add_argument(
        "--markdown", type=Path, help="default: docs/benchmarks.md; a full run only"
    )
    parser.add_argument(
        "--only",
        choices=("recorded", "dense"),
        help="run one part: the recorded sessions under every policy, or the dense variant",
    )
    parser.add_argument(
        "--windows",
        type=lambda text: tuple(int(w) for w in text.split(",")),
        default=WINDOWS,
        help="comma-separated windows (default: %(default)s)",
    )
    parser.add_argument("--match", help="only the session files whose path holds this text")
    args = parser.parse_args()
    windows: tuple[int, ...] = args.windows
    corpus, files = corpus_files()
    if args.match:
        files = [f for f in files if args.match in str(f)]
    partial = args.only is not None or windows != WINDOWS or bool(args.match)
    output: Path | None = args.output
    if output is None and not partial:
        output = REPO / "benchmarks/results/replay.json"
    started = time.perf_counter()
    rows = run(files, windows, args.tokenizer) if args.only != "dense" else []
    summary = [totals(rows, window, policy) for window in windows for policy in POLICIES]
    recorded_s = round(time.perf_counter() - started, 1)
    dense: JSONObject | None = None
    columns: list[DenseColumn] = []
    if args.only != "recorded":
        dense_started = time.perf_counter()
        dense_rows, columns = run_dense(files, windows, args.tokenizer)
        dense = {
            "elapsed_s": round(time.perf_counter() - dense_started, 1),
            "totals": [c.to_dict() for c in columns],
            "rows": dense_rows,
        }
    meta: JSONObject = {
        "benchmark": "replay",
        "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "tokenizer": args.tokenizer,
        "corpus": corpus,
        "files": [str(f.relative_to(f.parents[1])) for f in files],
        "windows": list(windows),
        "recorded_elapsed_s": recorded_s,
        "elapsed_s": round(time.perf_counter() - started, 1),
    }
    failed = failures(rows)
    report: dict[str, object] = {**meta, "totals": summary, "failures": failed, "rows": rows}
    if dense is not None:
        report["dense"] = dense
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    if not partial:
        update_section("replay", markdown(rows, summary, meta, dense), args.markdown or DOC)
    if rows:
        _print_recorded(corpus, meta, summary, rows, failed)
    if dense is not None:
        _print_dense(columns, float(str(dense["elapsed_s"])))
    return 0


def _print_dense(columns: Sequence[DenseColumn], elapsed: float) -> None:
    table = Table(title=f"replay benchmark, dense tool results under cairn ({elapsed} s)")
    for column in ("window", "sessions", "failed", "req", "over budget", "worst under", "comp."):
        table.add_column(column, justify="right")
    for c in columns:
        worst = c.worst_under_estimate
        table.add_row(
            f"{c.window // 1024}k",
            str(c.sessions),
            str(c.failed_sessions),
            f"{c.requests:,}",
            c.over_budget_cell,
            "–" if worst is None else f"{worst.ratio:.4f}×",
            str(c.compactions),
        )
    Console(width=120).print(table)
    for c in columns:
        worst = c.worst_under_estimate
        if worst is not None:
            print(
                f"dense {c.window // 1024}k worst under-estimate {worst.ratio:.4f}×: "
                f"{worst.session}, request {worst.request} "
                f"(exact {worst.true_tokens:,}, projected {worst.projected_tokens:,})",
                file=sys.stderr,
            )
        for session, reason in c.failures:
            print(f"FAILED dense {c.window // 1024}k {session}: {reason}", file=sys.stderr)
    print(
        f"cairn dense overflows: {sum(c.overflows for c in columns)} (must be 0); "
        f"cairn dense failed sessions: {sum(c.failed_sessions for c in columns)} (must be 0)",
        file=sys.stderr,
    )


def _print_recorded(
    corpus: str,
    meta: JSONObject,
    summary: list[JSONObject],
    rows: list[JSONObject],
    failed: list[JSONObject],
) -> None:
    table = Table(title=f"replay benchmark totals ({corpus}, {meta['recorded_elapsed_s']} s)")
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


if __name__ == "__main__":
    raise SystemExit(main())
