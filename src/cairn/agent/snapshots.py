"""File snapshots: what a file held before the agent wrote it, so a rewind can put it back.

Before ``write_file`` or ``edit_file`` changes a file of the workspace, the
file's prior state — its bytes and mode, a symlink's target, or its absence —
is saved in the session's folder (never in the workspace)::

    <session folder>/snapshots/index.jsonl     one line per write, in order
    <session folder>/snapshots/blobs/<sha256>  prior contents, each stored once

Each line is anchored to the transcript: ``anchor`` is the id of the last
record the session had written when the tool ran (``None``: only the header).
A rewind to a prompt restores, for every file written after the prompt's
record, the state saved by the first such write. Blobs are fsynced before
their line, and the line before the tool writes, so a crash never leaves a
write without what it replaced.

Bounded: a file over ``MAX_FILE_BYTES``, or one that would take the
session's snapshots past ``MAX_SESSION_BYTES``, gets a line saying why it
was not saved (a rewind names it as not restorable) and the write goes on.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeAlias

import orjson

from cairn.durable import fsync_dir, write_all
from cairn.store.records import now_ts

SNAPSHOTS_DIR = "snapshots"
INDEX_NAME = "index.jsonl"
BLOBS_DIR = "blobs"
#: A file larger than this is not saved before a write (a rewind cannot restore it).
MAX_FILE_BYTES = 8 * 1024 * 1024
#: All the prior contents one session keeps, at most.
MAX_SESSION_BYTES = 256 * 1024 * 1024

PriorKind: TypeAlias = Literal["file", "absent", "symlink", "unsaved"]


@dataclass(frozen=True, slots=True)
class PriorFile:
    """A file's state just before a write: what restoring it means."""

    kind: PriorKind
    data: bytes | None = None
    mode: int | None = None
    #: A symlink's target.
    target: str | None = None
    #: Why it was not saved (``unsaved``).
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One line of the index: a file of the workspace, as it was before one write."""

    path: Path
    anchor: str | None
    kind: PriorKind
    tool: str
    ts: str
    blob: str | None = None
    mode: int | None = None
    target: str | None = None
    reason: str | None = None

    def to_json(self) -> bytes:
        data = {
            "path": str(self.path),
            "anchor": self.anchor,
            "kind": self.kind,
            "tool": self.tool,
            "ts": self.ts,
            "blob": self.blob,
            "mode": self.mode,
            "target": self.target,
            "reason": self.reason,
        }
        return orjson.dumps({k: v for k, v in data.items() if v is not None or k == "anchor"})

    @classmethod
    def from_json(cls, line: bytes) -> Snapshot | None:
        """The snapshot a line holds; ``None`` for a torn or damaged line (skipped)."""
        try:
            data = orjson.loads(line)
            kind = data["kind"]
            if kind not in ("file", "absent", "symlink", "unsaved"):
                return None
            anchor = data.get("anchor")
            return cls(
                Path(str(data["path"])),
                anchor if isinstance(anchor, str) else None,
                kind,
                str(data.get("tool", "")),
                str(data.get("ts", "")),
                _opt_str(data.get("blob")),
                data.get("mode") if isinstance(data.get("mode"), int) else None,
                _opt_str(data.get("target")),
                _opt_str(data.get("reason")),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
            return None


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


class FileSnapshots:
    """The snapshots of one session: taken before each write, read by a rewind."""

    def __init__(
        self,
        folder: Path,
        workspace: Path,
        anchor: Callable[[], str | None],
        *,
        max_file_bytes: int = MAX_FILE_BYTES,
        max_session_bytes: int = MAX_SESSION_BYTES,
    ) -> None:
        #: ``<session folder>/snapshots``.
        self.folder = folder
        self._workspace = Path(os.path.realpath(workspace))
        self._anchor = anchor
        self.max_file_bytes = max_file_bytes
        self._max_session_bytes = max_session_bytes
        #: Bytes of blobs stored so far (measured on first use).
        self._used: int | None = None

    @property
    def index_path(self) -> Path:
        return self.folder / INDEX_NAME

    def blob_path(self, blob: str) -> Path:
        return self.folder / BLOBS_DIR / blob

    def covers(self, path: Path) -> bool:
        """Whether writes to ``path`` are snapshotted: files of the workspace, nothing else
        (the plan file lives in the session's own folder)."""
        return path.is_relative_to(self._workspace) and path != self._workspace

    def before_write(self, tool: str, path: Path, prior: PriorFile) -> None:
        """Save ``prior`` durably before ``tool`` writes ``path``; ``OSError`` if it cannot be."""
        blob = None
        if prior.kind == "file":
            data = prior.data or b""
            blob = hashlib.sha256(data).hexdigest()
            if not self.blob_path(blob).exists():
                if self._used_bytes() + len(data) > self._max_session_bytes:
                    prior = PriorFile(
                        "unsaved",
                        reason=f"the session's snapshots reached {self._max_session_bytes:,} bytes",
                    )
                    blob = None
                else:
                    self._write_blob(blob, data)
        snapshot = Snapshot(
            path,
            self._anchor(),
            prior.kind,
            tool,
            now_ts(),
            blob,
            prior.mode,
            prior.target,
            prior.reason,
        )
        self._append(snapshot)

    def entries(self) -> list[Snapshot]:
        """Every snapshot, in the order the writes ran; damaged lines skipped."""
        try:
            data = self.index_path.read_bytes()
        except FileNotFoundError:
            return []
        found = (Snapshot.from_json(line) for line in data.splitlines() if line.strip())
        return [s for s in found if s is not None]

    def read_blob(self, blob: str) -> bytes:
        return self.blob_path(blob).read_bytes()

    def copy_to(self, folder: Path, snapshots: Iterable[Snapshot]) -> None:
        """Write ``snapshots`` and their blobs as the snapshots of another session (a branch).

        The index appears whole (written aside, fsynced, renamed); blobs are
        hard-linked where the file system allows, else copied.
        """
        kept = list(snapshots)
        if not kept:
            return
        blobs = folder / BLOBS_DIR
        blobs.mkdir(parents=True, exist_ok=True)
        for blob in {s.blob for s in kept if s.blob is not None}:
            target = blobs / blob
            if target.exists():
                continue
            try:
                os.link(self.blob_path(blob), target)
            except OSError:
                shutil.copyfile(self.blob_path(blob), target)
                _fsync_file(target)
        fsync_dir(blobs)
        temp = folder / f".{INDEX_NAME}.{uuid.uuid4().hex[:12]}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            write_all(fd, b"".join(s.to_json() + b"\n" for s in kept))
            os.fsync(fd)
        finally:
            os.close(fd)
        temp.replace(folder / INDEX_NAME)
        fsync_dir(folder)

    # -- writing ---------------------------------------------------------

    def _used_bytes(self) -> int:
        if self._used is None:
            folder = self.folder / BLOBS_DIR
            self._used = sum(p.stat().st_size for p in folder.iterdir()) if folder.is_dir() else 0
        return self._used

    def _write_blob(self, blob: str, data: bytes) -> None:
        folder = self.folder / BLOBS_DIR
        folder.mkdir(parents=True, exist_ok=True)
        temp = folder / f".{blob}.{uuid.uuid4().hex[:12]}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            try:
                write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            temp.replace(folder / blob)
        except BaseException:
            with contextlib.suppress(OSError):
                temp.unlink()
            raise
        fsync_dir(folder)
        self._used = self._used_bytes() + len(data)

    def _append(self, snapshot: Snapshot) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.index_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            size = os.fstat(fd).st_size
            line = snapshot.to_json() + b"\n"
            if size and _last_byte(self.index_path, size) != b"\n":
                # A line torn by a crash must not swallow this one: start a line of its own.
                line = b"\n" + line
            write_all(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        if size == 0:
            fsync_dir(self.folder)


def _last_byte(path: Path, size: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.pread(fd, 1, size - 1)
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
