"""Reading a session file without changing it: whole, streamed, or from its last checkpoint on."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cairn.messages import Message
from cairn.store.base import NotATranscriptError, Transcript, valid_checkpoint
from cairn.store.jsonl.lines import (
    first_line,
    forward_lines,
    has_text,
    lines_backward,
    open_for_reading,
    read_all,
)
from cairn.store.records import (
    CompactionRecord,
    Record,
    RecordFormatError,
    SessionRecord,
    decode_line,
)
from cairn.store.views import Resumption, SessionDigest, digest, first_prompt, ui_view

__all__ = [
    "Tail",
    "describe_transcript",
    "entries_backward",
    "iter_records",
    "last_checkpoint",
    "parse_region",
    "parse_transcript",
    "read_transcript",
    "tail_from_checkpoint",
]


def parse_transcript(path: Path, data: bytes) -> tuple[Transcript, bytes]:
    """Parse file contents; return the transcript and a torn tail (``b""`` if none)."""
    records, warnings, bad, torn = parse_region(data, "line")
    if not records and not data.strip():
        warnings.append("the file is empty: no session header")
    elif records and not isinstance(records[0], SessionRecord):
        warnings.append("the file does not start with a session header")
    return Transcript(path, records, warnings, bad), torn


def parse_region(data: bytes, where: str) -> tuple[list[Record], list[str], int, bytes]:
    """Records, warnings, bad-line count and torn tail of ``data`` (whole lines from its start).

    ``where`` names a line in warnings: ``"line"`` in a whole file, or e.g.
    ``"line after the last checkpoint"`` for a region of one.
    """
    # Loading creates many long-lived objects and no garbage cycles; the
    # collector's passes over them would cost about a tenth of the load time.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse(data, where)
    finally:
        if was_enabled:
            gc.enable()


def _parse(data: bytes, where: str) -> tuple[list[Record], list[str], int, bytes]:
    records: list[Record] = []
    warnings: list[str] = []
    bad = 0
    lines = data.split(b"\n")
    tail = lines.pop()  # what follows the last newline: b"" in a clean file
    decode = decode_line
    for number, line in enumerate(lines, start=1):
        if not line:
            continue
        try:
            records.append(decode(line))
        except RecordFormatError as exc:
            bad += 1
            warnings.append(f"{where} {number}: {exc}; skipped")
    torn = b""
    if tail:
        try:
            # A whole record that only lost its newline is kept.
            records.append(decode(tail))
        except RecordFormatError:
            torn = tail
            warnings.append(
                f"{where} {len(lines) + 1}: torn last line ({len(tail)} bytes, "
                "a write cut short by a crash) skipped"
            )
    return records, warnings, bad, torn


def iter_records(fd: int, start: int = 0) -> Iterator[Record]:
    """Every readable record of the file from byte ``start`` on, streamed.

    Holds one chunk and the line being read, not the file: bad lines and a
    torn last line are skipped (``read_transcript`` reports them).
    """
    for line in forward_lines(fd, start):
        try:
            yield decode_line(line)
        except RecordFormatError:
            continue


#: How every compaction line Cairn writes starts (``record_to_dict``'s envelope).
_CHECKPOINT_LINE = b'{"v":1,"type":"compaction",'


def last_checkpoint(fd: int, start: int, end: int) -> tuple[int, CompactionRecord] | None:
    """The newest valid checkpoint line in ``[start, end)``, scanning backward from ``end``.

    ``start`` is the start of a line. Returns the line's offset and record,
    or ``None`` when there is none, or when the newest valid one carries no
    history (written by an older Cairn): the file must then be read from its
    start.
    """
    for offset, line in lines_backward(fd, start, end):
        found = _valid_checkpoint(line)
        if found is not None:
            return (offset, found) if found.history is not None else None
    return None


def entries_backward(fd: int, start: int, end: int) -> Iterator[Message]:
    """The UI view's entries from the records in ``[start, end)``, newest first."""
    for _, line in lines_backward(fd, start, end):
        if not line:
            continue
        try:
            record = decode_line(line)
        except RecordFormatError:
            continue
        yield from ui_view([record])


def _valid_checkpoint(line: bytes) -> CompactionRecord | None:
    if not line.startswith(_CHECKPOINT_LINE):
        return None  # decoding only the lines that can be one
    return valid_checkpoint(line)  # reading forward from an earlier checkpoint ignores it too


def read_transcript(path: str | Path) -> Transcript:
    """Load a transcript without modifying it.

    Raises ``NotATranscriptError`` for a missing path, a directory, or a
    non-empty file in which no line is a Cairn record.
    """
    path = Path(path)
    fd = open_for_reading(path)
    try:
        data = read_all(fd)
    except OSError as exc:
        raise NotATranscriptError(f"{path}: cannot read ({exc.strerror})") from None
    finally:
        os.close(fd)
    transcript, _ = parse_transcript(path, data)
    if data.strip() and not transcript.records:
        raise NotATranscriptError(f"{path} is not a Cairn transcript (no valid record found)")
    return transcript


def describe_transcript(path: str | Path) -> SessionDigest:
    """What a session picker shows of a transcript, without reading its history.

    The first prompt is read from the start, only as far as it lies; the
    message count from the last checkpoint on, whose history counts what came
    before it. Only a file without such a checkpoint is streamed whole, one
    chunk at a time. Changes nothing, and raises ``NotATranscriptError`` where
    ``read_transcript`` does.
    """
    path = Path(path)
    fd = open_for_reading(path)
    try:
        prompt = first_prompt(iter_records(fd))
        tail = tail_from_checkpoint(fd)
        found = digest(prompt, tail.resumption) if tail is not None else None
        if found is not None:
            return found
        state = Resumption()
        for record in iter_records(fd):
            state.apply(record)
        if not state.records and state.header is None and has_text(fd):
            raise NotATranscriptError(f"{path} is not a Cairn transcript (no valid record found)")
        return SessionDigest(prompt, (state.ui_entries or 0) - state.api.valid_checkpoints)
    except OSError as exc:
        raise NotATranscriptError(f"{path}: cannot read ({exc.strerror})") from None
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class Tail:
    """The file from its last valid checkpoint on, read and folded."""

    resumption: Resumption
    warnings: list[str]
    #: The bytes from the checkpoint to the end, and the torn line they end with.
    data: bytes
    torn: bytes
    #: Where the checkpoint starts, and the file size when it was read.
    offset: int
    size: int


def tail_from_checkpoint(fd: int) -> Tail | None:
    """The header and what follows the last valid checkpoint with its history; changes nothing."""
    size = os.fstat(fd).st_size
    header_line = first_line(fd)
    if header_line is None:
        return None
    try:
        header = decode_line(header_line)
    except RecordFormatError:
        return None
    if not isinstance(header, SessionRecord):
        return None
    found = last_checkpoint(fd, len(header_line) + 1, size)
    if found is None:
        return None
    offset, checkpoint = found
    data = os.pread(fd, size - offset, offset)
    records, warnings, _, torn = parse_region(data, "line after the last checkpoint")
    state = Resumption.starting_at(header, checkpoint)
    for record in records[1:]:  # records[0] is the checkpoint
        state.apply(record)
    return Tail(state, warnings, data, torn, offset, size)
