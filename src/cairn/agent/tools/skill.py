"""The ``skill`` tool: load a skill's instructions by name (DESIGN §7, §5.7).

The result is the skill's body exactly as restoration renders it — first line
``Base directory for this skill: <absolute folder>``, front matter dropped,
``${CAIRN_SKILL_DIR}`` replaced by that folder — and that very text is
recorded in the session state as ``body_as_seen``, so what a compaction
re-injects is what the model was shown.

The file is read by descriptor beneath the skills folders (``read_skill``):
a skill folder or file swapped since discovery for a symlink leading
outside them is refused with an error, not read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cairn.agent.skills import Skill, SkillCatalog, read_skill
from cairn.agent.tools.base import Tool, ToolContext, ToolResult
from cairn.context.effects import ToolEffect
from cairn.context.front_matter import split_front_matter
from cairn.context.restoration_source import InvokedSkill
from cairn.context.restore import (
    SKILL_BASE_PREFIX,
    SKILL_DIR_PLACEHOLDER,
    skill_directory,
)
from cairn.messages import JSONObject

SKILL_TOOL_NAME = "skill"


class SkillTool:
    """Implements ``cairn.agent.tools.base.Tool`` over one ``SkillCatalog``."""

    def __init__(self, catalog: SkillCatalog) -> None:
        self._catalog = catalog

    @property
    def catalog(self) -> SkillCatalog:
        return self._catalog

    @property
    def name(self) -> str:
        return SKILL_TOOL_NAME

    @property
    def description(self) -> str:
        names = ", ".join(self._catalog.names()) or "none"
        return (
            "Load a skill's instructions before a task that matches its description "
            f"(see the system prompt), then follow them. Available skills: {names}."
        )

    @property
    def parameters(self) -> JSONObject:
        return {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
            "additionalProperties": False,
        }

    @property
    def effect(self) -> ToolEffect:
        return "read_only"

    async def run(self, args: JSONObject, ctx: ToolContext) -> ToolResult:
        raw = args.get("name")
        if not isinstance(raw, str) or not raw.strip():
            return self._error("the argument 'name' must be a skill's name")
        name = raw.strip()
        skill = self._catalog.get(name) or self._catalog.get(name.removeprefix("/"))
        if skill is None:
            return self._error(f"there is no skill named {name!r}")
        try:
            body = _render(skill, read_skill(skill, self._catalog))
        except (OSError, UnicodeDecodeError, ValueError) as error:
            return ToolResult(
                f"Error: the skill {skill.name!r} cannot be read from {skill.path}: {error}",
                is_error=True,
                extra={"skill": skill.name},
            )
        ctx.state.record_skill(
            InvokedSkill(skill.name, skill.path, skill.description, body_as_seen=body)
        )
        return ToolResult(body, extra={"skill": skill.name, "path": str(skill.path)})

    def _error(self, problem: str) -> ToolResult:
        names = ", ".join(self._catalog.names())
        available = f"Available skills: {names}." if names else "No skills are available."
        return ToolResult(f"Error: {problem}. {available}", is_error=True)


def _render(skill: Skill, text: str) -> str:
    """The body as ``restore.render_skill`` renders it from the file, from text read safely."""
    directory = str(skill_directory(InvokedSkill(skill.name, skill.path)))
    body = split_front_matter(text).body.replace(SKILL_DIR_PLACEHOLDER, directory).strip("\n")
    return f"{SKILL_BASE_PREFIX}{directory}\n\n{body}"


if TYPE_CHECKING:
    _satisfies_protocol: Tool = SkillTool(SkillCatalog())
