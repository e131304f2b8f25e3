"""The terminal app's rules as small pure functions.

Nothing here touches Textual: which messages are rendered (the latest 30,
10 in expanded mode — seed 004 — and 30 more above at each step up), how a
tool call, the "earlier messages" line, the queued lines, the mode or the
context meter reads, which slash commands are refused in which state, how a
typed ``/`` prefix or ``@path`` completes, the one-line hint under the list,
the session and rewind pickers' lines. The message list the app folds events
into is ``transcript.Transcript``. The widgets only draw what these say.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias, TypeVar

from rich.cells import cell_len, get_character_cell_size

from cairn.agent import (
    COMMANDS,
    HELP,
    AgentSession,
    PromptPoint,
    QueuedPrompt,
    RestoredFiles,
    SessionMode,
    SessionStatus,
    SessionUsage,
)
from cairn.messages import ToolCall
from cairn.surfaces.tail import compaction_hint, stream_tail

#: Messages rendered in the normal (collapsed) view and in the expanded view (seed 004).
RENDER_LIMIT = 30
RENDER_LIMIT_EXPANDED = 10
#: Entries of the UI view read from the transcript at a time: the end of a session
#: when it opens, then the page before the first one held when the user goes up to it.
HISTORY_PAGE = 300
#: Entries mounted above the first one shown each time the user goes up to the top.
EARLIER_STEP = 30
#: A tool's result is shown as at most this many terminal cells, on one line.
RESULT_CHARS = 120
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"

T = TypeVar("T")


def render_limit(expanded: bool) -> int:
    return RENDER_LIMIT_EXPANDED if expanded else RENDER_LIMIT


def visible(items: Sequence[T], expanded: bool) -> list[T]:
    """The most recent ``render_limit(expanded)`` items, oldest first; the rest stay in memory."""
    limit = render_limit(expanded)
    return list(items[-limit:]) if len(items) > limit else list(items)


def earlier_text(messages: int) -> str:
    """The line above the first entry shown while there is more before it.

    ``messages`` counts the session's messages before that entry (what the
    app said itself, notices and errors, is not counted).
    """
    if messages <= 0:
        return "more above — scroll up to show (Ctrl+Home)"
    noun = "message" if messages == 1 else "messages"
    return f"{messages:,} earlier {noun} — scroll up to load (Ctrl+Home)"


def one_line(text: str, limit: int = RESULT_CHARS) -> str:
    """``text`` on one line (breaks as ``⏎``), cut to ``limit`` terminal cells with ``…``.

    Cells, not characters: a Chinese character takes two, so 120 of them would
    be 240 cells and wrap under the line they belong to. A tab is one space: it
    counts no cell, yet the screen widens it to the next tab stop.
    """
    lines = (line.strip().replace("\t", " ") for line in text.strip().splitlines())
    flat = " ⏎ ".join(line for line in lines if line)
    return flat if cell_len(flat) <= limit else cut_cells(flat, limit - 1) + "…"


def cut_cells(text: str, cells: int) -> str:
    """The longest start of ``text`` that takes at most ``cells`` terminal cells.

    A wide character that would straddle the limit is left out whole (never
    half of it, never a space in its place).
    """
    used = 0
    for index, character in enumerate(text):
        used += get_character_cell_size(character)
        if used > cells:
            return text[:index]
    return text


def tool_label(call: ToolCall) -> str:
    """``read_file {"path": "a.py"}``: the call and its arguments, on one line."""
    return f"{call.name} {one_line(call.arguments, 200)}".rstrip()


#: The footer's quiet word for the summary prepared in the background (DESIGN §5.5a).
PREPARED_TEXT = {"preparing": "preparing summary", "ready": "summary ready"}


#: The meter past the input budget: no request that large is ever sent (the next compacts first).
CONTEXT_FULL = "context full · compacts before the next request"


def meter_text(usage: SessionUsage, *, prepared: str | None = None) -> str:
    """The footer's context meter: ``usage.meter`` over the input budget, and compactions.

    The reading is the core's (``SessionUsage.meter``, the one rule every
    surface shows): the provider's count, else the pipeline's estimate marked
    ``~`` so it is never taken for a count, and past the budget no number at
    all — ``~36,401 / 4,096`` would be a request that is never sent.
    ``prepared``: the background summary's state, a quiet last word (never
    the compacting hint: nobody waits for it).
    """
    reading, budget = usage.meter, usage.input_budget
    shown = reading.tokens
    used = f"{'~' if reading.estimated else ''}{shown:,}" if shown is not None else "–"
    if reading.over_budget:
        context = CONTEXT_FULL
    elif budget:
        share = f" ({shown * 100 // budget}%)" if shown is not None else ""
        context = f"context {used} / {budget:,} tokens{share}"
    else:
        context = f"context {used} tokens"
    compactions = usage.compactions
    noun = "compaction" if compactions == 1 else "compactions"
    quiet = f" · {PREPARED_TEXT[prepared]}" if prepared in PREPARED_TEXT else ""
    return f"{context} · {compactions} {noun}{quiet}"


def mode_text(mode: SessionMode) -> str:
    """The footer's mode, and the key that changes it."""
    return f"mode {mode} · Shift+Tab"


