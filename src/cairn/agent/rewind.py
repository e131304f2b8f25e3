"""Rewind and fork: a new session branched from a point of the current one.

**Rewind** takes an earlier prompt (a user message the user typed) and starts
a new session holding the transcript's records up to just before it — the
records themselves, ids and times kept — so the branch's API context, its
compactions and everything rebuilt from the records (the boundary state,
calibration, session state) are exactly the original's at that point. A
prompt that lies before a compaction is no special case: the branch holds
the records up to that prompt, which end before the compaction, so it
resumes from the last checkpoint before the prompt, if any (else from the
start). The prompt's text comes back for the prompt box.

**Fork** copies the session as it stands, every record, into a new session.

Either way the original is never written: it stays whole and listed among
the workspace's sessions. The branch is written in one step
(``StoreFactory.create_from_records``): a crash leaves it complete or absent.
It then becomes the runtime's current session, opened as a resume
(SessionStart hooks run with source ``resume``). Its last record, a
``branch`` state record, says where it came from.

Files: rewinding may also put back the workspace files that write_file and
edit_file changed after the prompt, from the snapshots taken before each
write (``cairn.agent.snapshots``): a changed file gets its content at that
point, a file created after it is removed (folders made for it stay).
``bash`` calls after the point may have changed anything: they are named,
with their commands, as not restorable. The branch keeps the snapshots from
before its point, so it can be rewound further back in turn.

The caller holds the session guard: the session must be idle.
"""

from __future__ import annotations

import os
import shutil
import stat
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from cairn.agent.fd_io import read_all, write_at
from cairn.agent.runtime import BRANCH_KEY, Session
from cairn.agent.snapshots import SNAPSHOTS_DIR, FileSnapshots, Snapshot
from cairn.agent.state import SessionState
from cairn.agent.tools.base import ToolContext
from cairn.agent.tools.workspace import writable_slot
from cairn.errors import CairnError
from cairn.messages import JSONValue, Message
from cairn.store import (
    MessageRecord,
    Record,
    SessionRecord,
    StateRecord,
    new_session_id,
)

#: Tools whose writes the snapshots cover; every other writing call is named instead.
SNAPSHOT_TOOLS = frozenset({"write_file", "edit_file"})


class RewindPointError(CairnError, LookupError):
    """The session has no prompt with that id to rewind to."""


@dataclass(frozen=True)
class PromptPoint:
    """An earlier prompt the user may rewind to."""

    #: The prompt's message id (what ``rewind`` takes).
    id: str
    text: str
    #: When it was written (ISO 8601, UTC).
    ts: str
    #: Workspace files write_file / edit_file changed after it (a rewind can restore them).
    changed_files: tuple[Path, ...]
    #: Commands ``bash`` ran after it: what they changed cannot be restored.
    bash_commands: tuple[str, ...]

    @property
    def files_changed(self) -> bool:
        """Whether files changed after it, or may have (``bash``)."""
        return bool(self.changed_files or self.bash_commands)


@dataclass(frozen=True)
class RestoredFiles:
    """What a rewind did to the workspace's files."""

    #: Files put back to their content at the point.
    restored: tuple[Path, ...] = ()
    #: Files created after the point, removed.
    removed: tuple[Path, ...] = ()
    #: Files changed after the point that could not be put back (not saved: too
    #: large, not a regular file; or the restore failed), each with why.
    not_restorable: tuple[tuple[Path, str], ...] = ()
    #: ``bash`` commands run after the point: not restorable.
    bash_commands: tuple[str, ...] = ()


@dataclass(frozen=True)
class Branch:
    """A new session branched from the current one, now the runtime's current session."""

    session: Session
    #: The rewound prompt's text, for the prompt box (``None`` for a fork).
    prompt: str | None
    files: RestoredFiles


# ---------------------------------------------------------------------------
# Reading the session


@dataclass(frozen=True)
class _Prompt:
    position: int
    message: Message
    ts: str


