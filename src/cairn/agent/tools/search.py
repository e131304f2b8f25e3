"""The grep tool: a Python regular expression over the workspace's text files.

It walks like list_files (never into ``SKIPPED_DIRS``), skips binary files
and files whose real location is outside the folder searched in — the
workspace, or the session's folder (a symlink pointing out) — and stops at
``MAX_MATCHES`` matches.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

from cairn.agent.tools.base import ToolContext, ToolResult
from cairn.agent.tools.files import error
from cairn.agent.tools.paths import (
    bool_arg,
    confining_root,
    display_path,
    glob_regex,
    is_binary,
    opt_str_arg,
    resolve_readable,
    str_arg,
    walk,
)
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
            target = resolve_readable(ctx, raw or ".")
        except ValueError as exc:
            return error(exc)
        try:
            regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
        except re.error as exc:
            return error(f"invalid regular expression {pattern!r}: {exc}")
        shown = display_path(ctx.workspace, target)
        if not target.exists():
            return error(f"{shown} does not exist")
        root = confining_root(ctx, target)
        matches, more = await asyncio.to_thread(_grep, ctx.workspace, root, target, regex, glob)
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
    workspace: Path, root: Path, target: Path, regex: re.Pattern[str], glob: str | None
) -> tuple[list[str], bool]:
    """The matching lines, and whether the search stopped at ``MAX_MATCHES``."""
    matches: list[str] = []
    for path in _files(root, target, glob):
        shown = display_path(workspace, path)
        try:
            if is_binary(path):
                continue
            with path.open(encoding="utf-8", errors="replace") as handle:
                for number, line in enumerate(handle, 1):
                    text = line.rstrip("\n")
                    if regex.search(text) is None:
                        continue
                    if len(matches) == MAX_MATCHES:
                        return matches, True
                    if len(text) > MAX_MATCH_LINE_CHARS:
                        text = text[:MAX_MATCH_LINE_CHARS] + " …"
                    matches.append(f"{shown}:{number}: {text}")
        except OSError:
            continue
    return matches, False


def _files(root: Path, target: Path, glob: str | None) -> Iterator[Path]:
    """The regular files to search, sorted, each really inside ``root`` (resolved)."""
    if target.is_file():
        yield target
        return
    name_only = glob is not None and "/" not in glob
    regex = glob_regex(glob.removeprefix("./")) if glob is not None else None
    relatives = sorted(relative for relative, is_dir in walk(target) if not is_dir)
    for relative in relatives:
        if regex is not None:
            subject = relative.name if name_only else relative.as_posix()
            if regex.match(subject) is None:
                continue
        path = target / relative
        try:
            real = path.resolve()
        except (OSError, RuntimeError):
            continue
        if real.is_relative_to(root) and real.is_file():
            yield path
