"""What the file tools share: workspace confinement, walking, globs and argument reading.

Every path a tool touches goes through ``resolve_in_workspace``: relative
paths are taken relative to the workspace, symlinks are resolved, and the
result must lie inside the resolved workspace. ``../x``, an absolute path
elsewhere and a symlink inside the workspace that points outside are all
refused the same way. Two exceptions, both in the session's folder (outside
the workspace): the plan file while plan mode is on (``resolve_tool_path``),
because plan mode exists to write it; and, for read-only tools only, any
file inside that folder (``resolve_readable``), because the host saves there
what the model is told to read back — full tool outputs, oversized user
messages, background task logs.

The argument readers turn the model's JSON into typed values and raise
``ToolArgumentError`` (a ``ValueError``) with a message meant for the model.
They are lenient where models commonly stray — ``null`` for an omitted
optional argument, ``"10"`` for ``10``, ``"true"`` for ``true`` — and strict
about everything else.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from cairn.agent.tools.base import ToolContext
from cairn.messages import JSONObject, JSONValue

#: Folders never walked into by list_files and grep (still readable by name).
SKIPPED_DIRS = frozenset({".git", ".venv", "node_modules", "__pycache__"})

#: A NUL byte in this head of a file marks it binary.
BINARY_SNIFF_BYTES = 8_192


class PathOutsideWorkspaceError(ValueError):
    """A tool was asked for a path that does not lie inside the workspace."""


class ToolArgumentError(ValueError):
    """An argument is missing or has the wrong type or value; the text is for the model."""


# ---------------------------------------------------------------------------
# Confinement


def resolve_in_workspace(workspace: Path, raw: str) -> Path:
    """The absolute, symlink-free path ``raw`` names, which must be inside ``workspace``.

    Raises ``PathOutsideWorkspaceError`` when it is not (the workspace itself
    counts as inside), and ``ToolArgumentError`` when it cannot be resolved at
    all (a NUL byte, a symlink loop).
    """
    root = workspace.resolve()
    try:
        resolved = _absolute(root, raw).resolve()
    except (OSError, RuntimeError, ValueError) as exc:
        raise ToolArgumentError(f"cannot resolve the path {raw!r}: {exc}") from exc
    if resolved != root and not resolved.is_relative_to(root):
        lexical = Path(os.path.normpath(_absolute(root, raw)))
        via_link = "" if resolved == lexical else f" (it resolves to {resolved})"
        raise PathOutsideWorkspaceError(
            f"the path {raw!r} is outside the workspace {root}{via_link}; "
            "tools may only touch files inside the workspace"
        )
    return resolved


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


def plan_file_path(ctx: ToolContext) -> Path | None:
    """The resolved plan file while plan mode is on (a relative one is under the workspace)."""
    plan = ctx.state.plan
    if plan is None:
        return None
    return _absolute(ctx.workspace.resolve(), str(plan.plan_file)).resolve()


def is_plan_file(ctx: ToolContext, raw: str) -> bool:
    """Whether ``raw`` names the plan file (plan mode must be on)."""
    plan_file = plan_file_path(ctx)
    if plan_file is None:
        return False
    try:
        return _absolute(ctx.workspace.resolve(), raw).resolve() == plan_file
    except (OSError, RuntimeError, ValueError):
        return False


def resolve_tool_path(ctx: ToolContext, raw: str) -> Path:
    """``resolve_in_workspace``, except that the plan file is allowed while plan mode is on."""
    if is_plan_file(ctx, raw):
        plan_file = plan_file_path(ctx)
        assert plan_file is not None
        return plan_file
    return resolve_in_workspace(ctx.workspace, raw)


def resolve_readable(ctx: ToolContext, raw: str) -> Path:
    """``resolve_tool_path``, or a path inside the session's folder: for read-only tools.

    Symlinks are resolved first, so the result must really lie inside the
    resolved session folder: ``<session>/../x`` and a link pointing out are
    refused like any path outside the workspace.
    """
    try:
        return resolve_tool_path(ctx, raw)
    except PathOutsideWorkspaceError:
        session = ctx.session_dir.resolve()
        resolved = _absolute(ctx.workspace.resolve(), raw).resolve()
        if resolved == session or resolved.is_relative_to(session):
            return resolved
        raise PathOutsideWorkspaceError(
            f"the path {raw!r} is outside the workspace {ctx.workspace.resolve()} and this "
            f"session's folder {session}; read-only tools may read only inside those"
        ) from None


def confining_root(ctx: ToolContext, path: Path) -> Path:
    """The resolved folder that ``path`` (already resolved) was allowed in: session or workspace."""
    session = ctx.session_dir.resolve()
    workspace = ctx.workspace.resolve()
    if not path.is_relative_to(workspace) and path.is_relative_to(session):
        return session
    return workspace


def _absolute(root: Path, raw: str) -> Path:
    path = Path(raw).expanduser()
    return path if path.is_absolute() else root / path


# ---------------------------------------------------------------------------
# Files and folders


def is_binary(path: Path) -> bool:
    """Whether the head of the file holds a NUL byte (the usual text/binary test)."""
    with path.open("rb") as handle:
        return b"\0" in handle.read(BINARY_SNIFF_BYTES)


def walk(root: Path, *, max_depth: int | None = None) -> Iterator[tuple[Path, bool]]:
    """``(path relative to root, is_dir)`` for the entries below ``root``.

    Folders in ``SKIPPED_DIRS`` are neither listed nor entered, symlinked
    folders are listed but not entered, and ``max_depth`` (1 = the direct
    children) bounds the descent. Unreadable folders are skipped silently.
    """
    for dirpath, dirnames, filenames in os.walk(root):
        relative = Path(dirpath).relative_to(root)
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
        for name in dirnames:
            yield relative / name, True
        for name in sorted(filenames):
            yield relative / name, False
        if max_depth is not None and len(relative.parts) + 1 >= max_depth:
            dirnames[:] = []


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A regex for a glob over ``/``-separated relative paths.

    ``*`` and ``?`` never cross a ``/``; ``**`` does (``**/`` also matches no
    folder at all, so ``**/*.py`` matches ``a.py``); ``[abc]``, ``[!abc]``
    and ``{py,pyi}`` work as in shells.
    """
    return re.compile(rf"\A{_translate(pattern)}\Z")


