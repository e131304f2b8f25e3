"""The embedded transcript store: one append-only JSONL file per session.

Durability rules (DESIGN §6): every record is one ``write`` of one line, so it
reaches the OS before ``append`` returns and survives the process being
killed; compaction checkpoints and turn ends are ``fsync``ed; a new file's
directory is ``fsync``ed; one writer per file, enforced by ``flock``.

Reading never modifies a file. Opening for writing repairs a torn last line
(a crash mid-write) by moving it into a sibling ``*.torn-<time>`` file and
truncating it away, so the next record starts on a clean line.

A new session file appears whole or not at all: ``create`` writes and fsyncs
the header in a hidden sibling (``.<name>.<pid>-<random>.new``), then links it
into place. ``open`` refuses — with ``TranscriptHeaderError``, leaving the
file as it is — a file with no usable header: an empty one, one whose only
line is a torn header (a crash while an older Cairn created it), or one whose
first line is not a session header. Such a file is not rewritten: the
workspace a header names cannot be recovered from the file name, and
guessing it would attach the session to the wrong project.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gc
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from cairn.durable import fsync_dir, make_dirs, write_all
from cairn.messages import Message
from cairn.store.base import (
    NotATranscriptError,
    StoredSession,
    StoreError,
    Transcript,
    TranscriptHeaderError,
    TranscriptLockedError,
    TranscriptStore,
    TranscriptWriteError,
)
from cairn.store.deletion import remove_artifacts
from cairn.store.following import FOLLOW_POLL_S, Waiting, check_follow
from cairn.store.paths import (
    SUBAGENTS_DIR,
    TRANSCRIPT_SUFFIX,
    cairn_home,
    check_session_id,
    is_session_id,
    new_session_id,
    session_path,
)
from cairn.store.records import (
    CheckpointFormatError,
    CompactionRecord,
    Record,
    RecordFormatError,
    SessionRecord,
    check_checkpoint,
    decode_line,
    encode_line,
)
from cairn.store.views import (
    ApiView,
    Resumption,
    SessionDigest,
    UiPage,
    digest,
    first_prompt,
    resumption,
    ui_page,
    ui_view,
)


def parse_transcript(path: Path, data: bytes) -> tuple[Transcript, bytes]:
    """Parse file contents; return the transcript and a torn tail (``b""`` if none)."""
    records, warnings, bad, torn = _parse_region(data, "line")
    if not records and not data.strip():
        warnings.append("the file is empty: no session header")
    elif records and not isinstance(records[0], SessionRecord):
        warnings.append("the file does not start with a session header")
    return Transcript(path, records, warnings, bad), torn


def _parse_region(data: bytes, where: str) -> tuple[list[Record], list[str], int, bytes]:
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
    for line in _lines(fd, start):
        try:
            yield decode_line(line)
        except RecordFormatError:
            continue


def _lines(fd: int, start: int) -> Iterator[bytes]:
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


#: Bytes read at a time when streaming or scanning a file.
_CHUNK = 1 << 20
#: How every compaction line Cairn writes starts (``record_to_dict``'s envelope).
_CHECKPOINT_LINE = b'{"v":1,"type":"compaction",'


def _last_checkpoint(fd: int, start: int, end: int) -> tuple[int, CompactionRecord] | None:
    """The newest valid checkpoint line in ``[start, end)``, scanning backward from ``end``.

    ``start`` is the start of a line. Returns the line's offset and record,
    or ``None`` when there is none, or when the newest valid one carries no
    history (written by an older Cairn): the file must then be read from its
    start.
    """
    for offset, line in _lines_backward(fd, start, end):
        found = _valid_checkpoint(line)
        if found is not None:
            return (offset, found) if found.history is not None else None
    return None


def _lines_backward(fd: int, start: int, end: int) -> Iterator[tuple[int, bytes]]:
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


def _entries_backward(fd: int, start: int, end: int) -> Iterator[Message]:
    """The UI view's entries from the records in ``[start, end)``, newest first."""
    for _, line in _lines_backward(fd, start, end):
        if not line:
            continue
        try:
            record = decode_line(line)
        except RecordFormatError:
            continue
        yield from ui_view([record])


