"""Low-level helpers for writes that must survive a crash: whole writes, fsynced folders."""

from __future__ import annotations

import errno
import os
from pathlib import Path


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd`` (``os.write`` may write less than asked)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written == 0:
            raise OSError(errno.EIO, "write returned 0 bytes")
        view = view[written:]


def fsync_dir(directory: Path) -> None:
    """Make a folder's entries durable: a new or renamed file is only safe after this."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
