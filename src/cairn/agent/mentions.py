"""``@path`` mentions: finding them in a prompt, and completing workspace paths.

A mention is ``@`` at the start of a word followed by a path that exists in
the workspace (a file or a folder). The turn attaches each one by running the
real ``read_file`` / ``list_files`` tools (``cairn.agent.loop.run_turn``'s
``attach``): the pipeline counts the result like any tool result, the
tool-result budget caps it, and a file read this way is restored after a
compaction like any ``read_file``. Text that only looks like a mention (an
e-mail address, a path outside the workspace, one that does not exist) stays
plain text.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from cairn.agent.tools.workspace import resolve_in_workspace
from cairn.errors import CairnError

__all__ = ["MAX_COMPLETIONS", "MAX_MENTIONS", "Mention", "complete_paths", "find_mentions"]

#: Completions offered for one prefix (a picker shows a screenful).
MAX_COMPLETIONS = 50
#: Mentions attached to one prompt; more stay plain text (each costs a tool round).
MAX_MENTIONS = 10
#: Folders completion never enters (the same ones ``list_files`` skips, and caches).
_SKIPPED = frozenset({".git", ".venv", "node_modules", "__pycache__", ".mypy_cache"})
#: ``@`` at a word's start; the path ends at whitespace. Trailing punctuation of
#: the sentence ("see @a.py.") is not part of it.
_MENTION = re.compile(r"(?<!\S)@([^\s@]+)")
_TRAILING = ".,;:!?)]}'\""


@dataclass(frozen=True)
class Mention:
    """One mention as typed (``raw``) and what it names."""

    raw: str
    is_dir: bool


def find_mentions(text: str, workspace: Path) -> list[Mention]:
    """The ``@path`` mentions in ``text`` that name a file or folder in ``workspace``.

    In order, each path once, at most ``MAX_MENTIONS``.
    """
    found: list[Mention] = []
    seen: set[Path] = set()
    for match in _MENTION.finditer(text):
        raw = match.group(1).rstrip(_TRAILING)
        if not raw:
            continue
        try:
            path = resolve_in_workspace(workspace, raw)
        except (CairnError, ValueError):
            continue  # outside the workspace or unresolvable: plain text
        if path in seen or not path.exists():
            continue
        seen.add(path)
        found.append(Mention(raw, path.is_dir()))
        if len(found) == MAX_MENTIONS:
            break
    return found


def complete_paths(workspace: Path, prefix: str, limit: int = MAX_COMPLETIONS) -> list[str]:
    """Workspace paths that start with ``prefix`` (what follows an ``@``), folders ending in ``/``.

    Only the folder ``prefix`` names is listed (one level: typing on goes
    deeper), sorted with folders first; hidden entries only when the typed
    name starts with a dot. Nothing outside the workspace is offered.
    """
    folder, _, start = prefix.rpartition("/")
    try:
        base = resolve_in_workspace(workspace, folder or ".")
        entries = list(os.scandir(base))
    except (CairnError, ValueError, OSError):
        return []
    shown_folder = f"{folder}/" if folder else ""
    matches: list[tuple[bool, str]] = []
    for entry in entries:
        name = entry.name
        if not name.startswith(start) or (name.startswith(".") and not start.startswith(".")):
            continue
        try:
            is_dir = entry.is_dir()
        except OSError:
            continue
        if is_dir and name in _SKIPPED:
            continue
        matches.append((not is_dir, f"{shown_folder}{name}{'/' if is_dir else ''}"))
    return [path for _, path in sorted(matches)[:limit]]
