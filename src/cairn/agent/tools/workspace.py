"""What a tool may open: the workspace, the session's folders and the plan file.

Writing tools reach only the workspace (``writable_slot``). Read-only tools
(``open_readable``) may also read any file inside the session's folder (and
those of the sessions it descends from), because the host saves there what
the model is told to read back — full tool outputs, oversized user messages,
background task logs. The plan file is reached where it is while plan mode is
on (``cairn.agent.tools.plan_file``). Everything is opened by the descriptor
walks of ``cairn.agent.sandbox``; a path that leads elsewhere is refused with
``PathOutsideWorkspaceError``, whose message tells the model where it may go.
Paths are shown relative to the workspace (``display_path``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from cairn.agent.sandbox import (
    Opened,
    OutsideRootsError,
    Root,
    Slot,
    absolute_path,
    anchor,
    locate_beneath,
    open_beneath,
    slot_beneath,
)
from cairn.agent.tools.args import ToolArgumentError
from cairn.agent.tools.base import ToolContext
from cairn.agent.tools.plan_file import make_plan_folder, open_plan, plan_slot, plan_target
from cairn.errors import ToolError


class PathOutsideWorkspaceError(ToolError):
    """A tool was asked for a path that does not lie inside the workspace."""


def open_readable(ctx: ToolContext, raw: str) -> Opened:
    """For read-only tools: open what ``raw`` names in the workspace or the session's folder.

    The plan file (while plan mode is on) is opened where it is, never
    through a symlink. Raises ``PathOutsideWorkspaceError`` for anything
    else outside those folders, ``ToolArgumentError`` for a path that cannot
    be a path, and ``OSError`` as ``open`` would.
    """
    plan = plan_target(ctx, raw)
    if plan is not None:
        return open_plan(*plan)
    workspace, session = Root.of(ctx.workspace), Root.of(ctx.session_dir)
    roots = [workspace, session, *(Root.of(d) for d in ctx.lineage_dirs)]
    try:
        start, parts = _start(raw, workspace, roots)
        return open_beneath(roots, start, parts)
    except OutsideRootsError as exc:
        raise PathOutsideWorkspaceError(_outside(ctx, raw, exc, session=session)) from None


def writable_slot(ctx: ToolContext, raw: str, *, create: bool) -> Slot:
    """For writing tools: the folder and name ``raw`` names in the workspace, or the plan file.

    ``create`` makes missing folders on the way (inside the workspace only).
    Raises like ``open_readable``; the session's folder is refused.
    """
    plan = plan_target(ctx, raw)
    if plan is not None:
        if create:
            make_plan_folder(ctx, plan[0])
        return plan_slot(*plan)
    workspace = Root.of(ctx.workspace)
    try:
        start, parts = _start(raw, workspace, [workspace])
        return slot_beneath([workspace], start, parts, create=create)
    except OutsideRootsError as exc:
        raise PathOutsideWorkspaceError(_outside(ctx, raw, exc, session=None)) from None


def resolve_in_workspace(workspace: Path, raw: str) -> Path:
    """Where ``raw`` leads inside ``workspace``, symlinks followed beneath it; opens nothing.

    For showing and comparing paths: the tools themselves open through
    ``open_readable`` / ``writable_slot``. Raises ``PathOutsideWorkspaceError``
    when the path leads outside (the workspace itself counts as inside) and
    ``ToolArgumentError`` when it cannot be resolved at all.
    """
    root = Root.of(workspace)
    try:
        start, parts = _start(raw, root, [root])
        return locate_beneath([root], start, parts)
    except OutsideRootsError as exc:
        raise PathOutsideWorkspaceError(_outside_message(root, raw, exc, None)) from None
    except OSError as exc:
        raise ToolArgumentError(f"cannot resolve the path {raw!r}: {exc}") from exc


def shown_path(ctx: ToolContext, raw: str) -> str:
    """``raw`` as the tools show it, before it is opened (``display_path`` of its lexical form)."""
    try:
        return display_path(
            ctx.workspace, Path(os.path.normpath(absolute_path(ctx.workspace, raw)))
        )
    except (RuntimeError, ValueError):
        return raw


def display_path(workspace: Path, path: Path) -> str:
    """``path`` relative to the workspace when inside it (``.`` for the workspace), else as is."""
    absolute = path if path.is_absolute() else workspace / path
    normalized = Path(os.path.normpath(absolute))
    for root in (workspace.resolve(), Path(os.path.normpath(workspace.absolute()))):
        if normalized == root:
            return "."
        if normalized.is_relative_to(root):
            return normalized.relative_to(root).as_posix()
    return str(path)


def _start(raw: str, workspace: Root, roots: Sequence[Root]) -> tuple[Root, list[str]]:
    """The root a raw path starts from, and its components below it (``..`` kept)."""
    if "\0" in raw:
        raise ToolArgumentError(f"cannot resolve the path {raw!r}: it contains a NUL byte")
    try:
        path = Path(raw).expanduser()
    except RuntimeError as exc:  # ``~user`` that does not exist
        raise ToolArgumentError(f"cannot resolve the path {raw!r}: {exc}") from exc
    if not path.is_absolute():
        return workspace, list(path.parts)
    anchored = anchor(roots, path)
    if anchored is None:
        raise OutsideRootsError()
    return anchored


def _outside(ctx: ToolContext, raw: str, exc: OutsideRootsError, *, session: Root | None) -> str:
    return _outside_message(Root.of(ctx.workspace), raw, exc, session)


def _outside_message(
    workspace: Root, raw: str, exc: OutsideRootsError, session: Root | None
) -> str:
    if exc.link is not None:
        how = f" ({display_path(workspace.path, exc.link)} is a symbolic link to {exc.target})"
    else:
        lexical = Path(os.path.normpath(absolute_path(workspace.path, raw)))
        try:
            real = Path(os.path.realpath(lexical))
        except (OSError, ValueError):
            real = lexical
        how = "" if real == lexical else f" (it resolves to {real})"
    if session is not None:
        return (
            f"the path {raw!r} is outside the workspace {workspace.path} and this session's "
            f"folder {session.path}{how}; read-only tools may read only inside those"
        )
    return (
        f"the path {raw!r} is outside the workspace {workspace.path}{how}; "
        "tools may only touch files inside the workspace"
    )