def queued_text(prompts: Sequence[QueuedPrompt]) -> str:
    """The lines sent while the agent works, under the list; empty when none wait.

    One row each, marked ``queued``; the last says how to take them back.
    """
    rows = [f"queued › {one_line(p.text, 100) or '(empty)'}" for p in prompts]
    if rows:
        rows[-1] += "   (Esc edits)"
    return "\n".join(rows)


def hint_text(
    *,
    compacting: bool,
    compaction_text: str,
    status: SessionStatus,
    streamed: str,
    frame: int = 0,
) -> str:
    """The one line under the list: the compaction hint first, else the response's spinner.

    Empty when there is nothing to show (the widget hides then).
    """
    if compacting:
        return compaction_hint(compaction_text)
    spinner = SPINNER[frame % len(SPINNER)]
    if status == "streaming":
        return f"{spinner} {stream_tail(streamed)}" if streamed else f"{spinner} Thinking"
    if status == "tools":
        return f"{spinner} Running tools"
    return ""


# -- slash commands -----------------------------------------------------------

AppCommand: TypeAlias = Literal[
    "/compact",
    "/clear",
    "/resume",
    "/fork",
    "/rewind",
    "/status",
    "/context",
    "/cost",
    "/model",
    "/mcp",
    "/help",
]
#: Commands that leave the session shown for another: refused while it works.
LEAVING = ("/clear", "/resume", "/fork", "/rewind")


@dataclass(frozen=True)
class Submission:
    """What the input line asked for: a prompt, a command, or nothing."""

    kind: Literal["prompt", "command", "unknown", "empty"]
    text: str
    command: str = ""
    argument: str = ""


def classify(text: str) -> Submission:
    """A known slash command, an unknown one (``/foo``), an empty line, or a prompt.

    A line whose first word looks like a command name but is not one is an
    unknown command rather than a prompt, so a typo never reaches the model;
    a path (``/etc/hosts is …``) is still a prompt.
    """
    stripped = text.strip()
    if not stripped:
        return Submission("empty", "")
    # Any whitespace ends the name: ``/compact`` then a newline still is the command.
    name, *rest = stripped.split(None, 1)
    argument = rest[0].strip() if rest else ""
    if name in COMMANDS:
        return Submission("command", stripped, name, argument)
    if name.startswith("/") and name[1:].replace("-", "").isalpha():
        return Submission("unknown", stripped, name)
    return Submission("prompt", text)


def _usages() -> dict[str, tuple[str, str]]:
    """Each command's usage and description, read from the help text (one line each)."""
    found: dict[str, tuple[str, str]] = {}
    for line in HELP.splitlines():
        usage, _, description = line.strip().partition("  ")
        name = usage.split(" ", 1)[0]
        if name in COMMANDS:
            found[name] = (usage, description.strip())
    return {name: found.get(name, (name, "")) for name in COMMANDS}


#: ``{"/compact": ("/compact [instructions]", "summarize the conversation now …"), …}``
USAGES = _usages()


def complete(prefix: str) -> list[str]:
    """The commands a typed ``/`` prefix can still become, in the help's order.

    Only a first word being typed completes: no ``/``, any whitespace (an
    argument has begun) or a multi-line prompt gives nothing.
    """
    if not prefix.startswith("/") or any(c.isspace() for c in prefix):
        return []
    return [name for name in COMMANDS if name.startswith(prefix)]


def completion(prefix: str) -> str | None:
    """What Tab turns ``prefix`` into: the unique (else the first) match, or ``None``.

    A command that takes an argument gets a space after it, ready for the argument.
    """
    matches = complete(prefix)
    if not matches:
        return None
    name = matches[0]
    return f"{name} " if " " in USAGES[name][0] else name


def completion_hint(prefix: str) -> str:
    """The line under the input while a command is typed; empty when nothing matches.

    One match shows its usage and what it does; several show their usages.
    """
    matches = complete(prefix)
    if len(matches) == 1:
        usage, description = USAGES[matches[0]]
        return f"{usage}  {description}"
    return "   ".join(USAGES[name][0] for name in matches)


# -- @path completion ----------------------------------------------------------

