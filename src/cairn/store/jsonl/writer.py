"""The single writer of one session file, and what it reads to resume it."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from cairn.durable import make_dirs, write_all
from cairn.messages import Message
from cairn.store.base import (
    NotATranscriptError,
    StoreError,
    Transcript,
    TranscriptStore,
    TranscriptWriteError,
    TranscriptWriter,
    encode_for_writing,
)
from cairn.store.jsonl.files import (
    check_header,
    create_whole,
    lock_file,
    os_reason,
    repair_tail,
    restore,
)
from cairn.store.jsonl.lines import first_line, read_all
from cairn.store.jsonl.reader import (
    entries_backward,
    iter_records,
    parse_transcript,
    tail_from_checkpoint,
)
from cairn.store.paths import TRANSCRIPT_SUFFIX, new_session_id
from cairn.store.records import (
    CompactionRecord,
    Record,
    RecordFormatError,
    SessionRecord,
    encode_line,
)
from cairn.store.views import Resumption, UiPage, resumption, ui_page, ui_view

__all__ = ["JsonlTranscriptStore"]


class JsonlTranscriptStore(TranscriptWriter):
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
        line, stored = encode_for_writing(header, f"cannot create {path}")
        try:
            make_dirs(path.parent)
            if path.exists():
                raise TranscriptWriteError(
                    f"cannot create {path}: it already exists; open it to resume"
                )
            fd = create_whole(path, line)
        except OSError as exc:
            raise TranscriptWriteError(f"cannot create {path}: {os_reason(exc)}") from None
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
            raise NotATranscriptError(f"{where}: cannot open it ({os_reason(exc)})") from None
        try:
            lock_file(fd, path, where)
            try:
                loaded = _load_from_checkpoint(fd, path, where) or _load_whole(fd, path, where)
            except OSError as exc:
                raise NotATranscriptError(f"{where}: cannot read it ({os_reason(exc)})") from None
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

    def on_warning(self, handler: Callable[[str], None] | None) -> None:
        """Call ``handler`` with each one-line warning met while writing; ``None``: log it."""
        self._on_warning = handler

    def _commit(self, record: Record, line: bytes, *, checkpoint: bool) -> None:
        offset = self._write(line, durable=checkpoint or self._fsync_every_record)
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
                f"{self._path}: fsync failed ({os_reason(exc)}): the records are written "
                "but may not survive a power cut"
            ) from exc

    def transcript(self) -> Transcript:
        with self._reader() as fd:
            transcript = parse_transcript(self._path, read_all(fd))[0]
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
        header = first_line(fd) or b""
        older: list[Message] = []
        position = first
        for entry in entries_backward(fd, len(header) + 1, self._tail_offset or 0):
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
            raise StoreError(f"{self._path}: cannot read it ({os_reason(exc)})") from None

    def close(self) -> None:
        if self._fd < 0:
            return
        try:
            # The last chance to notice a replaced file: a record written after an
            # editor read the file is in no file a resume can find.
            self._check_path()
            os.fsync(self._fd)
        except OSError as exc:
            raise TranscriptWriteError(f"{self._path}: fsync failed ({os_reason(exc)})") from exc
        finally:
            os.close(self._fd)  # closing releases the flock
            self._fd = -1

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
            data = read_all(self._fd)[: self._size]
            records = data.count(b"\n")
            restored = restore(old_path, data) if deleted else None
            if restored is not None:
                fd, path, session_id, shift = restored, old_path, self._session_id, 0
            else:
                session_id = new_session_id()
                path = old_path.with_name(session_id + TRANSCRIPT_SUFFIX)
                data, shift = self._renamed(data, session_id)
                fd = create_whole(path, data)
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
    tail = tail_from_checkpoint(fd)
    if tail is None:
        return None
    repairs = repair_tail(fd, path, tail.size, tail.data, tail.torn, where)
    return tail.resumption, tail.warnings, repairs, tail.offset


def _load_whole(fd: int, path: Path, where: str) -> _Loaded:
    data = read_all(fd)
    transcript, torn = parse_transcript(path, data)
    check_header(transcript, data, where)
    repairs = repair_tail(fd, path, len(data), data, torn, where)
    return resumption(transcript.records), transcript.warnings, repairs, None


def _store_reason(exc: BaseException) -> str:
    return os_reason(exc) if isinstance(exc, OSError) else str(exc)


_log = logging.getLogger("cairn.store")


def _conforms(store: JsonlTranscriptStore) -> TranscriptStore:
    """Static proof (checked by mypy) that the JSONL store implements the interface."""
    return store
