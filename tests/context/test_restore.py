"""Restoration after compaction (DESIGN §5.7).

Seed 004 stories "压缩后上下文恢复" (context restoration after compaction) and
"压缩后计划模式提醒保留" (the plan-mode reminder survives compaction), and
seed 000's gotcha on recent files: filter by session *and* workspace before
taking five, and refuse paths outside the workspace and symlinks.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cairn.context.front_matter import split_front_matter
from cairn.context.restoration_source import BackgroundTask, FileRead, InvokedSkill, PlanState
from cairn.context.restore import (
    MAX_FILE_TOKENS,
    MAX_RESTORED_FILES,
    SKILL_DIR_PLACEHOLDER,
    build_restoration,
    plan_mode_reminder,
    render_skill,
    select_recent_files,
)
from cairn.messages import (
    KIND_PLAN_REMINDER,
    KIND_RESTORATION,
    KIND_SKILL,
    Message,
    message_to_wire,
)
from cairn.tokens import estimate_message_tokens, estimate_text_tokens

SESSION = "s1"


@dataclass
class Source:
    """A ``RestorationSource`` over plain fields."""

    workspace: Path
    reads: list[FileRead] = field(default_factory=list)
    plan: PlanState | None = None
    skills: list[InvokedSkill] = field(default_factory=list)
    tasks: list[BackgroundTask] = field(default_factory=list)
    working_dir: Path | None = None

    def cwd(self) -> Path:
        return self.working_dir or self.workspace

    def file_reads(self) -> Sequence[FileRead]:
        return self.reads

    def plan_state(self) -> PlanState | None:
        return self.plan

    def invoked_skills(self) -> Sequence[InvokedSkill]:
        return self.skills

    def background_tasks(self) -> Sequence[BackgroundTask]:
        return self.tasks


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def read(
    path: Path | str, at: float, *, ws: Path, session: str = SESSION, workspace: Path | None = None
) -> FileRead:
    return FileRead(Path(path), session, workspace or ws, at)


def restore(
    source: Source, count: Callable[[Message], int] = estimate_message_tokens
) -> list[Message]:
    return build_restoration(source, session_id=SESSION, workspace=source.workspace, count=count)


def file_messages(messages: list[Message]) -> list[Message]:
    return [m for m in messages if m.meta.extra.get("path") is not None]


def shown_paths(messages: list[Message]) -> list[str]:
    return [str(m.meta.extra["path"]) for m in file_messages(messages)]


# ---------------------------------------------------------------------------
# Scenario 1: recent files, at most 5, each at most 5,000 tokens


def test_scenario_1_restores_at_most_five_files_each_within_5000_tokens(ws: Path) -> None:
    reads = [read(write(ws / f"f{i}.py", f"print({i})\n"), i, ws=ws) for i in range(7)]
    big = write(ws / "big.txt", "".join(f"line {i:06d} of a long file\n" for i in range(4_000)))
    assert big.stat().st_size > 100_000
    reads.append(read(big, 100, ws=ws))

    messages = restore(Source(ws, reads))
    files = file_messages(messages)

    assert len(files) == MAX_RESTORED_FILES
    assert shown_paths(messages) == ["big.txt", "f6.py", "f5.py", "f4.py", "f3.py"]
    for message in files:
        assert estimate_message_tokens(message) <= MAX_FILE_TOKENS
    cut = files[0]
    assert cut.meta.extra["truncated"] is True
    assert "truncated by the host" in cut.text
    assert cut.text.startswith('<file path="big.txt">\nline 000000 of a long file\n')
    assert cut.text.endswith("</file>")
    # The cut falls on a line end and keeps most of the budget.
    body = cut.text.split("\n[… truncated")[0]
    assert body.endswith("of a long file")
    assert estimate_message_tokens(cut) > MAX_FILE_TOKENS * 0.95
    assert files[1].text == '<file path="f6.py">\nprint(6)\n</file>'
    assert files[1].meta.extra["truncated"] is False


def test_scenario_1_cut_honours_cjk_and_a_custom_counter(ws: Path) -> None:
    cjk = write(ws / "notes.md", "压缩后上下文恢复。\n" * 3_000)
    messages = restore(Source(ws, [read(cjk, 1, ws=ws)]))
    assert estimate_message_tokens(file_messages(messages)[0]) <= MAX_FILE_TOKENS

    def strict(message: Message) -> int:  # an exact tokenizer that counts 1 per character
        return len(message.text)

    text = write(ws / "a.txt", "x" * 20_000)
    messages = restore(Source(ws, [read(text, 1, ws=ws)]), count=strict)
    (only,) = file_messages(messages)
    assert strict(only) <= MAX_FILE_TOKENS
    assert only.meta.extra["truncated"] is True


def test_scenario_1_a_file_just_under_the_limit_is_not_cut(ws: Path) -> None:
    path = write(ws / "fits.txt", "abcd" * (MAX_FILE_TOKENS - 20))
    (message,) = file_messages(restore(Source(ws, [read(path, 1, ws=ws)])))
    assert message.meta.extra["truncated"] is False
    assert "abcd" * (MAX_FILE_TOKENS - 20) in message.text


# ---------------------------------------------------------------------------
# Seed 000 gotcha: filter by session AND workspace BEFORE taking five


def test_gotcha_filters_before_taking_five(tmp_path: Path, ws: Path) -> None:
    other_ws = tmp_path / "other-ws"
    other_ws.mkdir()
    good = [write(ws / f"src/m{i}.py", f"# module {i}\n") for i in range(6)]
    reads = [read(path, i, ws=ws) for i, path in enumerate(good)]  # t = 0 … 5
    foreign = write(other_ws / "x.py", "# other workspace\n")
    (ws / "link.py").symlink_to(good[0])
    reads += [
        read(good[1], 10, ws=ws, session="another-session"),
        read(foreign, 11, ws=ws, workspace=other_ws),
        read(ws / "link.py", 12, ws=ws),
    ]

    chosen = select_recent_files(reads, session_id=SESSION, workspace=ws)

    root = ws.resolve()
    assert chosen == [root / f"src/m{i}.py" for i in (5, 4, 3, 2, 1)]
    # Taking the five newest reads first would have left only two files.
    assert shown_paths(restore(Source(ws, reads))) == [f"src/m{i}.py" for i in (5, 4, 3, 2, 1)]


def test_gotcha_reads_of_another_session_or_workspace_never_restored(
    tmp_path: Path, ws: Path
) -> None:
    path = write(ws / "a.py", "a\n")
    reads = [
        read(path, 1, ws=ws, session="s2"),
        read(path, 2, ws=ws, workspace=tmp_path / "elsewhere"),
    ]
    assert select_recent_files(reads, session_id=SESSION, workspace=ws) == []
    assert file_messages(restore(Source(ws, reads))) == []


def test_gotcha_dotdot_escape_and_absolute_path_outside_refused(ws: Path, outside: Path) -> None:
    secret = outside / "secret.txt"
    reads = [
        read(Path("../outside/secret.txt"), 3, ws=ws),
        read(ws / "sub" / ".." / ".." / "outside" / "secret.txt", 2, ws=ws),
        read(secret, 1, ws=ws),
        read(Path("/etc/passwd"), 0, ws=ws),
    ]
    (ws / "sub").mkdir()
    assert select_recent_files(reads, session_id=SESSION, workspace=ws) == []
    messages = restore(Source(ws, reads))
    assert file_messages(messages) == []
    assert all("top secret" not in m.text for m in messages)


def test_gotcha_symlink_inside_workspace_pointing_outside_refused(ws: Path, outside: Path) -> None:
    (ws / "leak.txt").symlink_to(outside / "secret.txt")
    (ws / "linked-dir").symlink_to(outside, target_is_directory=True)
    reads = [
        read(ws / "leak.txt", 2, ws=ws),
        read(ws / "linked-dir" / "secret.txt", 1, ws=ws),
        read(Path("linked-dir/secret.txt"), 0, ws=ws),
    ]
    assert select_recent_files(reads, session_id=SESSION, workspace=ws) == []
    assert all("top secret" not in m.text for m in restore(Source(ws, reads)))


def test_gotcha_symlink_pointing_inside_the_workspace_refused_too(ws: Path) -> None:
    real = write(ws / "real.py", "real\n")
    (ws / "alias.py").symlink_to(real)
    reads = [read(ws / "alias.py", 2, ws=ws), read(real, 1, ws=ws)]
    assert select_recent_files(reads, session_id=SESSION, workspace=ws) == [
        ws.resolve() / "real.py"
    ]


def test_workspace_named_through_a_symlink_still_matches(tmp_path: Path, ws: Path) -> None:
    alias = tmp_path / "ws-alias"
    alias.symlink_to(ws, target_is_directory=True)
    path = write(ws / "a.py", "a\n")
    reads = [read(alias / "a.py", 2, ws=ws, workspace=alias), read(path, 1, ws=ws)]
    assert select_recent_files(reads, session_id=SESSION, workspace=alias) == [
        ws.resolve() / "a.py"
    ]


def test_relative_paths_and_repeated_reads_count_once(ws: Path) -> None:
    a = write(ws / "pkg/a.py", "a\n")
    write(ws / "pkg/b.py", "b\n")
    reads = [
        read(Path("pkg/a.py"), 1, ws=ws),
        read(Path("pkg/b.py"), 2, ws=ws),
        read(a, 3, ws=ws),
        read(Path("./pkg/../pkg/a.py"), 4, ws=ws),
    ]
    root = ws.resolve()
    assert select_recent_files(reads, session_id=SESSION, workspace=ws) == [
        root / "pkg/a.py",
        root / "pkg/b.py",
    ]


def test_deleted_file_skipped_and_the_next_one_restored(ws: Path) -> None:
    paths = [write(ws / f"f{i}.txt", f"file {i}\n") for i in range(6)]
    reads = [read(path, i, ws=ws) for i, path in enumerate(paths)]
    paths[5].unlink()
    paths[3].unlink()
    assert shown_paths(restore(Source(ws, reads))) == ["f4.txt", "f2.txt", "f1.txt", "f0.txt"]


def test_binary_and_non_regular_files_skipped(ws: Path) -> None:
    write(ws / "ok.txt", "fine\n")
    (ws / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    (ws / "a-dir").mkdir()
    os.mkfifo(ws / "pipe")
    reads = [
        read(ws / "ok.txt", 1, ws=ws),
        read(ws / "image.png", 2, ws=ws),
        read(ws / "a-dir", 3, ws=ws),
        read(ws / "pipe", 4, ws=ws),
    ]
    assert shown_paths(restore(Source(ws, reads))) == ["ok.txt"]


def test_files_are_reread_from_disk_now(ws: Path) -> None:
    path = write(ws / "config.toml", "version = 1\n")
    reads = [read(path, 1, ws=ws)]
    path.write_text("version = 2\n")
    (message,) = file_messages(restore(Source(ws, reads)))
    assert "version = 2" in message.text
    assert "version = 1" not in message.text


# ---------------------------------------------------------------------------
# Scenario 2: the working directory, always


def test_scenario_2_working_directory_always_included(ws: Path) -> None:
    messages = restore(Source(ws))
    assert len(messages) == 1
    (environment,) = messages
    assert f"Working directory: {ws}" in environment.text
    assert environment.role == "user"
    assert environment.meta.kind == KIND_RESTORATION
    assert environment.meta.synthetic


def test_scenario_2_cwd_below_the_workspace_is_shown_with_the_workspace(ws: Path) -> None:
    (ws / "sub").mkdir()
    (environment,) = restore(Source(ws, working_dir=ws / "sub"))
    assert f"Working directory: {ws / 'sub'}" in environment.text
    assert f"Workspace: {ws}" in environment.text


# ---------------------------------------------------------------------------
# Scenario 3 and the plan-mode story: plan file, existence, the full reminder


@pytest.mark.parametrize("exists", [True, False])
def test_scenario_3_plan_mode_path_and_existence(ws: Path, exists: bool) -> None:
    plan_file = ws / ".cairn" / "plans" / "plan.md"
    if exists:
        write(plan_file, "# Plan\n")
    messages = restore(Source(ws, plan=PlanState(plan_file)))

    environment = messages[0]
    assert "Plan mode is active. Plan file: .cairn/plans/plan.md" in environment.text
    assert ("(exists)" in environment.text) is exists
    assert ("(does not exist yet)" in environment.text) is not exists

    reminder = messages[-1]
    assert reminder.meta.extra == {"plan_file": ".cairn/plans/plan.md", "exists": exists}
    assert "Plan file: .cairn/plans/plan.md" in reminder.text
    assert ("already exists" in reminder.text) is exists
    assert ("does not exist yet" in reminder.text) is not exists


def test_plan_story_full_reminder_is_the_last_message_and_a_user_message(ws: Path) -> None:
    write(ws / "a.py", "a\n")
    skill = write(ws / ".cairn/skills/s/SKILL.md", "---\nname: s\n---\nDo s.\n")
    source = Source(
        ws,
        reads=[read(ws / "a.py", 1, ws=ws)],
        plan=PlanState(ws / "plan.md"),
        skills=[InvokedSkill("s", skill)],
        tasks=[BackgroundTask("t1", "run the tests", "running")],
    )
    messages = restore(source)

    kinds = [m.meta.kind for m in messages]
    assert kinds == [KIND_RESTORATION, KIND_RESTORATION, KIND_SKILL, KIND_PLAN_REMINDER]
    reminder = messages[-1]
    assert reminder.role == "user"
    assert message_to_wire(reminder)["role"] == "user"
    assert reminder.meta.synthetic
    text = reminder.text
    assert text.startswith("<system-reminder>")
    assert text.endswith("</system-reminder>")
    # Full, not sparse: the read-only constraints, the plan-file exception, the workflow.
    assert "MUST NOT make any edits" in text
    assert "the one exception of the plan file" in text
    assert "## Workflow" in text
    assert "Do not start implementing before the user approves" in text
    assert "{plan_file" not in text
    assert reminder.text == plan_mode_reminder(PlanState(ws / "plan.md"), workspace=ws).text


def test_plan_story_no_reminder_outside_plan_mode(ws: Path) -> None:
    messages = restore(Source(ws, tasks=[BackgroundTask("t", "x", "running")]))
    assert all(m.meta.kind != KIND_PLAN_REMINDER for m in messages)
    assert all("Plan mode" not in m.text for m in messages)


def test_plan_reminder_outside_the_workspace_shows_an_absolute_path(
    ws: Path, outside: Path
) -> None:
    reminder = plan_mode_reminder(PlanState(outside / "plan.md"), workspace=ws)
    assert f"Plan file: {outside / 'plan.md'}" in reminder.text
    assert reminder.meta.kind == KIND_PLAN_REMINDER


def test_every_restoration_message_is_a_synthetic_user_message(ws: Path) -> None:
    write(ws / "a.py", "a\n")
    skill = write(ws / "skills/s/SKILL.md", "body\n")
    source = Source(
        ws,
        reads=[read(ws / "a.py", 1, ws=ws)],
        plan=PlanState(ws / "plan.md"),
        skills=[InvokedSkill("s", skill)],
    )
    for message in restore(source):
        assert message.role == "user"
        assert message.meta.synthetic


# ---------------------------------------------------------------------------
# Scenario 4: invoked skills, as the model saw them

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


def test_scenario_4_skill_rerendered_from_file(ws: Path) -> None:
    skill_file = write(ws / ".cairn/skills/pdf-tools/SKILL.md", FOLDED_SKILL)
    directory = ws / ".cairn/skills/pdf-tools"

    rendered = render_skill(InvokedSkill("pdf-tools", skill_file))

    assert rendered.splitlines()[0] == f"Base directory for this skill: {directory}"
    assert directory.is_absolute()
    assert SKILL_DIR_PLACEHOLDER not in rendered
    assert f"python {directory}/scripts/extract.py <file>" in rendered
    assert f"Templates live in {directory}/templates." in rendered
    assert "---" not in rendered
    assert ">-" not in rendered
    assert "allowed-tools" not in rendered
    assert "# PDF tools" in rendered


def test_scenario_4_folded_description_never_leaks_front_matter_syntax(ws: Path) -> None:
    skill_file = write(ws / ".cairn/skills/pdf-tools/SKILL.md", FOLDED_SKILL)
    messages = restore(Source(ws, skills=[InvokedSkill("pdf-tools", skill_file)]))

    (message,) = [m for m in messages if m.meta.kind == KIND_SKILL]
    assert "Description: Extract text and tables from PDF files." in message.text
    assert ">-" not in message.text
    assert "---" not in message.text
    assert SKILL_DIR_PLACEHOLDER not in message.text
    assert message.role == "user"
    assert message.meta.extra == {"skill": "pdf-tools", "restored": True}


def test_scenario_4_body_as_seen_used_verbatim(ws: Path) -> None:
    skill_file = write(ws / "skills/x/SKILL.md", "---\nname: x\n---\nNEW BODY\n")
    seen = f"Base directory for this skill: {ws / 'skills/x'}\n\nOLD BODY, as the model saw it"
    skill = InvokedSkill("x", skill_file, description="does x", body_as_seen=seen)

    assert render_skill(skill) == seen
    (message,) = [m for m in restore(Source(ws, skills=[skill])) if m.meta.kind == KIND_SKILL]
    assert seen in message.text
    assert "NEW BODY" not in message.text
    assert "Description: does x" in message.text


def test_scenario_4_body_as_seen_survives_a_deleted_skill_file(ws: Path) -> None:
    seen = f"Base directory for this skill: {ws}/gone\n\nremembered"
    skill = InvokedSkill("gone", ws / "gone/SKILL.md", body_as_seen=seen)
    assert render_skill(skill) == seen


def test_scenario_4_unreadable_skill_without_record_is_named_not_dropped(ws: Path) -> None:
    skill = InvokedSkill("gone", ws / "gone/SKILL.md", description="was here")
    with pytest.raises(OSError):
        render_skill(skill)
    (message,) = [m for m in restore(Source(ws, skills=[skill])) if m.meta.kind == KIND_SKILL]
    assert 'The skill "gone"' in message.text
    assert "can no longer be read" in message.text
    assert message.meta.extra["restored"] is False


def test_scenario_4_a_skill_invoked_twice_is_restored_once(ws: Path) -> None:
    a = write(ws / "skills/a/SKILL.md", "A body\n")
    b = write(ws / "skills/b/SKILL.md", "B body\n")
    skills = [InvokedSkill("a", a), InvokedSkill("b", b), InvokedSkill("a", a)]
    names = [m.meta.extra["skill"] for m in restore(Source(ws, skills=skills))[1:]]
    assert names == ["b", "a"]


def test_front_matter_scalars_are_parsed_not_copied() -> None:
    parsed = split_front_matter(
        "---\n"
        "name: 'it''s'\n"
        'quoted: "tab\\tand \\"quotes\\""\n'
        "literal: |\n  one\n    two\n  three\n"
        "folded: >\n  a\n  b\n\n  c\n"
        "plain: hello # a comment\n  world\n"
        "nested:\n  key: value\n"
        "---\n\nbody\n"
    )
    assert parsed.fields == {
        "name": "it's",
        "quoted": 'tab\tand "quotes"',
        "literal": "one\n  two\nthree\n",
        "folded": "a b\nc\n",
        "plain": "hello world",
    }
    assert parsed.body == "body\n"
    assert split_front_matter("no front matter\n").body == "no front matter\n"


# ---------------------------------------------------------------------------
# Scenario 5: background tasks, each with description and status


def test_scenario_5_background_tasks_listed_with_description_and_status(ws: Path) -> None:
    tasks = [
        BackgroundTask("task-1", "run the full test suite", "running"),
        BackgroundTask("task-2", "index the repository", "completed"),
    ]
    (environment,) = restore(Source(ws, tasks=tasks))
    assert "- task-1 [running]: run the full test suite" in environment.text
    assert "- task-2 [completed]: index the repository" in environment.text


def test_scenario_5_no_task_section_without_tasks(ws: Path) -> None:
    (environment,) = restore(Source(ws))
    assert "Background tasks" not in environment.text


def test_estimate_of_a_cut_file_is_counted_on_the_whole_message(ws: Path) -> None:
    path = write(ws / "wide.txt", "y" * 100_000)
    (message,) = file_messages(restore(Source(ws, [read(path, 1, ws=ws)])))
    assert estimate_text_tokens(message.text) + 4 == estimate_message_tokens(message)
    assert estimate_message_tokens(message) <= MAX_FILE_TOKENS
    assert "the file has 100,000 bytes" in message.text


def test_a_binary_file_among_the_newest_five_is_replaced_by_the_next_text_file(ws: Path) -> None:
    paths = [write(ws / f"f{i}.txt", f"file {i}\n") for i in range(6)]
    (ws / "blob.bin").write_bytes(b"\0\1\2" * 100)
    reads = [read(path, i, ws=ws) for i, path in enumerate(paths)]
    reads.append(read(ws / "blob.bin", 99, ws=ws))
    assert shown_paths(restore(Source(ws, reads))) == [f"f{i}.txt" for i in (5, 4, 3, 2, 1)]