def _valid_checkpoint(line: bytes) -> CompactionRecord | None:
    if not line.startswith(_CHECKPOINT_LINE):
        return None
    try:
        record = decode_line(line)
        if not isinstance(record, CompactionRecord):
            return None
        check_checkpoint(record)
    except (RecordFormatError, CheckpointFormatError):
        return None  # reading forward from an earlier checkpoint ignores it too
    return record


def read_transcript(path: str | Path) -> Transcript:
    """Load a transcript without modifying it.

    Raises ``NotATranscriptError`` for a missing path, a directory, or a
    non-empty file in which no line is a Cairn record.
    """
    path = Path(path)
    fd = _open_for_reading(path)
    try:
        data = _read_all(fd)
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
    fd = _open_for_reading(path)
    try:
        prompt = first_prompt(iter_records(fd))
        tail = _tail_from_checkpoint(fd)
        found = digest(prompt, tail.resumption) if tail is not None else None
        if found is not None:
            return found
        state = Resumption()
        for record in iter_records(fd):
            state.apply(record)
        if not state.records and state.header is None and _has_text(fd):
            raise NotATranscriptError(f"{path} is not a Cairn transcript (no valid record found)")
        return SessionDigest(prompt, (state.ui_entries or 0) - state.api.valid_checkpoints)
    except OSError as exc:
        raise NotATranscriptError(f"{path}: cannot read ({exc.strerror})") from None
    finally:
        os.close(fd)


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
    handle = os.fdopen(_open_for_reading(path), "rb", buffering=0)
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
            data, more = _whole_lines(fd, offset)
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


def _whole_lines(fd: int, offset: int) -> tuple[bytes, bool]:
    """The whole lines from ``offset`` on, a chunk's worth or one line however long,
    and whether more may be there already."""
    data = b""
    while True:
        chunk = os.pread(fd, _CHUNK, offset + len(data))
        data += chunk
        end = data.rfind(b"\n") + 1
        if end or len(chunk) < _CHUNK:
            return data[:end], len(chunk) == _CHUNK


def _open_for_reading(path: Path) -> int:
    """A read-only descriptor of a transcript, or the one-line ``NotATranscriptError``."""
    if path.is_dir():
        raise NotATranscriptError(f"{path} is a directory, not a transcript file")
    try:
        return os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise NotATranscriptError(f"{path}: no such file") from None
    except OSError as exc:
        raise NotATranscriptError(f"{path}: cannot read ({exc.strerror})") from None


def _has_text(fd: int) -> bool:
    return any(line.strip() for line in _lines(fd, 0))


def write_transcript(path: str | Path, records: Sequence[Record]) -> int:
    """Write ``records`` as a new session file that appears whole or not at all.

    Each record is encoded as a writer would encode it, so records read from
    a file Cairn wrote come out as the same bytes. Raises
    ``TranscriptWriteError`` (the file exists, or cannot be written). Returns
    the bytes written.
    """
    path = Path(path)
    where = f"cannot write {path}"
    data = b"".join(_encode(record, where)[0] for record in records)
    try:
        make_dirs(path.parent)
        if path.exists():
            raise TranscriptWriteError(f"{where}: it already exists")
        os.close(_create_whole(path, data))
    except OSError as exc:
        raise TranscriptWriteError(f"{where}: {_reason(exc)}") from None
    return len(data)


