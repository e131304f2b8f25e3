"""Continuity after a compaction: what the new context must still hold (DESIGN §10).

After every compaction the replay checks, mechanically, that the context the
model gets next still carries what the session so far has established:

- the latest user instruction, verbatim — or, when the active-task
  checkpoint saved it to a file because it was oversized, that file's name
  (and the file holds the instruction);
- every exact continuation record, verbatim;
- every item of the current todo list (the newest ``*todo*`` tool call);
- the path of every file a writing tool touched;
- no tool result without its call and no call without its results.

Each invariant is one pure function returning what is missing; a check is
one expected item (one record, one todo item, one path; the instruction and
the pairing are one each), so the share passed says how much survived.
Todo items and paths may appear JSON-escaped (inside a kept tool call's
arguments or a ledger quoting them): the model reads those the same.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import orjson

from cairn.context.checkpoint import ACTIVE_TASK_KEY
from cairn.context.effects import ToolEffects, written_files
from cairn.context.ledger import exact_records
from cairn.messages import KIND_COMPACT_SUMMARY, JSONObject, Message, ToolCall, find_orphans

#: Substring every exact continuation record line holds: a cheap pre-filter.
RECORD_MARK = "EXACT CONTINUATION RECORD"
#: Keys under which todo tools conventionally carry an item's text, in order.
TODO_TEXT_KEYS = ("content", "text", "title", "task", "step", "description")
#: A failure quotes at most this many characters of what went missing.
QUOTE_CHARS = 80
#: Failure reasons a summary keeps (the counts stay exact).
MAX_FAILURES = 5
#: Joins the context's texts: no needle spans two messages.
_SEPARATOR = "\x00"


@dataclass(frozen=True, slots=True)
class Continuity:
    """Continuity checks of one or more compactions: how many, how many passed, what failed."""

    checks: int = 0
    passed: int = 0
    failures: tuple[str, ...] = ()
    compactions: int = 0

    @property
    def pct(self) -> float | None:
        """Share passed in percent, rounded down (100 only if all passed); ``None``: no checks."""
        if not self.checks:
            return None
        return math.floor(10_000 * self.passed / self.checks) / 100

    def __add__(self, other: Continuity) -> Continuity:
        return Continuity(
            self.checks + other.checks,
            self.passed + other.passed,
            self.failures + other.failures,
            self.compactions + other.compactions,
        )

    def prefixed(self, prefix: str) -> Continuity:
        """The same result, each failure introduced by ``prefix`` (where it happened)."""
        return Continuity(
            self.checks, self.passed, tuple(f"{prefix}{f}" for f in self.failures), self.compactions
        )

    def to_dict(self, max_failures: int | None = MAX_FAILURES) -> JSONObject:
        failures = self.failures if max_failures is None else self.failures[:max_failures]
        return {
            "compactions": self.compactions,
            "checks": self.checks,
            "passed": self.passed,
            "pct": self.pct,
            "failures": list(failures),
        }


def total(results: Iterable[Continuity]) -> Continuity:
    summed = Continuity()
    for result in results:
        summed += result
    return summed


def format_pct(pct: float | None) -> str:
    """``100 %``, ``97.5 %``; ``–`` when nothing was checked (never 100 % by default)."""
    if pct is None:
        return "–"
    return f"{pct:.2f}".rstrip("0").rstrip(".") + " %"


# ---------------------------------------------------------------------------
# What the session so far established


@dataclass(frozen=True, slots=True)
class Expected:
    """What the context after a compaction must hold."""

    instruction: Message | None = None
    records: tuple[tuple[str, str], ...] = ()
    todo_call: ToolCall | None = None
    files: tuple[str, ...] = ()
    #: Calls whose results the session has not produced yet (the compaction
    #: came between a call and its results), in order: not orphans, yet kept.
    awaiting: tuple[str, ...] = ()


@dataclass
class SessionSoFar:
    """Every message the session added so far, reduced to what continuity needs.

    Incremental, so a check costs what the context holds, not the whole history.
    """

    effects: ToolEffects
    instruction: Message | None = None
    todo_call: ToolCall | None = None
    _record_sources: list[Message] = field(default_factory=list)
    _files: dict[str, None] = field(default_factory=dict)

    def add(self, message: Message) -> None:
        if is_instruction(message):
            self.instruction = message
        if RECORD_MARK in message.text:
            self._record_sources.append(message)
        for call in message.tool_calls:
            if is_todo_call(call):
                self.todo_call = call
        for path in written_files([message], self.effects):
            self._files.setdefault(path, None)

    def expected(self, awaiting: Sequence[str] = ()) -> Expected:
        return Expected(
            self.instruction,
            # Same cap and order as the summarizer's: records past it are not promised.
            tuple(exact_records(self._record_sources)),
            self.todo_call,
            tuple(self._files),
            tuple(awaiting),
        )


def is_instruction(message: Message) -> bool:
    """A message the user typed (not one the host injected), with text."""
    return (
        message.role == "user"
        and not message.meta.synthetic
        and message.meta.kind != KIND_COMPACT_SUMMARY
        and bool(message.text.strip())
    )


def is_todo_call(call: ToolCall) -> bool:
    """Claude Code's ``TodoWrite``, Cairn's ``todo_write``, …: any tool named *todo*."""
    return "todo" in call.name.lower()


def todo_items(arguments: str) -> list[str]:
    """Each todo item's text in a todo call's JSON arguments, in order.

    The list is the ``todos`` value (else the first list in the object, or
    the arguments themselves if they are a list); an item is a string or an
    object with its text under one of ``TODO_TEXT_KEYS``. Arguments that are
    not JSON are one item: they must survive verbatim.
    """
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return [arguments] if arguments.strip() else []
    items: object = parsed
    if isinstance(parsed, dict):
        items = parsed.get("todos")
        if not isinstance(items, list):
            items = next((v for v in parsed.values() if isinstance(v, list)), [])
    if not isinstance(items, list):
        return []
    texts: list[str] = []
    for item in items:
        if isinstance(item, str) and item.strip():
            texts.append(item)
        elif isinstance(item, dict):
            text = next(
                (v for k in TODO_TEXT_KEYS if isinstance(v := item.get(k), str) and v.strip()),
                None,
            )
            if text is not None:
                texts.append(text)
    return texts


# ---------------------------------------------------------------------------
# The invariants: each returns what is missing (empty: it holds)


def context_text(context: Sequence[Message]) -> str:
    """Every text the model reads in ``context``: message texts and tool-call arguments."""
    parts: list[str] = []
    for message in context:
        parts.append(message.text)
        parts.extend(call.arguments for call in message.tool_calls)
    return _SEPARATOR.join(parts)


def written_forms(text: str) -> tuple[str, ...]:
    """``text`` as it may be written: raw, or escaped inside a JSON string (either style)."""
    escaped = orjson.dumps(text).decode()[1:-1]
    ascii_escaped = _ascii_json(escaped)
    return tuple(dict.fromkeys((text, escaped, ascii_escaped)))


def _ascii_json(escaped: str) -> str:
    # ``json.dumps(ensure_ascii=True)``: non-ASCII as \uXXXX (surrogate pairs beyond the BMP).
    out: list[str] = []
    for char in escaped:
        code = ord(char)
        if code < 0x80:
            out.append(char)
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            code -= 0x10000
            out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
    return "".join(out)


def holds(haystack: str, text: str) -> bool:
    return any(form in haystack for form in written_forms(text))


def missing_instruction(
    context: Sequence[Message],
    instruction: Message | None,
    saved_text: Callable[[str], str | None] | None = None,
) -> list[str]:
    """The latest user instruction, if the new context lost it.

    It holds when its text is verbatim in one of the context's messages, or
    when a compact block's checkpoint entry for it is an oversized stub whose
    saved file the context names — and, given ``saved_text`` (a reader),
    that file holds the text exactly.
    """
    if instruction is None:
        return []
    text = instruction.text
    if any(text in m.text for m in context):
        return []
    quoted = f"latest user instruction {_quote(text)} ({len(text):,} chars)"
    entry = _checkpoint_entry(context, instruction.id)
    saved = entry.get("saved") if entry is not None else None
    if entry is None or entry.get("oversized") is not True or not isinstance(saved, str):
        return [f"{quoted} is not in the new context"]
    if not any(saved in m.text for m in context):
        return [f"{quoted} was saved to {saved}, which the new context does not name"]
    if saved_text is not None and saved_text(saved) != text:
        return [f"{quoted}: its saved file {saved} does not hold it"]
    return []


def _checkpoint_entry(context: Sequence[Message], message_id: str) -> JSONObject | None:
    """The newest compact block's checkpoint entry for ``message_id``."""
    for message in reversed(context):
        if message.meta.kind != KIND_COMPACT_SUMMARY:
            continue
        entries = message.meta.extra.get(ACTIVE_TASK_KEY)
        if not isinstance(entries, list):
            continue
        for entry in entries:
            if isinstance(entry, dict) and entry.get("id") == message_id:
                return entry
    return None


