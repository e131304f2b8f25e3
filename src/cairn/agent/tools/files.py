"""The file tools: read_file, write_file, edit_file and list_files, confined to the workspace.

Text is UTF-8. ``read_file`` shows lines numbered like ``cat -n`` and records
the read in the session state (restoration re-reads recent files after a
compaction); ``write_file`` and ``edit_file`` write atomically — a temporary
file in the same folder, then a rename — and keep an existing file's mode;
``list_files`` walks the workspace without entering ``SKIPPED_DIRS``.

When the host does file I/O (``ctx.files``, see ``host_io``), read_file,
write_file and edit_file still walk, open and check the path here first —
confinement, a missing file, a folder, a binary file give the same errors —
and only then read or write the text through the host, at the path that walk
verified; the host's failure is an error result like any other.

Every tool works on descriptors from ``workspace`` (``open_readable``,
``writable_slot``) and ``globs`` (``scan``): what it reads, lists or
replaces is what the confined walk opened, so a folder swapped for a symlink
meanwhile cannot lead it outside the workspace.
"""

from __future__ import annotations

import errno
import io
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from cairn.agent.fd_io import in_thread, is_binary, read_all, write_at
from cairn.agent.sandbox import Opened, Slot
from cairn.agent.snapshots import PriorFile
from cairn.agent.tools.args import bool_arg, int_arg, opt_str_arg, str_arg
from cairn.agent.tools.base import ToolContext, ToolResult
from cairn.agent.tools.globs import SKIPPED_DIRS, glob_depth, glob_regex, scan
from cairn.agent.tools.host_io import host_problem
from cairn.agent.tools.workspace import display_path, open_readable, shown_path, writable_slot
from cairn.context.effects import ToolEffect
from cairn.messages import JSONObject

DEFAULT_READ_LIMIT = 2_000
MAX_LINE_CHARS = 2_000
#: read_file stops adding lines past this many characters (and says where to go on).
MAX_READ_CHARS = 100_000
MAX_LIST_ENTRIES = 1_000
#: Lines of context shown around an edit.
EDIT_CONTEXT_LINES = 3


def error(exc: Exception | str) -> ToolResult:
    return ToolResult(str(exc), is_error=True)


def text_file_problem(fd: int, shown: str) -> str | None:
    """Why the open file ``fd`` cannot be read as a text file, or ``None`` when it can."""
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            return f"{shown} is a directory, not a file; use list_files to see what it holds"
        if not stat.S_ISREG(info.st_mode):
            return f"{shown} is not a regular file"
        if is_binary(fd):
            return f"{shown} is a binary file ({info.st_size} bytes); only text files can be read"
    except OSError as exc:
        return f"cannot read {shown}: {exc.strerror or exc}"
    return None


def os_problem(exc: OSError, shown: str) -> str:
    """The one-line error for a failed open or walk: a missing file, or why it failed."""
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return f"{shown} does not exist"
    return f"cannot read {shown}: {exc.strerror or exc}"


def cut_line(line: str, limit: int = MAX_LINE_CHARS) -> str:
    if len(line) <= limit:
        return line
    return f"{line[:limit]} … [line cut at {limit} of {len(line)} characters]"


def numbered(number: int, line: str) -> str:
    return f"{number:>6}\t{cut_line(line)}"


# ---------------------------------------------------------------------------
# read_file

#: The ``path`` argument of every single-file tool.
FILE_PATH_PROPERTY: JSONObject = {
    "type": "string",
    "description": "Relative to the workspace, or absolute.",
}


class ReadFile:
    name = "read_file"
    # Descriptions are sent with every request: they say what a model needs to
    # call the tool right, and leave the rest to the results and error messages.
    description = (
        "Read a text file (also files Cairn saved in this session's folder). Lines "
        "come as `number<TAB>text`; the numbers are not in the file. Use offset/limit "
        "for large files."
    )
    effect: ToolEffect = "read_only"

    @property
    def parameters(self) -> JSONObject:
        return {
            "type": "object",
            "properties": {
                "path": FILE_PATH_PROPERTY,
                "offset": {"type": "integer", "description": "First line, 1-based."},
                "limit": {
                    "type": "integer",
                    "description": f"Lines to show (default {DEFAULT_READ_LIMIT}).",
                },
            },
            "required": ["path"],
            "additionalProperties": False,
        }

    async def run(self, args: JSONObject, ctx: ToolContext) -> ToolResult:
        try:
            raw = str_arg(args, "path")
            offset = max(1, int_arg(args, "offset", default=1, minimum=0))
            limit = int_arg(args, "limit", default=DEFAULT_READ_LIMIT, minimum=1)
            opened = open_readable(ctx, raw)
        except ValueError as exc:
            return error(exc)
        except OSError as exc:
            return error(os_problem(exc, shown_path(ctx, raw)))
        with opened:
            shown = display_path(ctx.workspace, opened.path)
            problem = text_file_problem(opened.fd, shown)
            if problem is not None:
                return error(problem)
            if ctx.files is not None:
                # Confined and checked above; the text is the host's (an unsaved buffer, say).
                try:
                    content = await ctx.files.read_text(opened.path)
                except OSError as exc:
                    return error(f"cannot read {shown}: {host_problem(exc)}")
                text = _format_lines(_text_lines(content), offset, limit)
            else:
                try:
                    text = await in_thread(opened.fd, lambda fd: _read_fd(fd, offset, limit))
                except OSError as exc:
                    return error(f"cannot read {shown}: {exc.strerror or exc}")
        ctx.state.record_read(opened.path, ctx.clock())
        return ToolResult(text)


