"""Moving a session between stores: a JSONL file out of any store, and into one.

A session's records are copied one for one, in order, ids and times kept, so
a session exported from PostgreSQL and imported back (or the reverse) holds
exactly what it held: the same records, the same views, and for a file Cairn
wrote, the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cairn.store.base import (
    NotATranscriptError,
    StoreFactory,
    Transcript,
    TranscriptHeaderError,
    TranscriptWriteError,
)
from cairn.store.jsonl import read_transcript, write_transcript


@dataclass(frozen=True, slots=True)
class Moved:
    """What an export or an import moved."""

    session_id: str
    workspace: str
    records: int
    #: Lines of the source that are not records (skipped, as every loader skips them).
    warnings: tuple[str, ...] = ()


def read_stored(stores: StoreFactory, session_id: str) -> Transcript:
    """A session of ``stores`` known only by its id; ``NotATranscriptError`` if there is none."""
    workspace = stores.find(session_id)
    if workspace is None:
        raise NotATranscriptError(f"no session {session_id!r} in the store")
    return stores.read(Path(workspace), session_id)


def export_session(stores: StoreFactory, session_id: str, path: Path) -> Moved:
    """Write session ``session_id`` of ``stores`` to the new JSONL file ``path``."""
    transcript = read_stored(stores, session_id)
    header = transcript.header
    if header is None:
        raise TranscriptHeaderError(f"session {session_id!r} has no session header")
    write_transcript(path, transcript.records)
    return Moved(session_id, header.workspace, len(transcript.records), tuple(transcript.warnings))


def import_session(stores: StoreFactory, path: Path) -> Moved:
    """Copy the JSONL transcript at ``path`` into ``stores`` as the session its header names.

    Refuses (``TranscriptWriteError``) a session the store already holds:
    an import never merges into, or replaces, a stored session.
    """
    transcript = read_transcript(path)
    header = transcript.header
    if header is None:
        raise TranscriptHeaderError(f"{path} has no session header: nothing to import")
    workspace = Path(header.workspace)
    if stores.exists(workspace, header.session_id):
        raise TranscriptWriteError(
            f"session {header.session_id} is already in the store; nothing imported"
        )
    store = stores.create(workspace, header)
    try:
        # ``append``, not ``save_compaction``: each checkpoint goes in as it was
        # written, including one that a limit makes every loader ignore.
        for record in transcript.records[1:]:
            store.append(record)
        store.sync()
    finally:
        store.close()
    return Moved(
        header.session_id, header.workspace, len(transcript.records), tuple(transcript.warnings)
    )
