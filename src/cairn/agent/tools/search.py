"""The grep tool: a Python regular expression over the workspace's text files.

It walks like list_files, by descriptor (``globs.scan``), never into
``SKIPPED_DIRS``; it skips binary files, and files behind a symlink that
leads outside the folder searched in — the workspace, or the session's
folder. Every file is read through the descriptor the confined walk opened,
so a folder swapped for a symlink meanwhile leads nowhere. It stops at
``MAX_MATCHES`` matches.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import replace
from pathlib import Path

from cairn.agent.fd_io import in_thread, is_binary
from cairn.agent.sandbox import OPEN_FLAGS, Opened, OutsideRootsError, open_beneath
from cairn.agent.tools.args import bool_arg, opt_str_arg, str_arg
from cairn.agent.tools.base import ToolContext, ToolResult
from cairn.agent.tools.files import error, os_problem
from cairn.agent.tools.globs import Entry, glob_regex, scan
from cairn.agent.tools.workspace import display_path, open_readable, shown_path
from cairn.context.effects import ToolEffect
from cairn.messages import JSONObject

MAX_MATCHES = 500
#: A matching line is shown up to this many characters.
MAX_MATCH_LINE_CHARS = 500


class Grep:
    name = "grep"
    description = (
        "Search files for a Python regex, line by line; prints `file:line: text`. "
        "`path` is a folder (recursive) or a file."
    )
    effect: ToolEffect = "read_only"

    @property
    def parameters(self) -> JSONObject:
        return {
            "type": "object",
            "properties": {
                "pattern": {"type": "string"},
                "path": {"type": "string", "description": "Default `.`."},
                "glob": {
                    "type": "string",
                    "description": "Only files whose name (`*.py`) or path (`src/**/*.ts`) "
                    "matches.",
                },
                "ignore_case": {"type": "boolean"},
            },
            "required": ["pattern"],
            "additionalProperties": False,
        }

    async def run(self, args: JSONObject, ctx: ToolContext) -> ToolResult:
        try:
            pattern = str_arg(args, "pattern")
            raw = str_arg(args, "path", default=".")
            glob = opt_str_arg(args, "glob")
            ignore_case = bool_arg(args, "ignore_case")
            regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
        except re.error as exc:
            return error(f"invalid regular expression {pattern!r}: {exc}")
        except ValueError as exc:
            return error(exc)
        try:
            target = open_readable(ctx, raw or ".")
        except ValueError as exc:
            return error(exc)
        except OSError as exc:
            return error(os_problem(exc, shown_path(ctx, raw or ".")))
        with target:
            shown = display_path(ctx.workspace, target.path)
            matches, more = await in_thread(
                target.fd, lambda fd: _grep(ctx.workspace, replace(target, fd=fd), regex, glob)
            )
        if not matches:
            among = f" among files matching {glob!r}" if glob else ""
            return ToolResult(f"No matches for {pattern!r} in {shown}{among}")
        text = "\n".join(matches)
        if more:
            text += (
                f"\n(showing the first {MAX_MATCHES} matches; there are more — narrow "
                "the pattern, the path or the glob)"
            )
        return ToolResult(text)


def _grep(
    workspace: Path, target: Opened, regex: re.Pattern[str], glob: str | None
) -> tuple[list[str], bool]:
    """The matching lines, and whether the search stopped at ``MAX_MATCHES``."""
    matches: list[str] = []
    try:
        mode = os.fstat(target.fd).st_mode
    except OSError:
        return matches, False
    if stat.S_ISREG(mode):
        full = _search(target.fd, display_path(workspace, target.path), regex, matches)
        return matches, full
    if not stat.S_ISDIR(mode):
        return matches, False
    name_only = glob is not None and "/" not in glob
    glob_re = glob_regex(glob.removeprefix("./")) if glob is not None else None
    for entry in scan(target.fd):
        if entry.is_dir:
            continue
        if glob_re is not None:
            subject = entry.name if name_only else entry.relative
            if glob_re.match(subject) is None:
                continue
        fd = _open_entry(target, entry)
        if fd is None:
            continue
        try:
            shown = display_path(workspace, target.path.joinpath(*entry.parts))
            if _search(fd, shown, regex, matches):
                return matches, True
        finally:
            os.close(fd)
    return matches, False


def _open_entry(target: Opened, entry: Entry) -> int | None:
    """A descriptor of the regular file ``entry`` names, or ``None`` to skip it.

    A plain file is opened in its folder's descriptor without following a
    link (one swapped in meanwhile is skipped); a link is walked again from
    the root searched in, and followed only beneath it.
    """
    try:
        if entry.is_link:
            opened = open_beneath([target.root], target.root, (*target.parts, *entry.parts))
            fd = opened.fd
        else:
            fd = os.open(entry.name, OPEN_FLAGS, dir_fd=entry.dir_fd)
    except (OSError, OutsideRootsError):
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode) and not is_binary(fd):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _search(fd: int, shown: str, regex: re.Pattern[str], matches: list[str]) -> bool:
    """Add the matching lines of the open file; ``True`` once ``MAX_MATCHES`` is passed."""
    try:
        if is_binary(fd):
            return False
        with open(fd, encoding="utf-8", errors="replace", closefd=False) as handle:
            for number, line in enumerate(handle, 1):
                text = line.rstrip("\n")
                if regex.search(text) is None:
                    continue
                if len(matches) == MAX_MATCHES:
                    return True
                if len(text) > MAX_MATCH_LINE_CHARS:
                    text = text[:MAX_MATCH_LINE_CHARS] + " …"
                matches.append(f"{shown}:{number}: {text}")
    except OSError:
        pass
    return False
