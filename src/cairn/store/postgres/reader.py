"""Reading a session's rows: a page at a time, as a transcript, or folded for a resume."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from cairn.store.base import (
    NotATranscriptError,
    Transcript,
    TranscriptHeaderError,
    valid_checkpoint,
)
from cairn.store.postgres.connection import session_location
from cairn.store.postgres.schema import MESSAGES, PAGE, PAGE_ROWS
from cairn.store.records import (
    CheckpointFormatError,
    CompactionRecord,
    Record,
    RecordFormatError,
    SessionRecord,
    check_checkpoint,
    decode_line,
)
from cairn.store.views import Resumption

if TYPE_CHECKING:
    from cairn.store.postgres.connection import Connection

__all__ = [
    "Loaded",
    "check_belongs",
    "decoded",
    "is_trusted",
    "load",
    "message_lines",
    "page",
    "transcript_of",
    "trusted_checkpoint",
]


def page(conn: Connection, session_id: str, after: int) -> list[tuple[int, bytes]]:
    rows = conn.execute(PAGE, (session_id, after, PAGE_ROWS)).fetchall()
    return [(int(seq), str(line).encode()) for seq, line in rows]


def message_lines(conn: Connection, session_id: str) -> Iterator[tuple[int, bytes]]:
    """The session's message rows in order, a page at a time, read only as far as wanted."""
    after = 0
    while True:
        rows = conn.execute(MESSAGES, (session_id, after, PAGE_ROWS)).fetchall()
        yield from ((int(seq), str(line).encode()) for seq, line in rows)
        if len(rows) < PAGE_ROWS:
            return
        after = int(rows[-1][0])


def check_belongs(conn: Connection, session_id: str, workspace: str | None) -> Path:
    """The session's location; ``NotATranscriptError`` unless it is stored (in ``workspace``).

    With a workspace, only a top-level session of it: a task's transcript is
    read through its parent.
    """
    location = session_location(conn, session_id)
    row = conn.execute(
        "SELECT workspace, parent_id FROM cairn_sessions WHERE session_id = %s", (session_id,)
    ).fetchone()
    if row is None or (workspace is not None and (row[0] != workspace or row[1] is not None)):
        raise NotATranscriptError(f"{location}: no such session")
    return location


def decoded(lines: Iterable[tuple[int, bytes]]) -> Iterator[tuple[int, Record]]:
    """The readable records among ``lines``; bad ones are skipped (``transcript_of`` says which)."""
    for seq, line in lines:
        try:
            yield seq, decode_line(line)
        except RecordFormatError:
            continue


def transcript_of(location: Path, lines: Iterable[tuple[int, bytes]]) -> Transcript:
    """A ``Transcript`` of a session's rows, with warnings worded as the JSONL loader's."""
    records: list[Record] = []
    warnings: list[str] = []
    bad = 0
    for seq, line in lines:
        try:
            records.append(decode_line(line))
        except RecordFormatError as exc:
            bad += 1
            warnings.append(f"line {seq}: {exc}; skipped")
    if not records and not bad:
        warnings.append("the session is empty: no session header")
    elif records and not isinstance(records[0], SessionRecord):
        warnings.append("the session does not start with a session header")
    return Transcript(location, records, warnings, bad)


def trusted_checkpoint(line: bytes | None) -> CompactionRecord | None:
    """The checkpoint ``line`` holds, if a resume may start from it (valid, with history)."""
    record = valid_checkpoint(line) if line is not None else None
    return record if record is not None and record.history is not None else None


def is_trusted(record: CompactionRecord) -> bool:
    try:
        check_checkpoint(record)
    except CheckpointFormatError:
        return False
    return record.history is not None


#: The resumption, the warnings of the rows read, and the last ``seq``.
Loaded = tuple[Resumption, list[str], int]


def load(conn: Connection, session_id: str, pointer: int | None, where: str) -> Loaded:
    """The session's resumption, read from the pointer's checkpoint on when it can be trusted."""
    first = conn.execute(
        "SELECT seq, line FROM cairn_records WHERE session_id = %s ORDER BY seq LIMIT 1",
        (session_id,),
    ).fetchone()
    if first is None:
        raise TranscriptHeaderError(
            f"{where}: it holds no records, not even its session header; delete it to start over"
        )
    header_seq = int(first[0])
    try:
        header = decode_line(str(first[1]).encode())
    except RecordFormatError as exc:
        reason = str(exc)
    else:
        reason = f"it is a {header.TYPE} record"
    if not isinstance(header, SessionRecord):
        raise TranscriptHeaderError(
            f"{where}: it is not a Cairn transcript (no session header on line {header_seq}: "
            f"{reason})"
        )
    warnings: list[str] = []
    checkpoint = None
    if pointer is not None:
        row = conn.execute(
            "SELECT line FROM cairn_records WHERE session_id = %s AND seq = %s",
            (session_id, pointer),
        ).fetchone()
        checkpoint = trusted_checkpoint(str(row[0]).encode() if row is not None else None)
        if checkpoint is None:
            warnings.append(
                f"the checkpoint pointer names line {pointer}, which holds no valid checkpoint "
                "with its history; the whole session was read"
            )
    if checkpoint is not None and pointer is not None:
        state = Resumption.starting_at(header, checkpoint)
        last = pointer
    else:
        state = Resumption()
        state.apply(header)
        last = header_seq
    while True:
        rows = page(conn, session_id, last)
        for seq, line in rows:
            try:
                state.apply(decode_line(line))
            except RecordFormatError as exc:
                warnings.append(f"line {seq}: {exc}; skipped")
        if rows:
            last = rows[-1][0]
        if len(rows) < PAGE_ROWS:
            break
    return state, warnings, last