class JsonlTranscriptStore:
    """The single writer of one session file. Use ``create`` or ``open``."""

    def __init__(
        self,
        path: Path,
        fd: int,
        resumption: Resumption,
        *,
        warnings: Sequence[str] = (),
        repairs: Sequence[str] = (),
        tail_offset: int | None = None,
        fsync_every_record: bool = False,
    ) -> None:
        self._path = path
        self._fd = fd
        #: ``fsync`` after every record, not only at checkpoints and turn ends:
        #: a power cut then loses nothing acknowledged either (slower on most disks).
        self._fsync_every_record = fsync_every_record
        self._size = os.fstat(fd).st_size
        # Only what a resume needs stays in memory; every record is on disk.
        self._resumption = resumption
        #: Where the kept records start in the file (their checkpoint's line);
        #: ``None`` with no checkpoint (everything is kept) or when not known.
        self._tail_offset = tail_offset
        #: What opening the file reported (a resume reads from the last checkpoint on),
        #: and what it repaired (also part of every ``transcript()`` read later).
        self._warnings = list(warnings)
        self._repairs = list(repairs)
        header = resumption.header
        self._session_id = header.session_id if header else path.stem
        #: The file this store writes, as ``(st_dev, st_ino)``: the path must still
        #: name it, or the records would go to a file nobody can find again.
        info = os.fstat(fd)
        self._identity = (info.st_dev, info.st_ino)
        self._on_warning: Callable[[str], None] | None = None

    # -- opening ---------------------------------------------------------

    @classmethod
    def create(
        cls, path: str | Path, header: SessionRecord, *, fsync_every_record: bool = False
    ) -> JsonlTranscriptStore:
        """Create a new session file holding ``header``; fails if the file exists.

        The file appears whole (header written and fsynced) or not at all,
        even if the process dies half-way. Raises ``TranscriptWriteError``.
        """
        path = Path(path)
        line, stored = _encode(header, f"cannot create {path}")
        try:
            make_dirs(path.parent)
            if path.exists():
                raise TranscriptWriteError(
                    f"cannot create {path}: it already exists; open it to resume"
                )
            fd = _create_whole(path, line)
        except OSError as exc:
            raise TranscriptWriteError(f"cannot create {path}: {_reason(exc)}") from None
        return cls(path, fd, resumption([stored]), fsync_every_record=fsync_every_record)

    @classmethod
    def open(cls, path: str | Path, *, fsync_every_record: bool = False) -> JsonlTranscriptStore:
        """Open an existing session file for appending, repairing a torn tail.

        Raises ``NotATranscriptError`` (missing, a directory, unreadable, not a
        transcript), its subclass ``TranscriptHeaderError`` (empty, or no
        usable session header), ``TranscriptLockedError`` (another writer has
        it) or ``TranscriptWriteError`` (the repair could not be written). The
        file is only changed by a successful repair.
        """
        path = Path(path)
        where = f"cannot resume {path}"
        if path.is_dir():
            raise NotATranscriptError(f"{where}: it is a directory, not a transcript file")
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND)
        except FileNotFoundError:
            raise NotATranscriptError(f"{where}: no such file") from None
        except OSError as exc:
            raise NotATranscriptError(f"{where}: cannot open it ({_reason(exc)})") from None
        try:
            _lock(fd, path, where)
            try:
                loaded = _load_from_checkpoint(fd, path, where) or _load_whole(fd, path, where)
            except OSError as exc:
                raise NotATranscriptError(f"{where}: cannot read it ({_reason(exc)})") from None
        except BaseException:
            os.close(fd)
            raise
        state, warnings, repairs, tail_offset = loaded
        return cls(
            path,
            fd,
            state,
            warnings=[*warnings, *repairs],
            repairs=repairs,
            tail_offset=tail_offset,
            fsync_every_record=fsync_every_record,
        )

    # -- writing ---------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def api_view(self) -> ApiView:
        return self._resumption.api

    @property
    def resumption(self) -> Resumption:
        return self._resumption

    @property
    def warnings(self) -> list[str]:
        """What opening reported, and what went wrong while writing (a replaced file)."""
        return list(self._warnings)

    def on_warning(self, handler: Callable[[str], None] | None) -> None:
        """Call ``handler`` with each one-line warning met while writing; ``None``: log it."""
        self._on_warning = handler

    def append(self, record: Record) -> None:
        line, stored = _encode(record, str(self._path))
        offset = self._write(line, durable=self._fsync_every_record)
        self._keep(stored, offset)

    def save_compaction(self, record: CompactionRecord) -> None:
        record = replace(record, history=self._resumption.history())
        check_checkpoint(record)
        line, stored = _encode(record, str(self._path))
        offset = self._write(line, durable=True)
        self._keep(stored, offset)

    def _keep(self, record: Record, offset: int) -> None:
        self._resumption.apply(record)
        if isinstance(record, CompactionRecord) and self._resumption.records[0] is record:
            self._tail_offset = offset  # a valid checkpoint: what is kept starts there

    def sync(self) -> None:
        self._check_open()
        self._check_path()
        try:
            os.fsync(self._fd)
        except OSError as exc:
            raise TranscriptWriteError(
                f"{self._path}: fsync failed ({_reason(exc)}): the records are written "
                "but may not survive a power cut"
            ) from exc

    def transcript(self) -> Transcript:
        with self._reader() as fd:
            transcript = parse_transcript(self._path, _read_all(fd))[0]
        transcript.warnings[:0] = self._repairs
        return transcript

    def ui_page(self, before: int | None = None, limit: int | None = None) -> UiPage:
        # The newest entries are in memory; older ones are read backward from
        # the last checkpoint, as far as the page reaches, and only without
        # the means to do that is the whole file streamed.
        page = self._resumption.tail_page(before, limit)
        if page is not None:
            return page
        total = self._resumption.ui_entries
        with self._reader() as fd:
            if total is None or limit is None or self._tail_offset is None:
                return ui_page(iter_records(fd), before=before, limit=limit)
            return self._page_before_tail(fd, total, before, limit)

    def _page_before_tail(self, fd: int, total: int, before: int | None, limit: int) -> UiPage:
        kept = ui_view(self._resumption.records, self._resumption.api.ignored_checkpoints)
        first = total - len(kept)
        end = total if before is None else min(before, total)
        start = max(0, end - limit)
        header = _first_line(fd) or b""
        older: list[Message] = []
        position = first
        for entry in _entries_backward(fd, len(header) + 1, self._tail_offset or 0):
            position -= 1
            if position < start:
                break
            if position < end:
                older.append(entry)
        older.reverse()
        newer = kept[max(0, start - first) : max(0, end - first)]
        return UiPage(older + newer, start, total)

    @contextlib.contextmanager
    def _reader(self) -> Iterator[int]:
        """A descriptor to read the file with: the writer's own, or the path's once closed."""
        try:
            if self._fd >= 0:
                yield self._fd
                return
            fd = os.open(self._path, os.O_RDONLY)
            try:
                yield fd
            finally:
                os.close(fd)
        except OSError as exc:
            raise StoreError(f"{self._path}: cannot read it ({_reason(exc)})") from None

    def close(self) -> None:
        if self._fd < 0:
            return
        try:
            # The last chance to notice a replaced file: a record written after an
            # editor read the file is in no file a resume can find.
            self._check_path()
            os.fsync(self._fd)
        except OSError as exc:
            raise TranscriptWriteError(f"{self._path}: fsync failed ({_reason(exc)})") from exc
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

    def _write(self, line: bytes, *, durable: bool) -> int:
        """Write ``line`` at the end of the file; return its offset."""
        self._check_open()
        self._check_path()
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
        offset = self._size
        self._size += len(line)
        return offset

    def _check_open(self) -> None:
        if self._fd < 0:
            raise TranscriptWriteError(f"{self._path}: the store is closed")

    # -- a file replaced or deleted under the writer ------------------------

    def _check_path(self) -> None:
        """Make sure the path still names the file being written; recover if it does not.

        An editor that saves by rename, ``sed -i`` or ``rm`` leaves this store
        appending to an unlinked file: everything written from then on would
        be shown and never found again. Checked before every write, at every
        sync and at close, so the old file — still open here, and holding
        every record this store wrote, those after the replacement too — is
        copied whole to a file a resume can open.
        """
        try:
            info = self._path.stat()
        except FileNotFoundError:
            self._recover(deleted=True)
            return
        except OSError:
            return  # cannot tell (a folder made unreadable): keep writing where we were
        if (info.st_dev, info.st_ino) != self._identity:
            self._recover(deleted=False)

    def _recover(self, *, deleted: bool) -> None:
        """Write the whole session to a file a resume can open, and write there from now on.

        Deleted: the file is restored at its path, same session id. Replaced
        by another file (someone's edit): that file is left as it is, and the
        session goes to a new session id in the same folder, its header
        naming that id, so ``--resume <new id>`` opens it.
        """
        old_path = self._path
        what = "was deleted" if deleted else "was replaced by another file"
        try:
            data = _read_all(self._fd)[: self._size]
            records = data.count(b"\n")
            restored = _restore(old_path, data) if deleted else None
            if restored is not None:
                fd, path, session_id, shift = restored, old_path, self._session_id, 0
            else:
                session_id = new_session_id()
                path = old_path.with_name(session_id + TRANSCRIPT_SUFFIX)
                data, shift = self._renamed(data, session_id)
                fd = _create_whole(path, data)
        except (OSError, RecordFormatError, TranscriptWriteError) as exc:
            raise TranscriptWriteError(
                f"{old_path} {what} while the session was open, and the session could not "
                f"be saved elsewhere ({_store_reason(exc)}); nothing more is written until it can"
            ) from None
        if self._tail_offset is not None:
            self._tail_offset += shift
        os.close(self._fd)  # the unlinked file, and its lock, go
        info = os.fstat(fd)
        self._fd, self._path, self._identity = fd, path, (info.st_dev, info.st_ino)
        self._size = len(data)
        if session_id != self._session_id:
            self._session_id = session_id
            header = self._resumption.header
            if header is not None:
                self._resumption.header = replace(header, session_id=session_id)
            where = (
                f"that file is left as it is, and the session ({records} records so far, "
                f"and everything after) is saved as {path}: resume it with --resume {session_id}"
            )
        else:
            where = f"it was restored with all {records} records, and the session goes on there"
        self._warn(f"{old_path} {what} while the session was open; {where}")

    def _renamed(self, data: bytes, session_id: str) -> tuple[bytes, int]:
        """``data`` with its header naming ``session_id``; and how far later lines moved."""
        header = self._resumption.header
        if header is None:
            raise RecordFormatError("the session has no header")
        start = len(data) - len(data.lstrip(b"\n"))
        end = data.index(b"\n", start) + 1
        line, _ = encode_line(replace(header, session_id=session_id))
        return line + data[end:], len(line) - end

    def _warn(self, text: str) -> None:
        self._warnings.append(text)
        if self._on_warning is not None:
            self._on_warning(text)
        else:
            _log.warning("%s", text)


