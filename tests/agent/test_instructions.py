"""Instruction files: AGENTS.md / CLAUDE.md in the system prompt (issue 26 item 1).

Real files in temporary folders, real sessions; the end-to-end tests drive
the loop against the local OpenAI-compatible SSE server and read the
request bodies it received.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

from cairn.agent.events import Event, Notice
from cairn.agent.instructions import (
    MAX_IMPORT_DEPTH,
    MAX_INSTRUCTION_CHARS,
    Instructions,
    load_instructions,
    with_instructions,
)
from cairn.agent.loop import run_turn
from cairn.agent.runtime import Runtime, Session
from cairn.agent.settings import Settings
from cairn.cli import build_parser
from cairn.context import CompactionConfig
from cairn.context.calibration import calibrated_tokens
from cairn.provider import ModelConfig, OpenAIProvider
from cairn.store import CompactionRecord, read_transcript
from cairn.surfaces.web.panes import WebSetup
from support.acp_client import connected, make_setup
from support.cli_run import cairn_p
from support.openai_server import (
    OpenAIServer,
    Reply,
    ToolCallSpec,
)

SUMMARY = (
    "<summary>\n## Objective and constraints\nSurvey the modules, keep AGENTS.md's rules.\n"
    "## Exact next action\nRead the next module.\n</summary>"
)
RULES = (
    "# Project rules\n\n"
    "- Rule 1: run `python check.py` before saying a change is done.\n"
    "- Rule 2: never edit files under vendor/.\n"
    "- Rule 3: answer in English, in short sentences.\n"
)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def folders(tmp_path: Path) -> tuple[Path, Path]:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    return workspace, home


def load(workspace: Path, home: Path, cwd: Path | None = None) -> Instructions:
    return load_instructions(workspace.resolve(), home.resolve(), cwd)


def texts(instructions: Instructions) -> dict[str, str]:
    return {f.shown: f.text for f in instructions.files}


def element(shown: str, text: str) -> str:
    """A file's element in the block, as the system prompt carries it."""
    return f'<instructions path="{shown}">\n{text}\n</instructions>'


def open_runtime(workspace: Path, home: Path, **kwargs: Any) -> Runtime:
    model = ModelConfig(model="m", base_url="http://127.0.0.1:9/v1", context_window=32_768)
    return Runtime(workspace, model, OpenAIProvider(model), home=home, **kwargs)


def system_text(body: dict[str, Any]) -> str:
    first = body["messages"][0]
    assert first["role"] == "system"
    return str(first["content"])


def is_fork(body: dict[str, Any]) -> bool:
    last = body["messages"][-1]
    return last["role"] == "user" and "TEXT ONLY" in str(last.get("content"))


def call(name: str, **args: Any) -> Reply:
    return Reply(tool_calls=[ToolCallSpec(name, json.dumps(args))])


# ---------------------------------------------------------------------------
# Discovery


def test_the_user_file_comes_first_then_the_root_then_each_folder_down_to_the_cwd(
    tmp_path: Path,
) -> None:
    workspace, home = folders(tmp_path)
    write(home / "AGENTS.md", "user")
    write(workspace / "AGENTS.md", "root agents")
    write(workspace / "CLAUDE.md", "root claude")
    write(workspace / "pkg" / "CLAUDE.md", "pkg")
    write(workspace / "pkg" / "sub" / "AGENTS.md", "sub")
    write(workspace / "other" / "AGENTS.md", "not on the way")
    cwd = workspace / "pkg" / "sub" / "deeper"
    cwd.mkdir()

    found = load(workspace, home, cwd)
    assert [f.shown for f in found.files] == [
        f"{home.resolve()}/AGENTS.md",
        "AGENTS.md",
        "CLAUDE.md",
        "pkg/CLAUDE.md",
        "pkg/sub/AGENTS.md",
    ]
    assert [f.text for f in found.files] == ["user", "root agents", "root claude", "pkg", "sub"]
    assert found.files[0].path == home.resolve() / "AGENTS.md"
    assert found.notices == ()
    # The block names each file, in that order, under one heading.
    block = found.block
    assert block.startswith("# Instructions\n")
    positions = [block.index(element(f.shown, f.text)) for f in found.files]
    assert positions == sorted(positions)

    # Without a working directory, or with one outside the workspace: the root only.
    assert [f.text for f in load(workspace, home).files] == ["user", "root agents", "root claude"]
    assert len(load(workspace, home, tmp_path).files) == 3