#: ``@`` at a word's start and the path typed after it, up to the cursor.
_MENTION_AT_END = re.compile(r"(?<!\S)@([^\s@]*)$")
#: Paths shown on the completion line (it is one row).
PATHS_SHOWN = 12


def mention_prefix(before_cursor: str) -> str | None:
    """The path being typed after an ``@`` that ends ``before_cursor``; ``None`` if none is."""
    found = _MENTION_AT_END.search(before_cursor)
    return found.group(1) if found else None


def path_completion(prefix: str, paths: Sequence[str]) -> str | None:
    """What Tab turns the ``@`` ``prefix`` into, given the workspace's ``paths`` for it.

    The paths' common start when it is longer than what is typed, else the
    first path; ``None`` when there is nothing to add. A file offered alone
    gets a space after it (done); a folder ends with ``/`` and keeps completing.
    """
    if not paths:
        return None
    # Character by character, not by path component: "src/ca" → "src/cairn/" is the point.
    common = paths[0]
    for path in paths[1:]:
        while not path.startswith(common):
            common = common[:-1]
    chosen = common if len(common) > len(prefix) else paths[0]
    if len(paths) == 1 and not chosen.endswith("/"):
        chosen += " "
    return None if chosen == prefix else chosen


def paths_hint(paths: Sequence[str]) -> str:
    """The completion line while an ``@path`` is typed: the first paths, and how many more."""
    shown = "   ".join(f"@{path}" for path in paths[:PATHS_SHOWN])
    more = len(paths) - PATHS_SHOWN
    return f"{shown}   … {more} more" if more > 0 else shown


def refusal(command: str, status: SessionStatus, busy: bool) -> str | None:
    """Why ``command`` cannot run now, or ``None``.

    ``busy`` means the app still runs a prompt or a command whose status has
    not reached the session yet. ``/compact`` itself is judged by the runtime
    (it knows a response streams, tools run or a compaction already runs);
    leaving the session while it works is refused here, before the facade's
    own guard would raise.
    """
    if command in LEAVING and (status != "idle" or busy):
        state = status if status != "idle" else "busy"
        why = AgentSession.busy_reason(state, cancel="press Esc to cancel")
        return f"{command} refused: {why}"
    return None


class History:
    """The input line's history: up goes back, down comes forward to the line being typed."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._at: int | None = None
        self._draft = ""

    def add(self, line: str) -> None:
        if line.strip() and (not self._lines or self._lines[-1] != line):
            self._lines.append(line)
        self._at = None

    def back(self, current: str) -> str:
        if not self._lines:
            return current
        if self._at is None:
            self._draft, self._at = current, len(self._lines)
        self._at = max(0, self._at - 1)
        return self._lines[self._at]

    def forward(self, current: str) -> str:
        if self._at is None:
            return current
        self._at += 1
        if self._at >= len(self._lines):
            self._at = None
            return self._draft
        return self._lines[self._at]


def age_text(seconds: float) -> str:
    """How long ago, coarsely: ``just now``, ``5 min ago``, ``3 h ago``, ``2 days ago``."""
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h ago"
    days = int(seconds // 86400)
    return "1 day ago" if days == 1 else f"{days} days ago"


def session_line(first_prompt: str, messages: int, age_seconds: float) -> str:
    """One session in the picker: its first prompt, its size and when it was last used."""
    return f"{prompt_text(first_prompt)} · {messages_text(messages)} · {age_text(age_seconds)}"


def prompt_text(first_prompt: str) -> str:
    """A session's first prompt as a list of sessions shows it: one line, 60 characters."""
    return one_line(first_prompt, 60) or "(no prompt yet)"


def messages_text(messages: int) -> str:
    """``1 message``, ``5 messages``."""
    return f"{messages} {'message' if messages == 1 else 'messages'}"


# -- rewind ---------------------------------------------------------------------


def point_line(number: int, point: PromptPoint, age_seconds: float) -> str:
    """One prompt in the rewind picker: its number, first line, age, and whether files changed."""
    note = " · files changed since" if point.files_changed else ""
    return f"{number}. {prompt_text(point.text)} · {age_text(age_seconds)}{note}"


def rewound_text(original: str, branch: str, files: RestoredFiles) -> str:
    """The notice after a rewind: the new branch, and what it did (or could not do) to files."""
    lines = [f"rewound: new session {branch} (/resume {original} goes back to the original)"]
    lines += [f"restored {path}" for path in files.restored]
    lines += [f"removed {path}" for path in files.removed]
    lines += [f"not restorable: {path} ({why})" for path, why in files.not_restorable]
    lines += [f"not restorable, ran by bash: {command}" for command in files.bash_commands]
    return "\n".join(lines)
