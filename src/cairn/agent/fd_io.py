"""Reading and writing through descriptors the sandbox opened (``cairn.agent.sandbox``).

The whole file or its head, read by offset; a file replaced in one durable
step inside an open folder; and a worker thread given its own copy of a
descriptor, so a cancelled tool never leaves a thread reading a number the
process has since reused.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import threading
import uuid
from collections.abc import Callable
from typing import TypeVar

from cairn.durable import write_all

#: A NUL byte in this head of a file marks it binary.
BINARY_SNIFF_BYTES = 8_192

#: Longest file name kept in a temporary file's name (names are limited to 255 bytes).
_TEMP_STEM = 200

T = TypeVar("T")


async def in_thread(fd: int, work: Callable[[int], T]) -> T:
    """``work`` in a worker thread, given a duplicate of ``fd`` that only that thread closes.

    A cancelled call leaves its thread running; with the caller's own
    descriptor it could go on reading a number the caller has closed and the
    process has reused (a socket, say). If the thread never started, the
    duplicate is closed here.
    """
    dup = os.dup(fd)
    lock = threading.Lock()
    started = abandoned = False

    def job() -> T:
        nonlocal started
        with lock:
            if abandoned:
                raise asyncio.CancelledError
            started = True
        try:
            return work(dup)
        finally:
            os.close(dup)

    try:
        return await asyncio.to_thread(job)
    except asyncio.CancelledError:
        with lock:
            if not started:
                abandoned = True
                os.close(dup)
        raise


def is_binary(fd: int) -> bool:
    """Whether the head of the open file holds a NUL byte (the usual text/binary test)."""
    return b"\0" in os.pread(fd, BINARY_SNIFF_BYTES, 0)


def read_all(fd: int) -> bytes:
    """Every byte of the open file, from its start."""
    chunks: list[bytes] = []
    offset = 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def write_at(dir_fd: int, name: str, data: bytes, *, mode: int | None = None) -> None:
    """Replace ``name`` in the open folder ``dir_fd`` with ``data``, in one step, durably.

    A temporary file is created in that folder (``O_EXCL | O_NOFOLLOW``),
    written, fsynced and renamed over ``name`` there, then the folder is
    fsynced. The file keeps ``mode``, or the existing file's mode; a new file
    gets the default (0666 less the umask). A symlink at ``name`` is replaced,
    never written through.
    """
    if mode is None:
        try:
            existing = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            mode = stat.S_IMODE(existing.st_mode) if stat.S_ISREG(existing.st_mode) else None
    temp = f".{name[:_TEMP_STEM]}.{uuid.uuid4().hex[:12]}.tmp"
    fd = os.open(
        temp,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o666,
        dir_fd=dir_fd,
    )
    try:
        try:
            write_all(fd, data)
            if mode is not None:
                os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
    os.fsync(dir_fd)
