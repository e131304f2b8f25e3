"""Deleting a session for good: the folder of what belongs to it, beside its records.

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

import shutil
from pathlib import Path

from cairn.store.base import StoreError

__all__ = ["remove_artifacts"]


def remove_artifacts(folder: Path) -> None:
    """Remove a session's folder (tasks' transcripts, saved outputs), if there is one."""
    try:
        shutil.rmtree(folder)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise StoreError(f"cannot delete {folder}: {exc.strerror or exc}") from None
