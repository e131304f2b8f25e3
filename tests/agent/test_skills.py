"""Skills: discovery, the catalog prompt and the ``skill`` tool (DESIGN §7, §5.7).

Seed 004 story "压缩后上下文恢复" scenario 4: the body the model saw when it
invoked a skill (``${CAIRN_SKILL_DIR}`` substituted, first line ``Base
directory for this skill: <absolute path>``, no raw front matter such as
``>-``) is the body a compaction re-injects.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cairn.agent.skills import Skill, SkillCatalog, discover_skills, skills_prompt
from cairn.agent.state import SessionState
from cairn.agent.tools.base import Tool, ToolContext, ToolResult, tool_schema
from cairn.agent.tools.skill import SkillTool
from cairn.context.restoration_source import InvokedSkill
from cairn.context.restore import (
    SKILL_BASE_PREFIX,
    SKILL_DIR_PLACEHOLDER,
    build_restoration,
    render_skill,
)
from cairn.messages import KIND_SKILL, JSONObject

FOLDED_SKILL = """---
name: pdf-tools
description: >-
  Extract text and tables
  from PDF files.
allowed-tools:
  - read_file
---

# PDF tools

Run `python ${CAIRN_SKILL_DIR}/scripts/extract.py <file>`.
Templates live in ${CAIRN_SKILL_DIR}/templates.
"""


def skill_md(name: str, description: str, body: str = "Do it.\n") -> str:
    return f"---\nname: {name}\ndescription: {description}\n---\n\n{body}"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    directory = tmp_path / "home" / ".cairn"
    directory.mkdir(parents=True)
    return directory


def project_skill(ws: Path, name: str, text: str) -> Path:
    return write(ws / ".cairn" / "skills" / name / "SKILL.md", text)


def user_skill(home: Path, name: str, text: str) -> Path:
    return write(home / "skills" / name / "SKILL.md", text)


def state_for(ws: Path) -> SessionState:
    return SessionState(session_id="s1", workspace=ws)


def run(tool: SkillTool, args: JSONObject, state: SessionState, tmp_path: Path) -> ToolResult:
    ctx = ToolContext(workspace=state.workspace, state=state, session_dir=tmp_path / "session")
    return asyncio.run(tool.run(args, ctx))


# ---------------------------------------------------------------------------
# Discovery


def test_discovers_project_and_user_skills_sorted(ws: Path, home: Path) -> None:
    project_skill(ws, "zeta", skill_md("zeta", "Project zeta."))
    user_skill(home, "alpha", skill_md("alpha", "User alpha."))

    catalog = discover_skills(ws, home)

    assert catalog.names() == ["alpha", "zeta"]
    assert catalog.warnings == ()
    alpha = catalog.get("alpha")
    assert alpha is not None
    assert alpha == Skill(
        name="alpha",
        description="User alpha.",
        path=home / "skills/alpha/SKILL.md",
        directory=home / "skills/alpha",
    )
    assert alpha.path.is_absolute()


def test_project_skill_wins_over_user_skill_of_the_same_name(ws: Path, home: Path) -> None:
    project = project_skill(ws, "review", skill_md("review", "Project review rules."))
    user_skill(home, "review", skill_md("review", "User review rules."))

    catalog = discover_skills(ws, home)

    (skill,) = catalog.skills
    assert skill.description == "Project review rules."
    assert skill.path == project
    assert catalog.warnings == ()


def test_user_home_defaults_to_cairn_home(
    ws: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAIRN_HOME", str(home))
    user_skill(home, "mine", skill_md("mine", "From CAIRN_HOME."))
    assert discover_skills(ws).names() == ["mine"]


def test_folded_description_is_read_as_text(ws: Path, home: Path) -> None:
    project_skill(ws, "pdf-tools", FOLDED_SKILL)

    (skill,) = discover_skills(ws, home).skills

    assert skill.description == "Extract text and tables from PDF files."


def test_malformed_folders_are_skipped_with_a_warning(ws: Path, home: Path) -> None:
    project_skill(ws, "good", skill_md("good", "Works."))
    (ws / ".cairn/skills/empty").mkdir()
    project_skill(ws, "plain", "# No front matter\n\nJust text.\n")
    project_skill(ws, "unclosed", "---\nname: unclosed\ndescription: never closed\n\nBody\n")
    project_skill(ws, "nodesc", "---\nname: nodesc\n---\nBody\n")
    write(ws / ".cairn/skills/binary/SKILL.md", "").write_bytes(b"---\xff\xfe\n")
    write(ws / ".cairn/skills/README.md", "not a skill folder")
    project_skill(ws, ".hidden", skill_md("hidden", "Ignored."))

    catalog = discover_skills(ws, home)

    assert catalog.names() == ["good"]
    assert len(catalog.warnings) == 5
    for name in ("empty", "plain", "unclosed", "nodesc", "binary"):
        (warning,) = [w for w in catalog.warnings if f"'{name}'" in w]
        assert "skipped" in warning
    assert any("no SKILL.md" in w for w in catalog.warnings if "'empty'" in w)
    assert any("no description" in w for w in catalog.warnings if "'nodesc'" in w)


def test_broken_project_skill_does_not_hide_the_user_one(ws: Path, home: Path) -> None:
    project_skill(ws, "dup", "no front matter\n")
    user_skill(home, "dup", skill_md("dup", "User copy."))

    catalog = discover_skills(ws, home)

    assert [s.description for s in catalog.skills] == ["User copy."]
    assert len(catalog.warnings) == 1


def test_folder_name_is_the_skill_name(ws: Path, home: Path) -> None:
    project_skill(ws, "folder", skill_md("other", "Named differently."))

    catalog = discover_skills(ws, home)

    assert catalog.names() == ["folder"]
    (warning,) = catalog.warnings
    assert "'other'" in warning
    assert "skipped" not in warning


def test_no_skills_folders_is_an_empty_catalog(ws: Path, home: Path) -> None:
    assert discover_skills(ws, home) == SkillCatalog()


def test_workspace_that_is_the_home_folder_is_scanned_once(tmp_path: Path) -> None:
    home_dir = tmp_path / "me"
    write(home_dir / ".cairn/skills/x/SKILL.md", "no front matter\n")
    catalog = discover_skills(home_dir, home_dir / ".cairn")
    assert len(catalog.warnings) == 1


# ---------------------------------------------------------------------------
# The catalog in the system prompt


def test_skills_prompt_lists_name_and_description(ws: Path, home: Path) -> None:
    project_skill(ws, "pdf-tools", FOLDED_SKILL)
    user_skill(home, "review", skill_md("review", '"Review a diff\n  for bugs."'))

    prompt = skills_prompt(discover_skills(ws, home))

    assert "- pdf-tools — Extract text and tables from PDF files." in prompt
    assert "- review — Review a diff for bugs." in prompt
    assert "`skill` tool" in prompt
    assert ">-" not in prompt
    assert SKILL_DIR_PLACEHOLDER not in prompt


def test_skills_prompt_is_empty_without_skills() -> None:
    assert skills_prompt(SkillCatalog()) == ""


# ---------------------------------------------------------------------------
# The skill tool


def test_tool_shape(ws: Path, home: Path) -> None:
    project_skill(ws, "pdf-tools", FOLDED_SKILL)
    tool: Tool = SkillTool(discover_skills(ws, home))

    assert tool.name == "skill"
    assert tool.effect == "read_only"
    assert tool.parameters["required"] == ["name"]
    assert "pdf-tools" in tool.description
    assert tool_schema(tool)["type"] == "function"


def test_tool_result_is_the_rendered_body(ws: Path, home: Path, tmp_path: Path) -> None:
    skill_file = project_skill(ws, "pdf-tools", FOLDED_SKILL)
    directory = ws / ".cairn/skills/pdf-tools"
    state = state_for(ws)

    result = run(SkillTool(discover_skills(ws, home)), {"name": "pdf-tools"}, state, tmp_path)

    assert not result.is_error
    text = result.content
    assert text.splitlines()[0] == f"{SKILL_BASE_PREFIX}{directory}"
    assert directory.is_absolute()
    assert SKILL_DIR_PLACEHOLDER not in text
    assert f"python {directory}/scripts/extract.py <file>" in text
    assert f"Templates live in {directory}/templates." in text
    assert "---" not in text
    assert ">-" not in text
    assert "allowed-tools" not in text
    assert "# PDF tools" in text
    assert text == render_skill(InvokedSkill("pdf-tools", skill_file))


def test_tool_records_exactly_what_the_model_saw(ws: Path, home: Path, tmp_path: Path) -> None:
    skill_file = project_skill(ws, "pdf-tools", FOLDED_SKILL)
    state = state_for(ws)
    changes: list[int] = []
    state.on_change = lambda s: changes.append(len(s.skills))

    result = run(SkillTool(discover_skills(ws, home)), {"name": "pdf-tools"}, state, tmp_path)

    (recorded,) = state.invoked_skills()
    assert recorded == InvokedSkill(
        "pdf-tools",
        skill_file,
        "Extract text and tables from PDF files.",
        body_as_seen=result.content,
    )
    assert changes == [1]
    # The record survives persistence unchanged.
    reloaded = state_for(ws)
    reloaded.restore(state.to_json())
    assert reloaded.invoked_skills() == [recorded]


def test_unknown_skill_is_an_error_listing_the_available_ones(
    ws: Path, home: Path, tmp_path: Path
) -> None:
    project_skill(ws, "pdf-tools", FOLDED_SKILL)
    user_skill(home, "review", skill_md("review", "Reviews."))
    state = state_for(ws)

    result = run(SkillTool(discover_skills(ws, home)), {"name": "pdf"}, state, tmp_path)

    assert result.is_error
    assert "'pdf'" in result.content
    assert "pdf-tools, review" in result.content
    assert state.invoked_skills() == []


@pytest.mark.parametrize("args", [{}, {"name": ""}, {"name": 3}])
def test_bad_arguments_are_an_error(args: JSONObject, tmp_path: Path) -> None:
    result = run(SkillTool(SkillCatalog()), args, state_for(tmp_path), tmp_path)
    assert result.is_error
    assert "No skills are available" in result.content


def test_skill_file_gone_since_discovery_is_an_error(ws: Path, home: Path, tmp_path: Path) -> None:
    skill_file = project_skill(ws, "pdf-tools", FOLDED_SKILL)
    tool = SkillTool(discover_skills(ws, home))
    skill_file.unlink()
    state = state_for(ws)

    result = run(tool, {"name": "pdf-tools"}, state, tmp_path)

    assert result.is_error
    assert "cannot be read" in result.content
    assert state.invoked_skills() == []


def test_tool_reads_the_file_at_invocation(ws: Path, home: Path, tmp_path: Path) -> None:
    skill_file = project_skill(ws, "x", skill_md("x", "Does x.", "OLD\n"))
    tool = SkillTool(discover_skills(ws, home))
    write(skill_file, skill_md("x", "Does x.", "NEW\n"))

    result = run(tool, {"name": "x"}, state_for(ws), tmp_path)

    assert result.content.endswith("\n\nNEW")


# ---------------------------------------------------------------------------
# Restoration re-injects what the tool returned


def test_restoration_reinjects_the_body_the_tool_returned(
    ws: Path, home: Path, tmp_path: Path
) -> None:
    skill_file = project_skill(ws, "pdf-tools", FOLDED_SKILL)
    state = state_for(ws)
    result = run(SkillTool(discover_skills(ws, home)), {"name": "pdf-tools"}, state, tmp_path)
    # Edited after the invocation: restoration still shows what the model saw.
    write(skill_file, FOLDED_SKILL.replace("# PDF tools", "# Changed later"))

    messages = build_restoration(state, session_id="s1", workspace=ws)

    (message,) = [m for m in messages if m.meta.kind == KIND_SKILL]
    assert f"\n{result.content}\n" in message.text
    assert "# Changed later" not in message.text
    assert "Description: Extract text and tables from PDF files." in message.text
    assert ">-" not in message.text
    assert "---" not in message.text
    assert SKILL_DIR_PLACEHOLDER not in message.text
    assert message.meta.extra == {"skill": "pdf-tools", "restored": True}


def test_symlinked_skill_folder_keeps_its_named_path(ws: Path, home: Path, tmp_path: Path) -> None:
    # A link is followed when it leads inside the skills folders (here a hidden
    # store in the user's): see the tests below for one that leads outside.
    real = write(home / "skills/.store/pdf/SKILL.md", FOLDED_SKILL).parent
    (ws / ".cairn/skills").mkdir(parents=True)
    link = ws / ".cairn/skills/pdf-tools"
    link.symlink_to(real)

    catalog = discover_skills(ws, home)
    result = run(SkillTool(catalog), {"name": "pdf-tools"}, state_for(ws), tmp_path)

    assert catalog.names() == ["pdf-tools"]
    assert result.content.splitlines()[0] == f"{SKILL_BASE_PREFIX}{link}"
    assert f"python {link}/scripts/extract.py" in result.content


# ---------------------------------------------------------------------------
# Symlinks leading outside the skills folders


def test_skill_folder_linking_outside_the_skills_folders_is_skipped(
    ws: Path, home: Path, tmp_path: Path
) -> None:
    outside = write(tmp_path / "elsewhere/pdf/SKILL.md", FOLDED_SKILL).parent
    (ws / ".cairn/skills").mkdir(parents=True)
    (ws / ".cairn/skills/pdf-tools").symlink_to(outside)
    write(home / "skills/mine/SKILL.md", "").unlink()
    (home / "skills/mine/SKILL.md").symlink_to(outside / "SKILL.md")

    catalog = discover_skills(ws, home)

    assert catalog.names() == []
    assert len(catalog.warnings) == 2
    for name in ("pdf-tools", "mine"):
        (warning,) = [w for w in catalog.warnings if f"'{name}'" in w]
        assert "skipped" in warning and "outside the skills folders" in warning
        assert "symbolic link" in warning and str(outside) in warning


def test_project_skills_folder_linking_outside_the_workspace_is_skipped(
    ws: Path, home: Path, tmp_path: Path
) -> None:
    write(tmp_path / "elsewhere/skills/pdf/SKILL.md", FOLDED_SKILL)
    (ws / ".cairn").symlink_to(tmp_path / "elsewhere")

    catalog = discover_skills(ws, home)

    assert catalog.names() == []
    (warning,) = catalog.warnings
    assert "project skills folder" in warning and "outside the workspace" in warning


def test_skill_swapped_for_an_outside_link_after_discovery_is_refused(
    ws: Path, home: Path, tmp_path: Path
) -> None:
    secret = write(tmp_path / "elsewhere/SKILL.md", skill_md("x", "Secret.", "TOP SECRET\n"))
    skill_file = project_skill(ws, "x", skill_md("x", "Does x.", "harmless\n"))
    tool = SkillTool(discover_skills(ws, home))
    skill_file.unlink()
    skill_file.symlink_to(secret)
    state = state_for(ws)

    result = run(tool, {"name": "x"}, state, tmp_path)

    assert result.is_error
    assert "TOP SECRET" not in result.content
    assert "outside the skills folders" in result.content and str(skill_file) in result.content
    assert state.invoked_skills() == []
