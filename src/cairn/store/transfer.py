"""Moving a session between stores: a JSONL file out of any store, and into one.

A session's records are copied one for one, in order, ids and times kept, so
a session exported from PostgreSQL and imported back (or the reverse) holds
exactly what it held: the same records, the same views, and for a file Cairn
wrote, the same bytes.

What belongs to the session beside its records travels in a folder next to
the file, laid out as the JSONL store lays out a session's own folder
(``session.jsonl`` and ``session/``): its background tasks' transcripts in
``subagents/<task id>.jsonl``, and its artifact files (oversized tool
outputs and messages saved in full, plans, tasks' outputs) where they were.
The folder is written only when the session has any of them.
"""

from __future__ import annotations

import filecmp
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from cairn.store.base import (
    NotATranscriptError,
    StoreFactory,
    Transcript,
    TranscriptHeaderError,
    TranscriptStore,
    TranscriptWriteError,
)
from cairn.store.jsonl.files import write_transcript
from cairn.store.jsonl.reader import read_transcript
from cairn.store.paths import SUBAGENTS_DIR, TRANSCRIPT_SUFFIX, is_session_id
from cairn.store.records import SessionRecord


@dataclass(frozen=True, slots=True)
class Moved:
    """What an export or an import moved."""

    session_id: str
    workspace: str
    records: int
    #: Lines of the source that are not records (skipped, as every loader skips them).
    warnings: tuple[str, ...] = ()
    #: Background tasks' transcripts and artifact files moved with it.
    tasks: int = 0
    files: int = 0


def companion_dir(path: Path) -> Path:
    """The folder beside an exported session file: ``session.jsonl`` → ``session/``."""
    return path.with_suffix("") if path.suffix else path.with_name(path.name + ".d")


def read_stored(stores: StoreFactory, session_id: str) -> Transcript:
    """A session of ``stores`` known only by its id; ``NotATranscriptError`` if there is none."""
    workspace = stores.find(session_id)
    if workspace is None:
        raise NotATranscriptError(f"no session {session_id!r} in the store")
    return stores.read(Path(workspace), session_id)


