"""Replay output: terminal tables, the JSON summary and the report folder."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import orjson
from rich.console import Console
from rich.table import Table

from cairn.messages import JSONObject, JSONValue
from cairn.replay.continuity import MAX_FAILURES, format_pct
from cairn.replay.metrics import ProjectionError, ReplaySummary, RequestMetrics, SessionReport
from cairn.replay.plot import plot_context

CSV_FIELDS = (
    "policy",
    "session",
    "request",
    "true_tokens",
    "projected_tokens",
    "error_pct",
    "phase",
    "handoff",
    "snipped",
    "compaction",
    "pre_tokens",
    "post_tokens",
    "overflow",
    "cache_eligible_tokens",
    "openai_cache_read",
    "anthropic_cache_read",
    "anthropic_cache_write",
    "pipeline_us",
    "trigger_tokens",
    "continuity_checks",
    "continuity_passed",
    "continuity_failures",
)
#: Joins one compaction's continuity failures in a CSV cell.
FAILURE_SEPARATOR = " | "


def session_row(session: SessionReport) -> list[str]:
    billed = session.billed_prompt_tokens
    share = session.cache_eligible_tokens / billed if billed else 0.0
    return [
        session.name,
        f"{session.fixed_tokens:,} {session.fixed_source}",
        str(len(session.requests)),
        str(session.overflows),
        f"{session.peak_tokens:,}",
        str(session.compactions),
        str(session.snips),
        f"{billed:,}",
        f"{share:.0%}",
        format_pct(session.continuity.pct),
        "ok" if session.failure is None else f"FAILED: {session.failure}",
    ]


SESSION_COLUMNS = (
    "session", "fixed", "req", "over", "peak", "comp", "snips", "billed", "cached", "continuity",
    "status",
)  # fmt: skip


def render_summary(console: Console, summary: ReplaySummary) -> None:
    """One policy: a measure/value table for one session, one row per session otherwise."""
    title = (
        f"{Path(summary.source).name} · {summary.format} · window {summary.window:,} · "
        f"policy {summary.policy} · {summary.tokenizer}"
    )
    if len(summary.sessions) == 1:
        render_comparison(console, [summary], title=title)
        return
    table = Table(title=title, title_justify="left")
    for name in SESSION_COLUMNS:
        table.add_column(name, justify="left" if name in ("session", "status") else "right")
    for session in summary.sessions[:50]:
        table.add_row(*session_row(session))
    if len(summary.sessions) > 50:
        table.add_row(f"… {len(summary.sessions) - 50} more (see --json or --report)")
    totals = summary.to_dict()
    failed = int(str(totals["failed_sessions"]))
    table.add_section()
    table.add_row(
        f"all {totals['sessions']}",
        _format(totals["fixed_context"], "fixed_context"),
        str(totals["requests"]),
        str(totals["overflows"]),
        _format(totals["peak_tokens"], "peak_tokens"),
        str(totals["compactions"]),
        str(totals["snips"]),
        _format(totals["billed_prompt_tokens"], "billed_prompt_tokens"),
        _format(totals["cache_eligible_share"], "cache_eligible_share"),
        format_pct(summary.continuity.pct),
        "ok" if not failed else f"FAILED: {failed} of {totals['sessions']}",
    )
    console.print(table)
    render_failures(console, [summary])
    render_notes(console, [summary])
    render_continuity_failures(console, [summary])


COMPARE_ROWS: tuple[tuple[str, str], ...] = (
    ("fixed context tokens (source)", "fixed_context"),
    ("failed sessions", "failed_sessions"),
    ("requests", "requests"),
    ("overflows (over the input budget)", "overflows"),
    ("peak prompt tokens", "peak_tokens"),
    ("compactions", "compactions"),
    ("compactions per 100 requests", "compactions_per_100_requests"),
    ("headroom wasted per compaction, mean", "wasted_headroom.mean"),
    ("continuity after compaction", "continuity"),
    ("results elided by snip", "snips"),
    ("handoffs", "handoffs"),
    ("prompt tokens billed", "billed_prompt_tokens"),
    ("cache-eligible share", "cache_eligible_share"),
    ("cache read share, OpenAI (chat, responses)", "prompt_cache.openai.read_share"),
    ("cache read share, Anthropic", "prompt_cache.anthropic.read_share"),
    ("projection error, mean |%|", "projection_error.mean_abs_pct"),
    ("worst under-estimate %", "projection_error.max_under_pct"),
    ("pipeline seconds", "pipeline_seconds"),
)


def render_comparison(
    console: Console, summaries: Sequence[ReplaySummary], *, title: str | None = None
) -> None:
    """Measures down, policies across: the same work under each policy."""
    first = summaries[0]
    heading = f"{Path(first.source).name} · window {first.window:,} · same work, three policies"
    table = Table(title=title or heading, title_justify="left")
    table.add_column("measure")
    dicts = [s.to_dict() for s in summaries]
    for summary in summaries:
        table.add_column(summary.policy, justify="right")
    for label, key in COMPARE_ROWS:
        table.add_row(label, *(_format(_lookup(d, key), key) for d in dicts))
    console.print(table)
    render_failures(console, summaries)
    render_notes(console, summaries)
    render_continuity_failures(console, summaries)


def render_failures(console: Console, summaries: Sequence[ReplaySummary]) -> None:
    """One line per failed session and policy, with the reason: never a silent zero."""
    for summary in summaries:
        for session in summary.sessions:
            if session.failure is not None:
                console.print(
                    f"[bold red]FAILED[/] {session.name} (policy {summary.policy}, "
                    f"{len(session.requests)} requests replayed): {session.failure}",
                    highlight=False,
                )


def render_notes(console: Console, summaries: Sequence[ReplaySummary]) -> None:
    """What a session's replay says about itself (its fixed context's source …), once each."""
    shown: set[tuple[str, str]] = set()
    for summary in summaries:
        for session in summary.sessions:
            for warning in session.warnings:
                if (session.name, warning) not in shown:
                    shown.add((session.name, warning))
                    console.print(f"[bold cyan]note[/] {session.name}: {warning}", highlight=False)


def render_continuity_failures(console: Console, summaries: Sequence[ReplaySummary]) -> None:
    """The first few things a compaction lost, per policy (the counts are in the table)."""
    for summary in summaries:
        lost = summary.continuity
        for failure in lost.failures[:MAX_FAILURES]:
            console.print(
                f"[bold yellow]continuity[/] (policy {summary.policy}): {failure}", highlight=False
            )
        if len(lost.failures) > MAX_FAILURES:
            more = len(lost.failures) - MAX_FAILURES
            console.print(
                f"[bold yellow]continuity[/] (policy {summary.policy}): … {more} more "
                "(see requests.csv in --report)",
                highlight=False,
            )


def continuity_label(continuity: JSONObject) -> str:
    """``100 % (24 checks, 3 compactions)``; ``–`` when there was no compaction."""
    pct, checks, compactions = (continuity.get(k) for k in ("pct", "checks", "compactions"))
    if not isinstance(pct, int | float) or not isinstance(checks, int):
        return format_pct(None)
    noun = "compaction" if compactions == 1 else "compactions"
    return f"{format_pct(float(pct))} ({checks:,} checks, {compactions} {noun})"


def failed_sessions(summaries: Sequence[ReplaySummary]) -> int:
    """How many (session, policy) replays failed."""
    return sum(s.failed for summary in summaries for s in summary.sessions)


def _lookup(data: JSONObject, key: str) -> JSONValue:
    value: JSONValue = data
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _format(value: JSONValue, key: str) -> str:
    if key.endswith("share") and isinstance(value, float):
        return f"{value:.1%}"
    if key == "wasted_headroom.mean" and isinstance(value, float):
        return f"{value:.1%}"
    if key == "fixed_context" and isinstance(value, dict):
        return _fixed_label(value)
    if key == "continuity" and isinstance(value, dict):
        return continuity_label(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _fixed_label(fixed: JSONObject) -> str:
    low, high, sources = fixed.get("min_tokens"), fixed.get("max_tokens"), fixed.get("sources")
    size = f"{low:,}" if low == high else f"{low:,}–{high:,}"
    names = ", ".join(sources) if isinstance(sources, dict) else ""
    return f"{size} ({names})" if names else size


def summary_json(summaries: Sequence[ReplaySummary]) -> JSONObject:
    """One summary object, or (``--compare``) the common keys plus one object per policy."""
    if len(summaries) == 1:
        return summaries[0].to_dict()
    first = summaries[0].to_dict()
    return {
        "source": first["source"],
        "format": first["format"],
        "window": first["window"],
        "tokenizer": first["tokenizer"],
        "policies": {s.policy: s.to_dict() for s in summaries},
    }


def write_report(
    directory: Path,
    summaries: Sequence[ReplaySummary],
    *,
    handoff_ratio: float,
    compact_ratio: float,
) -> list[Path]:
    """Write ``report.json``, ``requests.csv`` and ``context.png`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    report = {
        **summary_json(summaries),
        "details": [
            {
                "policy": s.policy,
                "sessions": [_session_json(session) for session in s.sessions],
            }
            for s in summaries
        ],
    }
    json_path = directory / "report.json"
    json_path.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    csv_path = directory / "requests.csv"
    with csv_path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_FIELDS)
        for summary in summaries:
            for session in summary.sessions:
                for r in session.requests:
                    error = r.error_pct
                    writer.writerow(
                        [
                            summary.policy,
                            session.name,
                            r.index,
                            r.true_tokens,
                            "" if r.projected_tokens is None else r.projected_tokens,
                            "" if error is None else f"{error:.2f}",
                            r.phase,
                            int(r.handoff),
                            r.snipped,
                            r.compaction or "",
                            "" if r.pre_tokens is None else r.pre_tokens,
                            "" if r.post_tokens is None else r.post_tokens,
                            int(r.overflow),
                            r.cache_eligible_tokens,
                            r.openai_cache_read,
                            r.anthropic_cache_read,
                            r.anthropic_cache_write,
                            round(r.pipeline_seconds * 1e6, 1),
                            "" if r.trigger_tokens is None else r.trigger_tokens,
                            *_continuity_cells(r),
                        ]
                    )
    png = plot_context(
        summaries,
        directory / "context.png",
        handoff_ratio=handoff_ratio,
        compact_ratio=compact_ratio,
    )
    return [json_path, csv_path, png]


def _continuity_cells(request: RequestMetrics) -> list[str | int]:
    """Checks, passed and failures of the request's compaction; empty cells without one."""
    result = request.continuity
    if result is None:
        return ["", "", ""]
    return [result.checks, result.passed, FAILURE_SEPARATOR.join(result.failures)]


def _session_json(session: SessionReport) -> JSONObject:
    return {
        "name": session.name,
        "failed": session.failure is not None,
        "failure": session.failure,
        "refused_tokens": session.refused_tokens,
        "fixed_tokens": session.fixed_tokens,
        "fixed_source": session.fixed_source,
        "recorded_fixed_tokens": session.recorded_fixed_tokens,
        "warnings": list(session.warnings),
        "transcript": session.transcript,
        "requests": len(session.requests),
        "overflows": session.overflows,
        "peak_tokens": session.peak_tokens,
        "compactions": session.compactions,
        "snips": session.snips,
        "handoffs": session.handoffs,
        "wasted_headroom": [round(w, 4) for w in session.wasted_headroom],
        "continuity": session.continuity.to_dict(max_failures=None),
        "billed_prompt_tokens": session.billed_prompt_tokens,
        "cache_eligible_tokens": session.cache_eligible_tokens,
        "prompt_cache": session.prompt_cache(),
        "projection_error": ProjectionError.of(session.requests).to_dict(),
        "pipeline_seconds": round(session.pipeline_seconds, 6),
    }
