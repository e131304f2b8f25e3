"""Deleting a session for good: what ``StoreFactory.delete`` removes beside the records.

A session is its transcript plus what belongs to it (``cairn.store.transfer``
moves the same set): its background tasks' transcripts and its artifact files,
all kept in the session's own folder (``StoreFactory.artifacts_dir``) — for
the JSONL store the tasks' transcripts live there too, for PostgreSQL they are
rows of the database.

A session a writer holds open is refused, never pulled from under it: the
JSONL file's ``flock`` and the database's advisory lock are taken before
anything goes, and a writer in this very process counts as one (the caller
closes its own session first).
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
from pathlib import Path

from cairn.durable import fsync_dir
from cairn.store.base import StoreError, TranscriptLockedError

__all__ = ["delete_jsonl_session", "remove_artifacts"]


def delete_jsonl_session(path: Path, folder: Path) -> bool:
    """Remove the session file ``path`` and its folder; false when the file was not there."""
    where = f"cannot delete {path}"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        remove_artifacts(folder)  # a folder left behind by an earlier, interrupted delete
        return False
    except OSError as exc:
        raise StoreError(f"{where}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise TranscriptLockedError(
                    f"{where}: it is open for writing in a Cairn process; close it there first"
                ) from None
            raise StoreError(f"{where}: cannot lock it ({exc.strerror or exc})") from None
        # The folder before the file: an interrupted delete leaves a session without
        # its artifacts (still listed, deleted again), never artifacts nobody lists.
        remove_artifacts(folder)
        try:
            path.unlink()
            fsync_dir(path.parent)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StoreError(f"{where}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)  # releases the lock
    return True


def remove_artifacts(folder: Path) -> None:
    """Remove a session's folder (tasks' transcripts, saved outputs), if there is one."""
    try:
        shutil.rmtree(folder)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise StoreError(f"cannot delete {folder}: {exc.strerror or exc}") from None
