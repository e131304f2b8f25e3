"""Instruction files: the user's and the project's ``AGENTS.md`` / ``CLAUDE.md`` (DESIGN §7).

Read most general first — ``$CAIRN_HOME``, the workspace root, then each
folder down to the working directory — so a more specific file comes later
and wins. ``@path`` imports are expanded; every read goes through the
descriptor walk of ``cairn.agent.sandbox``, so a symlink never leads a
project's file (or the user's) out of the workspace (the Cairn folder): a
cloned repository must not send ``~/.ssh`` to the provider. The files are one
block of the system prompt — fixed context, never history — re-read only when
a ``stat`` shows a change. Nothing here raises: a bad file is one notice.
"""

from __future__ import annotations

import codecs
import os
import re
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TypeAlias

from cairn.agent.sandbox import OutsideRootsError, Root, anchor, open_beneath

#: The names read in each folder, in this order.
INSTRUCTION_NAMES = ("AGENTS.md", "CLAUDE.md")
#: The most characters one file gives the prompt, its imports included; the
#: rest is cut with a notice (a long file costs every request its size).
MAX_INSTRUCTION_CHARS = 40_000
#: How deep imports may nest: the files a top file imports are at depth 1.
MAX_IMPORT_DEPTH = 5

HEADING = "# Instructions"
INTRO = (
    "From the user and this project (AGENTS.md, CLAUDE.md), most general first. "
    "Follow them; where two disagree, the later one wins."
)

#: A file as last seen: device, inode, size, modification time; ``None``: absent.
Stamp: TypeAlias = tuple[int, int, int, int] | None
_Identity: TypeAlias = tuple[int, int]

# Fences as CommonMark opens and closes them: 3+ backticks or tildes, indented < 4.
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)")
# After whitespace or an opening bracket or quote, never after a word
# character: ``user@example.com`` is not an import.
_IMPORT = re.compile(r"(?<![^\s(\[{\"'])@([^\s`]+)")
#: Punctuation that ends a sentence, not a path: ``see @docs/style.md.``
_TRAILING = ".,;:!?)]}\"'"
#: Enough bytes for the cap plus one character, however the text is encoded.
_READ_LIMIT = (MAX_INSTRUCTION_CHARS + 1) * 4


@dataclass(frozen=True)
class InstructionFile:
    """One file of the block: where it was found, how it is named, what it gives."""

    path: Path
    #: Its name in the block: relative to the workspace, or ``~/.cairn/AGENTS.md``.
    shown: str
    #: Its content with the imports expanded, cut at ``MAX_INSTRUCTION_CHARS``.
    text: str


@dataclass(frozen=True)
class Instructions:
    """The files found, in order, and a line for each problem met reading them."""

    files: tuple[InstructionFile, ...] = ()
    notices: tuple[str, ...] = ()

    @cached_property
    def block(self) -> str:
        """The system prompt's section: one ``<instructions>`` element per file; ``""``: none."""
        if not self.files:
            return ""
        parts = [HEADING, INTRO]
        for file in self.files:
            shown = file.shown.replace('"', "&quot;")
            parts.append(f'<instructions path="{shown}">\n{file.text}\n</instructions>')
        return "\n\n".join(parts)


def with_instructions(prompt: str, instructions: Instructions) -> str:
    """``prompt`` with the block appended; unchanged when there is none."""
    block = instructions.block
    return f"{prompt.rstrip()}\n\n{block}" if block else prompt


def load_instructions(workspace: Path, home: Path, cwd: Path | None = None) -> Instructions:
    """Read the instruction files once (``InstructionFiles`` re-reads only on a change)."""
    return _Reading(workspace, home).run(cwd)


class InstructionFiles:
    """The instruction files of one session, re-read when one of them changes.

    ``on_notice`` receives each notice of a (re)reading that the reading
    before did not give, so an unchanged problem is told once.
    """

    def __init__(
        self, workspace: Path, home: Path, *, on_notice: Callable[[str], None] | None = None
    ) -> None:
        self.workspace = workspace
        self.home = home
        self._on_notice = on_notice
        self._current: Instructions | None = None
        self._stamps: dict[Path, Stamp] = {}
        self._cwd: Path | None = None

    def load(self, cwd: Path | None = None) -> Instructions:
        """The files as they are now: the same object while none changed."""
        current = self._current
        if current is not None and cwd == self._cwd and not self.changed():
            return current
        reading = _Reading(self.workspace, self.home)
        loaded = reading.run(cwd)
        self._current, self._stamps, self._cwd = loaded, reading.stamps, cwd
        before = set(current.notices) if current is not None else set()
        if self._on_notice is not None:
            for notice in loaded.notices:
                if notice not in before:
                    self._on_notice(notice)
        return loaded

    def changed(self) -> bool:
        """Whether a file read (or looked for) last time differs now: ``stat`` calls only."""
        return any(_stamp(path) != seen for path, seen in self._stamps.items())


# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Scope:
    """A folder files are read beneath: the workspace, or the Cairn folder."""

    root: Root
    #: How messages name it.
    where: str
    #: What a path beneath it is shown after (``""``: relative to the workspace).
    label: str

    def show(self, parts: Sequence[str]) -> str:
        return self.label + "/".join(parts)


class _Reading:
    """One reading of every instruction file, with the stamps to tell a later change."""

    def __init__(self, workspace: Path, home: Path) -> None:
        self.workspace = Root.of(workspace)
        self.home = Root.of(home)
        self.stamps: dict[Path, Stamp] = {}
        self.notices: list[str] = []
        #: Every file included so far, so none is included twice.
        self._seen: set[_Identity] = set()

    def run(self, cwd: Path | None) -> Instructions:
        user = _Scope(self.home, "the Cairn folder", _home_label(self.home.path))
        project = _Scope(self.workspace, "the workspace", "")
        places = [(user, ())] + [(project, folder) for folder in self._folders(cwd)]
        files: list[InstructionFile] = []
        for scope, folder in places:
            for name in INSTRUCTION_NAMES:
                found = self._top(scope, (*folder, name))
                if found is not None:
                    files.append(found)
        return Instructions(tuple(files), tuple(self.notices))

    def _folders(self, cwd: Path | None) -> list[tuple[str, ...]]:
        """The workspace root, then each folder down to ``cwd`` (when it lies inside)."""
        folders: list[tuple[str, ...]] = [()]
        if cwd is None:
            return folders
        root = self.workspace.path
        real = Path(os.path.realpath(cwd if cwd.is_absolute() else root / cwd))
        if not self.workspace.holds(real):
            return folders
        parts = real.relative_to(root).parts
        folders += [parts[:end] for end in range(1, len(parts) + 1)]
        return folders

    def _top(self, scope: _Scope, parts: tuple[str, ...]) -> InstructionFile | None:
        named = scope.root.path.joinpath(*parts)
        shown = scope.show(parts)
        try:
            opened = open_beneath([scope.root], scope.root, parts)
        except (FileNotFoundError, NotADirectoryError):
            self.stamps[named] = None
            return None
        except OutsideRootsError as error:
            self.stamps[named] = _stamp(named)
            self._notice(f"{shown} not read: {_outside(scope, error)}")
            return None
        except (OSError, ValueError) as error:
            self.stamps[named] = _stamp(named)
            self._notice(f"{shown} cannot be read: {_reason(error)}")
            return None
        with opened:
            info = os.fstat(opened.fd)
            self.stamps[named] = _stamp_of(info)
            identity = (info.st_dev, info.st_ino)
            if identity in self._seen:
                return None  # a link to, or an import of, a file already included
            text = self._text(opened.fd, info, shown)
            folder = opened.parts[:-1]
        if text is None:
            return None
        self._seen.add(identity)
        text = self._expand(text, scope, folder, shown, (identity,), MAX_INSTRUCTION_CHARS + 1)
        text = text.rstrip()
        if not text:
            return None
        if len(text) > MAX_INSTRUCTION_CHARS:
            text = (
                f"{text[:MAX_INSTRUCTION_CHARS]}\n[cut at {MAX_INSTRUCTION_CHARS:,} characters: "
                f"the rest of {shown} is left out]"
            )
            self._notice(
                f"{shown} is over {MAX_INSTRUCTION_CHARS:,} characters with its imports; "
                f"cut at {MAX_INSTRUCTION_CHARS:,}"
            )
        return InstructionFile(named, shown, text)

    def _text(self, fd: int, info: os.stat_result, shown: str) -> str | None:
        if stat.S_ISDIR(info.st_mode):
            self._notice(f"{shown} is a folder, not a file; skipped")
            return None
        if not stat.S_ISREG(info.st_mode):
            self._notice(f"{shown} is not a regular file; skipped")
            return None
        try:
            return _read_text(fd)
        except UnicodeDecodeError:
            self._notice(f"{shown} is not UTF-8 text; skipped")
        except OSError as error:
            self._notice(f"{shown} cannot be read: {_reason(error)}")
        return None

    def _expand(
        self,
        text: str,
        scope: _Scope,
        folder: tuple[str, ...],
        shown: str,
        chain: tuple[_Identity, ...],
        room: int,
    ) -> str:
        """``text`` with its imports replaced, up to ``room`` characters (the rest is cut)."""
        out: list[str] = []
        size = 0
        fence: str | None = None
        for number, line in enumerate(text.splitlines(keepends=True), 1):
            if size >= room:
                break  # cut anyway: imports past the cap are not even read
            opening = _FENCE.match(line)
            if fence is not None:
                closes = (
                    opening is not None
                    and opening.group(1)[0] == fence[0]
                    and len(opening.group(1)) >= len(fence)
                    and not line[opening.end() :].strip()
                )
                fence = None if closes else fence
            elif opening is not None:
                fence = opening.group(1)
            else:
                where = f"{shown} line {number}"
                line = self._imports(line, scope, folder, where, chain, room - size)
            out.append(line)
            size += len(line)
        return "".join(out)

    def _imports(
        self,
        line: str,
        scope: _Scope,
        folder: tuple[str, ...],
        where: str,
        chain: tuple[_Identity, ...],
        room: int,
    ) -> str:
        code = [span.span() for span in _CODE_SPAN.finditer(line)]
        pieces: list[str] = []
        last = 0
        for match in _IMPORT.finditer(line):
            if room <= 0:
                break  # past the cap: the rest is cut, nothing more is read
            if any(start <= match.start() < end for start, end in code):
                continue
            raw = match.group(1)
            path = raw.rstrip(_TRAILING)
            if not path.strip(".") or ("/" not in path and "." not in path):
                continue  # a mention (``@alice``), not a file
            content = self._import(path, scope, folder, where, chain, room)
            if content is None:
                continue
            room -= len(content)
            pieces += [line[last : match.start()], content, raw[len(path) :]]
            last = match.end()
        return "".join([*pieces, line[last:]]) if pieces else line

    def _import(
        self,
        raw: str,
        scope: _Scope,
        folder: tuple[str, ...],
        where: str,
        chain: tuple[_Identity, ...],
        room: int,
    ) -> str | None:
        """The content ``@raw`` stands for, or ``None`` to keep the token."""

        def refuse(why: str) -> None:
            self._notice(f"{where}: @{raw} not imported: {why}")

        if len(chain) > MAX_IMPORT_DEPTH:
            refuse(f"imports nest deeper than {MAX_IMPORT_DEPTH}")
            return None
        parts = _target(scope, folder, raw)
        if parts is None:
            refuse(f"it is outside {scope.where}")
            return None
        lexical = Path(os.path.normpath(scope.root.path.joinpath(*parts)))
        try:
            opened = open_beneath([scope.root], scope.root, parts)
        except (FileNotFoundError, NotADirectoryError):
            self.stamps[lexical] = None  # created later, it is read then
            refuse("no such file")
            return None
        except OutsideRootsError as error:
            refuse(_outside(scope, error))
            return None
        except (OSError, ValueError) as error:
            self.stamps[lexical] = _stamp(lexical)
            refuse(_reason(error))
            return None
        with opened:
            info = os.fstat(opened.fd)
            self.stamps[opened.path] = _stamp_of(info)
            identity = (info.st_dev, info.st_ino)
            if identity in chain:
                refuse("it imports itself (an import cycle)")
                return None
            if identity in self._seen:
                return None  # already in the block: the token points at it
            text = self._text(opened.fd, info, f"{where}: @{raw}")
            real = opened.parts
        if text is None:
            return None
        self._seen.add(identity)
        expanded = self._expand(text, scope, real[:-1], scope.show(real), (*chain, identity), room)
        return expanded.rstrip("\n")

    def _notice(self, text: str) -> None:
        self.notices.append(f"instructions: {text}")