def test_the_user_file_is_named_from_the_users_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace, home = folders(tmp_path)
    write(home / "AGENTS.md", "user")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert [f.shown for f in load(workspace, home).files] == ["~/home/AGENTS.md"]


def test_both_names_are_read_agents_first_and_a_file_met_twice_once(tmp_path: Path) -> None:
    workspace, home = folders(tmp_path)
    write(workspace / "CLAUDE.md", "claude")
    write(workspace / "AGENTS.md", "agents")
    assert texts(load(workspace, home)) == {"AGENTS.md": "agents", "CLAUDE.md": "claude"}
    assert [f.shown for f in load(workspace, home).files] == ["AGENTS.md", "CLAUDE.md"]

    # The common set-up: CLAUDE.md a link to AGENTS.md, or a file that imports it.
    (workspace / "CLAUDE.md").unlink()
    (workspace / "CLAUDE.md").symlink_to("AGENTS.md")
    assert texts(load(workspace, home)) == {"AGENTS.md": "agents"}
    (workspace / "CLAUDE.md").unlink()
    write(workspace / "CLAUDE.md", "@AGENTS.md")
    found = load(workspace, home)
    assert texts(found) == {"AGENTS.md": "agents", "CLAUDE.md": "@AGENTS.md"}
    assert found.notices == ()


def test_no_files_leave_the_system_prompt_as_it_was(tmp_path: Path) -> None:
    workspace, home = folders(tmp_path)
    write(workspace / "AGENTS.md", "  \n\n")  # nothing in it: no element either
    found = load(workspace, home)
    assert found.files == () and found.block == ""
    prompt = "You are Cairn.\n"
    assert with_instructions(prompt, found) is prompt
    runtime = open_runtime(workspace, home)
    without = open_runtime(workspace, home, instructions=False)
    try:
        ours, theirs = runtime.new_session().fixed_context(), without.new_session().fixed_context()
        assert ours.fingerprint == theirs.fingerprint
    finally:
        runtime.close()
        without.close()


# ---------------------------------------------------------------------------
# @imports


def test_imports_are_relative_to_the_importing_file_and_nest(tmp_path: Path) -> None:
    workspace, home = folders(tmp_path)
    write(workspace / "AGENTS.md", "Style: @docs/style.md.\nTests: @./docs/tests.md")
    write(workspace / "docs" / "style.md", "four spaces\n(see @sub/naming.md)\n")
    write(workspace / "docs" / "sub" / "naming.md", "snake_case, as in @../../NAMES.md")
    write(workspace / "docs" / "tests.md", "pytest -q")
    write(workspace / "NAMES.md", "names list")
    found = load(workspace, home)
    assert found.notices == ()
    assert texts(found)["AGENTS.md"] == (
        "Style: four spaces\n(see snake_case, as in names list).\nTests: pytest -q"
    )


def test_imports_nest_only_to_the_depth_limit(tmp_path: Path) -> None:
    workspace, home = folders(tmp_path)
    write(workspace / "AGENTS.md", "level 0 @f1.md")
    for level in range(1, MAX_IMPORT_DEPTH + 2):
        write(workspace / f"f{level}.md", f"level {level} @f{level + 1}.md")
    found = load(workspace, home)
    text = texts(found)["AGENTS.md"]
    assert all(f"level {n}" in text for n in range(MAX_IMPORT_DEPTH + 1))
    assert f"level {MAX_IMPORT_DEPTH + 1}" not in text
    # The refused token stays as written.
    assert text.endswith(f"level {MAX_IMPORT_DEPTH} @f{MAX_IMPORT_DEPTH + 1}.md")
    assert found.notices == (
        f"instructions: f{MAX_IMPORT_DEPTH}.md line 1: @f{MAX_IMPORT_DEPTH + 1}.md not imported: "
        f"imports nest deeper than {MAX_IMPORT_DEPTH}",
    )


def test_an_import_cycle_is_refused(tmp_path: Path) -> None:
    workspace, home = folders(tmp_path)
    write(workspace / "AGENTS.md", "A then @b.md")
    write(workspace / "b.md", "B then @c.md")
    write(workspace / "c.md", "C then @b.md")
    found = load(workspace, home)
    assert texts(found)["AGENTS.md"] == "A then B then C then @b.md"
    assert found.notices == (
        "instructions: c.md line 1: @b.md not imported: it imports itself (an import cycle)",
    )