#: The resumption, the warnings of the lines read, and the repairs made.
#: ... and the offset of the checkpoint it starts from (``None``: unknown, or none).
_Loaded = tuple[Resumption, list[str], list[str], int | None]


def _load_from_checkpoint(fd: int, path: Path, where: str) -> _Loaded | None:
    """Read only the header and what follows the last valid checkpoint.

    ``None`` when that cannot be done (no checkpoint with its history, an
    unreadable header): the whole file is read instead.
    """
    tail = _tail_from_checkpoint(fd)
    if tail is None:
        return None
    repairs = _repair_tail(fd, path, tail.size, tail.data, tail.torn, where)
    return tail.resumption, tail.warnings, repairs, tail.offset


@dataclass(frozen=True, slots=True)
class _Tail:
    """The file from its last valid checkpoint on, read and folded."""

    resumption: Resumption
    warnings: list[str]
    #: The bytes from the checkpoint to the end, and the torn line they end with.
    data: bytes
    torn: bytes
    #: Where the checkpoint starts, and the file size when it was read.
    offset: int
    size: int


def _tail_from_checkpoint(fd: int) -> _Tail | None:
    """The header and what follows the last valid checkpoint with its history; changes nothing."""
    size = os.fstat(fd).st_size
    header_line = _first_line(fd)
    if header_line is None:
        return None
    try:
        header = decode_line(header_line)
    except RecordFormatError:
        return None
    if not isinstance(header, SessionRecord):
        return None
    found = _last_checkpoint(fd, len(header_line) + 1, size)
    if found is None:
        return None
    offset, checkpoint = found
    data = os.pread(fd, size - offset, offset)
    records, warnings, _, torn = _parse_region(data, "line after the last checkpoint")
    state = Resumption.starting_at(header, checkpoint)
    for record in records[1:]:  # records[0] is the checkpoint
        state.apply(record)
    return _Tail(state, warnings, data, torn, offset, size)


