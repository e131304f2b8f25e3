"""The JSONL store's sessions of a workspace: one file each, under Cairn's home."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from cairn.store.base import StoredSession, Transcript, TranscriptWriteError
from cairn.store.jsonl.files import delete_session, write_transcript
from cairn.store.jsonl.follower import follow_transcript
from cairn.store.jsonl.reader import describe_transcript, read_transcript
from cairn.store.jsonl.writer import JsonlTranscriptStore
from cairn.store.paths import (
    SUBAGENTS_DIR,
    TRANSCRIPT_SUFFIX,
    cairn_home,
    check_session_id,
    is_session_id,
    session_path,
)
from cairn.store.records import Record, RecordFormatError, SessionRecord, decode_line
from cairn.store.views import SessionDigest

__all__ = ["JsonlStoreFactory"]


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
        return delete_session(
            self.path(workspace, session_id), self.artifacts_dir(workspace, session_id)
        )

    def close(self) -> None:
        pass  # nothing held: each store owns its file
