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

Parsing and rendering are those of restoration (``cairn.context.restore``), so
what the model is shown on invocation is exactly what a compaction re-injects.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from cairn.context.restore import split_front_matter
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
    roots = [
        ("project", _absolute(workspace) / PROJECT_SKILLS_DIR),
        ("user", _absolute(home if home is not None else cairn_home()) / USER_SKILLS_DIR),
    ]
    found: dict[str, Skill] = {}
    warnings: list[str] = []
    scanned: set[Path] = set()
    for scope, root in roots:
        # A workspace that is the home folder has one skills folder, not two.
        key = root.resolve()
        if key in scanned:
            continue
        scanned.add(key)
        for skill in _scan(scope, root, warnings):
            found.setdefault(skill.name, skill)
    skills = tuple(sorted(found.values(), key=lambda skill: skill.name))
    return SkillCatalog(skills, tuple(warnings))


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


def _scan(scope: str, root: Path, warnings: list[str]) -> list[Skill]:
    try:
        entries = sorted(os.scandir(root), key=lambda entry: entry.name)
    except FileNotFoundError:
        return []
    except OSError as error:
        warnings.append(f"{scope} skills folder {root} cannot be read: {_reason(error)}")
        return []
    skills: list[Skill] = []
    for entry in entries:
        if entry.name.startswith("."):
            continue
        try:
            is_dir = entry.is_dir()  # follows a symlinked skill folder
        except OSError:
            is_dir = False
        if not is_dir:
            continue
        skill = _load(Path(entry.path), warnings)
        if skill is not None:
            skills.append(skill)
    return skills


def _load(directory: Path, warnings: list[str]) -> Skill | None:
    name = directory.name
    path = directory / SKILL_FILE
    if not path.is_file():
        warnings.append(f"skill {name!r} skipped: {directory} has no {SKILL_FILE}")
        return None
    try:
        text = path.read_text(encoding="utf-8")
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


def _one_line(text: str) -> str:
    text = _WHITESPACE.sub(" ", text).strip()
    if len(text) > MAX_DESCRIPTION_CHARS:
        text = text[: MAX_DESCRIPTION_CHARS - 1].rstrip() + "…"
    return text


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__