def _load_whole(fd: int, path: Path, where: str) -> _Loaded:
    data = _read_all(fd)
    transcript, torn = parse_transcript(path, data)
    _check_header(transcript, data, where)
    repairs = _repair_tail(fd, path, len(data), data, torn, where)
    return resumption(transcript.records), transcript.warnings, repairs, None


def _first_line(fd: int) -> bytes | None:
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


def _encode(record: Record, where: str) -> tuple[bytes, Record]:
    """The line to write and the record as a reload will see it (kept in memory)."""
    try:
        return encode_line(record)
    except RecordFormatError as exc:
        raise TranscriptWriteError(f"{where}: record not written: {exc}") from None


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _restore(path: Path, data: bytes) -> int | None:
    """``data`` as a new file at ``path``, locked; ``None`` if a file appeared there meanwhile."""
    try:
        return _create_whole(path, data)
    except TranscriptWriteError:
        return None


def _store_reason(exc: BaseException) -> str:
    return _reason(exc) if isinstance(exc, OSError) else str(exc)


_log = logging.getLogger("cairn.store")


def _create_whole(path: Path, line: bytes) -> int:
    """Write ``line`` into a new file at ``path`` that never exists half-written.

    Returns its descriptor, locked. The header goes into a hidden sibling
    first and is fsynced; linking it into place cannot replace a file that
    appeared meanwhile (``rename`` would).
    """
    temp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:12]}.new")
    fd = os.open(temp, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
    linked = False
    try:
        _lock(fd, path, f"cannot create {path}")  # a fresh inode: nobody else holds it
        write_all(fd, line)
        os.fsync(fd)
        _link_into_place(temp, path)
        linked = True
        with contextlib.suppress(FileNotFoundError):  # gone if it was renamed instead
            temp.unlink()
        fsync_dir(path.parent)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            temp.unlink()
        if linked:  # roll back: a session that failed to be created does not exist
            with contextlib.suppress(OSError):
                path.unlink()
        raise
    return fd


#: ``link`` errors of file systems without hard links (FAT, some network mounts).
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS})


