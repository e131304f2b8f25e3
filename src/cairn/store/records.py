"""Transcript records: the typed form of every line in a session file.

A record is ``{"v": 1, "type": …, "id": …, "ts": …, …}``. This module turns
records into JSON-ready dicts and back, and holds the checkpoint limits that
are enforced both when a compaction is saved and when it is loaded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import ClassVar, Literal, TypeAlias, cast

import orjson

from cairn.messages import (
    JSONObject,
    JSONValue,
    Message,
    MessageFormatError,
    find_orphans,
    message_from_dict,
    message_to_dict,
    new_id,
)

RECORD_VERSION = 1
CHECKPOINT_VERSION = 1
#: Limits on one compaction checkpoint's ``replacement_messages`` (seed 000).
MAX_REPLACEMENT_MESSAGES = 4_096
MAX_REPLACEMENT_BYTES = 16 * 1024 * 1024

Trigger: TypeAlias = Literal["auto", "manual", "reactive"]
Strategy: TypeAlias = Literal["llm", "fallback"]
TRIGGERS: frozenset[str] = frozenset({"auto", "manual", "reactive"})
STRATEGIES: frozenset[str] = frozenset({"llm", "fallback"})


class RecordFormatError(ValueError):
    """A line of a transcript is not a valid record; the message says why."""


class CheckpointError(ValueError):
    """A compaction checkpoint breaks a rule (size, count, version or pairing)."""


def now_ts() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """The header: first record of every session file."""

    TYPE: ClassVar[str] = "session"

    session_id: str
    workspace: str
    id: str = field(default_factory=lambda: new_id("rec"))
    ts: str = field(default_factory=now_ts)
    model: str | None = None


@dataclass(frozen=True, slots=True)
class MessageRecord:
    """One conversation message; the record id is the message id (messages are unique)."""

    TYPE: ClassVar[str] = "message"

    message: Message
    ts: str = field(default_factory=now_ts)

    @property
    def id(self) -> str:
        return self.message.id


@dataclass(frozen=True, slots=True)
class HandoffRecord:
    """The hidden token-budget handoff reminder of one compaction epoch."""

    TYPE: ClassVar[str] = "handoff"

    message: Message
    epoch: int
    version: int = 1
    ts: str = field(default_factory=now_ts)

    @property
    def id(self) -> str:
        return self.message.id


@dataclass(frozen=True, slots=True)
class ContentEdit:
    """Replace the content of one message in the API view (snip, micro compact)."""

    message_id: str
    content: str
    reason: str = "snip"


@dataclass(frozen=True, slots=True)
class ContextEditRecord:
    TYPE: ClassVar[str] = "context_edit"

    edits: tuple[ContentEdit, ...]
    id: str = field(default_factory=lambda: new_id("rec"))
    ts: str = field(default_factory=now_ts)


@dataclass(frozen=True, slots=True)
class CompactionRecord:
    """A durable checkpoint: ``replacement_messages`` is the exact API context after it."""

    TYPE: ClassVar[str] = "compaction"

    trigger: Trigger
    strategy: Strategy
    pre_tokens: int
    post_tokens: int
    summary: str
    replacement_messages: tuple[Message, ...]
    files: tuple[str, ...] = ()
    version: int = CHECKPOINT_VERSION
    id: str = field(default_factory=lambda: new_id("rec"))
    ts: str = field(default_factory=now_ts)


@dataclass(frozen=True, slots=True)
class StateRecord:
    """A snapshot of one piece of session state (plan mode, skills, tasks …)."""

    TYPE: ClassVar[str] = "state"

    key: str
    value: JSONValue
    id: str = field(default_factory=lambda: new_id("rec"))
    ts: str = field(default_factory=now_ts)


@dataclass(frozen=True, slots=True)
class ErrorRecord:
    """An error block shown in the UI (e.g. a failed manual ``/compact``)."""

    TYPE: ClassVar[str] = "error"

    text: str
    source: str = "error"
    id: str = field(default_factory=lambda: new_id("rec"))
    ts: str = field(default_factory=now_ts)


Record: TypeAlias = (
    SessionRecord
    | MessageRecord
    | HandoffRecord
    | ContextEditRecord
    | CompactionRecord
    | StateRecord
    | ErrorRecord
)


# ---------------------------------------------------------------------------
# Checkpoint limits


def check_checkpoint(record: CompactionRecord) -> int:
    """Raise ``CheckpointError`` if ``record`` may not be a checkpoint; return its size in bytes."""
    if record.version != CHECKPOINT_VERSION:
        raise CheckpointError(
            f"unsupported checkpoint version {record.version} (expected {CHECKPOINT_VERSION})"
        )
    count = len(record.replacement_messages)
    if count > MAX_REPLACEMENT_MESSAGES:
        raise CheckpointError(
            f"checkpoint has {count} replacement messages; the limit is {MAX_REPLACEMENT_MESSAGES}"
        )
    size = len(orjson.dumps([message_to_dict(m) for m in record.replacement_messages]))
    if size > MAX_REPLACEMENT_BYTES:
        raise CheckpointError(
            f"checkpoint replacement messages take {size:,} bytes; "
            f"the limit is {MAX_REPLACEMENT_BYTES:,} (16 MiB)"
        )
    orphans = find_orphans(record.replacement_messages)
    if orphans:
        raise CheckpointError(
            "checkpoint would split tool calls from their results "
            f"(calls without results: {list(orphans.calls)}, "
            f"results without calls: {list(orphans.results)})"
        )
    return size


# ---------------------------------------------------------------------------
# Encoding


def record_to_dict(record: Record) -> JSONObject:
    """The JSON object written as one line of the transcript."""
    out: JSONObject = {"v": RECORD_VERSION, "type": record.TYPE, "id": record.id, "ts": record.ts}
    match record:
        case SessionRecord():
            out["session_id"] = record.session_id
            out["workspace"] = record.workspace
            if record.model is not None:
                out["model"] = record.model
        case MessageRecord():
            out["message"] = message_to_dict(record.message)
        case HandoffRecord():
            out["version"] = record.version
            out["epoch"] = record.epoch
            out["message"] = message_to_dict(record.message)
        case ContextEditRecord():
            out["edits"] = [
                {"message_id": e.message_id, "content": e.content, "reason": e.reason}
                for e in record.edits
            ]
        case CompactionRecord():
            out["version"] = record.version
            out["trigger"] = record.trigger
            out["strategy"] = record.strategy
            out["pre_tokens"] = record.pre_tokens
            out["post_tokens"] = record.post_tokens
            out["summary"] = record.summary
            out["files"] = list(record.files)
            out["replacement_messages"] = [message_to_dict(m) for m in record.replacement_messages]
        case StateRecord():
            out["key"] = record.key
            out["value"] = record.value
        case ErrorRecord():
            out["text"] = record.text
            out["source"] = record.source
    return out


def encode_record(record: Record) -> bytes:
    """One transcript line, newline included.

    Lone surrogates (undecodable bytes smuggled into a ``str``, e.g. from a
    tool's raw output) cannot be UTF-8; they become U+FFFD rather than
    failing the write and losing the whole record.
    """
    data = record_to_dict(record)
    try:
        return orjson.dumps(data, option=orjson.OPT_APPEND_NEWLINE)
    except orjson.JSONEncodeError:
        return orjson.dumps(_scrub(data), option=orjson.OPT_APPEND_NEWLINE)


# A Python ``str`` holds astral characters as single code points, so any
# surrogate code point in one is a lone half.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _scrub(value: JSONValue) -> JSONValue:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, dict):
        return {_scrub_key(k): _scrub(v) for k, v in value.items()}
    return value


def _scrub_key(key: str) -> str:
    scrubbed = _scrub(key)
    return scrubbed if isinstance(scrubbed, str) else key


def record_from_dict(data: object) -> Record:
    """Parse one decoded line, raising ``RecordFormatError`` that names the problem."""
    if not isinstance(data, dict):
        raise RecordFormatError("a record must be a JSON object")
    version = data.get("v")
    if version != RECORD_VERSION:
        raise RecordFormatError(f"unsupported record version {version!r}")
    kind = data.get("type")
    if not isinstance(kind, str):
        raise RecordFormatError("record field 'type' must be a string")
    ts = _str(data, "ts")
    try:
        match kind:
            case "message":
                return MessageRecord(message_from_dict(data.get("message")), ts=ts)
            case "handoff":
                return HandoffRecord(
                    message=message_from_dict(data.get("message")),
                    epoch=_int(data, "epoch"),
                    version=_int(data, "version"),
                    ts=ts,
                )
            case "compaction":
                return _compaction_from_dict(data, ts)
            case "context_edit":
                edits = data.get("edits")
                if not isinstance(edits, list):
                    raise RecordFormatError("context_edit record needs an 'edits' list")
                return ContextEditRecord(
                    tuple(_edit_from_dict(e) for e in edits), id=_str(data, "id"), ts=ts
                )
            case "session":
                model = data.get("model")
                return SessionRecord(
                    session_id=_str(data, "session_id"),
                    workspace=_str(data, "workspace"),
                    id=_str(data, "id"),
                    ts=ts,
                    model=model if isinstance(model, str) else None,
                )
            case "state":
                return StateRecord(_str(data, "key"), data.get("value"), id=_str(data, "id"), ts=ts)
            case "error":
                return ErrorRecord(
                    _str(data, "text"),
                    source=_str(data, "source"),
                    id=_str(data, "id"),
                    ts=ts,
                )
            case _:
                raise RecordFormatError(f"unknown record type {kind!r}")
    except MessageFormatError as exc:
        raise RecordFormatError(f"{kind} record: {exc}") from exc


def _compaction_from_dict(data: Mapping[str, object], ts: str) -> CompactionRecord:
    trigger, strategy = data.get("trigger"), data.get("strategy")
    if not isinstance(trigger, str) or trigger not in TRIGGERS:
        raise RecordFormatError(f"compaction trigger must be one of {sorted(TRIGGERS)}")
    if not isinstance(strategy, str) or strategy not in STRATEGIES:
        raise RecordFormatError(f"compaction strategy must be one of {sorted(STRATEGIES)}")
    raw_messages = data.get("replacement_messages")
    if not isinstance(raw_messages, list):
        raise RecordFormatError("compaction record needs a 'replacement_messages' list")
    files = data.get("files", [])
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise RecordFormatError("compaction 'files' must be a list of strings")
    return CompactionRecord(
        trigger=cast(Trigger, trigger),
        strategy=cast(Strategy, strategy),
        pre_tokens=_int(data, "pre_tokens"),
        post_tokens=_int(data, "post_tokens"),
        summary=_str(data, "summary"),
        replacement_messages=tuple(message_from_dict(m) for m in raw_messages),
        files=tuple(files),
        version=_int(data, "version"),
        id=_str(data, "id"),
        ts=ts,
    )


def _edit_from_dict(raw: object) -> ContentEdit:
    if not isinstance(raw, dict):
        raise RecordFormatError("each context edit must be an object")
    return ContentEdit(_str(raw, "message_id"), _str(raw, "content"), _str(raw, "reason"))


def _str(data: Mapping[str, object], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise RecordFormatError(f"record field '{key}' must be a string")
    return value


def _int(data: Mapping[str, object], key: str) -> int:
    value = data.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise RecordFormatError(f"record field '{key}' must be an integer")
    return value


def records_messages(records: Sequence[Record]) -> list[Message]:
    """Every conversation message in file order (message records only)."""
    return [r.message for r in records if isinstance(r, MessageRecord)]
