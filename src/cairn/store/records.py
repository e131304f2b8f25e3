"""Transcript records: the typed form of every line in a session file.

A record is ``{"v": 1, "type": …, "id": …, "ts": …, …}``. This module turns
records into JSON-ready dicts and back, and holds the checkpoint limits that
are enforced both when a compaction is saved and when it is loaded.

A line is a record only if it could be written again: ``decode_line`` refuses
JSON nested deeper than ``MAX_JSON_DEPTH`` (``orjson`` reads 1,024 levels but
writes only 254), and ``encode_record`` refuses to produce a line that
``decode_line`` would not accept. So every record a consumer sees — loaded or
about to be written — can be encoded again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, ClassVar, Literal, TypeAlias

import orjson
from pydantic import StrictInt

from cairn.codec import OMIT_EMPTY, OMIT_NONE, Codec, JSONDepthError, JSONKey, exceeds_depth
from cairn.errors import FormatError
from cairn.messages import (
    JSONObject,
    JSONValue,
    Message,
    MessageFormatError,
    StoredMessage,
    find_orphans,
    message_to_dict,
    new_id,
    scrub,
)

RECORD_VERSION = 1
CHECKPOINT_VERSION = 1
#: Limits on one compaction checkpoint's ``replacement_messages`` (seed 000).
MAX_REPLACEMENT_MESSAGES = 4_096
MAX_REPLACEMENT_BYTES = 16 * 1024 * 1024
#: Deepest JSON nesting a record line may have (the line's own object is level 1).
#: ``orjson`` cannot encode more than 254 levels; half of that leaves room for
#: whatever wraps a record or a message (an event, a request, an export) to
#: still encode it, and is far beyond anything Cairn itself writes.
MAX_JSON_DEPTH = 128

Trigger: TypeAlias = Literal["auto", "manual", "reactive"]
Strategy: TypeAlias = Literal["llm", "fallback"]
TRIGGERS: frozenset[str] = frozenset({"auto", "manual", "reactive"})
STRATEGIES: frozenset[str] = frozenset({"llm", "fallback"})


class RecordFormatError(FormatError):
    """A line of a transcript is not a valid record; the message says why."""


class CheckpointFormatError(FormatError):
    """This record may not be a compaction checkpoint: it breaks a rule (size, count,
    version or pairing)."""


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
    model: Annotated[str | None, OMIT_NONE] = None


@dataclass(frozen=True, slots=True)
class MessageRecord:
    """One conversation message; the record id is the message id (messages are unique)."""

    TYPE: ClassVar[str] = "message"

    message: StoredMessage
    ts: str = field(default_factory=now_ts)

    @property
    def id(self) -> str:
        return self.message.id


@dataclass(frozen=True, slots=True)
class HandoffRecord:
    """The hidden token-budget handoff reminder of one compaction epoch."""

    TYPE: ClassVar[str] = "handoff"

    message: StoredMessage
    epoch: StrictInt
    version: StrictInt = 1
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
class CheckpointHistory:
    """What the records before a checkpoint leave that its replacement messages do not hold.

    The store writes it into every checkpoint it saves, so reopening a session
    can start reading at the last valid checkpoint instead of the file start:
    the resume then costs what came after it, however long the history.
    """

    #: Valid checkpoints in the session up to and including this one (the epoch).
    checkpoints: StrictInt
    #: The newest value of each state key (``StateRecord``) written before it.
    state: Mapping[JSONKey, JSONValue] = field(default_factory=dict)
    #: When the provider last answered before it (an assistant message with usage).
    last_response_ts: Annotated[str | None, OMIT_NONE] = None
    #: Entries of the UI view up to and including this checkpoint's compact block.
    ui_entries: Annotated[StrictInt | None, OMIT_NONE] = None


@dataclass(frozen=True, slots=True)
class CompactionRecord:
    """A durable checkpoint: ``replacement_messages`` is the exact API context after it."""

    TYPE: ClassVar[str] = "compaction"

    trigger: Trigger
    strategy: Strategy
    pre_tokens: StrictInt
    post_tokens: StrictInt
    summary: str
    replacement_messages: tuple[StoredMessage, ...]
    files: tuple[str, ...] = ()
    version: StrictInt = CHECKPOINT_VERSION
    id: str = field(default_factory=lambda: new_id("rec"))
    ts: str = field(default_factory=now_ts)
    #: Filled in by the store when it saves the checkpoint (absent in older files).
    history: Annotated[CheckpointHistory | None, OMIT_NONE] = None
    #: What the compaction fork left out of the main request it extends, to fit
    #: the budget (one line each); empty: the fork began with that request,
    #: byte for byte.
    fork_elisions: Annotated[tuple[str, ...], OMIT_EMPTY] = ()
    #: The summary was prepared in the background before the line and committed
    #: without a model call (DESIGN §5.5a).
    precomputed: Annotated[bool, OMIT_EMPTY] = False
    #: The rounds after the precomputed summary's snapshot, kept verbatim.
    rounds_after: Annotated[StrictInt, OMIT_EMPTY] = 0


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
    """Raise ``CheckpointFormatError`` if ``record`` may not be a checkpoint; else its size
    in bytes."""
    if record.version != CHECKPOINT_VERSION:
        raise CheckpointFormatError(
            f"unsupported checkpoint version {record.version} (expected {CHECKPOINT_VERSION})"
        )
    count = len(record.replacement_messages)
    if count > MAX_REPLACEMENT_MESSAGES:
        raise CheckpointFormatError(
            f"checkpoint has {count} replacement messages; the limit is {MAX_REPLACEMENT_MESSAGES}"
        )
    size = len(_replacement_bytes(record.replacement_messages))
    if size > MAX_REPLACEMENT_BYTES:
        raise CheckpointFormatError(
            f"checkpoint replacement messages take {size:,} bytes; "
            f"the limit is {MAX_REPLACEMENT_BYTES:,} (16 MiB)"
        )
    orphans = find_orphans(record.replacement_messages)
    if orphans:
        raise CheckpointFormatError(
            "checkpoint would split tool calls from their results "
            f"(calls without results: {list(orphans.calls)}, "
            f"results without calls: {list(orphans.results)})"
        )
    return size


def _replacement_bytes(messages: Sequence[Message]) -> bytes:
    """The replacement messages as they would be written (lone surrogates scrubbed)."""
    too_deep = CheckpointFormatError(
        f"checkpoint replacement messages nest JSON more than {MAX_JSON_DEPTH - 1} "
        f"levels deep (a record line may nest {MAX_JSON_DEPTH} in all)"
    )
    try:
        data: JSONValue = [message_to_dict(m) for m in messages]
    except JSONDepthError:
        raise too_deep from None
    except MessageFormatError as exc:
        raise CheckpointFormatError(f"checkpoint replacement messages: {exc}") from None
    try:
        return orjson.dumps(data)
    except orjson.JSONEncodeError:
        pass
    # The line nests the list inside the record object: one level more.
    if exceeds_depth(data, MAX_JSON_DEPTH - 1):
        raise too_deep
    try:
        return orjson.dumps(scrub_json(data))
    except orjson.JSONEncodeError as exc:
        raise CheckpointFormatError(
            f"checkpoint replacement messages are not valid JSON ({exc})"
        ) from None


# ---------------------------------------------------------------------------
# Nesting depth


def line_exceeds_depth(line: bytes, value: object) -> bool:
    """``exceeds_depth(value, MAX_JSON_DEPTH)`` for ``value`` decoded from ``line``.

    The nesting can be no deeper than the number of opening brackets in the
    line; counting them is far cheaper than walking the value, and nearly
    every line has fewer than the limit.
    """
    if line.count(b"[") + line.count(b"{") <= MAX_JSON_DEPTH:
        return False
    return exceeds_depth(value, MAX_JSON_DEPTH)


# ---------------------------------------------------------------------------
# Encoding


def _codec(kind: type[Record]) -> Codec[Record]:
    return Codec(kind, error=RecordFormatError, what=f"{kind.TYPE} record")


#: Each record type's codec, by the ``type`` its lines carry.
_CODECS: Mapping[str, Codec[Record]] = {
    kind.TYPE: _codec(kind)
    for kind in (
        SessionRecord,
        MessageRecord,
        HandoffRecord,
        ContextEditRecord,
        CompactionRecord,
        StateRecord,
        ErrorRecord,
    )
}


def record_to_dict(record: Record) -> JSONObject:
    """The JSON object written as one line of the transcript.

    The envelope (``v``, ``type``, ``id``) comes first, then the record's own
    fields as its codec writes them.
    """
    out: JSONObject = {"v": RECORD_VERSION, "type": record.TYPE, "id": record.id}
    out.update(_CODECS[record.TYPE].dump(record))
    return out


def encode_record(record: Record) -> bytes:
    """One transcript line, newline included; ``decode_line`` reads it back.

    Raises ``RecordFormatError`` for a record that cannot be a line (see
    ``encode_line``).
    """
    return encode_line(record)[0]


def encode_line(record: Record) -> tuple[bytes, Record]:
    """One transcript line, and the record exactly as the loader will read it back.

    Lone surrogates (undecodable bytes smuggled into a ``str``, e.g. in a
    ``meta.extra`` value) cannot be UTF-8; they become U+FFFD rather than
    failing the write and losing the whole record. A record that still cannot
    be a line — JSON nested too deep, an integer beyond 64 bits, a field of
    the wrong type — raises ``RecordFormatError`` naming the problem: a line
    the loader would skip must never be written. A writer keeps the returned
    record, so what it holds in memory is what a reload will hold.
    """
    try:
        data = record_to_dict(record)
    except JSONDepthError:
        raise _too_deep(record) from None
    try:
        line = orjson.dumps(data, option=orjson.OPT_APPEND_NEWLINE)
    except orjson.JSONEncodeError:
        line = _encode_slowly(record, data)
    try:
        return line, decode_line(line)
    except RecordFormatError as exc:
        raise RecordFormatError(
            f"{record.TYPE} record {record.id!r} would not read back: {exc}"
        ) from None


def _encode_slowly(record: Record, data: JSONObject) -> bytes:
    # Measured before scrubbing: the scrub recurses, and a value nested far
    # enough would exhaust the interpreter's stack.
    if exceeds_depth(data, MAX_JSON_DEPTH):
        raise _too_deep(record)
    try:
        return orjson.dumps(scrub_json(data), option=orjson.OPT_APPEND_NEWLINE)
    except orjson.JSONEncodeError as exc:
        raise RecordFormatError(
            f"{record.TYPE} record {record.id!r} cannot be encoded as JSON ({exc})"
        ) from None


def _too_deep(record: Record) -> RecordFormatError:
    return RecordFormatError(
        f"{record.TYPE} record {record.id!r} nests JSON more than {MAX_JSON_DEPTH} levels deep"
    )


def scrub_json(value: JSONValue) -> JSONValue:
    """``value`` with every lone surrogate in its strings and keys replaced by U+FFFD.

    Recursive: only call it on values no deeper than ``MAX_JSON_DEPTH``.
    """
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, (list, tuple)):
        return [scrub_json(v) for v in value]
    if isinstance(value, dict):
        return {scrub(k) if isinstance(k, str) else k: scrub_json(v) for k, v in value.items()}
    return value


def decode_line(line: bytes) -> Record:
    """Parse one transcript line, raising ``RecordFormatError`` that names the problem."""
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise RecordFormatError(f"not valid JSON ({exc.msg})") from None
    if line_exceeds_depth(line, data):
        raise RecordFormatError(f"JSON nested more than {MAX_JSON_DEPTH} levels deep")
    return record_from_dict(data)


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
    codec = _CODECS.get(kind)
    if codec is None:
        raise RecordFormatError(f"unknown record type {kind!r}")
    # Every line carries its time, and its id unless the id is its message's;
    # a codec would invent fresh ones.
    for key in ("ts",) if kind in ("message", "handoff") else ("id", "ts"):
        if not isinstance(data.get(key), str):
            raise RecordFormatError(f"record field '{key}' must be a string")
    return codec.load(data)


def records_messages(records: Sequence[Record]) -> list[Message]:
    """Every conversation message in file order (message records only)."""
    return [r.message for r in records if isinstance(r, MessageRecord)]
