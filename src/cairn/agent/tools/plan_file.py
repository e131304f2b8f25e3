"""The plan file: the one path outside the workspace a writing tool may touch.

While plan mode is on, the plan file may be read and written where it is —
usually in the session's folder, outside the workspace — because plan mode
exists to write it; and never through a symlink: its folder is resolved, its
own name is not, so a plan file that is a link is refused rather than
followed.
"""

from __future__ import annotations

import os
from pathlib import Path

from cairn.agent.sandbox import (
    Opened,
    Root,
    Slot,
    SymlinkRefusedError,
    absolute_path,
    open_beneath,
    slot_beneath,
)
from cairn.agent.tools.base import ToolContext


def plan_file_path(ctx: ToolContext) -> Path | None:
    """The plan file while plan mode is on: its folder resolved, its own name kept.

    The name is not resolved, so a plan file that is a symlink is seen as
    one (and refused) rather than as wherever it points. A relative plan
    file is under the workspace.
    """
    plan = ctx.state.plan
    if plan is None:
        return None
    return _parent_resolved(absolute_path(ctx.workspace.resolve(), str(plan.plan_file)))


def is_plan_file(ctx: ToolContext, raw: str) -> bool:
    """Whether ``raw`` names the plan file (plan mode must be on)."""
    plan_file = plan_file_path(ctx)
    if plan_file is None:
        return False
    try:
        return _parent_resolved(absolute_path(ctx.workspace.resolve(), raw)) == plan_file
    except (OSError, RuntimeError, ValueError):
        return False


def plan_root(ctx: ToolContext) -> tuple[Root, str] | None:
    """The plan file's folder as a root and its name, while plan mode is on."""
    plan_file = plan_file_path(ctx)
    if plan_file is None:
        return None
    return Root.of(plan_file.parent), plan_file.name


def open_plan(root: Root, name: str) -> Opened:
    """The plan file, open for reading; a symlink there is refused (``SymlinkRefusedError``)."""
    try:
        return open_beneath([root], root, [name], follow_last=False)
    except SymlinkRefusedError:
        raise _plan_link(root, name) from None


def plan_slot(root: Root, name: str) -> Slot:
    """Where the plan file is written; a symlink there is refused (``SymlinkRefusedError``)."""
    try:
        return slot_beneath([root], root, [name], create=False, follow_last=False)
    except SymlinkRefusedError:
        raise _plan_link(root, name) from None


def _plan_link(root: Root, name: str) -> SymlinkRefusedError:
    return SymlinkRefusedError(
        f"the plan file {root.path / name} is a symbolic link; the plan is never read or "
        "written through a link (remove it, then write the plan again)"
    )


def make_plan_folder(ctx: ToolContext, root: Root) -> None:
    """Make the plan file's folder when it is the session's folder (before a write creates it)."""
    # The session's folder is the host's, outside the workspace, and made on first use.
    if root.path == Root.of(ctx.session_dir).path:
        ctx.session_dir.mkdir(parents=True, exist_ok=True)


def plan_target(ctx: ToolContext, raw: str) -> tuple[Root, str] | None:
    """The plan file's root and name when ``raw`` names it (plan mode on), else ``None``."""
    return plan_root(ctx) if is_plan_file(ctx, raw) else None


def _parent_resolved(path: Path) -> Path:
    normalized = Path(os.path.normpath(path))
    return normalized.parent.resolve() / normalized.name
