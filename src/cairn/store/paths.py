"""Where session files live: ``$CAIRN_HOME/projects/<workspace-slug>/<session-id>.jsonl``."""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from pathlib import Path

TRANSCRIPT_SUFFIX = ".jsonl"
#: The folder, in a session's artifacts folder, of its background tasks' transcripts.
SUBAGENTS_DIR = "subagents"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def cairn_home() -> Path:
    """``$CAIRN_HOME``, or ``~/.cairn``."""
    configured = os.environ.get("CAIRN_HOME")
    return Path(configured).expanduser() if configured else Path.home() / ".cairn"


def workspace_slug(workspace: str | Path) -> str:
    """A readable, collision-free folder name for a workspace path.

    The readable part alone would map ``/a/b-c`` and ``/a-b/c`` to the same
    name, so a short hash of the normalized path is appended.
    """
    normalized = normalize_workspace(workspace)
    readable = _UNSAFE.sub("-", normalized).strip("-")[-80:] or "root"
    digest = hashlib.sha256(normalized.encode()).hexdigest()[:10]
    return f"{readable}-{digest}"


def normalize_workspace(workspace: str | Path) -> str:
    """The absolute, symlink-resolved form of a workspace path."""
    return str(Path(workspace).expanduser().resolve())


def new_session_id() -> str:
    return uuid.uuid4().hex


def is_session_id(text: str) -> bool:
    """Whether ``text`` is a valid session (or task) id: ``check_session_id`` accepts it."""
    return _SESSION_ID.fullmatch(text) is not None


def check_session_id(session_id: str) -> str:
    """Reject ids that could escape the project folder or break file names."""
    if not is_session_id(session_id):
        raise ValueError(
            f"invalid session id {session_id!r}: use 1–128 letters, digits, '.', '_' or '-'"
        )
    return session_id


def session_path(workspace: str | Path, session_id: str, home: Path | None = None) -> Path:
    base = home if home is not None else cairn_home()
    name = check_session_id(session_id) + TRANSCRIPT_SUFFIX
    return base / "projects" / workspace_slug(workspace) / name