def _read_fd(fd: int, offset: int, limit: int) -> str:
    with open(fd, encoding="utf-8", errors="replace", closefd=False) as handle:
        return _format_lines(handle, offset, limit)


def _text_lines(text: str) -> io.StringIO:
    # The lines a file of this text would give: universal newlines, as
    # ``open`` splits them (``str.splitlines`` would also split on \f, \v, …).
    return io.StringIO(text, newline=None)


def _format_lines(lines: Iterable[str], offset: int, limit: int) -> str:
    """read_file's text for ``lines`` (each with its line end): numbered, from ``offset``, cut."""
    shown: list[str] = []
    chars = 0
    total = 0
    full = False
    for number, line in enumerate(lines, 1):
        total = number
        if number < offset or full or len(shown) >= limit:
            continue
        entry = numbered(number, line.rstrip("\n"))
        if shown and chars + len(entry) > MAX_READ_CHARS:
            full = True
            continue
        shown.append(entry)
        chars += len(entry) + 1
    if total == 0:
        return "(the file is empty)"
    if not shown:
        return f"(the file has {total} lines; offset {offset} is past its end)"
    last = offset + len(shown) - 1
    if last < total:
        why = f" (output cut at {MAX_READ_CHARS} characters)" if full else ""
        shown.append(f"\n(lines {offset}-{last} of {total}{why}; read on with offset={last + 1})")
    return "\n".join(shown)


# ---------------------------------------------------------------------------
# write_file


class WriteFile:
    name = "write_file"
    description = (
        "Create a file, or replace all of its content (folders are created). To "
        "change part of a file, use edit_file."
    )
    effect: ToolEffect = "write"

    @property
    def parameters(self) -> JSONObject:
        return {
            "type": "object",
            "properties": {
                "path": FILE_PATH_PROPERTY,
                "content": {"type": "string", "description": "The complete new text."},
            },
            "required": ["path", "content"],
            "additionalProperties": False,
        }

    def summarize(self, args: JSONObject) -> str:
        content = args.get("content")
        lines = f" ({_count_lines(content)} lines)" if isinstance(content, str) else ""
        return f"write {args.get('path')}{lines}"

    async def run(self, args: JSONObject, ctx: ToolContext) -> ToolResult:
        try:
            raw = str_arg(args, "path")
            content = str_arg(args, "content")
            slot = writable_slot(ctx, raw, create=True)
        except ValueError as exc:
            return error(exc)
        except OSError as exc:
            return error(f"cannot write {shown_path(ctx, raw)}: {exc.strerror or exc}")
        data = content.encode("utf-8")
        with slot:
            shown = display_path(ctx.workspace, slot.path)
            try:
                existing = slot.lstat()
                if slot.name is None or (existing and stat.S_ISDIR(existing.st_mode)):
                    return error(f"{shown} is a directory; write_file writes files")
                save_prior(ctx, slot, self.name)
                if ctx.files is None:
                    write_at(slot.dir_fd, slot.name, data)
            except OSError as exc:
                return error(f"cannot write {shown}: {exc.strerror or exc}")
        if ctx.files is not None:
            # The walk above has made any missing folders, as it does for a local write.
            try:
                await ctx.files.write_text(slot.path, content)
            except OSError as exc:
                return error(f"cannot write {shown}: {host_problem(exc)}")
        existed = existing is not None
        verb = "Overwrote" if existed else "Created"
        return ToolResult(f"{verb} {shown} ({_count_lines(content)} lines, {len(data)} bytes)")


