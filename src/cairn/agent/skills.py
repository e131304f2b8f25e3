"""Skills: folders of instructions the model loads by name (DESIGN §7).

A skill is a folder holding a ``SKILL.md`` whose YAML front matter gives at
least a ``description`` (and usually a ``name``), as in Claude Code::

    ---
    name: pdf-tools
    description: >-
      Extract text and tables from PDF files.
    ---
    Run `python ${CAIRN_SKILL_DIR}/scripts/extract.py <file>`.

Two places are searched:

- project: ``<workspace>/.cairn/skills/<name>/SKILL.md``;
- user: ``$CAIRN_HOME/skills/<name>/SKILL.md`` (``~/.cairn/skills/…``).

A skill is called by its folder name; a project skill hides a user skill of
the same name. The model sees the catalog (name and description, see
``skills_prompt``) and loads a skill's body with the ``skill`` tool
(``cairn.agent.tools.skill``). A folder that cannot be used — no ``SKILL.md``,
an unreadable file, no front matter, no description — is skipped and named in
``SkillCatalog.warnings``; discovery never raises.

Skill folders and ``SKILL.md`` files are opened by descriptor, beneath the
skills folders (``sandbox.open_beneath``), never by name: a skill folder or
file that is a symlink is followed only when it leads inside one of the two
skills folders. One that leads elsewhere — a cloned repository's
``.cairn/skills/x`` pointing at ``~/.ssh``, say — is skipped with a warning
at discovery and refused by the ``skill`` tool (``read_skill``) if it is
swapped in later. The project skills folder must itself lie inside the
workspace.

Parsing and rendering are those of restoration (``cairn.context.restore``), so
what the model is shown on invocation is exactly what a compaction re-injects.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cairn.agent.fd_io import read_all
from cairn.agent.sandbox import OutsideRootsError, Root, open_beneath
from cairn.context.front_matter import split_front_matter
from cairn.store.paths import cairn_home

SKILL_FILE = "SKILL.md"
PROJECT_SKILLS_DIR = Path(".cairn") / "skills"
USER_SKILLS_DIR = "skills"
#: Longest description shown in the catalog (the Agent Skills limit).
MAX_DESCRIPTION_CHARS = 1_024

_WHITESPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Skill:
    """One usable skill: ``path`` is its ``SKILL.md``, ``directory`` the folder (absolute)."""

    name: str
    description: str
    path: Path
    directory: Path


@dataclass(frozen=True)
class SkillCatalog:
    """The skills found, sorted by name, and why any folder was skipped."""

    skills: tuple[Skill, ...] = ()
    warnings: tuple[str, ...] = ()
    #: The skills folders searched (as named): links may lead anywhere beneath them.
    roots: tuple[Path, ...] = field(default=(), compare=False)

    def get(self, name: str) -> Skill | None:
        return next((skill for skill in self.skills if skill.name == name), None)

    def names(self) -> list[str]:
        return [skill.name for skill in self.skills]


def discover_skills(workspace: Path, home: Path | None = None) -> SkillCatalog:
    """The project's and the user's skills; project skills win on a name clash.

    ``home`` is the Cairn home (default ``cairn_home()``); user skills live in
    its ``skills`` folder. Hidden folders (``.name``) and plain files in a
    skills folder are ignored; every other unusable folder gives a warning.
    """
    warnings: list[str] = []
    folders = _skill_folders(workspace, home, warnings)
    roots = [root for _, _, root in folders]
    found: dict[str, Skill] = {}
    for scope, folder, root in folders:
        for skill in _scan(scope, folder, root, roots, warnings):
            found.setdefault(skill.name, skill)
    skills = tuple(sorted(found.values(), key=lambda skill: skill.name))
    return SkillCatalog(skills, tuple(warnings), tuple(folder for _, folder, _ in folders))


def read_skill(skill: Skill, catalog: SkillCatalog) -> str:
    """The text of ``skill``'s ``SKILL.md``, read beneath the catalog's skills folders.

    Raises ``OSError`` or ``UnicodeDecodeError`` when it cannot be read, and
    ``ValueError`` when the folder or the file is (now) a symlink leading
    outside the skills folders.
    """
    folder = skill.directory.parent
    roots = [Root.of(path) for path in catalog.roots or (folder,)]
    start = Root.of(folder)
    try:
        return _read_text(roots, start, skill.directory.name)
    except OutsideRootsError as error:
        raise ValueError(_outside(skill.path, error)) from None


def skills_prompt(catalog: SkillCatalog) -> str:
    """The system-prompt section listing the available skills; ``""`` when none."""
    if not catalog.skills:
        return ""
    lines = [
        "# Skills",
        "Skills are folders of instructions, scripts and resources for particular tasks. "
        "When a task matches a skill's description, call the `skill` tool with its name "
        "before doing the task, then follow the instructions it returns.",
        "",
        "Available skills:",
    ]
    lines.extend(f"- {skill.name} — {_one_line(skill.description)}" for skill in catalog.skills)
    return "\n".join(lines)


# ---------------------------------------------------------------------------


def _absolute(path: Path) -> Path:
    """Absolute and normalised, with symlinks kept as named (like ``skill_directory``)."""
    return Path(os.path.normpath(path.expanduser().absolute()))


def _skill_folders(
    workspace: Path, home: Path | None, warnings: list[str]
) -> list[tuple[str, Path, Root]]:
    """The skills folders to search: scope, folder as named, and as a root."""
    candidates = [
        ("project", _absolute(workspace) / PROJECT_SKILLS_DIR),
        ("user", _absolute(home if home is not None else cairn_home()) / USER_SKILLS_DIR),
    ]
    folders: list[tuple[str, Path, Root]] = []
    for scope, folder in candidates:
        try:
            root = Root.of(folder)
        except OSError as error:  # changed while it was resolved
            warnings.append(f"{scope} skills folder {folder} cannot be read: {_reason(error)}")
            continue
        # A workspace that is the home folder has one skills folder, not two.
        if any(root.path == other.path for _, _, other in folders):
            continue
        inside = Root.of(workspace).holds(root.path)
        if scope == "project" and not inside and os.path.lexists(folder):
            warnings.append(
                f"project skills folder {folder} skipped: it leads outside the workspace "
                f"(to {root.path}) through a symbolic link"
            )
            continue
        folders.append((scope, folder, root))
    return folders


def _scan(
    scope: str, folder: Path, root: Root, roots: Sequence[Root], warnings: list[str]
) -> list[Skill]:
    try:
        with open_beneath([root], root, []) as opened:
            folders = _subfolders(opened.fd)
    except FileNotFoundError:
        return []
    except OSError as error:
        warnings.append(f"{scope} skills folder {folder} cannot be read: {_reason(error)}")
        return []
    skills: list[Skill] = []
    for name in folders:
        skill = _load(folder / name, root, roots, warnings)
        if skill is not None:
            skills.append(skill)
    return skills


def _subfolders(fd: int) -> list[str]:
    """The visible folders (or links to folders) in the open folder ``fd``, sorted."""
    names: list[str] = []
    for entry in sorted(os.scandir(fd), key=lambda entry: entry.name):
        if entry.name.startswith("."):
            continue
        try:
            # A symlinked skill folder counts; where it leads is checked on loading.
            if entry.is_dir():
                names.append(entry.name)
        except OSError:
            continue
    return names


def _load(directory: Path, root: Root, roots: Sequence[Root], warnings: list[str]) -> Skill | None:
    name = directory.name
    path = directory / SKILL_FILE
    try:
        text = _read_text(roots, root, name)
    except OutsideRootsError as error:
        warnings.append(f"skill {name!r} skipped: {_outside(path, error)}")
        return None
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        warnings.append(f"skill {name!r} skipped: {directory} has no {SKILL_FILE}")
        return None
    except (OSError, UnicodeDecodeError) as error:
        warnings.append(f"skill {name!r} skipped: {path} cannot be read: {_reason(error)}")
        return None
    fields = split_front_matter(text).fields
    if not fields:
        warnings.append(
            f"skill {name!r} skipped: {path} has no front matter "
            "(a block between '---' lines with name and description)"
        )
        return None
    description = _one_line(fields.get("description", ""))
    if not description:
        warnings.append(
            f"skill {name!r} skipped: the front matter of {path} has no description "
            "(the model chooses skills by their description)"
        )
        return None
    declared = fields.get("name", "").strip()
    if declared and declared != name:
        warnings.append(
            f"skill {name!r}: front matter name {declared!r} differs from its folder name; "
            f"it is called {name!r}"
        )
    return Skill(name=name, description=description, path=path, directory=directory)


def _read_text(roots: Sequence[Root], start: Root, name: str) -> str:
    """``<name>/SKILL.md`` beneath ``start``, links followed only beneath ``roots``."""
    with open_beneath(roots, start, [name, SKILL_FILE]) as opened:
        if not stat.S_ISREG(os.fstat(opened.fd).st_mode):
            raise IsADirectoryError(f"{opened.path} is not a regular file")
        return read_all(opened.fd).decode("utf-8")


def _outside(path: Path, error: OutsideRootsError) -> str:
    where = f" ({error.link} is a symbolic link to {error.target})" if error.link else ""
    return f"{path} leads outside the skills folders{where}; skills are read only inside them"


def _one_line(text: str) -> str:
    text = _WHITESPACE.sub(" ", text).strip()
    if len(text) > MAX_DESCRIPTION_CHARS:
        text = text[: MAX_DESCRIPTION_CHARS - 1].rstrip() + "…"
    return text


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__
