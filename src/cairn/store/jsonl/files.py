"""A session file on disk: created whole or not at all, locked, repaired, deleted.

One writer per file, held with ``flock``; a torn last line is moved aside
into a ``*.torn-<time>`` sibling; a deleted session takes its folder with it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from cairn.durable import fsync_dir, make_dirs, write_all
from cairn.store.base import (
    NotATranscriptError,
    StoreError,
    Transcript,
    TranscriptHeaderError,
    TranscriptLockedError,
    TranscriptWriteError,
    encode_for_writing,
)
from cairn.store.deletion import remove_artifacts
from cairn.store.records import Record, RecordFormatError, decode_line

__all__ = [
    "check_header",
    "create_whole",
    "delete_session",
    "lock_file",
    "os_reason",
    "repair_tail",
    "restore",
    "write_transcript",
]


def write_transcript(path: str | Path, records: Sequence[Record]) -> int:
    """Write ``records`` as a new session file that appears whole or not at all.

    Each record is encoded as a writer would encode it, so records read from
    a file Cairn wrote come out as the same bytes. Raises
    ``TranscriptWriteError`` (the file exists, or cannot be written). Returns
    the bytes written.
    """
    path = Path(path)
    where = f"cannot write {path}"
    data = b"".join(encode_for_writing(record, where)[0] for record in records)
    try:
        make_dirs(path.parent)
        if path.exists():
            raise TranscriptWriteError(f"{where}: it already exists")
        os.close(create_whole(path, data))
    except OSError as exc:
        raise TranscriptWriteError(f"{where}: {os_reason(exc)}") from None
    return len(data)


def os_reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def restore(path: Path, data: bytes) -> int | None:
    """``data`` as a new file at ``path``, locked; ``None`` if a file appeared there meanwhile."""
    try:
        return create_whole(path, data)
    except TranscriptWriteError:
        return None


def create_whole(path: Path, line: bytes) -> int:
    """Write ``line`` into a new file at ``path`` that never exists half-written.

    Returns its descriptor, locked. The header goes into a hidden sibling
    first and is fsynced; linking it into place cannot replace a file that
    appeared meanwhile (``rename`` would).
    """
    temp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:12]}.new")
    fd = os.open(temp, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
    linked = False
    try:
        lock_file(fd, path, f"cannot create {path}")  # a fresh inode: nobody else holds it
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


def check_header(transcript: Transcript, data: bytes, where: str) -> None:
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


def repair_tail(fd: int, path: Path, size: int, data: bytes, torn: bytes, where: str) -> list[str]:
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
            f"{where}: could not repair its last line ({os_reason(exc)})"
        ) from None
    return []


def delete_session(path: Path, folder: Path) -> bool:
    """Remove the session file ``path`` and its folder; false when the file was not there."""
    where = f"cannot delete {path}"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        remove_artifacts(folder)  # a folder left behind by an earlier, interrupted delete
        return False
    except OSError as exc:
        raise StoreError(f"{where}: {os_reason(exc)}") from None
    try:
        lock_file(fd, path, where)  # a writer holds it: refused, never pulled from under it
        # The folder before the file: an interrupted delete leaves a session without
        # its artifacts (still listed, deleted again), never artifacts nobody lists.
        remove_artifacts(folder)
        try:
            path.unlink()
            fsync_dir(path.parent)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StoreError(f"{where}: {os_reason(exc)}") from None
    finally:
        os.close(fd)  # releases the lock
    return True


def lock_file(fd: int, path: Path, where: str) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise TranscriptLockedError(
                f"{where}: it is already open for writing by {_holder(fd)}; "
                "close it there first (one writer per session file)"
            ) from None
        raise StoreError(f"{where}: cannot lock it ({os_reason(exc)})") from None


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


def _move_aside(path: Path, torn: bytes) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    aside = path.with_name(f"{path.name}.torn-{stamp}")
    with aside.open("xb") as handle:
        handle.write(torn)
        handle.flush()
        os.fsync(handle.fileno())
    fsync_dir(path.parent)
    return aside