def save_prior(ctx: ToolContext, slot: Slot, tool: str) -> None:
    """Save what the file holds before ``tool`` writes it, for a rewind (``ctx.snapshots``).

    Read through the verified slot, as the write will go. Raises ``OSError``
    when it cannot be saved: the write must not run then, or a rewind could
    not undo it.
    """
    snapshots = ctx.snapshots
    if snapshots is None or slot.name is None or not snapshots.covers(slot.path):
        return
    snapshots.before_write(tool, slot.path, _prior(slot, snapshots.max_file_bytes))


def _prior(slot: Slot, limit: int) -> PriorFile:
    assert slot.name is not None
    info = slot.lstat()
    if info is None:
        return PriorFile("absent")
    if stat.S_ISLNK(info.st_mode):
        return PriorFile("symlink", target=os.readlink(slot.name, dir_fd=slot.dir_fd))
    if not stat.S_ISREG(info.st_mode):
        return PriorFile("unsaved", reason="not a regular file")
    if info.st_size > limit:
        return PriorFile("unsaved", reason=f"larger than {limit:,} bytes")
    fd = slot.open()
    try:
        return PriorFile("file", read_all(fd), stat.S_IMODE(info.st_mode))
    finally:
        os.close(fd)


def _count_lines(text: str) -> int:
    return len(text.splitlines())


# ---------------------------------------------------------------------------
# edit_file


class EditFile:
    name = "edit_file"
    description = (
        "Replace old_string with new_string in a file. old_string must match exactly, "
        "indentation included (without read_file's line numbers), and occur once "
        "unless replace_all is true."
    )
    effect: ToolEffect = "write"

    @property
    def parameters(self) -> JSONObject:
        return {
            "type": "object",
            "properties": {
                "path": FILE_PATH_PROPERTY,
                "old_string": {"type": "string"},
                "new_string": {"type": "string"},
                "replace_all": {"type": "boolean", "description": "Default false."},
            },
            "required": ["path", "old_string", "new_string"],
            "additionalProperties": False,
        }

    def summarize(self, args: JSONObject) -> str:
        every = " (every occurrence)" if args.get("replace_all") is True else ""
        return f"edit {args.get('path')}{every}"

    async def run(self, args: JSONObject, ctx: ToolContext) -> ToolResult:
        try:
            raw = str_arg(args, "path")
            old = str_arg(args, "old_string")
            new = str_arg(args, "new_string")
            replace_all = bool_arg(args, "replace_all")
        except ValueError as exc:
            return error(exc)
        if old == "":
            return error("old_string is empty; to create or replace a whole file use write_file")
        if old == new:
            return error("old_string and new_string are the same; there is nothing to change")
        try:
            slot = writable_slot(ctx, raw, create=False)
        except ValueError as exc:
            return error(exc)
        except OSError as exc:
            return error(os_problem(exc, shown_path(ctx, raw)))
        with slot:
            shown = display_path(ctx.workspace, slot.path)
            return await self._edit(ctx, slot, shown, old, new, replace_all)

    async def _edit(
        self, ctx: ToolContext, slot: Slot, shown: str, old: str, new: str, replace_all: bool
    ) -> ToolResult:
        if slot.name is None:
            return error(f"{shown} is a directory, not a file; use list_files to see what it holds")
        read = await _text_to_edit(ctx, slot, shown)
        if isinstance(read, ToolResult):
            return read
        text, mode = read

        found = _occurrences(text, old)
        if found == 0 and "\r\n" in text and "\n" in old and "\r\n" not in old:
            # The file uses CRLF line ends; the model wrote LF.
            crlf_old = old.replace("\n", "\r\n")
            if _occurrences(text, crlf_old):
                old = crlf_old
                new = new.replace("\r\n", "\n").replace("\n", "\r\n")
                found = _occurrences(text, old)
        if found == 0:
            return error(
                f"old_string was not found in {shown} (0 occurrences). It must match the "
                "file exactly, whitespace and indentation included; read the file again "
                "to see its current text."
            )
        if found > 1 and not replace_all:
            return error(
                f"old_string occurs {found} times in {shown}; it must occur exactly once. "
                "Include more surrounding lines to make it unique, or set replace_all "
                "to replace every occurrence."
            )
        first = text.index(old)
        replaced = text.count(old) if replace_all else 1
        updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        try:
            save_prior(ctx, slot, self.name)
        except OSError as exc:
            return error(f"cannot write {shown}: {exc.strerror or exc}")
        if ctx.files is not None:
            try:
                await ctx.files.write_text(slot.path, updated)
            except OSError as exc:
                return error(f"cannot write {shown}: {host_problem(exc)}")
        else:
            try:
                write_at(slot.dir_fd, slot.name, updated.encode("utf-8"), mode=mode)
            except OSError as exc:
                return error(f"cannot write {shown}: {exc.strerror or exc}")
        what = "1 occurrence" if replaced == 1 else f"{replaced} occurrences"
        where = " (the first shown)" if replaced > 1 else ""
        return ToolResult(
            f"Edited {shown}: replaced {what}{where}.\n{_snippet(updated, first, new)}"
        )


