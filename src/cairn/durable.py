"""Low-level helpers for writes that must survive a crash: whole writes, fsynced folders,
folders made durably, files replaced atomically."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
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


def make_dirs(directory: Path) -> None:
    """``mkdir -p``, ``fsync``ing the parent of each folder it creates.

    Another process creating one of them meanwhile is no error; a name that
    exists but is not a folder makes the next step fail, as it should.
    """
    missing: list[Path] = []
    current = directory
    while not current.is_dir() and current != current.parent:
        missing.append(current)
        current = current.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process was quicker
            folder.mkdir()
        fsync_dir(folder.parent)


def write_durably(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically and durably, creating folders as needed.

    The data goes to a temporary file in the same folder, which is
    ``fsync``ed and renamed over ``path``; then the folder is ``fsync``ed so
    the rename survives a crash. Raises ``OSError``; a failure leaves no
    temporary file behind and ``path`` as it was.
    """
    make_dirs(path.parent)
    fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    temp = Path(temp_name)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        temp.replace(path)  # os.replace: atomic on POSIX
        fsync_dir(path.parent)
    except OSError:
        with contextlib.suppress(OSError):
            temp.unlink()  # a no-op once renamed: the renamed file holds the data
        raise