def test_imports_outside_the_workspace_are_refused(tmp_path: Path) -> None:
    workspace, home = folders(tmp_path)
    secret = write(tmp_path / "secret.md", "SECRET")
    write(workspace / "AGENTS.md", f"one @../secret.md\ntwo @{secret}\nthree @~/x.md")
    found = load(workspace, home)
    assert "SECRET" not in found.block
    assert texts(found)["AGENTS.md"] == f"one @../secret.md\ntwo @{secret}\nthree @~/x.md"
    assert [n.split(" not imported: ")[1] for n in found.notices] == [
        "it leads outside the workspace",
        "it is outside the workspace",
        "it is outside the workspace",
    ]
    # An absolute path inside the workspace is fine.
    write(workspace / "inside.md", "INSIDE")
    write(workspace / "AGENTS.md", f"@{workspace.resolve() / 'inside.md'}")
    assert texts(load(workspace, home))["AGENTS.md"] == "INSIDE"


def test_a_symlink_never_leads_an_instruction_file_or_an_import_outside(tmp_path: Path) -> None:
    workspace, home = folders(tmp_path)
    write(tmp_path / "outside" / "secret.md", "SECRET")
    (workspace / "link.md").symlink_to(tmp_path / "outside" / "secret.md")
    (workspace / "docs").symlink_to(tmp_path / "outside")
    (workspace / "CLAUDE.md").symlink_to(tmp_path / "outside" / "secret.md")
    write(workspace / "inner.md", "INNER")
    (workspace / "ok.md").symlink_to("inner.md")  # a link that stays inside is followed
    write(workspace / "AGENTS.md", "@link.md @docs/secret.md @ok.md")
    found = load(workspace, home)
    assert "SECRET" not in found.block
    assert texts(found) == {"AGENTS.md": "@link.md @docs/secret.md INNER"}
    assert len(found.notices) == 3
    assert all("leads outside the workspace" in n for n in found.notices)
    assert "CLAUDE.md not read" in found.notices[-1]
    assert "is a symbolic link to" in found.notices[0]


def test_the_user_files_imports_stay_in_the_cairn_folder(tmp_path: Path) -> None:
    workspace, home = folders(tmp_path)
    write(home / "AGENTS.md", "mine: @rules/me.md, not @../ws/AGENTS.md")
    write(home / "rules" / "me.md", "be brief")
    write(workspace / "AGENTS.md", "project")
    found = load(workspace, home)
    assert found.files[0].text == "mine: be brief, not @../ws/AGENTS.md"
    assert found.notices == (
        "instructions: "
        f"{home.resolve()}/AGENTS.md line 1: @../ws/AGENTS.md not imported: "
        "it leads outside the Cairn folder",
    )


def test_code_blocks_code_spans_addresses_and_mentions_are_not_imports(tmp_path: Path) -> None:
    workspace, home = folders(tmp_path)
    write(workspace / "x.md", "X")
    text = (
        "```\n@x.md in a fence\n```\n"
        "~~~~ text\n```\n@x.md in a tilde fence\n~~~~\n"
        "`@x.md` in a span, ``a `@x.md` b`` in a double one\n"
        "mail ops@x.md, ask @alice, or @x.md."
    )
    write(workspace / "AGENTS.md", text)
    found = load(workspace, home)
    assert found.notices == ()
    assert texts(found)["AGENTS.md"] == text.replace("or @x.md.", "or X.")


# ---------------------------------------------------------------------------
# The cap, bad input


def test_a_file_over_the_cap_is_cut_with_a_notice_in_the_block_and_one_event(
    tmp_path: Path,
) -> None:
    workspace, home = folders(tmp_path)
    line = "Always keep functions short and tested.\n"  # 40 characters
    write(workspace / "AGENTS.md", line * 1_500)  # 60,000 characters
    runtime = open_runtime(workspace, home)
    session = runtime.new_session()
    events: list[Event] = []
    session.events.on(events.append)
    try:
        asyncio.run(session.start())
        prompt = session.fixed_context().system[0].text
        session.fixed_context()  # unchanged: told once
    finally:
        runtime.close()
    cut = (
        f"{(line * 1_000)[:MAX_INSTRUCTION_CHARS]}\n"
        f"[cut at {MAX_INSTRUCTION_CHARS:,} characters: the rest of AGENTS.md is left out]"
    )
    assert element("AGENTS.md", cut) in prompt
    assert [e.text for e in events if isinstance(e, Notice)] == [
        "instructions: AGENTS.md is over 40,000 characters with its imports; cut at 40,000"
    ]