def is_prompt(message: Message) -> bool:
    """A user message the user typed: not written by the host, not hidden."""
    return message.role == "user" and not (message.meta.synthetic or message.meta.hidden)


def _prompts(records: Sequence[Record]) -> list[_Prompt]:
    return [
        _Prompt(i, r.message, r.ts)
        for i, r in enumerate(records)
        if isinstance(r, MessageRecord) and is_prompt(r.message)
    ]


def _positions(records: Sequence[Record]) -> dict[str, int]:
    return {record.id: i for i, record in enumerate(records)}


def _position(snapshot: Snapshot, positions: Mapping[str, int]) -> int | None:
    """Where in the transcript the write ran: after the record it is anchored to."""
    if snapshot.anchor is None:
        return 0  # only the header was written
    return positions.get(snapshot.anchor)


def _bash_commands(records: Sequence[Record]) -> list[tuple[int, str]]:
    """``(position, command)`` of each ``bash`` call in ``records``, in order."""
    found: list[tuple[int, str]] = []
    for i, record in enumerate(records):
        if not isinstance(record, MessageRecord) or record.message.role != "assistant":
            continue
        for call in record.message.tool_calls:
            if call.name == "bash":
                found.append((i, _command(call.arguments)))
    return found


def _command(arguments: str) -> str:
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    command = parsed.get("command") if isinstance(parsed, dict) else None
    return command if isinstance(command, str) else arguments


def _read(session: Session) -> list[Record]:
    # Everything is on disk (or committed) once appended; the sync makes it durable
    # before a branch copies it.
    session.pipeline.end_turn()
    return session.runtime.store_factory.read(session.workspace, session.id).records


def prompt_points(session: Session) -> list[PromptPoint]:
    """The session's prompts, oldest first, each with what changed after it."""
    records = _read(session)
    positions = _positions(records)
    writes = [
        (position, s.path)
        for s in session.snapshots.entries()
        if (position := _position(s, positions)) is not None
    ]
    commands = _bash_commands(records)
    return [
        PromptPoint(
            p.message.id,
            p.message.text,
            p.ts,
            tuple(dict.fromkeys(path for at, path in writes if at >= p.position)),
            tuple(command for at, command in commands if at > p.position),
        )
        for p in _prompts(records)
    ]


# ---------------------------------------------------------------------------
# Branching


def fork_session(session: Session) -> Branch:
    """Copy ``session`` as it stands into a new session, which becomes the runtime's current."""
    records = _read(session)
    snapshots = session.snapshots.entries()
    branch_id = _write_branch(session, records[1:], snapshots, kind="fork", at=None)
    return Branch(session.runtime.resume(branch_id), None, RestoredFiles())


def rewind_session(session: Session, point_id: str, *, restore_files: bool) -> Branch:
    """Branch ``session`` just before prompt ``point_id``; the branch becomes current.

    ``restore_files``: also put back the workspace files changed after the
    prompt. Raises ``RewindPointError`` for an id that is not one of the
    session's prompts (``prompt_points``).
    """
    records = _read(session)
    point = next((p for p in _prompts(records) if p.message.id == point_id), None)
    if point is None:
        raise RewindPointError(f"session {session.id} has no prompt {point_id!r} to rewind to")
    positions = _positions(records)
    before: list[Snapshot] = []
    after: list[Snapshot] = []
    for snapshot in session.snapshots.entries():
        position = _position(snapshot, positions)
        if position is None:
            continue  # anchored to no record the transcript holds: placed nowhere
        (after if position >= point.position else before).append(snapshot)
    branch_id = _write_branch(
        session, records[1 : point.position], before, kind="rewind", at=point_id
    )
    commands = tuple(c for at, c in _bash_commands(records) if at > point.position)
    files = RestoredFiles(bash_commands=commands)
    if restore_files:
        files = _restore(session, after, commands)
    return Branch(session.runtime.resume(branch_id), point.message.text, files)