async def _text_to_edit(
    ctx: ToolContext, slot: Slot, shown: str
) -> tuple[str, int | None] | ToolResult:
    """The text edit_file changes and the mode to keep (``None``: the host's), or the error."""
    try:
        fd = slot.open()
    except OSError as exc:
        return error(os_problem(exc, shown))
    files = ctx.files
    try:
        # Checked on the disk even when the host reads: a missing file, a
        # folder or a binary file give the same errors either way.
        problem = text_file_problem(fd, shown)
        if problem is not None:
            return error(problem)
        if files is None:
            mode = stat.S_IMODE(os.fstat(fd).st_mode)
            return read_all(fd).decode("utf-8"), mode
    except UnicodeDecodeError:
        return error(f"{shown} is not valid UTF-8 text; edit_file only edits UTF-8 files")
    except OSError as exc:
        return error(f"cannot read {shown}: {exc.strerror or exc}")
    finally:
        os.close(fd)
    try:
        return await files.read_text(slot.path), None
    except OSError as exc:
        return error(f"cannot read {shown}: {host_problem(exc)}")


def _occurrences(text: str, needle: str) -> int:
    """Every start position of ``needle``, overlapping ones included."""
    count, start = 0, text.find(needle)
    while start != -1:
        count += 1
        start = text.find(needle, start + 1)
    return count


def _snippet(text: str, start: int, inserted: str) -> str:
    lines = text.splitlines()
    first_line = text.count("\n", 0, start) + 1
    last_line = first_line + inserted.count("\n")
    low = max(1, first_line - EDIT_CONTEXT_LINES)
    high = min(len(lines), last_line + EDIT_CONTEXT_LINES)
    return "\n".join(numbered(n, lines[n - 1]) for n in range(low, high + 1))


# ---------------------------------------------------------------------------
# list_files


class ListFiles:
    name = "list_files"
    description = (
        "List a folder's entries (folders end with `/`), or with `pattern` every path "
        f"under it matching a glob. Skips {', '.join(sorted(SKIPPED_DIRS))}."
    )
    effect: ToolEffect = "read_only"

    @property
    def parameters(self) -> JSONObject:
        return {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Folder (default `.`)."},
                "pattern": {"type": "string", "description": "E.g. `**/*.py`."},
            },
            "additionalProperties": False,
        }

    async def run(self, args: JSONObject, ctx: ToolContext) -> ToolResult:
        try:
            raw = str_arg(args, "path", default=".")
            pattern = opt_str_arg(args, "pattern")
            opened = open_readable(ctx, raw or ".")
        except ValueError as exc:
            return error(exc)
        except OSError as exc:
            return error(os_problem(exc, shown_path(ctx, raw or ".")))
        with opened:
            shown = display_path(ctx.workspace, opened.path)
            try:
                is_dir = stat.S_ISDIR(os.fstat(opened.fd).st_mode)
            except OSError as exc:
                return error(f"cannot read {shown}: {exc.strerror or exc}")
            if not is_dir:
                return ToolResult(shown)
            entries = await in_thread(
                opened.fd, lambda fd: _list(ctx.workspace, replace(opened, fd=fd), pattern)
            )
        if not entries:
            if pattern is None:
                return ToolResult(f"{shown} is empty")
            return ToolResult(f"No entries match {pattern!r} under {shown}")
        text = "\n".join(entries[:MAX_LIST_ENTRIES])
        if len(entries) > MAX_LIST_ENTRIES:
            text += (
                f"\n(showing the first {MAX_LIST_ENTRIES} of {len(entries)} entries; "
                "narrow the path or the pattern)"
            )
        return ToolResult(text)


def _list(workspace: Path, folder: Opened, pattern: str | None) -> list[str]:
    regex: re.Pattern[str] | None = None
    depth: int | None = 1
    if pattern is not None:
        pattern = pattern.removeprefix("./")
        regex, depth = glob_regex(pattern), glob_depth(pattern)
    entries: list[str] = []
    for entry in scan(folder.fd, max_depth=depth):
        if regex is not None and regex.match(entry.relative) is None:
            continue
        shown = display_path(workspace, folder.path.joinpath(*entry.parts))
        entries.append(shown + ("/" if entry.is_dir else ""))
    return sorted(entries)
