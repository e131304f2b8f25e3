"""Importers: recorded agent sessions from seven formats, as ``RecordedSession`` objects.

``import_sessions(path, format="auto", session=None)`` reads one file and
returns an ``ImportResult``; ``detect_format(path)`` only names the format.
``FORMATS`` lists the format names, ``IMPORTERS`` maps each to its loader.

Formats (one module each; its docstring gives the details):

- ``openai``: a JSON array of chat messages, or ``{"messages": [...], "tools": [...]}``;
- ``tau-bench``: a JSON array of ``{task_id, trial, reward, info, traj}``, many sessions;
- ``swe-agent``: a SWE-agent ``.traj`` (``history``: function calls or thought/action text);
- ``openhands``: OpenHands output JSONL, one session per line (``history`` events);
- ``claude-code``: a Claude Code session JSONL (records merged by ``message.id``);
- ``codex``: a Codex CLI rollout JSONL (``response_item`` records);
- ``cairn``: Cairn's own transcript JSONL.

What every importer guarantees:

- messages in recorded order, each with a unique id (the recorded one when
  there is one, else ``msg_<file hash>_<session>_<n>``, the same on every
  import of the same file); system messages in ``RecordedSession.system``;
- every assistant message with tool calls is followed by one result per call
  before the next non-tool message (results may be in any order inside the
  round). A call with no recorded result gets a tool message
  ``"[no result was recorded for this call]"`` (``meta.synthetic``); a result
  no call asked for is dropped. Each repair is one warning naming the line or
  key, and ``find_orphans`` finds nothing in the output;
- tool results hold their text, with images as ``ImagePart``;
- what the host wrote into a user turn, not the user (Claude Code's IDE
  selections and reminders, Codex's environment and AGENTS.md text, …), is a
  user message of its own marked ``meta.synthetic``, in place;
- ``RecordedSession.format`` names the format (the replay looks up what that
  format's recordings leave out of the fixed context);
- a session whose first recorded usage counts context the file does not hold
  has that response marked ``meta.extra["context_not_recorded"]`` (the
  reason) and one warning saying so: a Claude Code compaction sub-agent's
  transcript (``agent-acompact-*.jsonl``), and in any format that documents a
  default fixed context (Claude Code, Codex) a first prompt over 4x the
  estimate of the messages before it plus that default
  (``fixed_context.usage_exceeds_recording``). The replay gives it the
  documented default, not a fixed context inferred from that usage.

Errors are ``SessionImportError`` with one line: a missing path or a
directory names the path; a file no format matches names the path; a file
malformed for the format tried names the format and the line or key
(``swe-agent: key 'history' missing``, ``tau-bench: line 7: not valid JSON
(…)``). JSON Lines formats (``openhands``, ``claude-code``, ``codex``,
``cairn``) replay what they can: a damaged line is skipped with a warning
naming it, and only a file in which nothing can be read is an error.
``session=N`` picks the N-th (0-based) session; single-session formats accept
only 0; a number out of range is an error.

No content makes an importer fail otherwise: a value of the wrong type (a
list for a string, an object for a list, null, a huge integer, a value nested
1,000 deep) is a wrong shape, reported as above (a skipped line or record in
JSON Lines formats). Lone surrogates (``"\\ud800"`` escapes, which orjson
refuses and Python's ``json`` writes) are read, each becoming U+FFFD. A tool
call's arguments or a tool schema nested deeper than 254 levels (what JSON
writers accept) is a wrong shape too. Warnings and errors are one line each;
foreign values in them are cut short.

Detection (``format="auto"``) reads the content, not the name:

1. The first non-blank byte is ``[``: the whole file is one JSON array; its
   first element decides — ``traj`` key → ``tau-bench``; ``role`` → ``openai``;
   ``action``/``observation`` → ``openhands`` (a bare event list).
2. The first non-blank byte is ``{``: the first lines (up to 50) are read as
   JSON Lines, skipping lines that do not parse, and the first object that
   decides wins. If the first line alone does not parse, the whole file is
   read as one JSON object (a pretty-printed ``.traj``) and decides instead
   (if that fails too, the following lines are tried):

   - ``"v": 1`` and a Cairn record ``type`` (``session``, ``message`` …) → ``cairn``;
   - a ``payload`` object and ``type`` ``session_meta``/``response_item``/
     ``event_msg``/``turn_context``/``compacted`` → ``codex``;
   - ``type`` ``user``/``assistant``/``system``/``progress``/``summary``/
     ``file-history-snapshot``/``queue-operation`` (no ``payload``) → ``claude-code``;
   - a ``history`` list whose first item has ``role`` → ``swe-agent``; whose
     first item has ``action``/``observation``/``source`` → ``openhands``
     (an empty ``history``: ``instance_id`` → ``openhands``, ``trajectory`` →
     ``swe-agent``);
   - a ``messages`` list → ``openai``.
3. Nothing decided and the name ends in ``.traj`` → ``swe-agent`` (so a
   truncated trajectory reports where it breaks). Otherwise: no format.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

import orjson

from cairn.replay.importers import (
    cairn_transcript,
    claude_code,
    codex,
    openai_chat,
    openhands,
    swe_agent,
    tau_bench,
)
from cairn.replay.importers._session_builder import (
    PLACEHOLDER_RESULT,
    Loaded,
    check_context_not_recorded,
)
from cairn.replay.importers._source import Source, load_json
from cairn.replay.session import ImportResult, RecordedSession, SessionImportError

Importer = Callable[[Source, int | None], Loaded]

#: The registry: format name → loader, in the order ``FORMATS`` lists them.
IMPORTERS: Mapping[str, Importer] = {
    openai_chat.FORMAT: openai_chat.load,
    tau_bench.FORMAT: tau_bench.load,
    swe_agent.FORMAT: swe_agent.load,
    openhands.FORMAT: openhands.load,
    claude_code.FORMAT: claude_code.load,
    codex.FORMAT: codex.load,
    cairn_transcript.FORMAT: cairn_transcript.load,
}
FORMATS: tuple[str, ...] = tuple(IMPORTERS)

_DETECT_LINES = 50
_CAIRN_TYPES = frozenset(
    {"session", "message", "handoff", "context_edit", "compaction", "state", "error"}
)
_CODEX_TYPES = frozenset(
    {"session_meta", "response_item", "event_msg", "turn_context", "compacted"}
)
_CLAUDE_TYPES = frozenset(
    {
        "user",
        "assistant",
        "system",
        "progress",
        "summary",
        "file-history-snapshot",
        "queue-operation",
    }
)
_BY_SUFFIX = {".traj": swe_agent.FORMAT}


def import_sessions(
    path: str | Path, format: str = "auto", session: int | None = None
) -> ImportResult:
    """Read the recorded session(s) in ``path``; see the module docstring for the rules."""
    if format != "auto" and format not in IMPORTERS:
        raise SessionImportError(
            f"unknown format {format!r}; choose auto or one of {', '.join(FORMATS)}"
        )
    source = Source.read(path)
    chosen = _detect(source) if format == "auto" else format
    loaded = IMPORTERS[chosen](source, session)
    sessions: list[RecordedSession] = []
    notes: list[str] = []
    for recorded in loaded.sessions:
        checked, note = check_context_not_recorded(replace(recorded, format=chosen))
        sessions.append(checked)
        if note is not None:
            notes.append(note)
    return ImportResult(
        source=source.path,
        format=chosen,
        sessions=tuple(sessions),
        warnings=(*loaded.warnings, *notes),
    )


def detect_format(path: str | Path) -> str:
    """The name of the format of the file at ``path``, judged from its content."""
    return _detect(Source.read(path))


def _detect(source: Source) -> str:
    head = source.head
    if not head:
        raise SessionImportError(f"{source.path}: the file is empty; no session to import")
    problem = f"it starts with {head.decode(errors='replace')!r}, not with a JSON array or object"
    found: str | None = None
    if head == b"[":
        document = source.try_document()
        found = _from_value(document)
        problem = "its JSON array matches no known format"
        if document is None:
            problem = _json_problem(source)
    elif head == b"{":
        found, problem = _from_lines(source)
    if found is None:
        found = _BY_SUFFIX.get(source.path.suffix.lower())
    if found is None:
        raise SessionImportError(
            f"{source.path}: no known session format recognised ({problem}); "
            f"name one with --format ({', '.join(FORMATS)})"
        )
    return found


def _from_lines(source: Source) -> tuple[str | None, str]:
    problem = "its first lines match no known format"
    for index, (_, line) in enumerate(itertools.islice(source.lines(), _DETECT_LINES)):
        try:
            value = load_json(line)
        except orjson.JSONDecodeError:
            if index > 0:
                continue
            document = source.try_document()  # one pretty-printed JSON object?
            if document is not None:
                return _from_value(document), "its JSON object matches no known format"
            problem = _json_problem(source)  # or JSON Lines with a damaged first line
            continue
        found = _from_value(value)
        if found is not None:
            return found, problem
    return None, problem


def _json_problem(source: Source) -> str:
    try:
        source.document("json")
    except SessionImportError as exc:
        return str(exc)
    return "valid JSON"  # pragma: no cover - only called after a parse failed


def _from_value(value: object) -> str | None:
    if isinstance(value, list):
        first = value[0] if value else None
        if not isinstance(first, dict):
            return None
        if "traj" in first:
            return tau_bench.FORMAT
        if "role" in first:
            return openai_chat.FORMAT
        if "action" in first or "observation" in first:
            return openhands.FORMAT
        return None
    if not isinstance(value, dict):
        return None
    kind = value.get("type")
    if not isinstance(kind, str):  # a list or an object here is no format's, and unhashable
        kind = None
    if value.get("v") == 1 and kind in _CAIRN_TYPES:
        return cairn_transcript.FORMAT
    if isinstance(value.get("payload"), dict) and kind in _CODEX_TYPES:
        return codex.FORMAT
    if kind in _CLAUDE_TYPES and "payload" not in value:
        return claude_code.FORMAT
    history = value.get("history")
    if isinstance(history, list):
        first = history[0] if history else None
        if isinstance(first, dict):
            if "role" in first:
                return swe_agent.FORMAT
            if "action" in first or "observation" in first or "source" in first:
                return openhands.FORMAT
        elif not history:
            if "instance_id" in value:
                return openhands.FORMAT
            if "trajectory" in value:
                return swe_agent.FORMAT
    if isinstance(value.get("messages"), list):
        return openai_chat.FORMAT
    return None


__all__ = [
    "FORMATS",
    "IMPORTERS",
    "PLACEHOLDER_RESULT",
    "ImportResult",
    "Importer",
    "RecordedSession",
    "SessionImportError",
    "detect_format",
    "import_sessions",
]
