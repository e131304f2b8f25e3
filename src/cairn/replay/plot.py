"""The context plot: tokens per request against the window and the two lines.

Needs matplotlib (``pip install 'cairn[plot]'``); it draws off-screen.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from cairn.errors import CairnError
from cairn.replay.metrics import ReplaySummary


class PlotUnavailableError(CairnError, RuntimeError):
    """matplotlib is not installed."""


def plot_context(
    summaries: Sequence[ReplaySummary],
    path: Path,
    *,
    handoff_ratio: float = 0.70,
    compact_ratio: float = 0.80,
) -> Path:
    """Draw every policy's true request size per request (sessions end to end) to ``path``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError as exc:
        raise PlotUnavailableError("the plot needs matplotlib: pip install 'cairn[plot]'") from exc

    first = summaries[0]
    budget = first.sessions[0].input_budget if first.sessions else 0
    figure, axes = plt.subplots(figsize=(10, 5), dpi=110)
    for summary in summaries:
        requests = summary.requests
        xs = list(range(1, len(requests) + 1))
        (line,) = axes.plot(
            xs, [r.true_tokens for r in requests], linewidth=1.4, label=f"policy {summary.policy}"
        )
        marks = [(x, r.true_tokens) for x, r in zip(xs, requests, strict=True) if r.compaction]
        if marks:
            axes.scatter(
                [x for x, _ in marks],
                [y for _, y in marks],
                marker="v",
                s=46,
                color=line.get_color(),
                zorder=3,
                label=f"compaction ({summary.policy})",
            )
    axes.axhline(first.window, color="black", linewidth=1.2, label=f"window {first.window:,}")
    axes.axhline(budget, color="dimgray", linestyle="--", linewidth=1, label="input budget")
    axes.axhline(
        compact_ratio * budget,
        color="tab:red",
        linestyle=":",
        label=f"compaction {compact_ratio:.0%}",
    )
    axes.axhline(
        handoff_ratio * budget,
        color="tab:orange",
        linestyle=":",
        label=f"handoff {handoff_ratio:.0%}",
    )
    boundaries = _session_starts(first)
    for x in boundaries[1:]:
        axes.axvline(x - 0.5, color="lightgray", linewidth=0.8)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("request")
    axes.set_ylabel("prompt tokens (exact)")
    axes.set_title(f"{Path(first.source).name} — context per request ({first.tokenizer})")
    axes.set_ylim(bottom=0)
    axes.legend(loc="upper left", fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path


def _session_starts(summary: ReplaySummary) -> list[int]:
    starts, position = [], 1
    for session in summary.sessions:
        starts.append(position)
        position += len(session.requests)
    return starts