def _target(scope: _Scope, folder: tuple[str, ...], raw: str) -> list[str] | None:
    """The components of ``raw`` below the scope's root (``..`` kept); ``None``: outside."""
    try:
        path = Path(raw).expanduser()
    except RuntimeError:  # ``~user`` that does not exist
        path = Path(raw)
    if not path.is_absolute():
        return [*folder, *path.parts]
    anchored = anchor([scope.root], path)
    return None if anchored is None else anchored[1]


def _read_text(fd: int) -> str:
    """The file's text, at most enough of it to know it is over the cap.

    Raises ``UnicodeDecodeError`` for bytes that are not UTF-8; a character
    split by the read limit is left out, not an error. A byte-order mark is
    dropped.
    """
    chunks: list[bytes] = []
    offset = 0
    while offset < _READ_LIMIT and (chunk := os.pread(fd, _READ_LIMIT - offset, offset)):
        chunks.append(chunk)
        offset += len(chunk)
    decoder = codecs.getincrementaldecoder("utf-8-sig")()
    return decoder.decode(b"".join(chunks), final=offset < _READ_LIMIT)


def _stamp(path: Path) -> Stamp:
    try:
        return _stamp_of(path.stat())
    except (OSError, ValueError):
        return None


def _stamp_of(info: os.stat_result) -> Stamp:
    # The inode too: an editor that saves by renaming a new file over the old
    # one can leave the size and, within a clock tick, the time unchanged.
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def _home_label(home: Path) -> str:
    """How a file of the Cairn folder is named: ``~/.cairn/…`` under the user's home."""
    try:
        user = Path(os.path.realpath(Path.home()))
    except (RuntimeError, OSError):
        return f"{home}/"
    if home.is_relative_to(user) and home != user:
        return f"~/{home.relative_to(user).as_posix()}/"
    return f"{home}/"


def _outside(scope: _Scope, error: OutsideRootsError) -> str:
    how = f" ({error.link} is a symbolic link to {error.target})" if error.link else ""
    return f"it leads outside {scope.where}{how}"


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__
