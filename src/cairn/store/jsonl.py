"""The embedded transcript store: one append-only JSONL file per session.

Durability rules (DESIGN §6): every record is one ``write`` of one line, so it
reaches the OS before ``append`` returns and survives the process being
killed; compaction checkpoints and turn ends are ``fsync``ed; a new file's
directory is ``fsync``ed; one writer per file, enforced by ``flock``.

Reading never modifies a file. Opening for writing repairs a torn last line
(a crash mid-write) by moving it into a sibling ``*.torn-<time>`` file and
truncating it away, so the next record starts on a clean line.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gc
import os
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

import orjson

from cairn.durable import fsync_dir, write_all
from cairn.store.base import (
    NotATranscriptError,
    Transcript,
    TranscriptLockedError,
    TranscriptStore,
    TranscriptWriteError,
)
from cairn.store.records import (
    CompactionRecord,
    Record,
    RecordFormatError,
    SessionRecord,
    check_checkpoint,
    encode_record,
    record_from_dict,
)
from cairn.store.views import ApiView, api_view


def parse_transcript(path: Path, data: bytes) -> tuple[Transcript, bytes]:
    """Parse file contents; return the transcript and a torn tail (``b""`` if none)."""
    # Loading creates many long-lived objects and no garbage cycles; the
    # collector's passes over them would cost about a tenth of the load time.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse(path, data)
    finally:
        if was_enabled:
            gc.enable()


def _parse(path: Path, data: bytes) -> tuple[Transcript, bytes]:
    records: list[Record] = []
    warnings: list[str] = []
    bad = 0
    lines = data.split(b"\n")
    tail = lines.pop()  # what follows the last newline: b"" in a clean file
    loads, from_dict = orjson.loads, record_from_dict
    for number, line in enumerate(lines, start=1):
        if not line:
            continue
        try:
            records.append(from_dict(loads(line)))
        except orjson.JSONDecodeError as exc:
            bad += 1
            warnings.append(f"line {number}: not valid JSON ({exc.msg}); skipped")
        except RecordFormatError as exc:
            bad += 1
            warnings.append(f"line {number}: {exc}; skipped")
    torn = b""
    if tail:
        try:
            # A whole record that only lost its newline is kept.
            records.append(from_dict(loads(tail)))
        except (orjson.JSONDecodeError, RecordFormatError):
            torn = tail
            warnings.append(
                f"line {len(lines) + 1}: torn last line ({len(tail)} bytes, "
                "a write cut short by a crash) skipped"
            )
    if not records and not data.strip():
        warnings.append("the file is empty: no session header")
    elif records and not isinstance(records[0], SessionRecord):
        warnings.append("the file does not start with a session header")
    return Transcript(path, records, warnings, bad), torn


def read_transcript(path: str | Path) -> Transcript:
    """Load a transcript without modifying it.

    Raises ``NotATranscriptError`` for a missing path, a directory, or a
    non-empty file in which no line is a Cairn record.
    """
    path = Path(path)
    if path.is_dir():
        raise NotATranscriptError(f"{path} is a directory, not a transcript file")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise NotATranscriptError(f"{path}: no such file") from None
    except OSError as exc:
        raise NotATranscriptError(f"{path}: cannot read ({exc.strerror})") from None
    transcript, _ = parse_transcript(path, data)
    if data.strip() and not transcript.records:
        raise NotATranscriptError(f"{path} is not a Cairn transcript (no valid record found)")
    return transcript


class JsonlTranscriptStore:
    """The single writer of one session file. Use ``create`` or ``open``."""

    def __init__(self, path: Path, fd: int, transcript: Transcript) -> None:
        self._path = path
        self._fd = fd
        self._size = os.fstat(fd).st_size
        self._records = transcript.records
        self._warnings = transcript.warnings
        self._bad_lines = transcript.bad_lines
        self._api = api_view(self._records)
        header = transcript.header
        self._session_id = header.session_id if header else path.stem

    # -- opening ---------------------------------------------------------

    @classmethod
    def create(cls, path: str | Path, header: SessionRecord) -> JsonlTranscriptStore:
        """Create a new session file holding ``header``; fails if the file exists."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            raise TranscriptWriteError(f"{path} already exists; open it to resume") from None
        try:
            _lock(fd, path)
            write_all(fd, encode_record(header))
            os.fsync(fd)
            fsync_dir(path.parent)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, Transcript(path, [header]))

    @classmethod
    def open(cls, path: str | Path) -> JsonlTranscriptStore:
        """Open an existing session file for appending, repairing a torn tail."""
        path = Path(path)
        if path.is_dir():
            raise NotATranscriptError(f"{path} is a directory, not a transcript file")
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND)
        except FileNotFoundError:
            raise NotATranscriptError(f"{path}: no such file") from None
        try:
            _lock(fd, path)
            data = _read_all(fd)
            transcript, torn = parse_transcript(path, data)
            if data.strip() and not transcript.records:
                raise NotATranscriptError(f"{path} is not a Cairn transcript (no valid record)")
            if torn:
                aside = _move_aside(path, torn)
                os.ftruncate(fd, len(data) - len(torn))
                os.fsync(fd)
                transcript.warnings.append(f"the torn last line was moved to {aside}")
            elif data and not data.endswith(b"\n"):
                # A complete record whose newline was lost: finish the line.
                write_all(fd, b"\n")
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, transcript)

    # -- writing ---------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def api_view(self) -> ApiView:
        return self._api

    def append(self, record: Record) -> None:
        self._write(encode_record(record), durable=False)
        self._remember(record)

    def save_compaction(self, record: CompactionRecord) -> None:
        check_checkpoint(record)
        self._write(encode_record(record), durable=True)
        self._remember(record)

    def sync(self) -> None:
        self._check_open()
        try:
            os.fsync(self._fd)
        except OSError as exc:
            raise TranscriptWriteError(f"{self._path}: fsync failed ({exc.strerror})") from exc

    def transcript(self) -> Transcript:
        return Transcript(self._path, list(self._records), list(self._warnings), self._bad_lines)

    def close(self) -> None:
        if self._fd < 0:
            return
        try:
            os.fsync(self._fd)
        finally:
            os.close(self._fd)  # closing releases the flock
            self._fd = -1

    def __enter__(self) -> JsonlTranscriptStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _remember(self, record: Record) -> None:
        self._records.append(record)
        self._api.apply(record)

    def _write(self, line: bytes, *, durable: bool) -> None:
        self._check_open()
        try:
            write_all(self._fd, line)
            if durable:
                os.fsync(self._fd)
        except OSError as exc:
            # Leave no partial line behind: the record either is in the file
            # whole, or not at all.
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._size)
            raise TranscriptWriteError(
                f"{self._path}: could not write record ({exc.strerror or exc})"
            ) from exc
        self._size += len(line)

    def _check_open(self) -> None:
        if self._fd < 0:
            raise TranscriptWriteError(f"{self._path}: the store is closed")


def _lock(fd: int, path: Path) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise TranscriptLockedError(
                f"{path} is already open for writing by another Cairn session; "
                "close it there first (one writer per session file)"
            ) from None
        raise


def _read_all(fd: int) -> bytes:
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


def _move_aside(path: Path, torn: bytes) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    aside = path.with_name(f"{path.name}.torn-{stamp}")
    with aside.open("xb") as handle:
        handle.write(torn)
        handle.flush()
        os.fsync(handle.fileno())
    fsync_dir(path.parent)
    return aside


def _conforms(store: JsonlTranscriptStore) -> TranscriptStore:
    """Static proof (checked by mypy) that the JSONL store implements the interface."""
    return store