def _link_into_place(temp: Path, path: Path) -> None:
    exists = TranscriptWriteError(f"cannot create {path}: it already exists; open it to resume")
    try:
        os.link(temp, path)
    except FileExistsError:
        raise exists from None
    except OSError as exc:
        if exc.errno not in _NO_HARD_LINKS:
            raise
        # Without hard links, ``rename`` is the atomic step; it would replace a
        # file created in the instant since this check, which links rule out.
        if path.exists():
            raise exists from None
        temp.rename(path)


def _check_header(transcript: Transcript, data: bytes, where: str) -> None:
    """Refuse a file that has no session header where it must be."""
    if transcript.header is not None:
        return
    if not data.strip():
        raise TranscriptHeaderError(
            f"{where}: the file is empty, not a session (no session header); "
            "delete it to start over"
        )
    first = next(line for line in data.split(b"\n") if line.strip())
    if not transcript.records:
        if b"\n" not in data.rstrip(b"\n") and _looks_like_header(first):
            raise TranscriptHeaderError(
                f"{where}: its session header is incomplete (Cairn stopped while creating "
                "the session) and nothing else is stored in it; delete it to start over"
            )
        raise NotATranscriptError(f"{where}: it is not a Cairn transcript (no valid record found)")
    number = data[: data.index(first)].count(b"\n") + 1
    try:
        record = decode_line(first)
    except RecordFormatError as exc:
        reason = str(exc)
    else:
        reason = f"it is a {record.TYPE} record"
    raise TranscriptHeaderError(
        f"{where}: it is not a Cairn transcript (no session header on line {number}: {reason})"
    )


