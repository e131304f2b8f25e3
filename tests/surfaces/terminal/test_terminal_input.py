"""The terminal app's input box, driven through Textual's pilot against the local OpenAI
server: multi-line prompts (Enter, Ctrl+J, backslash + Enter, a paste), the box's
growth, history on up / down at its edges, and slash-command completion on Tab."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual import events
from textual.widgets import Static

from cairn import AgentSession
from cairn.agent.commands import COMMANDS
from cairn.surfaces.terminal import CairnApp
from cairn.surfaces.terminal.view import USAGES
from cairn.surfaces.terminal.widgets import PROMPT_LINES, PromptInput
from support.openai_server import (
    OpenAIServer,
    Reply,
)
from surfaces.terminal.test_terminal_app import kinds, make_runtime, notices, until


def user_prompts(server: OpenAIServer) -> list[Any]:
    """The user messages of the last request the model received, as sent."""
    return [m["content"] for m in server.bodies[-1]["messages"] if m["role"] == "user"]


async def test_ctrl_j_and_backslash_enter_insert_newlines_and_enter_submits(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(lambda body: Reply(text="Got three lines."))
    rt = make_runtime(tmp_path, openai_server)
    app = CairnApp(rt, AgentSession.new(rt))

    async with app.run_test() as pilot:
        prompt = app.query_one(PromptInput)
        await pilot.press(*"one", "ctrl+j", *"two \\", "enter", *"three")
        assert prompt.value == "one\ntwo \nthree"  # the backslash went, the space stayed
        assert prompt.cursor_location == (2, 5)
        assert openai_server.requests == [] and kinds(app) == []  # nothing sent yet
        await pilot.press("ctrl+c")  # a non-empty prompt, even of several lines, clears
        assert prompt.value == "" and app.is_running and app.hint == ""
        await pilot.press(*"one", "ctrl+j", *"two\\", "enter", *"three", "enter")
        await until(pilot, lambda: "assistant" in kinds(app) and not app.busy, "the answer")
        assert prompt.value == ""
        assert user_prompts(openai_server) == ["one\ntwo\nthree"]
        assert app.transcript.entries[0].text == "one\ntwo\nthree"
        assert len(openai_server.requests) == 1

    rt.close()


#: Blank lines, indentation, tabs, trailing spaces, a line ending in a backslash, Unicode.
PASTED = (
    "Fix the parser:\n\n    def parse(s):\t# here\n        return s  \n"
    "a line that ends in a backslash \\\n\n– naïve café ✓\n"
)


async def test_a_multi_line_prompt_reaches_the_model_whole(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(lambda body: Reply(text="Pasted."))
    rt = make_runtime(tmp_path, openai_server)
    app = CairnApp(rt, AgentSession.new(rt))

    async with app.run_test() as pilot:
        prompt = app.query_one(PromptInput)
        await pilot.press(*"Look:", "ctrl+j")
        app.post_message(events.Paste(PASTED))  # as the driver posts a bracketed paste
        await until(pilot, lambda: prompt.value == "Look:\n" + PASTED, "the paste")
        assert openai_server.requests == []  # the paste's newlines did not submit it
        await pilot.press(*"Thanks.", "enter")
        await until(pilot, lambda: "assistant" in kinds(app) and not app.busy, "the answer")
        assert user_prompts(openai_server) == ["Look:\n" + PASTED + "Thanks."]
        assert app.agent.ui_messages()[0].text == "Look:\n" + PASTED + "Thanks."

    rt.close()


async def test_the_prompt_box_grows_with_its_lines_then_scrolls(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    rt = make_runtime(tmp_path, openai_server)
    app = CairnApp(rt, AgentSession.new(rt))

    async with app.run_test(size=(80, 40)) as pilot:
        prompt = app.query_one(PromptInput)
        await until(pilot, lambda: prompt.size.height == 1, "one line when empty")
        assert prompt.max_scroll_y == 0
        await pilot.press(*"a", "ctrl+j", *"b", "ctrl+j", *"c")
        await until(pilot, lambda: prompt.size.height == 3, "three lines")
        assert prompt.max_scroll_y == 0
        prompt.value = "\n".join(f"line {n}" for n in range(PROMPT_LINES + 4))
        await until(pilot, lambda: prompt.size.height == PROMPT_LINES, "the cap")
        await until(pilot, lambda: prompt.max_scroll_y == 4, "scrolls beyond it")
        assert prompt.scroll_y == 4  # the cursor, at the end, is in view
        await pilot.press("ctrl+c")
        await until(pilot, lambda: prompt.size.height == 1, "back to one line")

    rt.close()


async def test_history_arrows_only_leave_the_prompt_at_its_edges(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(lambda body: Reply(text="ok"))
    rt = make_runtime(tmp_path, openai_server)
    app = CairnApp(rt, AgentSession.new(rt))
    older = "first line\nsecond line"

    async with app.run_test() as pilot:
        prompt = app.query_one(PromptInput)
        for text in (older, "single"):
            answers = kinds(app).count("assistant") + 1

            def answered(wanted: int = answers) -> bool:
                return kinds(app).count("assistant") == wanted and not app.busy

            prompt.value = text
            await pilot.press("enter")
            await until(pilot, answered, "the answer")
        await pilot.press(*"draft", "ctrl+j", *"more")
        assert (prompt.value, prompt.cursor_location) == ("draft\nmore", (1, 4))
        await pilot.press("up")  # on the last line: the cursor moves, the text stays
        assert (prompt.value, prompt.cursor_location) == ("draft\nmore", (0, 4))
        await pilot.press("up")  # on the first line: back through the history
        assert (prompt.value, prompt.cursor_location) == ("single", (0, 6))
        await pilot.press("up")
        assert (prompt.value, prompt.cursor_location) == (older, (0, 10))  # first line
        await pilot.press("up")  # the oldest: it stays
        assert prompt.value == older
        await pilot.press("down")  # within the recalled prompt first
        assert (prompt.value, prompt.cursor_location) == (older, (1, 10))
        await pilot.press("down")
        assert (prompt.value, prompt.cursor_location) == ("single", (0, 6))
        await pilot.press("down")  # back to the draft, the cursor at its end
        assert (prompt.value, prompt.cursor_location) == ("draft\nmore", (1, 4))
        await pilot.press("down")
        assert prompt.value == "draft\nmore"
        await pilot.press("up", "left", "up")  # left of a first line: still history
        assert prompt.value == "single"
        wrapped = "word " * 40  # one line, wrapped over rows of the box: rows count
        prompt.value = wrapped
        await until(pilot, lambda: prompt.wrapped_document.height > 1, "the wrap")
        await pilot.press("up")
        assert prompt.value == wrapped and prompt.cursor_location[1] < len(wrapped)

    rt.close()


async def test_tab_completes_a_slash_command(tmp_path: Path, openai_server: OpenAIServer) -> None:
    rt = make_runtime(tmp_path, openai_server)
    app = CairnApp(rt, AgentSession.new(rt))

    async with app.run_test() as pilot:
        prompt = app.query_one(PromptInput)
        line = app.query_one("#completions", Static)
        assert app.completions == "" and not line.display
        await pilot.press("/")
        await until(pilot, lambda: app.completions != "", "the candidates")
        assert line.display
        assert app.completions.split("   ") == [USAGES[name][0] for name in COMMANDS]
        assert "/compact [instructions]" in app.completions
        await pilot.press("c")
        await until(pilot, lambda: app.completions.count("/") == 4, "four candidates")
        assert app.completions == "/compact [instructions]   /clear   /context   /cost"
        await pilot.press("l")
        await until(pilot, lambda: app.completions.count("/") == 1, "one candidate")
        assert app.completions == "/clear  start a new session (the old one stays on disk)"
        await pilot.press("backspace", "tab")  # "/c": the first match
        assert prompt.value == "/compact "  # it takes an argument: a space follows
        await until(pilot, lambda: app.completions == "", "the line goes")
        assert not line.display and app.focused is prompt
        await pilot.press("ctrl+c", *"/st", "tab")
        assert prompt.value == "/status" and prompt.cursor_location == (0, 7)
        await pilot.press("enter")
        await until(pilot, lambda: bool(notices(app)), "the status")
        assert notices(app)[-1].startswith("session")
        await pilot.press(*"/zz")
        await pilot.pause()
        assert app.completions == ""
        await pilot.press("tab")  # nothing to complete: Tab moves the focus as before
        assert prompt.value == "/zz" and app.focused is not prompt
        assert openai_server.requests == []  # no command reached the model

    rt.close()