def missing_records(context: Sequence[Message], records: Sequence[tuple[str, str]]) -> list[str]:
    """Exact continuation records the new context does not hold verbatim.

    A record holds as the host places it (``EXACT CONTINUATION RECORD
    [<heading>] :: <payload>``) or as its source wrote it (the heading in any
    case, in a kept message).
    """
    lines = [line.strip() for m in context for line in m.text.splitlines() if RECORD_MARK in line]
    missing = []
    for heading, payload in records:
        # The heading as the source may have cased and spaced it; the payload exactly.
        heading_pattern = rf"\[\s*(?i:{re.escape(heading)})\s*\]"
        pattern = re.compile(rf"{RECORD_MARK} {heading_pattern} :: {re.escape(payload)}")
        if not any(pattern.fullmatch(line) for line in lines):
            missing.append(f"exact record [{heading}] :: {_quote(payload)} is missing")
    return missing


def missing_todos(context: Sequence[Message], todo_call: ToolCall | None) -> list[str]:
    """Items of the current todo list the new context does not hold."""
    if todo_call is None:
        return []
    haystack = context_text(context)
    return [
        f"todo item {_quote(item)} (from {todo_call.name}) is missing"
        for item in todo_items(todo_call.arguments)
        if not holds(haystack, item)
    ]


