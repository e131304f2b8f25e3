"""The continuation ledger: its seven sections and the compact block that carries it.

Both the deterministic fallback and the LLM summarizer produce this block, so
its layout lives here: the ledger's headings, the host-placed exact
continuation records, the todo list and the files written, then the
active-task checkpoint (``cairn.context.checkpoint``) after the ledger.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

from cairn.context.checkpoint import ACTIVE_TASK_KEY, ActiveTask
from cairn.context.effects import ToolEffects, written_files
from cairn.messages import KIND_COMPACT_SUMMARY, Message, MessageMeta
from cairn.prompts import load_prompt
from cairn.tokens import estimate_text_tokens

#: The seven headings of the continuation ledger, in order (a host protocol).
LEDGER_HEADINGS: tuple[str, ...] = (
    "Objective and constraints",
    "Decisions and rationale",
    "Workspace mutations",
    "Verification evidence",
    "Active tasks and background work",
    "Open risks or blockers",
    "Exact next action",
)
EMPTY_SECTION = "(none)"


# ---------------------------------------------------------------------------
# The ledger


def render_ledger(sections: Mapping[str, str]) -> str:
    """The ledger text: every heading in order, ``(none)`` where nothing is known."""
    parts = []
    for heading in LEDGER_HEADINGS:
        body = sections.get(heading, "").strip() or EMPTY_SECTION
        parts.append(f"## {heading}\n{body}")
    return "\n\n".join(parts)


# ---------------------------------------------------------------------------
# The block


def render_checkpoint(active_task: ActiveTask) -> str:
    return active_task.render()


def build_compact_block(ledger: str, active_task: ActiveTask) -> Message:
    """The user message that opens the context after a compaction (seed 004 §1.3)."""
    body = [
        load_prompt("continuation_preface"),
        f"<continuation-ledger>\n{ledger}\n</continuation-ledger>",
    ]
    checkpoint = render_checkpoint(active_task)
    if checkpoint:
        body.append(checkpoint)
    return Message(
        role="user",
        content="\n\n".join(body),
        meta=MessageMeta(
            kind=KIND_COMPACT_SUMMARY,
            synthetic=True,
            extra={ACTIVE_TASK_KEY: active_task.to_json()},
        ),
    )


# ---------------------------------------------------------------------------
# One ledger for both paths: headings, exact continuation records, the todo list
#
# The LLM summary and the deterministic fallback go through these same rules,
# so what the host promised to keep — exact records, the todo list — survives
# either way, verbatim.

MAX_EXACT_RECORDS = 32
MAX_EXACT_RECORD_CHARS = 16_384
#: The todo list's own budget in the ledger; past it completed items go first,
#: then the oldest — whole items, never a cut one.
TODO_SECTION_TOKENS = 2_000

_HEADING = re.compile(r"^\s{0,3}#{1,6}\s*(?:\d+[.)]\s*)?(?P<title>.+?)\s*#*\s*$")
_RECORD = re.compile(r"^EXACT CONTINUATION RECORD \[(?P<heading>[^\]]+)\] :: (?P<payload>.*)$")


def _heading_of(line: str) -> str | None:
    match = _HEADING.match(line)
    if not match:
        return None
    title = match.group("title").strip().strip("*").strip().rstrip(":").casefold()
    for heading in LEDGER_HEADINGS:
        if title == heading.casefold():
            return heading
    return None


def normalize_ledger(summary: str) -> str:
    """Put the model's sections under the seven headings, in order, none missing.

    A summary without any of the headings is passed through unchanged (the
    model ignored the format; its text is still the best summary we have).
    Text before the first heading joins the first section; an unknown
    heading's text stays with the section it follows.
    """
    sections: dict[str, list[str]] = {h: [] for h in LEDGER_HEADINGS}
    current: str | None = None
    preamble: list[str] = []
    found = False
    for line in summary.splitlines():
        heading = _heading_of(line)
        if heading is not None:
            current, found = heading, True
            continue
        (sections[current] if current else preamble).append(line)
    if not found:
        return summary.strip()
    sections[LEDGER_HEADINGS[0]] = preamble + sections[LEDGER_HEADINGS[0]]
    parts = []
    for heading in LEDGER_HEADINGS:
        body = "\n".join(sections[heading]).strip() or EMPTY_SECTION
        parts.append(f"## {heading}\n{body}")
    return "\n\n".join(parts)


def exact_records(messages: Sequence[Message]) -> list[tuple[str, str]]:
    """``EXACT CONTINUATION RECORD [<heading>] :: <payload>`` lines of the source, de-duplicated.

    At most ``MAX_EXACT_RECORDS`` records and ``MAX_EXACT_RECORD_CHARS``
    characters in all, oldest first; lines naming an unknown heading are ignored.
    """
    known = {h.casefold(): h for h in LEDGER_HEADINGS}
    seen: dict[tuple[str, str], None] = {}
    size = 0
    for message in messages:
        for line in message.text.splitlines():
            match = _RECORD.match(line.strip())
            if not match:
                continue
            heading = known.get(match.group("heading").strip().casefold())
            if heading is None:
                continue
            record = (heading, match.group("payload"))
            if record in seen:
                continue
            cost = len(line.strip())
            if len(seen) >= MAX_EXACT_RECORDS or size + cost > MAX_EXACT_RECORD_CHARS:
                return list(seen)
            seen[record] = None
            size += cost
    return list(seen)


def place_exact_records(ledger: str, records: Sequence[tuple[str, str]]) -> str:
    """Append each record verbatim at the end of its heading's section (host-placed)."""
    if not records:
        return ledger
    lines = ledger.splitlines()
    if not any(_heading_of(line) for line in lines):
        ledger = normalize_ledger(f"## {LEDGER_HEADINGS[0]}\n{ledger}")
        lines = ledger.splitlines()
    out: list[str] = []
    current: str | None = None

    def flush(section: str | None) -> None:
        for heading, payload in records:
            if heading == section:
                out.append(f"EXACT CONTINUATION RECORD [{heading}] :: {payload}")

    for line in lines:
        heading = _heading_of(line)
        if heading is not None:
            while out and not out[-1].strip():
                out.pop()
            flush(current)
            if current is not None:
                out.append("")
            current = heading
        out.append(line)
    flush(current)
    return "\n".join(out)