def export_session(stores: StoreFactory, session_id: str, path: Path) -> Moved:
    """Write session ``session_id`` of ``stores`` to the new JSONL file ``path``.

    Its tasks' transcripts and its artifact files go to ``companion_dir(path)``.
    Refuses (``TranscriptWriteError``) to overwrite the file or the folder;
    either both appear or neither does.
    """
    transcript = read_stored(stores, session_id)
    header = transcript.header
    if header is None:
        raise TranscriptHeaderError(f"session {session_id!r} has no session header")
    workspace = Path(header.workspace)
    folder = companion_dir(path)
    if path.exists():
        raise TranscriptWriteError(f"cannot write {path}: it already exists")
    if folder.exists():
        raise TranscriptWriteError(f"cannot write {folder}: it already exists")
    tasks = {
        task: stores.read_subagent(workspace, session_id, task)
        for task in stores.subagents(workspace, session_id)
    }
    artifacts = stores.artifacts_dir(workspace, session_id)
    files = list(_artifact_files(artifacts))
    if not tasks and not files:
        write_transcript(path, transcript.records)
        return _moved(header, transcript, tasks, 0)
    # Built aside, moved into place once the file is written: a failed export
    # leaves neither behind.
    staging = folder.with_name(f".{folder.name}.{os.getpid()}.new")
    try:
        shutil.rmtree(staging, ignore_errors=True)
        for relative in files:
            target = staging / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(artifacts / relative, target)
        for task, read in tasks.items():
            write_transcript(staging / SUBAGENTS_DIR / f"{task}{TRANSCRIPT_SUFFIX}", read.records)
        write_transcript(path, transcript.records)
        try:
            staging.rename(folder)
        except OSError as exc:
            path.unlink()
            raise TranscriptWriteError(f"cannot write {folder}: {exc.strerror}") from None
    except OSError as exc:
        raise TranscriptWriteError(f"cannot export to {folder}: {exc}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return _moved(header, transcript, tasks, len(files))


def import_session(stores: StoreFactory, path: Path) -> Moved:
    """Copy the JSONL transcript at ``path`` into ``stores`` as the session its header names.

    With it, what ``companion_dir(path)`` holds: its tasks' transcripts, and
    its artifact files, copied into the store's folder for the session. Refuses
    (``TranscriptWriteError``, nothing imported) a session the store already
    holds, one of its tasks the store already holds, and an artifact file that
    is already there with other contents: an import never merges into, or
    replaces, what is stored. An identical file already there is kept.
    """
    transcript = read_transcript(path)
    header = transcript.header
    if header is None:
        raise TranscriptHeaderError(f"{path} has no session header: nothing to import")
    session_id = header.session_id
    workspace = Path(header.workspace)
    folder = companion_dir(path)
    tasks = _task_transcripts(folder)
    files = list(_artifact_files(folder))
    if stores.exists(workspace, session_id):
        raise TranscriptWriteError(
            f"session {session_id} is already in the store; nothing imported"
        )
    stored_tasks = set(stores.subagents(workspace, session_id))
    for task in tasks:
        if task in stored_tasks:
            raise TranscriptWriteError(
                f"background task {task} of session {session_id} is already in the store; "
                "nothing imported"
            )
    artifacts = stores.artifacts_dir(workspace, session_id)
    for relative in files:
        target = artifacts / relative
        if target.exists() and not filecmp.cmp(folder / relative, target, shallow=False):
            raise TranscriptWriteError(
                f"{target} already exists with other contents; nothing imported"
            )
    _append_all(stores.create(workspace, header), transcript)
    for task_header, task_transcript in tasks.values():
        _append_all(stores.create_subagent(workspace, session_id, task_header), task_transcript)
    try:
        for relative in files:
            target = artifacts / relative
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(folder / relative, target)
    except OSError as exc:
        raise TranscriptWriteError(
            f"session {session_id} was imported, but its files could not all be copied to "
            f"{artifacts}: {exc}"
        ) from None
    return _moved(header, transcript, {t: read for t, (_, read) in tasks.items()}, len(files))


def _moved(
    header: SessionRecord, transcript: Transcript, tasks: Mapping[str, Transcript], files: int
) -> Moved:
    """What moved, with the warnings of the session's lines and of its tasks' lines."""
    warnings = [*transcript.warnings]
    for task, read in tasks.items():
        warnings += [f"{SUBAGENTS_DIR}/{task}{TRANSCRIPT_SUFFIX}: {w}" for w in read.warnings]
    return Moved(
        header.session_id,
        header.workspace,
        len(transcript.records),
        tuple(warnings),
        tasks=len(tasks),
        files=files,
    )


def _append_all(store: TranscriptStore, transcript: Transcript) -> None:
    """Every record after the header, as it was, then one sync."""
    try:
        # ``append``, not ``save_compaction``: each checkpoint goes in as it was
        # written, including one that a limit makes every loader ignore.
        for record in transcript.records[1:]:
            store.append(record)
        store.sync()
    finally:
        store.close()


def _task_transcripts(folder: Path) -> dict[str, tuple[SessionRecord, Transcript]]:
    """The tasks' transcripts in an export's folder, by task id, each checked for its header."""
    found: dict[str, tuple[SessionRecord, Transcript]] = {}
    for path in sorted((folder / SUBAGENTS_DIR).glob(f"*{TRANSCRIPT_SUFFIX}")):
        if not _is_task_transcript(path.relative_to(folder)) or not path.is_file():
            continue  # a file whose name is no task id is an artifact like any other
        read = read_transcript(path)
        if read.header is None or read.header.session_id != path.stem:
            raise TranscriptHeaderError(
                f"{path} is not the transcript of background task {path.stem} "
                "(no session header naming it): nothing imported"
            )
        found[path.stem] = (read.header, read)
    return found


def _artifact_files(folder: Path) -> Iterator[Path]:
    """Every file under a session's folder but its tasks' transcripts, relative to it, sorted."""
    if not folder.is_dir():
        return
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if path.is_file() and not _is_task_transcript(relative):
            yield relative


def _is_task_transcript(relative: Path) -> bool:
    """``subagents/<task id>.jsonl``, where the store keeps a task's transcript."""
    return (
        relative.parent == Path(SUBAGENTS_DIR)
        and relative.suffix == TRANSCRIPT_SUFFIX
        and is_session_id(relative.stem)
    )
