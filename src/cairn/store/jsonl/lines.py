"""A session file's bytes as lines: read forward, backward from an offset, or as they come.

Reads are ``os.pread`` calls at explicit offsets, so they never move the
offset a writer appends through; streaming holds one chunk (``_CHUNK``
bytes) and the line being read, not the file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from cairn.store.base import NotATranscriptError

__all__ = [
    "first_line",
    "forward_lines",
    "has_text",
    "lines_backward",
    "open_for_reading",
    "read_all",
    "whole_lines",
]

#: Bytes read at a time when streaming or scanning a file.
_CHUNK = 1 << 20


def forward_lines(fd: int, start: int) -> Iterator[bytes]:
    """The non-empty lines of the file from ``start`` on, and its unterminated tail."""
    offset = start
    pending = b""
    while True:
        chunk = os.pread(fd, _CHUNK, offset)
        if not chunk:
            break
        offset += len(chunk)
        pieces = (pending + chunk).split(b"\n")
        pending = pieces.pop()
        yield from (piece for piece in pieces if piece)
    if pending:
        yield pending


def lines_backward(fd: int, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """The lines in ``[start, end)`` and their offsets, newest first.

    ``start`` is the start of a line. Bytes after the last newline before
    ``end`` (a torn tail) are not a line.
    """
    position = end
    carry = b""  # the beginning of a line, whose start lies before ``position``
    in_tail = True  # still inside the bytes after the region's last newline
    while position > start:
        size = min(_CHUNK, position - start)
        position -= size
        pieces = (os.pread(fd, size, position) + carry).split(b"\n")
        if in_tail:
            pieces.pop()
            if not pieces:
                carry = b""
                continue
            in_tail = False
        if position > start:
            carry = pieces[0]
            lines = pieces[1:]
            offset = position + len(carry) + 1
        else:
            carry, lines, offset = b"", pieces, start
        offsets = []
        for line in lines:
            offsets.append(offset)
            offset += len(line) + 1
        yield from zip(reversed(offsets), reversed(lines), strict=True)


def whole_lines(fd: int, offset: int) -> tuple[bytes, bool]:
    """The whole lines from ``offset`` on, a chunk's worth or one line however long,
    and whether more may be there already."""
    data = b""
    while True:
        chunk = os.pread(fd, _CHUNK, offset + len(data))
        data += chunk
        end = data.rfind(b"\n") + 1
        if end or len(chunk) < _CHUNK:
            return data[:end], len(chunk) == _CHUNK


def open_for_reading(path: Path) -> int:
    """A read-only descriptor of a transcript, or the one-line ``NotATranscriptError``."""
    if path.is_dir():
        raise NotATranscriptError(f"{path} is a directory, not a transcript file")
    try:
        return os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise NotATranscriptError(f"{path}: no such file") from None
    except OSError as exc:
        raise NotATranscriptError(f"{path}: cannot read ({exc.strerror})") from None


def has_text(fd: int) -> bool:
    return any(line.strip() for line in forward_lines(fd, 0))


def first_line(fd: int) -> bytes | None:
    """The file's first line without its newline; ``None`` if it has no newline."""
    data = b""
    while True:
        chunk = os.pread(fd, 1 << 16, len(data))
        if not chunk:
            return None
        cut = chunk.find(b"\n")
        if cut >= 0:
            return data + chunk[:cut]
        data += chunk


def read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, max(size - offset, 1 << 16), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)