def todo_section(messages: Sequence[Message]) -> str:
    """The newest todo list, whole: one line per item, never an item cut in two.

    Within ``TODO_SECTION_TOKENS`` every item is listed; past it completed
    items are left out first, then the oldest, and a line says how many. A
    list in a shape this does not know is repeated as its arguments, whole.
    """
    call = next(
        (c for m in reversed(messages) for c in reversed(m.tool_calls) if "todo" in c.name.lower()),
        None,
    )
    if call is None:
        return ""
    items = todo_items(call.arguments)
    if items is None:
        raw = call.arguments.strip()
        if estimate_text_tokens(raw) <= TODO_SECTION_TOKENS:
            return f"`{call.name}` {raw}"
        return f"`{call.name}`: the latest todo list ({len(raw):,} characters) is in the transcript"
    lines = [f"- [{status}] {content}" for status, content in items]
    keep = list(range(len(lines)))
    order = [i for i, (status, _) in enumerate(items) if status == "completed"]
    order += [i for i in range(len(items)) if i not in set(order)]
    used = sum(estimate_text_tokens(line) + 1 for line in lines)
    for index in order:
        if used <= TODO_SECTION_TOKENS:
            break
        keep.remove(index)
        used -= estimate_text_tokens(lines[index]) + 1
    left_out = len(lines) - len(keep)
    note = [f"({left_out} item(s) not listed; the transcript has them)"] if left_out else []
    return "\n".join([f"Todo list (`{call.name}`):", *(lines[i] for i in keep), *note])


def todo_items(arguments: str) -> list[tuple[str, str]] | None:
    """``(status, content)`` of each item of a todo tool call, or ``None`` if not a todo list.

    Cairn's ``todo_write`` and Claude Code's ``TodoWrite`` send
    ``{"todos": [{"content": …, "status": …}, …]}``; a bare list is accepted too.
    """
    try:
        data = json.loads(arguments)
    except (ValueError, RecursionError):  # a recording's arguments nested ~1,000 deep
        return None
    raw = data.get("todos") if isinstance(data, dict) else data
    if not isinstance(raw, list):
        return None
    items: list[tuple[str, str]] = []
    for item in raw:
        if not isinstance(item, dict):
            return None
        content = next(
            (item[k] for k in ("content", "text", "task", "title") if isinstance(item.get(k), str)),
            None,
        )
        if content is None:
            return None
        status = item.get("status")
        items.append((status if isinstance(status, str) else "pending", one_line(content)))
    return items


def one_line(text: str) -> str:
    """``text`` as one ledger line, verbatim when it already is one.

    Line breaks and other control characters are written JSON-escaped
    (``\\n``, ``\\t``), so a todo item or a path stays findable character
    for character — collapsing its whitespace would name another file.
    """
    return text if text.isprintable() else json.dumps(text, ensure_ascii=False)[1:-1]