def _looks_like_header(line: bytes) -> bool:
    return line.lstrip().startswith((b'{"v":1,"type":"session"', b'{"v": 1, "type": "session"'))


def _repair_tail(fd: int, path: Path, size: int, data: bytes, torn: bytes, where: str) -> list[str]:
    """Make the file end on a clean line; ``data`` is its last bytes, ending at ``size``.

    Returns what was repaired, as warnings.
    """
    try:
        if torn:
            aside = _move_aside(path, torn)
            os.ftruncate(fd, size - len(torn))
            os.fsync(fd)
            return [f"the torn last line was moved to {aside}"]
        if data and not data.endswith(b"\n"):
            # A complete record whose newline was lost: finish the line.
            write_all(fd, b"\n")
            os.fsync(fd)
    except OSError as exc:
        raise TranscriptWriteError(
            f"{where}: could not repair its last line ({_reason(exc)})"
        ) from None
    return []


def _delete_session(path: Path, folder: Path) -> bool:
    """Remove the session file ``path`` and its folder; false when the file was not there."""
    where = f"cannot delete {path}"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        remove_artifacts(folder)  # a folder left behind by an earlier, interrupted delete
        return False
    except OSError as exc:
        raise StoreError(f"{where}: {_reason(exc)}") from None
    try:
        _lock(fd, path, where)  # a writer holds it: refused, never pulled from under it
        # The folder before the file: an interrupted delete leaves a session without
        # its artifacts (still listed, deleted again), never artifacts nobody lists.
        remove_artifacts(folder)
        try:
            path.unlink()
            fsync_dir(path.parent)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StoreError(f"{where}: {_reason(exc)}") from None
    finally:
        os.close(fd)  # releases the lock
    return True


def _lock(fd: int, path: Path, where: str) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise TranscriptLockedError(
                f"{where}: it is already open for writing by {_holder(fd)}; "
                "close it there first (one writer per session file)"
            ) from None
        raise StoreError(f"{where}: cannot lock it ({_reason(exc)})") from None


def _holder(fd: int) -> str:
    """Who holds the lock on ``fd``'s file, as far as ``/proc/locks`` tells (Linux)."""
    pid = _lock_holder_pid(fd)
    if pid is None:
        return "another Cairn process"
    if pid == os.getpid():
        return f"this Cairn process (pid {pid})"
    return f"another Cairn process (pid {pid})"


def _lock_holder_pid(fd: int) -> int | None:
    try:
        info = os.fstat(fd)
        table = Path("/proc/locks").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    inode = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    for row in table.splitlines():
        # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF"; waiters read "1: -> FLOCK …".
        fields = row.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == inode:
            # 0: the holder is in a pid namespace this process cannot see.
            return int(fields[4]) if fields[4].isdigit() and fields[4] != "0" else None
    return None


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