def glob_depth(pattern: str) -> int | None:
    """How many path levels a glob can match (``None``: any, because of ``**``)."""
    if "**" in pattern:
        return None
    return pattern.strip("/").count("/") + 1


def _translate(pattern: str) -> str:
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**", i):
            if pattern.startswith("**/", i):
                out.append("(?:.*/)?")
                i += 3
            else:
                out.append(".*")
                i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1 : end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
            continue
        elif c == "{" and (end := pattern.find("}", i)) != -1:
            choices = pattern[i + 1 : end].split(",")
            out.append("(?:" + "|".join(_translate(choice) for choice in choices) + ")")
            i = end + 1
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


# ---------------------------------------------------------------------------
# Arguments


def str_arg(args: JSONObject, name: str, *, default: str | None = None) -> str:
    """A string argument; required unless ``default`` is given."""
    value = args.get(name)
    if value is None:
        if default is None:
            raise ToolArgumentError(f"missing required argument {name!r}")
        return default
    if not isinstance(value, str):
        raise ToolArgumentError(f"argument {name!r} must be a string, got {_shown(value)}")
    return value


def opt_str_arg(args: JSONObject, name: str) -> str | None:
    """An optional string argument; ``None`` (or an empty string) when omitted."""
    value = args.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ToolArgumentError(f"argument {name!r} must be a string, got {_shown(value)}")
    return value


def number_arg(
    args: JSONObject,
    name: str,
    *,
    default: float,
    minimum: float | None = None,
    maximum: float | None = None,
    integer: bool = False,
) -> float:
    """A number argument (``integer`` refuses fractions); numeric strings are accepted."""
    value = args.get(name)
    if value is None:
        return default
    number: float
    if isinstance(value, bool):
        raise ToolArgumentError(f"argument {name!r} must be a number, got {_shown(value)}")
    if isinstance(value, int | float):
        number = value
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise ToolArgumentError(
                f"argument {name!r} must be a number, got {_shown(value)}"
            ) from None
    else:
        raise ToolArgumentError(f"argument {name!r} must be a number, got {_shown(value)}")
    if number != number or number in (float("inf"), float("-inf")):
        raise ToolArgumentError(f"argument {name!r} must be a finite number")
    if integer and number != int(number):
        raise ToolArgumentError(f"argument {name!r} must be a whole number, got {number:g}")
    if minimum is not None and number < minimum:
        raise ToolArgumentError(f"argument {name!r} must be at least {minimum:g}, got {number:g}")
    if maximum is not None and number > maximum:
        raise ToolArgumentError(f"argument {name!r} must be at most {maximum:g}, got {number:g}")
    return number


def int_arg(args: JSONObject, name: str, *, default: int, minimum: int | None = None) -> int:
    return int(number_arg(args, name, default=default, minimum=minimum, integer=True))


def bool_arg(args: JSONObject, name: str, *, default: bool = False) -> bool:
    """A boolean argument; ``"true"`` / ``"false"`` strings are accepted."""
    value = args.get(name)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ToolArgumentError(f"argument {name!r} must be true or false, got {_shown(value)}")


def _shown(value: JSONValue) -> str:
    kind = {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
    }.get(type(value), type(value).__name__)
    text = repr(value)
    return f"{kind} {text[:60]}{'…' if len(text) > 60 else ''}"