def missing_files(context: Sequence[Message], files: Sequence[str]) -> list[str]:
    """Paths of written files the new context does not name."""
    haystack = context_text(context)
    return [f"written file {_quote(p)} is not named" for p in files if not holds(haystack, p)]


def broken_pairs(context: Sequence[Message], awaiting: Sequence[str] = ()) -> list[str]:
    """Tool calls without their results and results without their call, in the new context.

    Calls in ``awaiting`` have no result yet anywhere (the session produces
    it next), so their missing results are not broken — but they must still
    be in the context, or the results that come next will have no call.
    """
    orphans = find_orphans(context)
    calls = [c for c in orphans.calls if c not in awaiting]
    present = {c.id for m in context for c in m.tool_calls}
    dropped = [c for c in awaiting if c not in present]
    found = []
    if calls:
        found.append(f"{len(calls)} tool call(s) without results: {_ids(calls)}")
    if orphans.results:
        found.append(
            f"{len(orphans.results)} tool result(s) without their call: {_ids(orphans.results)}"
        )
    if dropped:
        found.append(
            f"{len(dropped)} tool call(s) dropped before their results came "
            f"(those results will have no call): {_ids(dropped)}"
        )
    return found


def _ids(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:3])
    return shown + ", …" if len(ids) > 3 else shown


def check_continuity(
    context: Sequence[Message],
    expected: Expected,
    saved_text: Callable[[str], str | None] | None = None,
) -> Continuity:
    """Every invariant on the context right after one compaction."""
    todos = todo_items(expected.todo_call.arguments) if expected.todo_call is not None else []
    checks = (
        (1 if expected.instruction is not None else 0)
        + len(expected.records)
        + len(todos)
        + len(expected.files)
        + 1  # the call/result pairing
    )
    instruction = missing_instruction(context, expected.instruction, saved_text)
    records = missing_records(context, expected.records)
    todo = missing_todos(context, expected.todo_call)
    files = missing_files(context, expected.files)
    pairs = broken_pairs(context, expected.awaiting)
    failed = len(instruction) + len(records) + len(todo) + len(files) + (1 if pairs else 0)
    return Continuity(checks, checks - failed, (*instruction, *records, *todo, *files, *pairs), 1)


def _quote(text: str) -> str:
    line = " ".join(text[: QUOTE_CHARS * 4].split())
    return repr(line if len(line) <= QUOTE_CHARS else line[: QUOTE_CHARS - 1] + "…")