class JsonlStoreFactory:
    """Sessions as JSONL files under ``HOME/projects/<workspace slug>/<id>.jsonl``."""

    def __init__(self, home: Path | None = None, *, fsync_every_record: bool = False) -> None:
        self._home = home
        self._fsync_every_record = fsync_every_record

    def path(self, workspace: Path, session_id: str) -> Path:
        return session_path(workspace, session_id, self._home)

    def create(self, workspace: Path, header: SessionRecord) -> JsonlTranscriptStore:
        return JsonlTranscriptStore.create(
            self.path(workspace, header.session_id),
            header,
            fsync_every_record=self._fsync_every_record,
        )

    def open(self, workspace: Path, session_id: str) -> JsonlTranscriptStore:
        return JsonlTranscriptStore.open(
            self.path(workspace, session_id), fsync_every_record=self._fsync_every_record
        )

    def create_from_records(self, workspace: Path, records: Sequence[Record]) -> None:
        # One file linked into place once written and fsynced: whole or absent.
        header = records[0] if records else None
        if not isinstance(header, SessionRecord):
            raise TranscriptWriteError("cannot create a session without its header record first")
        write_transcript(self.path(workspace, header.session_id), records)

    def create_subagent(
        self, workspace: Path, parent_id: str, header: SessionRecord
    ) -> JsonlTranscriptStore:
        # In the parent's folder, which ``sessions`` does not glob.
        path = self._subagent_path(workspace, parent_id, header.session_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        return JsonlTranscriptStore.create(
            path, header, fsync_every_record=self._fsync_every_record
        )

    def _subagent_path(self, workspace: Path, parent_id: str, task_id: str) -> Path:
        name = check_session_id(task_id) + TRANSCRIPT_SUFFIX
        return self.artifacts_dir(workspace, parent_id) / SUBAGENTS_DIR / name

    def subagents(self, workspace: Path, session_id: str) -> list[str]:
        folder = self.artifacts_dir(workspace, session_id) / SUBAGENTS_DIR
        found = (p.stem for p in folder.glob(f"*{TRANSCRIPT_SUFFIX}") if p.is_file())
        return sorted(task for task in found if is_session_id(task))  # not a stray file

    def read_subagent(self, workspace: Path, session_id: str, task_id: str) -> Transcript:
        return read_transcript(self._subagent_path(workspace, session_id, task_id))

    def exists(self, workspace: Path, session_id: str) -> bool:
        return self.path(workspace, session_id).exists()

    def sessions(self, workspace: Path) -> list[StoredSession]:
        folder = self.path(workspace, "x").parent
        found = []
        for path in folder.glob("*.jsonl"):
            try:
                mtime = path.stat().st_mtime
            except OSError:
                continue  # removed meanwhile
            found.append(StoredSession(path.stem, path, mtime))
        return sorted(found, key=lambda s: s.last_activity, reverse=True)

    def read(self, workspace: Path, session_id: str) -> Transcript:
        return read_transcript(self.path(workspace, session_id))

    def describe(self, workspace: Path, session_id: str) -> SessionDigest:
        return describe_transcript(self.path(workspace, session_id))

    def follow(
        self,
        workspace: Path,
        session_id: str,
        after: int = 0,
        *,
        timeout: float | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[tuple[int, Record]]:
        return follow_transcript(
            self.path(workspace, session_id), after, timeout=timeout, stop=stop
        )

    def artifacts_dir(self, workspace: Path, session_id: str) -> Path:
        return self.path(workspace, session_id).with_suffix("")

    def find(self, session_id: str) -> str | None:
        try:
            name = check_session_id(session_id) + TRANSCRIPT_SUFFIX
        except ValueError:
            return None
        projects = (self._home if self._home is not None else cairn_home()) / "projects"
        for path in sorted(projects.glob(f"*/{name}")):
            try:
                with path.open("rb") as handle:
                    header = decode_line(handle.readline())
            except (OSError, RecordFormatError):
                continue
            if isinstance(header, SessionRecord) and header.session_id == session_id:
                return header.workspace
        return None

    def delete(self, workspace: Path, session_id: str) -> bool:
        return _delete_session(
            self.path(workspace, session_id), self.artifacts_dir(workspace, session_id)
        )

    def close(self) -> None:
        pass  # nothing held: each store owns its file
