"""``cairn replay``: run a recorded session through the pipeline and show what happened.

Exit codes: 0 every session replayed to its end; 1 some session failed (the
window is too small for its fixed context, or a request could not be brought
under the input budget), each named with its reason; 2 a usage or import error.

After every compaction the replay checks continuity (``cairn.replay.continuity``):
the tables show the share of checks passed — ``–`` when nothing was compacted,
never 100 % by default — and the first things lost are printed below them; the
``--json`` summary carries the same figures under ``continuity``. What a
compaction lost is a measurement, not a failed replay: it does not change the
exit code.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from cairn.context.config import CompactionConfig
from cairn.context.llm_summarizer import LLMSummarizer
from cairn.context.summarizer import Summarizer
from cairn.errors import CairnError
from cairn.provider import model_from_env, open_provider
from cairn.provider.config import MIN_CONTEXT_WINDOW
from cairn.replay.engine import MessageTokens, ReplayOptions, replay_sessions
from cairn.replay.fixed_context import FixedContextError, check_requested, recorded_fixed
from cairn.replay.metrics import POLICIES, Policy, ReplaySummary, RequestMetrics
from cairn.replay.report import (
    failed_sessions,
    render_comparison,
    render_summary,
    summary_json,
    write_report,
)
from cairn.replay.session import ImportResult, SessionImportError
from cairn.tokens import TokenizerError, get_tokenizer

EXIT_FAILED = 1
EXIT_ERROR = 2
SUMMARIZERS = ("fallback", "llm")


class ReplayUsageError(CairnError, ValueError):
    """Arguments that cannot work together; the message says which and why."""


@dataclass(frozen=True)
class ReplayArgs:
    path: Path
    format: str
    session: int | None
    window: int
    tokenizer: str
    summarizer: str
    policy: Policy
    compare: bool
    as_json: bool
    report: Path | None
    #: ``--fixed-tokens``: a whole number of tokens, or ``auto``.
    fixed_tokens: str = "auto"


def run_replay(args: ReplayArgs) -> int:
    err = Console(stderr=True)
    try:
        imported, config, fixed_tokens = _prepare(args)
    except (SessionImportError, ReplayUsageError, FixedContextError, TokenizerError) as exc:
        print(f"cairn replay: {exc}", file=sys.stderr)
        return EXIT_ERROR
    try:
        summarizer = _summarizer(args.summarizer)
    except ReplayUsageError as exc:
        print(f"cairn replay: {exc}", file=sys.stderr)
        return EXIT_ERROR
    policies: Sequence[Policy] = POLICIES if args.compare else (args.policy,)
    total = sum(1 for s in imported.sessions for m in s.messages if m.role == "assistant")
    with (
        _transcripts_dir(args.report) as folder,
        _progress(err, total * len(policies), args) as tick,
    ):
        summaries = [
            ReplaySummary(
                source=str(args.path),
                format=imported.format,
                window=args.window,
                tokenizer=args.tokenizer,
                policy=policy,
                sessions=tuple(
                    asyncio.run(
                        replay_sessions(
                            imported.sessions,
                            ReplayOptions(
                                args.window,
                                policy,
                                args.tokenizer,
                                config,
                                summarizer,
                                fixed_tokens,
                            ),
                            folder / policy if len(policies) > 1 else folder,
                            on_request=tick,
                        )
                    )
                ),
            )
            for policy in policies
        ]
        written = (
            write_report(
                args.report,
                summaries,
                handoff_ratio=config.handoff_ratio,
                compact_ratio=config.compact_ratio,
            )
            if args.report is not None
            else []
        )
    failed = failed_sessions(summaries)
    if args.as_json:
        sys.stdout.buffer.write(orjson.dumps(summary_json(summaries)) + b"\n")
        sys.stdout.flush()
        return _exit(failed, 'the reasons are under "failures"')
    out = Console()
    for warning in imported.warnings[:20]:
        err.print(f"[yellow]warning:[/] {warning}", highlight=False)
    if len(imported.warnings) > 20:
        err.print(f"[yellow]warning:[/] … {len(imported.warnings) - 20} more")
    if len(summaries) == 1 or len(imported.sessions) > 1:
        for summary in summaries:
            render_summary(out, summary)
    if len(summaries) > 1:
        render_comparison(out, summaries)
    for path in written:
        out.print(f"wrote {path}", highlight=False)
    return _exit(failed, "reasons above")


def _exit(failed: int, where: str) -> int:
    """1 when any session failed, said on stderr; 0 otherwise."""
    if not failed:
        return 0
    replays = "replay" if failed == 1 else "replays"
    print(f"cairn replay: {failed} session {replays} failed ({where})", file=sys.stderr)
    return EXIT_FAILED


def parse_fixed_tokens(text: str) -> int | None:
    """``--fixed-tokens``: ``auto`` (``None``) or a whole number of tokens, 0 or more."""
    if text.strip().lower() == "auto":
        return None
    try:
        value = int(text.replace(",", "").replace("_", ""))
    except ValueError:
        value = -1
    if value < 0:
        raise ReplayUsageError(
            f"--fixed-tokens must be 'auto' or a whole number of tokens (0 or more), got {text!r}"
        )
    return value


def check_fixed_tokens(imported: ImportResult, fixed_tokens: int, tokenizer: str) -> None:
    """``--fixed-tokens N`` must cover what every session's recording carries."""
    count = MessageTokens(tokenizer)
    for session in imported.sessions:
        check_requested(session.name, fixed_tokens, count.fixed(recorded_fixed(session)))


