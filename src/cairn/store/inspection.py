"""What a session file holds, read-only: the data behind ``cairn inspect``.

The file is loaded with ``read_transcript`` (inspecting never repairs or
otherwise modifies it); the API view is built once and the UI view reuses its
checkpoint verdicts. Problems inside the file — bad lines, a torn last line,
ignored checkpoints, orphan tool calls — become warnings; only a path that
cannot be inspected at all is an ``InspectError``. The rendering (a table for
a person, JSON for a script) is the surface's, in ``cairn.surfaces.inspect``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeAlias

from cairn.errors import CairnError
from cairn.messages import (
    JSONObject,
    JSONValue,
    Message,
    find_orphans,
    message_to_dict,
)
from cairn.store.base import NotATranscriptError, Transcript
from cairn.store.jsonl.reader import read_transcript
from cairn.store.records import (
    CompactionRecord,
    ContextEditRecord,
    ErrorRecord,
    HandoffRecord,
    MessageRecord,
    SessionRecord,
    StateRecord,
)
from cairn.store.views import ApiView
from cairn.tokens import estimate_message_tokens

ViewName: TypeAlias = Literal["ui", "api"]


#: Record type names as written in the file, in the order the summary lists them.
RECORD_TYPES: tuple[str, ...] = tuple(
    cls.TYPE
    for cls in (
        SessionRecord,
        MessageRecord,
        HandoffRecord,
        ContextEditRecord,
        CompactionRecord,
        StateRecord,
        ErrorRecord,
    )
)


class InspectError(CairnError):
    """The path cannot be inspected; the message names the problem in one line."""


@dataclass(frozen=True, slots=True)
class CompactionInfo:
    id: str
    ts: str
    trigger: str
    strategy: str
    pre_tokens: int
    post_tokens: int
    replacement_messages: int
    valid: bool

    def to_dict(self) -> JSONObject:
        return {
            "id": self.id,
            "ts": self.ts,
            "trigger": self.trigger,
            "strategy": self.strategy,
            "pre_tokens": self.pre_tokens,
            "post_tokens": self.post_tokens,
            "replacement_messages": self.replacement_messages,
            "valid": self.valid,
        }


@dataclass(frozen=True, slots=True)
class Inspection:
    """A loaded transcript with both views and the figures derived from them."""

    transcript: Transcript
    file_bytes: int
    api: ApiView
    ui: list[Message]
    api_tokens: list[int]
    record_types: dict[str, int]
    compactions: list[CompactionInfo]
    warnings: list[str]
    #: The store the session was read from, when it is not a file of its own.
    origin: str | None = None

    @property
    def api_tokens_estimate(self) -> int:
        return sum(self.api_tokens)

    @property
    def compact_blocks(self) -> int:
        return sum(1 for c in self.compactions if c.valid)

    @property
    def error_blocks(self) -> int:
        return self.record_types.get("error", 0)


def inspect_transcript(path: str | Path) -> Inspection:
    """Load ``path`` read-only and derive everything ``cairn inspect`` shows.

    Raises ``InspectError`` when the path cannot be inspected at all.
    """
    path = Path(path)
    transcript = _load(path)
    try:
        return _inspect(path, transcript)
    except Exception as exc:  # a bug deriving the views must not become a traceback either
        raise InspectError(f"{path}: cannot inspect ({type(exc).__name__}: {exc})") from None


def _inspect(path: Path, transcript: Transcript) -> Inspection:
    api = transcript.api()
    ui = transcript.ui(api)
    records = transcript.records

    record_types = dict.fromkeys(RECORD_TYPES, 0)
    for record in records:
        record_types[record.TYPE] += 1

    compactions = [
        CompactionInfo(
            id=r.id,
            ts=r.ts,
            trigger=r.trigger,
            strategy=r.strategy,
            pre_tokens=r.pre_tokens,
            post_tokens=r.post_tokens,
            replacement_messages=len(r.replacement_messages),
            valid=r.id not in api.ignored_checkpoints,
        )
        for r in records
        if isinstance(r, CompactionRecord)
    ]

    warnings = [*transcript.warnings, *api.warnings]
    orphans = find_orphans(api.messages)
    if orphans.calls:
        warnings.append(
            f"API view: {plural(len(orphans.calls), 'tool call')} without a result "
            f"({', '.join(orphans.calls)}); the session may have stopped mid-turn"
        )
    if orphans.results:
        warnings.append(
            f"API view: {plural(len(orphans.results), 'tool result')} without a call "
            f"({', '.join(orphans.results)})"
        )

    return Inspection(
        transcript=transcript,
        file_bytes=_file_size(path),
        api=api,
        ui=ui,
        api_tokens=[estimate_message_tokens(m) for m in api.messages],
        record_types=record_types,
        compactions=compactions,
        warnings=warnings,
    )


def _load(path: Path) -> Transcript:
    try:
        transcript = read_transcript(path)
    except NotATranscriptError as exc:
        raise InspectError(str(exc)) from None
    except Exception as exc:  # a loader bug must not become a traceback
        raise InspectError(f"{path}: cannot load ({type(exc).__name__}: {exc})") from None
    if not transcript.records:
        raise InspectError(f"{path} is empty (no transcript records)")
    return transcript


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


# ---------------------------------------------------------------------------
# JSON


def summary_to_dict(inspection: Inspection) -> JSONObject:
    """The ``--json`` summary: one object, stable keys."""
    transcript = inspection.transcript
    header = transcript.header
    api = inspection.api
    orphans = find_orphans(api.messages)
    record_types: JSONObject = dict(inspection.record_types.items())
    return {
        "path": None if inspection.origin else str(transcript.path),
        "store": inspection.origin,
        "file_bytes": inspection.file_bytes,
        "session_id": transcript.session_id,
        "workspace": header.workspace if header else None,
        "model": header.model if header else None,
        "started": header.ts if header else None,
        "records": len(transcript.records),
        "record_types": record_types,
        "bad_lines": transcript.bad_lines,
        "ui_messages": len(inspection.ui),
        "compact_blocks": inspection.compact_blocks,
        "error_blocks": inspection.error_blocks,
        "api_messages": len(api.messages),
        "api_tokens_estimate": inspection.api_tokens_estimate,
        "api_checkpoint_id": api.checkpoint_id,
        "checkpoints": {"valid": api.valid_checkpoints, "invalid": len(api.ignored_checkpoints)},
        "compactions": [c.to_dict() for c in inspection.compactions],
        "orphans": {"calls": list(orphans.calls), "results": list(orphans.results)},
        "warnings": list(inspection.warnings),
    }


def view_to_list(inspection: Inspection, view: ViewName) -> list[JSONValue]:
    messages = inspection.api.messages if view == "api" else inspection.ui
    return [message_to_dict(m) for m in messages]


def plural(n: int, noun: str) -> str:
    """``1 tool call``, ``2 tool calls``."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")
