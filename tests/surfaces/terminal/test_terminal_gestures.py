"""Issue 29's everyday gestures in the terminal app, through Textual's pilot against the
local OpenAI server: ``@path`` completion (Tab) and attachment, a ``!command`` shown as
its block (live and on resume), Shift+Tab cycling the mode in the footer, Esc Esc
rewinding to an earlier prompt (with or without its files), ``/fork`` and ``/rewind N``.
The queue (a line sent while the agent works) is in ``test_terminal_app.py``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from textual.widgets import OptionList

from cairn import AgentSession
from cairn.surfaces.terminal import CairnApp
from cairn.surfaces.terminal.app import REWIND_ARMED
from cairn.surfaces.terminal.picker import RestoreChoice, RewindPicker
from cairn.surfaces.terminal.widgets import MessageList, PromptInput, ToolView
from support.openai_server import (
    OpenAIServer,
    Reply,
    ToolCallSpec,
)
from surfaces.terminal.test_terminal_app import kinds, make_runtime, notices, submit, texts, until


async def test_an_at_path_completes_on_tab_and_the_sent_prompt_attaches_the_file(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(lambda body: Reply(text="Read it."))
    rt = make_runtime(tmp_path, openai_server)
    cairn = rt.workspace / "src" / "cairn"
    cairn.mkdir(parents=True)
    (cairn / "app.py").write_text("MARKER-APP = 1\n", encoding="utf-8")
    (cairn / "view.py").write_text("VIEW = 2\n", encoding="utf-8")
    (rt.workspace / "setup.py").write_text("", encoding="utf-8")
    app = CairnApp(rt, AgentSession.new(rt))

    async with app.run_test() as pilot:
        prompt = app.query_one(PromptInput)
        await pilot.press(*"look at @s")
        await until(pilot, lambda: app.completions == "@src/   @setup.py", "two paths")
        await pilot.press("r", "tab")  # one folder: completed, and completing goes on
        assert prompt.value == "look at @src/"
        await until(pilot, lambda: app.completions == "@src/cairn/", "the folder's")
        await pilot.press("tab")
        await until(
            pilot,
            lambda: app.completions == "@src/cairn/app.py   @src/cairn/view.py",
            "the files",
        )
        await pilot.press("tab")  # no common start to add: the first
        assert prompt.value == "look at @src/cairn/app.py"
        await until(pilot, lambda: app.completions == "@src/cairn/app.py", "the one")
        await pilot.press("space")
        await until(pilot, lambda: app.completions == "", "done: the line goes")
        await pilot.press(*"please", "enter")
        await until(pilot, lambda: "Read it." in texts(app) and not app.busy, "answered")
        assert texts(app)[0] == "look at @src/cairn/app.py please"
        # The core attached the file: the model read it as a tool result.
        sent = openai_server.bodies[0]["messages"]
        assert any(m["role"] == "tool" and "MARKER-APP" in str(m["content"]) for m in sent)

    rt.close()


def test_a_bang_command_is_a_block_live_and_after_a_resume_not_a_prompt(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(lambda body: Reply(text="Seen."))
    rt = make_runtime(tmp_path, openai_server)
    (rt.workspace / "ledger.txt").write_text("balanced\n", encoding="utf-8")
    agent = AgentSession.new(rt)
    app = CairnApp(rt, agent)
    seen: dict[str, str] = {}

    async def scenario() -> None:
        async with app.run_test() as pilot:
            await submit(pilot, "!cat ledger.txt && echo second-line")
            await until(pilot, lambda: "shell" in kinds(app) and not app.busy, "the block")
            block = app.transcript.entries[-1]
            assert (block.kind, block.text) == ("shell", "cat ledger.txt && echo second-line")
            seen["detail"] = block.detail
            assert block.detail.startswith("balanced ⏎ second-line") and not block.failed
            assert "user" not in kinds(app) and openai_server.requests == []  # no turn
            widget = app.query_one(MessageList).mounted()[-1]
            assert isinstance(widget, ToolView) and widget.has_class("shell")
            await submit(pilot, "!false")
            await until(pilot, lambda: kinds(app).count("shell") == 2, "the failed one")
            assert app.transcript.entries[-1].failed
            await submit(pilot, "!")
            await until(pilot, lambda: bool(notices(app)), "the usage")
            assert notices(app)[-1].startswith("usage: !command")
            await submit(pilot, "what did it say?")
            await until(pilot, lambda: "Seen." in texts(app) and not app.busy, "answered")
            # The model reads the command and its output, for its next turn.
            assert "second-line" in json.dumps(openai_server.bodies[0]["messages"])

    asyncio.run(scenario())
    rt.close()
    rt = make_runtime(tmp_path, openai_server)  # as `cairn --resume <id>` opens it
    resumed = CairnApp(rt, AgentSession.resume(rt, agent.id))

    async def reopened() -> None:
        async with resumed.run_test() as pilot:
            await pilot.pause()
            assert kinds(resumed) == ["shell", "shell", "user", "assistant"]
            assert resumed.transcript.entries[0].text == "cat ledger.txt && echo second-line"
            assert resumed.transcript.entries[0].detail == seen["detail"]

    asyncio.run(reopened())
    rt.close()


async def test_shift_tab_cycles_the_mode_and_the_footer_shows_it(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    rt = make_runtime(tmp_path, openai_server, mode="ask")
    app = CairnApp(rt, AgentSession.new(rt))

    async with app.run_test() as pilot:
        assert app.mode == "mode ask · Shift+Tab"
        prompt = app.query_one(PromptInput)
        for mode in ("accept-edits", "bypass", "plan", "ask"):
            await pilot.press("shift+tab")
            shown = f"mode {mode} · Shift+Tab"
            await until(pilot, lambda: app.mode == shown, mode)  # noqa: B023 (awaited here)
            assert app.agent.mode == mode
            assert app.focused is prompt  # the key is the mode's, not the focus's
        # A mode set from elsewhere reaches the footer through its event.
        app.agent.set_mode("bypass")
        await until(pilot, lambda: app.mode == "mode bypass · Shift+Tab", "the event")

    rt.close()


def write_then_change(server: OpenAIServer) -> None:
    """Prompt 1 writes a.txt (``one``), prompt 2 changes it (``two``)."""
    plan = [
        Reply(
            tool_calls=[ToolCallSpec("write_file", json.dumps({"path": "a.txt", "content": "one"}))]
        ),
        Reply(text="Wrote one."),
        Reply(
            tool_calls=[ToolCallSpec("write_file", json.dumps({"path": "a.txt", "content": "two"}))]
        ),
        Reply(text="Wrote two."),
    ]
    server.respond_with(lambda body: plan.pop(0) if plan else Reply(text="ok"))


async def test_escape_twice_on_an_empty_idle_prompt_rewinds_and_can_restore_the_files(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    write_then_change(openai_server)
    rt = make_runtime(tmp_path, openai_server)
    agent = AgentSession.new(rt)
    app = CairnApp(rt, agent)
    a_txt = rt.workspace / "a.txt"

    async with app.run_test() as pilot:
        prompt = app.query_one(PromptInput)
        await submit(pilot, "write a.txt")
        await until(pilot, lambda: "Wrote one." in texts(app) and not app.busy, "one")
        await submit(pilot, "now make it two")
        await until(pilot, lambda: "Wrote two." in texts(app) and not app.busy, "two")
        assert a_txt.read_text(encoding="utf-8") == "two"
        # One Esc says what a second does; another key in between breaks the pair.
        await pilot.press("escape")
        assert app.hint == REWIND_ARMED
        await pilot.press("x", "backspace", "escape")
        assert not isinstance(app.screen, RewindPicker) and app.hint == REWIND_ARMED
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, RewindPicker), "the picker")
        options = app.screen.query_one(OptionList)
        first = str(options.get_option_at_index(0).prompt)
        assert first.startswith("2. now make it two · ") and "files changed" in first
        await pilot.press("enter")  # the latest prompt
        await until(pilot, lambda: isinstance(app.screen, RestoreChoice), "the question")
        await pilot.press("down", "enter")  # conversation and files
        await until(pilot, lambda: app.agent.id != agent.id, "the branch")
        assert a_txt.read_text(encoding="utf-8") == "one"  # as before prompt 2
        assert prompt.value == "now make it two"  # back in the box, to edit
        assert kinds(app)[:3] == ["user", "tool", "assistant"]
        assert texts(app)[0] == "write a.txt" and texts(app)[2] == "Wrote one."
        assert "now make it two" not in texts(app)
        assert "restored" in notices(app)[-1] and "a.txt" in notices(app)[-1]
        assert f"/resume {agent.id}" in notices(app)[-1]  # the original stays
        # The conversation only: the files stay as they are.
        branch = app.agent.id
        prompt.value = ""
        await pilot.press("escape", "escape")
        await until(pilot, lambda: isinstance(app.screen, RewindPicker), "the picker")
        await pilot.press("enter")  # the only prompt left: "write a.txt"
        await until(pilot, lambda: isinstance(app.screen, RestoreChoice), "the question")
        await pilot.press("enter")  # conversation only
        await until(pilot, lambda: app.agent.id not in (agent.id, branch), "a new branch")
        assert a_txt.read_text(encoding="utf-8") == "one" and prompt.value == "write a.txt"
        assert kinds(app) == ["notice"]

    rt.close()


async def test_fork_and_rewind_n_switch_the_app_to_the_new_session(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(lambda body: Reply(text="noted"))
    rt = make_runtime(tmp_path, openai_server)
    agent = AgentSession.new(rt)
    app = CairnApp(rt, agent)

    async with app.run_test() as pilot:
        prompt = app.query_one(PromptInput)
        for n in range(2):
            await submit(pilot, f"remember {n}")
            await until(pilot, lambda: texts(app).count("noted") == n + 1, "noted")  # noqa: B023
            await until(pilot, lambda: not app.busy, "idle")
        await submit(pilot, "/fork")
        await until(pilot, lambda: app.agent.id != agent.id, "the copy")
        fork = app.agent.id
        assert notices(app)[-1].startswith(f"forked {agent.id} into {fork}")
        assert texts(app)[:4] == ["remember 0", "noted", "remember 1", "noted"]
        assert [s.id for s in AgentSession.sessions(rt)].count(agent.id) == 1  # still there
        await submit(pilot, "/rewind 2")
        await until(pilot, lambda: app.agent.id not in (agent.id, fork), "the branch")
        assert prompt.value == "remember 1"
        assert texts(app)[:2] == ["remember 0", "noted"] and "remember 1" not in texts(app)
        assert notices(app)[-1].startswith("rewound to before prompt 2")
        # /rewind alone opens the picker over the branch's prompts.
        prompt.value = ""
        await submit(pilot, "/rewind")
        await until(pilot, lambda: isinstance(app.screen, RewindPicker), "the picker")
        picker = app.screen
        assert isinstance(picker, RewindPicker)
        assert [p.text for p in picker.points] == ["remember 0"]
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, RewindPicker), "closed")

    rt.close()
