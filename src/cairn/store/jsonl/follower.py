"""Following a session file another process writes: each record once its line is whole."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from cairn.store.base import NotATranscriptError
from cairn.store.following import FOLLOW_POLL_S, Waiting, check_follow
from cairn.store.jsonl.lines import open_for_reading, whole_lines
from cairn.store.records import Record, RecordFormatError, decode_line

__all__ = ["follow_transcript"]


def follow_transcript(
    path: str | Path,
    after: int = 0,
    *,
    timeout: float | None = None,
    stop: threading.Event | None = None,
) -> Iterator[tuple[int, Record]]:
    """``(line number, record)`` for each record past line ``after``, as another process writes it.

    Lines are numbered from 1, blank ones not counted: the rows the
    PostgreSQL store would hold. The file is polled every ``FOLLOW_POLL_S``
    seconds for more; a line counts once its newline is written, so a record
    being written is never read half. Ends after ``timeout`` seconds without
    a new record when given, soon after ``stop`` is set, else when the
    caller stops. Raises ``NotATranscriptError`` at once for a file that
    cannot be opened.
    """
    check_follow(after, timeout)
    path = Path(path)
    # A file object, not a bare descriptor: one never iterated is closed when collected.
    handle = os.fdopen(open_for_reading(path), "rb", buffering=0)
    return _follow(path, handle, after, Waiting(timeout, stop))


def _follow(
    path: Path, handle: BinaryIO, after: int, wait: Waiting
) -> Iterator[tuple[int, Record]]:
    fd = handle.fileno()
    try:
        offset = seq = 0  # offset: just past the last whole line read
        while True:
            # From the last newline each time: a line still being written is read again
            # once it is whole, and a torn one a reopening writer cut off is never read.
            data, more = whole_lines(fd, offset)
            offset += len(data)
            for line in data.split(b"\n"):
                if not line:
                    continue
                seq += 1
                if seq <= after:
                    continue
                try:
                    record = decode_line(line)
                except RecordFormatError:
                    continue
                yield seq, record
                wait.restart()
            if more:
                continue
            slice_s = wait.next_slice(FOLLOW_POLL_S)
            if slice_s is not None and slice_s <= 0:
                return
            time.sleep(FOLLOW_POLL_S if slice_s is None else slice_s)
    except OSError as exc:
        raise NotATranscriptError(f"{path}: cannot read ({exc.strerror})") from None
    finally:
        handle.close()