def test_imports_count_toward_the_cap_of_the_file_that_imports_them(tmp_path: Path) -> None:
    workspace, home = folders(tmp_path)
    write(workspace / "big.md", "b" * 30_000)
    write(workspace / "AGENTS.md", "@big.md\n@big2.md\n")
    write(workspace / "big2.md", "c" * 30_000)
    found = load(workspace, home)
    text = texts(found)["AGENTS.md"]
    assert text.startswith("b" * 30_000 + "\n" + "c" * 9_999)
    assert text.endswith("the rest of AGENTS.md is left out]")
    assert len(found.notices) == 1


def test_bad_files_are_one_line_each_and_the_session_goes_on(tmp_path: Path) -> None:
    workspace, home = folders(tmp_path)
    (home / "AGENTS.md").mkdir()  # a folder by that name
    (home / "CLAUDE.md").symlink_to("CLAUDE.md")  # a link to itself: unreadable
    (workspace / "AGENTS.md").write_bytes(b"caf\xe9 latin-1\n")
    os.mkfifo(workspace / "CLAUDE.md")  # must not hang the reading
    write(workspace / "pkg" / "AGENTS.md", "fine, and @bad.md")
    (workspace / "pkg" / "bad.md").write_bytes(b"\xff\xfe")
    runtime = open_runtime(workspace, home)
    session = runtime.new_session()
    events: list[Event] = []
    session.events.on(events.append)
    home_shown = f"{home.resolve()}/"
    try:
        asyncio.run(session.start())
        prompt = session.fixed_context().system[0].text
    finally:
        runtime.close()
    assert "# Instructions" not in prompt  # nothing usable at the root
    assert [e.text for e in events if isinstance(e, Notice)] == [
        f"instructions: {home_shown}AGENTS.md is a folder, not a file; skipped",
        f"instructions: {home_shown}CLAUDE.md cannot be read: Too many levels of symbolic links",
        "instructions: AGENTS.md is not UTF-8 text; skipped",
        "instructions: CLAUDE.md is not a regular file; skipped",
    ]
    found = load(workspace, home, workspace / "pkg")
    assert texts(found) == {"pkg/AGENTS.md": "fine, and @bad.md"}
    assert found.notices[-1] == (
        "instructions: pkg/AGENTS.md line 1: @bad.md is not UTF-8 text; skipped"
    )


# ---------------------------------------------------------------------------
# Re-reading on a change


def test_a_change_is_read_before_the_next_request_and_nothing_else_is(tmp_path: Path) -> None:
    workspace, home = folders(tmp_path)
    agents = write(workspace / "AGENTS.md", "first @docs/a.md @docs/later.md")
    write(workspace / "docs" / "a.md", "A")
    runtime = open_runtime(workspace, home)
    session = runtime.new_session()
    assert session.instructions is not None
    files = session.instructions
    try:
        first = session.fixed_context()
        loaded = files.load(session.state.cwd())
        # Unchanged: the same reading (only stat calls), the same fixed context.
        assert files.load(session.state.cwd()) is loaded
        assert session.fixed_context().fingerprint == first.fingerprint

        def changed(edit: Any) -> str:
            before = files.load(session.state.cwd())
            edit()
            assert files.changed()
            assert files.load(session.state.cwd()) is not before
            return session.fixed_context().system[0].text

        # An edit of another size.
        assert "\nsecond A\n" in changed(lambda: agents.write_text("second @docs/a.md"))
        # The same size, a later time: a save within one clock tick shows by its time.
        stat = agents.stat()

        def same_size() -> None:
            agents.write_text("SECOND @docs/a.md")
            os.utime(agents, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))

        assert "SECOND A" in changed(same_size)
        # An imported file changes; a missing import appears; a file appears; one goes.
        assert "SECOND AAA" in changed(lambda: write(workspace / "docs" / "a.md", "AAA"))
        agents.write_text("third @docs/later.md")
        session.fixed_context()
        assert "third LATER" in changed(lambda: write(workspace / "docs" / "later.md", "LATER"))
        assert element("CLAUDE.md", "claude") in changed(
            lambda: write(workspace / "CLAUDE.md", "claude")
        )
        assert "third" not in changed(agents.unlink)
        last = session.fixed_context()
        assert session.fixed_context().fingerprint == last.fingerprint != first.fingerprint
    finally:
        runtime.close()


