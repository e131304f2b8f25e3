"""``cairn inspect``: what a session file holds, for a person or for a script.

The file is loaded read-only with ``cairn.store.read_transcript`` (inspecting
never repairs or otherwise modifies it); the API view is built once and the UI
view reuses its checkpoint verdicts. Problems inside the file — bad lines, a
torn last line, ignored checkpoints, orphan tool calls — are reported as
warnings in the output. Only a path that cannot be inspected at all (missing,
a directory, unreadable, not a transcript, empty) is an error: one line on
stderr and exit code 2.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

import orjson
from rich import box
from rich.cells import cell_len, set_cell_size
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Text

from cairn.messages import (
    KIND_CHAT,
    KIND_COMPACT_SUMMARY,
    JSONValue,
    Message,
)
from cairn.store.inspection import (
    CompactionInfo,
    InspectError,
    Inspection,
    ViewName,
    inspect_transcript,
    plural,
    summary_to_dict,
    view_to_list,
)
from cairn.tokens import estimate_message_tokens

#: Exit code for a path that cannot be inspected (as for a usage error).
EXIT_UNUSABLE = 2
#: A preview is one line of at most this many characters.
PREVIEW_CHARS = 80
#: The summary shows this many of the newest API messages (``--view api`` shows
#: all), compactions and warnings (``--json`` lists all).
SUMMARY_ROWS = 50
SUMMARY_COMPACTIONS = 20
SUMMARY_WARNINGS = 20

#: Short names for the kind column, so the table fits 80 columns.
_KIND_LABELS = {KIND_COMPACT_SUMMARY: "compact", "restoration": "restore"}


def _write_json(value: JSONValue, out: IO[str]) -> None:
    data = orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
    buffer = getattr(out, "buffer", None)
    if buffer is not None:
        # JSON is UTF-8 whatever the terminal's encoding: write the bytes.
        out.flush()
        buffer.write(data)
        buffer.flush()
    else:
        out.write(data.decode())


# ---------------------------------------------------------------------------
# Rich rendering


def render_summary(inspection: Inspection) -> RenderableType:
    transcript = inspection.transcript
    header = transcript.header
    api = inspection.api

    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold", no_wrap=True)
    facts.add_column(overflow="fold")

    def fact(label: str, value: str | Text) -> None:
        facts.add_row(label, value if isinstance(value, Text) else Text(value))

    if inspection.origin:
        fact("store", f"{inspection.origin} ({_size(inspection.file_bytes)} as JSONL)")
    else:
        fact("file", f"{transcript.path} ({_size(inspection.file_bytes)})")
    fact("session", transcript.session_id or "(no session header)")
    if header is not None:
        fact("workspace", header.workspace)
        if header.model:
            fact("model", header.model)
        fact("started", header.ts)
    types = " · ".join(f"{name} {n:,}" for name, n in inspection.record_types.items() if n)
    fact("records", f"{len(transcript.records):,} ({types})" if types else "0")
    fact("bad lines", f"{transcript.bad_lines:,}")
    fact(
        "UI view",
        f"{len(inspection.ui):,} messages "
        f"({plural(inspection.compact_blocks, 'compact block')}, "
        f"{plural(inspection.error_blocks, 'error block')})",
    )
    start = f"from checkpoint {api.checkpoint_id}" if api.checkpoint_id else "from the file start"
    fact(
        "API view",
        f"{len(api.messages):,} messages · ~{inspection.api_tokens_estimate:,} tokens "
        f"(estimate) · {start}",
    )
    invalid = len(api.ignored_checkpoints)
    fact(
        "checkpoints",
        Text.assemble(
            f"{api.valid_checkpoints:,} valid · ",
            (f"{invalid:,} invalid", "bold red" if invalid else ""),
        ),
    )

    parts: list[RenderableType] = [Text("Session", style="bold underline"), facts]
    command = f"cairn inspect {shlex.quote(str(transcript.path))}"
    compactions = inspection.compactions
    if compactions:
        parts += [
            Text(""),
            _compactions_table(compactions[-SUMMARY_COMPACTIONS:], len(compactions)),
        ]
        if len(compactions) > SUMMARY_COMPACTIONS:
            hidden = len(compactions) - SUMMARY_COMPACTIONS
            parts.append(_more(f"{plural(hidden, 'earlier compaction')}", f"{command} --json"))
    parts += [Text(""), *_warnings(inspection.warnings, f"{command} --json")]

    messages = api.messages
    shown = messages[-SUMMARY_ROWS:]
    first = len(messages) - len(shown)
    title = f"API view ({len(messages):,} messages)"
    if first:
        title = f"API view (the last {len(shown):,} of {len(messages):,} messages)"
    parts += [
        Text(""),
        MessageTable(
            shown,
            title=title,
            tokens=inspection.api_tokens[first:],
            first_index=first,
            context=messages,
        ),
    ]
    if first:
        parts.append(_more(f"{plural(first, 'earlier message')}", f"{command} --view api"))
    return Group(*parts)


def _more(what: str, command: str) -> Text:
    return Text(f"… {what} not shown; {command} lists them all", style="dim")


def _compactions_table(compactions: Sequence[CompactionInfo], total: int) -> Table:
    first = total - len(compactions)
    table = Table(
        title=f"Compactions ({total:,})",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("#", justify="right", no_wrap=True)
    # The time gives way first when the terminal is narrow (rich narrows
    # wrappable columns first); the cell text itself never wraps.
    table.add_column("time", min_width=8)
    table.add_column("trigger", no_wrap=True)
    table.add_column("strategy", no_wrap=True)
    table.add_column("tokens", justify="right", no_wrap=True)
    table.add_column("kept", justify="right", no_wrap=True)
    table.add_column("status", no_wrap=True)
    for number, c in enumerate(compactions, start=first + 1):
        table.add_row(
            str(number),
            Text(c.ts.replace("T", " ")[:19], no_wrap=True, overflow="ellipsis"),
            Text(c.trigger),
            Text(c.strategy),
            f"{c.pre_tokens:,} → {c.post_tokens:,}",
            f"{c.replacement_messages:,}",
            Text("valid", "green") if c.valid else Text("ignored", "bold red"),
        )
    return table


def _warnings(warnings: Sequence[str], command: str) -> list[RenderableType]:
    if not warnings:
        return [Text("No warnings.", style="green")]
    lines: list[RenderableType] = [Text(f"Warnings ({len(warnings):,})", style="bold yellow")]
    lines += [Text(f"• {w}") for w in warnings[:SUMMARY_WARNINGS]]
    if len(warnings) > SUMMARY_WARNINGS:
        lines.append(_more(plural(len(warnings) - SUMMARY_WARNINGS, "more warning"), command))
    return lines


@dataclass(frozen=True, slots=True)
class _Row:
    cells: tuple[str, str, str, str, str, str]
    styles: tuple[str, str, str, str, str, str]


_HEADERS = ("#", "role", "kind", "preview", "tools", "~tok")
_RIGHT = (True, False, False, False, False, True)
_MAX_WIDTHS = (None, None, 8, None, 15, None)
_PREVIEW = 3
_GAP = "  "
_MIN_PREVIEW = 12


class MessageTable:
    """One row per message: index, role, kind, one-line preview, tool calls, tokens.

    A rich renderable that lays out fixed-width lines itself: a view can hold
    tens of thousands of messages, and ``rich.table.Table`` measures and wraps
    every cell (about a millisecond per row). Only the preview column gives
    way to a narrow terminal; every row stays on one line. ``context``
    (default ``messages``) is searched for the call each tool result answers,
    so its row can name the tool.
    """

    def __init__(
        self,
        messages: Sequence[Message],
        *,
        title: str,
        tokens: Sequence[int] | None = None,
        first_index: int = 0,
        context: Sequence[Message] | None = None,
    ) -> None:
        self.title = title
        call_names = {c.id: c.name for m in (context or messages) for c in m.tool_calls}
        rows: list[_Row] = []
        for offset, message in enumerate(messages):
            count = tokens[offset] if tokens is not None else estimate_message_tokens(message)
            dim = "dim" if message.meta.hidden else ""
            rows.append(
                _Row(
                    (
                        str(first_index + offset),
                        message.role,
                        _KIND_LABELS.get(message.meta.kind, message.meta.kind),
                        preview(message),
                        _tools_cell(message, call_names),
                        f"{count:,}",
                    ),
                    ("dim", dim, _kind_style(message), dim, "cyan", ""),
                )
            )
        self.rows = rows

    def widths(self, available: int) -> list[int]:
        widths = [cell_len(h) for h in _HEADERS]
        for row in self.rows:
            for i, cell in enumerate(row.cells):
                if i != _PREVIEW:
                    widths[i] = max(widths[i], cell_len(cell))
        for i, limit in enumerate(_MAX_WIDTHS):
            if limit is not None:
                widths[i] = min(widths[i], limit)
        others = sum(w for i, w in enumerate(widths) if i != _PREVIEW)
        room = available - 1 - others - len(_GAP) * (len(widths) - 1)
        longest = max((cell_len(r.cells[_PREVIEW]) for r in self.rows), default=0)
        widths[_PREVIEW] = max(_MIN_PREVIEW, min(room, max(longest, cell_len("preview"))))
        return widths

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        widths = self.widths(options.max_width)
        style = console.get_style
        yield Segment(self.title, style("bold"))
        yield Segment.line()
        yield from self._line(_HEADERS, ("bold",) * len(_HEADERS), widths, style)
        yield Segment(" " + "─" * (sum(widths) + len(_GAP) * (len(widths) - 1)), style("dim"))
        yield Segment.line()
        if not self.rows:
            yield Segment(" (no messages)", style("dim"))
            yield Segment.line()
        for row in self.rows:
            yield from self._line(row.cells, row.styles, widths, style)

    @staticmethod
    def _line(
        cells: Sequence[str],
        styles: Sequence[str],
        widths: Sequence[int],
        style: Callable[[str], Style],
    ) -> Iterator[Segment]:
        yield Segment(" ")
        last = len(cells) - 1
        for i, (cell, name, width) in enumerate(zip(cells, styles, widths, strict=True)):
            yield Segment(_fit(cell, width, right=_RIGHT[i]), style(name) if name else None)
            if i != last:
                yield Segment(_GAP)
        yield Segment.line()


def _fit(text: str, width: int, *, right: bool = False) -> str:
    """``text`` in exactly ``width`` terminal cells: cut with ``…``, or padded."""
    size = len(text) if text.isascii() else cell_len(text)
    if size > width:
        return set_cell_size(text, width - 1) + "…" if width > 1 else "…"[:width]
    padding = " " * (width - size)
    return padding + text if right else text + padding


def _kind_style(message: Message) -> str:
    if message.meta.hidden:
        return "dim"
    if message.meta.kind == KIND_COMPACT_SUMMARY:
        return "bold magenta"
    if message.meta.kind == "error":
        return "bold red"
    return "" if message.meta.kind == KIND_CHAT else "yellow"


def _tools_cell(message: Message, call_names: dict[str, str]) -> str:
    if message.tool_calls:
        return ", ".join(c.name for c in message.tool_calls)
    if message.role == "tool":
        name = message.name or call_names.get(message.tool_call_id or "")
        return f"← {name}" if name else "← ?"
    return ""


def preview(message: Message, limit: int = PREVIEW_CHARS) -> str:
    """The content on one line, at most ``limit`` characters (``…`` marks a cut)."""
    # Whitespace is collapsed in a prefix only: a tool result may be megabytes long.
    text = " ".join(message.text[: limit * 16].split())
    extra = message.meta.extra
    if message.meta.kind == KIND_COMPACT_SUMMARY and "trigger" in extra:
        # A compact block of the UI view: say what kind of compaction it was.
        text = (
            f"[{extra.get('trigger')}/{extra.get('strategy')} "
            f"{_int_text(extra.get('pre_tokens'))}→{_int_text(extra.get('post_tokens'))}] {text}"
        )
    if not text and message.tool_calls:
        # A bare tool request: show what it asks for.
        text = "; ".join(f"{c.name} {' '.join(c.arguments.split())}" for c in message.tool_calls)
    images = len(message.images)
    if images:
        text = f"[{plural(images, 'image')}] {text}".rstrip()
    if not text and message.reasoning:
        text = "(reasoning only)"
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def _int_text(value: JSONValue | None) -> str:
    return f"{value:,}" if isinstance(value, int) else "?"


def _size(n: int) -> str:
    size = float(n)
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{n:,} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n:,} bytes"


# ---------------------------------------------------------------------------
# Entry point


def run_inspect(
    path: str | Path,
    *,
    as_json: bool = False,
    view: ViewName | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    origin: str | None = None,
) -> int:
    """``cairn inspect``; returns the exit code (0, or 2 when the path is unusable).

    ``origin`` names the store ``path`` is a copy of (a session read from it).
    """
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    try:
        inspection = inspect_transcript(path)
        if origin is not None:
            inspection = replace(inspection, origin=origin)
    except InspectError as exc:
        message = " ".join(str(exc).splitlines())
        err.write(f"cairn inspect: {message}\n")
        err.flush()
        return EXIT_UNUSABLE

    if as_json:
        value: JSONValue = view_to_list(inspection, view) if view else summary_to_dict(inspection)
        _write_json(value, out)
        out.flush()
        return 0

    console = Console(file=out, highlight=False)
    if view == "api":
        api = inspection.api
        console.print(
            MessageTable(
                api.messages,
                title=(
                    f"API view ({len(api.messages):,} messages, "
                    f"~{inspection.api_tokens_estimate:,} tokens)"
                ),
                tokens=inspection.api_tokens,
            )
        )
    elif view == "ui":
        console.print(
            MessageTable(inspection.ui, title=f"UI view ({len(inspection.ui):,} messages)")
        )
    else:
        console.print(render_summary(inspection))
    out.flush()
    return 0