def _write_branch(
    session: Session,
    records: Sequence[Record],
    snapshots: Sequence[Snapshot],
    *,
    kind: str,
    at: str | None,
) -> str:
    """Store a new session holding ``records`` (and ``snapshots``); its id."""
    stores = session.runtime.store_factory
    branch_id = new_session_id()
    header = SessionRecord(branch_id, str(session.workspace), model=session.model.model)
    # Every session this one came from, oldest first: their folders hold the saved
    # outputs the copied messages name, which the branch's read tools may open.
    lineage: list[JSONValue] = [*session.lineage, session.id]
    note = StateRecord(BRANCH_KEY, {"from": session.id, "at": at, "kind": kind, "lineage": lineage})
    folder = stores.artifacts_dir(session.workspace, branch_id)
    try:
        # The snapshots first: the transcript, written last in one step, is what
        # makes the branch exist.
        session.snapshots.copy_to(folder / SNAPSHOTS_DIR, snapshots)
        stores.create_from_records(session.workspace, [header, *records, note])
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return branch_id


# ---------------------------------------------------------------------------
# Restoring files


def _restore(
    session: Session, after: Sequence[Snapshot], commands: tuple[str, ...]
) -> RestoredFiles:
    """Put each file written after the point back as its first write after it found it."""
    first: dict[Path, Snapshot] = {}
    for snapshot in after:
        first.setdefault(snapshot.path, snapshot)
    snapshots = session.snapshots
    ctx = ToolContext(
        workspace=session.workspace,
        state=SessionState(session.id, session.workspace),
        session_dir=session.session_dir,
    )
    restored: list[Path] = []
    removed: list[Path] = []
    failed: list[tuple[Path, str]] = []
    for path, snapshot in first.items():
        if snapshot.kind == "unsaved":
            failed.append((path, f"not saved before {snapshot.tool} ({snapshot.reason})"))
            continue
        try:
            changed = _put_back(ctx, snapshots, snapshot)
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            failed.append((path, reason))
            continue
        if changed:
            (removed if snapshot.kind == "absent" else restored).append(path)
    return RestoredFiles(tuple(restored), tuple(removed), tuple(failed), commands)


def _put_back(ctx: ToolContext, snapshots: FileSnapshots, snapshot: Snapshot) -> bool:
    """Make ``snapshot.path`` what the snapshot saved; whether anything changed.

    Through the same confined walk the tools use, so a folder swapped for a
    symlink since cannot lead the restore outside the workspace.
    """
    try:
        slot = writable_slot(ctx, str(snapshot.path), create=snapshot.kind != "absent")
    except FileNotFoundError:
        if snapshot.kind == "absent":
            return False  # its folder is gone too: nothing to remove
        raise
    with slot:
        name = slot.name
        if name is None:
            raise ValueError("it is the workspace itself")
        now = slot.lstat()
        if now is not None and stat.S_ISDIR(now.st_mode):
            raise ValueError("a folder is there now")
        if snapshot.kind == "absent":
            if now is None:
                return False
            os.unlink(name, dir_fd=slot.dir_fd)
            return True
        if snapshot.kind == "symlink":
            target = snapshot.target or ""
            same = now is not None and stat.S_ISLNK(now.st_mode)
            if same and os.readlink(name, dir_fd=slot.dir_fd) == target:
                return False
            temp = f".{name[:200]}.{uuid.uuid4().hex[:12]}.tmp"
            os.symlink(target, temp, dir_fd=slot.dir_fd)
            os.replace(temp, name, src_dir_fd=slot.dir_fd, dst_dir_fd=slot.dir_fd)
            return True
        assert snapshot.blob is not None
        data = snapshots.read_blob(snapshot.blob)
        if now is not None and stat.S_ISREG(now.st_mode):
            mode = stat.S_IMODE(now.st_mode)
            if mode == snapshot.mode and _content(slot.open()) == data:
                return False
        write_at(slot.dir_fd, name, data, mode=snapshot.mode)
        return True


def _content(fd: int) -> bytes:
    try:
        return read_all(fd)
    finally:
        os.close(fd)