def test_a_changed_fixed_context_is_measured_again_by_its_fingerprint(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """A new fingerprint drops the old measurement; its discount holds until it is re-measured.

    ``calibrated_tokens`` already behaves so: a different fingerprint counts
    the change at the estimate, keeping the discount the provider showed on
    the old one; the next fully estimated request (after a compaction)
    measures the new fixed context and replaces the old calibration.
    """
    workspace, home = folders(tmp_path)
    agents = write(workspace / "AGENTS.md", RULES)
    answer = "The survey found nothing to change in the modules. " * 60  # worth compacting
    openai_server.respond_with(
        lambda body: Reply(text=SUMMARY) if is_fork(body) else Reply(text=answer)
    )
    config = ModelConfig(model="m", base_url=openai_server.base_url, context_window=32_768)
    runtime = Runtime(
        workspace, config, OpenAIProvider(config), home=home, permission_mode="bypass"
    )
    session = runtime.new_session()
    try:
        asyncio.run(run_turn(session, "hello"))
        old = session.fixed_context()
        measured = session.pipeline.calibration
        assert measured is not None and measured.fingerprint == old.fingerprint
        assert session.pipeline.fixed_tokens(old) == measured.tokens

        agents.write_text(RULES + "- Rule 4: " + "keep the changelog current. " * 40 + "\n")
        new = session.fixed_context()
        assert new.fingerprint != old.fingerprint and new.tokens > old.tokens
        discount = measured.estimate - measured.tokens
        assert session.pipeline.fixed_tokens(new) == new.tokens - discount
        assert session.pipeline.fixed_tokens(new) == calibrated_tokens(
            new.fingerprint, new.tokens, measured
        )

        asyncio.run(run_turn(session, "again"))  # anchored: the growth is counted, not measured
        assert session.pipeline.calibration == measured
        asyncio.run(session.pipeline.compact(new))
        asyncio.run(run_turn(session, "after the compaction"))
        again = session.pipeline.calibration
        assert again is not None and again.fingerprint == new.fingerprint
        assert session.pipeline.fixed_tokens(new) == again.tokens
    finally:
        runtime.close()


# ---------------------------------------------------------------------------
# The acceptance test: through compactions, and an edit mid-turn


def test_agents_md_survives_three_compactions_byte_for_byte_and_an_edit_reaches_the_next_request(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """The issue's acceptance test: a long survey on a small window, an edit of AGENTS.md mid-turn.

    The model reads modules until several compactions have happened, edits
    AGENTS.md with ``edit_file``, and reads on through more compactions.
    """
    workspace, home = folders(tmp_path)
    write(workspace / "AGENTS.md", RULES)
    for n in range(6):
        lines = "".join(f"module {n} line {i}: value = compute({i})\n" for i in range(45))
        write(workspace / f"m{n}.py", lines)
    edited = RULES.replace("short sentences", "short sentences, and cite the file")
    plan = [
        *(call("read_file", path=f"m{n % 6}.py") for n in range(28)),
        call(
            "edit_file",
            path="AGENTS.md",
            old_string="in short sentences.",
            new_string="in short sentences, and cite the file.",
        ),
        *(call("read_file", path=f"m{n % 6}.py") for n in range(8)),
        Reply(text="Surveyed."),
    ]
    edit_at: list[int] = []

    def model(body: dict[str, Any]) -> Reply:
        if is_fork(body):
            return Reply(text=SUMMARY)
        reply = plan.pop(0) if plan else Reply(text="ok")
        if reply.tool_calls and reply.tool_calls[0].name == "edit_file":
            edit_at.append(len(openai_server.requests))
        return reply

    openai_server.respond_with(model)
    config = ModelConfig(model="m", base_url=openai_server.base_url, context_window=14_336)
    runtime = Runtime(
        workspace,
        config,
        OpenAIProvider(config),
        # Blocking compactions: one fork per compaction (a summary prepared in the
        # background may be dropped, which would leave a fork without its record).
        settings=Settings(compaction=CompactionConfig(precompute=False)),
        home=home,
        permission_mode="bypass",
    )
    session = runtime.new_session()
    try:
        result = asyncio.run(run_turn(session, "survey the modules", max_turns=100))
        final = session.fixed_context()
    finally:
        runtime.close()
    assert result.text == "Surveyed."
    assert (workspace / "AGENTS.md").read_text() == edited

    bodies = openai_server.bodies
    forks = [i for i, body in enumerate(bodies) if is_fork(body)]
    compactions = [
        r for r in read_transcript(session.path).records if isinstance(r, CompactionRecord)
    ]
    assert len(compactions) == len(forks)
    (edit,) = edit_at  # the request after the edit_file call is bodies[edit]
    before_edit = [i for i in forks if i < edit]
    assert len(before_edit) >= 3 and any(i > edit for i in forks)

    first = system_text(bodies[0])
    assert element("AGENTS.md", RULES.rstrip()) in first
    # The edit reaches the very next request.
    now = system_text(bodies[edit])
    assert element("AGENTS.md", edited.rstrip()) in now
    assert RULES.rstrip() not in now
    # The first request after each compaction carries the very same system prompt as
    # the first request (after the edit: as the first one after the edit), and so
    # does every request in between: forks included.
    after = [next(j for j in range(i + 1, len(bodies)) if not is_fork(bodies[j])) for i in forks]
    for i in after:
        assert system_text(bodies[i]) == (first if i < edit else now)
    assert all(system_text(b) == first for b in bodies[:edit])
    assert all(system_text(b) == now for b in bodies[edit:])
    assert final.system[0].text == now
    # Fixed context, never history: until the edit_file result showed the file, no
    # summary or other message carried them.
    assert not any("vendor/" in str(m) for b in bodies[:edit] for m in b["messages"][1:])
    # Compacted after the edit, the new fixed context was measured anew.
    calibration = session.pipeline.calibration
    assert calibration is not None and calibration.fingerprint == final.fingerprint


# ---------------------------------------------------------------------------
# --no-instructions


@pytest.mark.parametrize(
    "argv",
    [
        ["--no-instructions"],
        ["-p", "hi", "--no-instructions"],
        ["acp", "--no-instructions"],
        ["--no-instructions", "acp"],
        ["web", "--no-instructions"],
    ],
)
def test_no_instructions_is_a_flag_of_every_surface(argv: list[str]) -> None:
    parser = build_parser()
    assert parser.parse_args(argv).instructions is False
    without = [a for a in argv if a != "--no-instructions"]
    assert parser.parse_args(without).instructions is True


def test_cairn_p_reads_them_and_no_instructions_turns_them_off(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    workspace, home = folders(tmp_path)
    write(workspace / "AGENTS.md", RULES)
    env = {
        "CAIRN_MODEL": "test-model",
        "OPENAI_BASE_URL": openai_server.base_url,
        "CAIRN_HOME": str(home),
    }
    done = cairn_p("-p", "hi", cwd=workspace, env=env)
    assert done.returncode == 0, done.stderr
    off = cairn_p("-p", "hi", "--no-instructions", cwd=workspace, env=env)
    assert off.returncode == 0, off.stderr
    with_them, without = (system_text(b) for b in openai_server.bodies)
    assert element("AGENTS.md", RULES.rstrip()) in with_them
    assert "# Instructions" not in without and "Rule 1" not in without


def test_acp_and_web_sessions_follow_the_setting(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    workspace, home = folders(tmp_path)
    write(workspace / "AGENTS.md", RULES)
    openai_server.respond_with(lambda body: Reply(text="ok"))

    async def scenario(instructions: bool) -> None:
        setup = dataclasses.replace(make_setup(tmp_path, openai_server), instructions=instructions)
        async with connected(setup, workspace) as editor:
            await editor.ask(await editor.new(), "hi")

    asyncio.run(scenario(True))
    asyncio.run(scenario(False))
    with_them, without = (system_text(b) for b in openai_server.bodies)
    assert element("AGENTS.md", RULES.rstrip()) in with_them
    assert "Rule 1" not in without

    model = ModelConfig(model="m", base_url=openai_server.base_url, context_window=32_768)
    for instructions in (True, False):
        setup = WebSetup(
            model, OpenAIProvider(model), workspace, home=home, instructions=instructions
        )
        runtime = setup.runtime()
        try:
            session: Session = runtime.new_session()
            assert ("Rule 1" in session.fixed_context().system[0].text) is instructions
        finally:
            runtime.close()