def without_exact_records(text: str) -> str:
    """``text`` without its exact-record lines (the host places those itself)."""
    return "\n".join(line for line in text.split("\n") if not _RECORD.match(line.strip()))


#: The files-written list has its own budget: every path whole up to it.
FILES_SECTION_TOKENS = 2_000
_LEDGER_OPEN = "<continuation-ledger>\n"
_LEDGER_CLOSE = "\n</continuation-ledger>"


def previous_sections(history: Sequence[Message]) -> dict[str, str]:
    """The ledger sections of the newest previous compact block, by heading."""
    block = next((m for m in reversed(history) if m.meta.kind == KIND_COMPACT_SUMMARY), None)
    if block is None:
        return {}
    text = block.text
    start = text.find(_LEDGER_OPEN)
    end = text.find(_LEDGER_CLOSE, start)
    if start < 0 or end < 0:
        return {}
    heading_lines = {f"## {h}": h for h in LEDGER_HEADINGS}
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text[start + len(_LEDGER_OPEN) : end].split("\n"):
        heading = heading_lines.get(line)
        if heading is not None and heading not in sections:
            current = sections[heading] = []
        elif current is not None:
            current.append(line)
    bodies = {h: "\n".join(lines).strip() for h, lines in sections.items()}
    return {h: b for h, b in bodies.items() if b and b != EMPTY_SECTION}


def files_section(previous: str, files: Sequence[str]) -> str:
    """Every file written, each path whole: a cut path names no file.

    Within ``FILES_SECTION_TOKENS`` (its own budget, not scaled by the target)
    every path is listed; past it the oldest are counted instead.
    """
    # Bullets of the previous block first: files written before it stay listed.
    items = [line[2:] for line in previous.split("\n") if line.startswith("- ")]
    unique = list(dict.fromkeys(one_line(i) for i in (*items, *files) if i.strip()))
    listed: list[str] = []
    used, budget = 0, FILES_SECTION_TOKENS
    for item in reversed(unique):  # the most recent files win the space
        line = f"- {item}"
        cost = estimate_text_tokens(line + "\n")
        if listed and used + cost > budget:
            break
        listed.append(line)
        used += cost
    omitted = len(unique) - len(listed)
    head = [f"({omitted} earlier file(s) not listed)"] if omitted else []
    return "\n".join(head + listed[::-1])


def place_under(ledger: str, heading: str, text: str) -> str:
    """``text`` appended at the end of ``heading``'s section (host-placed, like the records)."""
    if not text.strip():
        return ledger
    lines = ledger.splitlines()
    if not any(_heading_of(line) for line in lines):
        lines = normalize_ledger(f"## {LEDGER_HEADINGS[0]}\n{ledger}").splitlines()
    start = next((i for i, line in enumerate(lines) if _heading_of(line) == heading), None)
    if start is None:
        return "\n".join([*lines, "", f"## {heading}", text])
    end = next(
        (i for i in range(start + 1, len(lines)) if _heading_of(lines[i]) is not None), len(lines)
    )
    body = [line for line in lines[start + 1 : end] if line.strip() != EMPTY_SECTION]
    while body and not body[-1].strip():
        body.pop()
    section = [lines[start], *body, text]
    tail = ["", *lines[end:]] if end < len(lines) else []
    return "\n".join([*lines[:start], *section, *tail])


def place_host_facts(ledger: str, messages: Sequence[Message], effects: ToolEffects) -> str:
    """The todo list and the files written, as the host knows them, under their headings.

    The model's summary may skip or garble them; what the host promised to
    keep it places itself, whole, when the summary does not already hold it.
    """
    sections = previous_sections(messages)
    todo = todo_section(messages)
    if not todo:
        # The newest todo call was compacted away before: the previous block holds it.
        carried = sections.get("Active tasks and background work", "").splitlines()
        todo = "\n".join(line for line in carried if line.startswith(("Todo list", "- [")))
    items = [line for line in todo.splitlines() if line.startswith("- [")]
    if todo and not all(line in ledger for line in items or todo.splitlines()):
        ledger = place_under(ledger, "Active tasks and background work", todo)
    previous = sections.get("Workspace mutations", "")
    files = files_section(previous, written_files(messages, effects))
    missing = [
        line for line in files.splitlines() if line.startswith("- ") and line[2:] not in ledger
    ]
    if missing:
        ledger = place_under(ledger, "Workspace mutations", "\n".join(missing))
    return ledger
