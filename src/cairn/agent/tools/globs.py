"""Walking a folder by descriptor (``scan``) and matching its paths with globs.

``scan`` lists links but never enters them, and enters each folder relative
to its parent's descriptor, so a folder swapped for a link mid-walk is
skipped, not followed. The globs are the shells' own, over ``/``-separated
relative paths.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

from cairn.agent.sandbox import LIST_FLAGS

#: Folders never walked into by list_files and grep (still readable by name).
SKIPPED_DIRS = frozenset({".git", ".venv", "node_modules", "__pycache__"})


@dataclass(frozen=True)
class Entry:
    """One entry found by ``scan``."""

    #: Components below the folder scanned.
    parts: tuple[str, ...]
    #: A folder, or a link to one (listed as a folder, never entered).
    is_dir: bool
    is_link: bool
    #: The open folder holding the entry; valid until the scan moves on.
    dir_fd: int

    @property
    def name(self) -> str:
        return self.parts[-1]

    @property
    def relative(self) -> str:
        return "/".join(self.parts)


def scan(dir_fd: int, *, max_depth: int | None = None) -> Iterator[Entry]:
    """The entries below the open folder ``dir_fd``, depth first, each folder's sorted by name.

    That is the order of their sorted relative paths. Folders in
    ``SKIPPED_DIRS`` are neither listed nor entered, links are listed but
    never entered, and each folder is entered by ``O_NOFOLLOW`` relative to
    its parent's descriptor, so a folder swapped for a link is skipped, not
    followed. ``max_depth`` (1 = the direct children) bounds the descent;
    unreadable folders are skipped silently.
    """
    # An explicit stack: a deep tree cannot exhaust Python's recursion limit.
    stack: list[tuple[int, bool, tuple[str, ...], Iterator[os.DirEntry[str]]]] = [
        (dir_fd, False, (), _entries(dir_fd))
    ]
    try:
        while stack:
            fd, _, prefix, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                fd, owned, _, _ = stack.pop()
                if owned:
                    os.close(fd)
                continue
            try:
                is_link = entry.is_symlink()
                is_dir = entry.is_dir()
            except OSError:
                continue
            if is_dir and entry.name in SKIPPED_DIRS:
                continue
            parts = (*prefix, entry.name)
            yield Entry(parts, is_dir, is_link, fd)
            if not is_dir or is_link or (max_depth is not None and len(parts) >= max_depth):
                continue
            try:
                child = os.open(entry.name, LIST_FLAGS, dir_fd=fd)
            except OSError:
                continue  # swapped for a link, or unreadable
            stack.append((child, True, parts, _entries(child)))
    finally:
        for fd, owned, _, _ in stack:
            if owned:
                os.close(fd)


def _entries(fd: int) -> Iterator[os.DirEntry[str]]:
    try:
        with os.scandir(fd) as found:
            return iter(sorted(found, key=lambda entry: entry.name))
    except OSError:
        return iter(())


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