def _summarizer(name: str) -> Summarizer | None:
    """The LLM summarizer against the configured endpoint, or ``None`` for the fallback."""
    if name != "llm":
        return None
    model = model_from_env()
    if model is None:
        raise ReplayUsageError(
            "--summarizer llm needs a model: set CAIRN_MODEL (and OPENAI_BASE_URL and "
            "OPENAI_API_KEY for your endpoint)"
        )
    return LLMSummarizer(open_provider(model), model)


def _prepare(args: ReplayArgs) -> tuple[ImportResult, CompactionConfig, int | None]:
    if args.summarizer not in SUMMARIZERS:
        raise ReplayUsageError(f"unknown summarizer {args.summarizer!r}; choose fallback or llm")
    if args.window < MIN_CONTEXT_WINDOW:
        raise ReplayUsageError(
            f"--window must be at least {MIN_CONTEXT_WINDOW} tokens, got {args.window}"
        )
    config = CompactionConfig()
    fixed_tokens = parse_fixed_tokens(args.fixed_tokens)
    get_tokenizer(args.tokenizer)  # fail before any work if it is unknown or not installed
    from cairn.replay.importers import import_sessions

    imported = import_sessions(args.path, args.format, args.session)
    if not imported.sessions:
        raise SessionImportError(f"{args.path}: no session to replay")
    if fixed_tokens is not None:
        check_fixed_tokens(imported, fixed_tokens, args.tokenizer)
    return imported, config, fixed_tokens


@contextmanager
def _transcripts_dir(report: Path | None) -> Iterator[Path]:
    if report is not None:
        report.mkdir(parents=True, exist_ok=True)
        yield report
        return
    with tempfile.TemporaryDirectory(prefix="cairn-replay-") as folder:
        yield Path(folder)


@contextmanager
def _progress(
    console: Console, total: int, args: ReplayArgs
) -> Iterator[Callable[[RequestMetrics], None]]:
    """A progress bar on a terminal for long replays; silent otherwise."""
    if args.as_json or not console.is_terminal or total < 200:
        yield lambda _: None
        return
    with Progress(
        TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), console=console, transient=True
    ) as progress:
        task = progress.add_task("replay", total=total)
        yield lambda _: progress.advance(task)
