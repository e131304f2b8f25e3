"""Pasted blocks in the terminal app (issue 29), driven through Textual's pilot against
the local OpenAI server: a large paste shows as its label in the prompt box and is
sent whole, several are numbered, deleting a label deletes its paste, a long user
message is folded in the list (and expands), and after a long prompt is sent the
list follows the end, where Ctrl+End also goes. The threshold and the label are
``cairn.agent.paste``'s, the one rule every surface folds by."""

from __future__ import annotations

import asyncio
from pathlib import Path

from textual import events
from textual.pilot import Pilot
from textual.widgets import Collapsible

from cairn import AgentSession
from cairn.agent.paste import FOLDED_HEAD_LINES, PASTE_CHARS, PASTE_LINES, paste_label
from cairn.surfaces.terminal import CairnApp
from cairn.surfaces.terminal.widgets import EntryView, MessageList, PastedView, PromptInput
from support.openai_server import (
    OpenAIServer,
    Reply,
)
from surfaces.terminal.test_terminal_app import kinds, make_runtime, rendered, until

#: A common terminal.
SIZE = (100, 40)


def log(lines: int, tag: str = "log") -> str:
    return "\n".join(f"{tag} line {n}: the ledger balances" for n in range(1, lines + 1))


def user_prompts(server: OpenAIServer) -> list[str]:
    """The user messages of the last request the model received, as sent."""
    return [m["content"] for m in server.bodies[-1]["messages"] if m["role"] == "user"]


async def paste(pilot: Pilot[None], text: str) -> None:
    """A bracketed paste, posted as the driver posts one."""
    pilot.app.post_message(events.Paste(text))
    await pilot.pause()


def answered(app: CairnApp, count: int) -> bool:
    return kinds(app).count("assistant") == count and not app.busy


async def test_a_large_paste_is_a_label_in_the_box_and_is_sent_whole(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(lambda body: Reply(text="Read them both."))
    rt = make_runtime(tmp_path, openai_server)
    app = CairnApp(rt, AgentSession.new(rt))
    # Long enough to fold, short enough for the test model's window (no compaction).
    first, second = log(300), log(PASTE_LINES + 1, "trace")

    async with app.run_test(size=SIZE) as pilot:
        prompt = app.query_one(PromptInput)
        await pilot.press(*"Look at this: ")
        await paste(pilot, first)
        await pilot.press(*" and ")
        await paste(pilot, second)
        await pilot.press(*" thanks")
        one, two = "[Pasted text #1 · 300 lines]", "[Pasted text #2 · 21 lines]"
        assert (one, two) == (paste_label(1, first), paste_label(2, second))
        assert prompt.value == f"Look at this: {one} and {two} thanks"
        assert prompt.document.line_count == 1  # the box stays one line
        assert openai_server.requests == []  # a paste never sends
        await pilot.press("enter")
        await until(pilot, lambda: answered(app, 1), "the answer")
        whole = f"Look at this: {first} and {second} thanks"
        assert user_prompts(openai_server) == [whole]  # the labels went out as the pastes
        assert app.agent.ui_messages()[0].text == whole
        assert prompt.value == "" and prompt.pastes == {}
        # The history brings the prompt back as typed, and it still sends the pastes.
        await pilot.press("up")
        assert prompt.value == f"Look at this: {one} and {two} thanks"
        await pilot.press("enter")
        await until(pilot, lambda: answered(app, 2), "the second answer")
        assert user_prompts(openai_server) == [whole, whole]

    rt.close()


async def test_deleting_a_label_deletes_its_paste_and_a_small_paste_stays_as_it_is(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(lambda body: Reply(text="ok"))
    rt = make_runtime(tmp_path, openai_server)
    app = CairnApp(rt, AgentSession.new(rt))
    big, small, wide = log(500), log(PASTE_LINES), "x" * (PASTE_CHARS + 1)

    async with app.run_test(size=SIZE) as pilot:
        prompt = app.query_one(PromptInput)
        await pilot.press(*"a ")
        await paste(pilot, big)
        assert prompt.value == "a [Pasted text #1 · 500 lines]"
        await pilot.press("backspace")  # right after the label: all of it goes
        assert prompt.value == "a " and prompt.pastes == {}
        await paste(pilot, big)
        await pilot.press("home", "right", "right", "delete")  # right before it: likewise
        assert prompt.value == "a " and prompt.pastes == {}
        await paste(pilot, wide)  # one long line counts by its characters
        assert prompt.value == f"a [Pasted text #1 · {PASTE_CHARS + 1:,} characters]"
        await pilot.press("left", "backspace")  # a broken label is a label no more
        assert prompt.pastes == {}
        await pilot.press("ctrl+c")  # clears the box
        await paste(pilot, small)  # at the threshold: pasted as it is
        assert prompt.value == small and prompt.pastes == {}
        await pilot.press("ctrl+c")
        await paste(pilot, big)
        await pilot.press("ctrl+c")  # clearing the box drops its pastes too
        assert prompt.value == "" and prompt.pastes == {}
        await pilot.press(*"just this", "enter")
        await until(pilot, lambda: answered(app, 1), "the answer")
        assert user_prompts(openai_server) == ["just this"]

    rt.close()


def test_a_long_user_message_is_folded_in_the_list_and_expands(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(lambda body: Reply(text="Folded."))
    rt = make_runtime(tmp_path, openai_server)
    app = CairnApp(rt, AgentSession.new(rt))
    pasted = log(1_200)
    message = f"Look:\n{pasted}"

    def folded() -> PastedView:
        (view,) = [w for w in rendered(app) if isinstance(w, PastedView)]
        return view

    async def scenario() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press(*"Look:", "ctrl+j")
            await paste(pilot, pasted)
            await pilot.press("enter")
            await until(pilot, lambda: answered(app, 1), "the answer")
            view = folded()
            assert view.more.collapsed and view.more.title == paste_label(1, message)
            head = str(view.head.content)
            assert head.splitlines() == [
                "› Look:",
                *(f"  log line {n}: the ledger balances" for n in range(1, FOLDED_HEAD_LINES)),
            ]
            await until(pilot, lambda: view.head.region.height == FOLDED_HEAD_LINES, "3 rows")
            assert view.full.region.height == 0  # the 1,200 lines are not laid out
            # The short message of the next turn is not folded.
            await pilot.press(*"and now?", "enter")
            await until(pilot, lambda: answered(app, 2), "the second answer")
            user_views = [w for w in rendered(app) if "user" in w.classes]
            assert [type(w) for w in user_views] == [PastedView, EntryView]
            # The list's own expand gesture, as for a tool's result: click the label.
            app.query_one(MessageList).scroll_home(animate=False, immediate=True)
            await pilot.pause()
            await pilot.click(view.more.query_one("CollapsibleTitle"))
            await until(pilot, lambda: view.full.region.height > 0, "the whole message")
            assert view.full.size.height == 1_201 and not view.head.display
            assert str(view.full.content).endswith("log line 1200: the ledger balances")
            title = view.more.query_one("CollapsibleTitle")
            title.focus()
            await pilot.press("enter")
            await until(pilot, lambda: view.more.collapsed and view.head.display, "folded again")

    asyncio.run(scenario())
    # A resumed session folds it the same way: the rule reads only the message.
    session_id = app.agent.id
    app.agent.clear()  # the transcript has one writer: leave it before resuming it
    agent = AgentSession.resume(rt, session_id)
    resumed = CairnApp(rt, agent)

    async def resume() -> None:
        async with resumed.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: len(rendered(resumed)) == 4, "the history")
            view = rendered(resumed)[0]
            assert isinstance(view, PastedView)
            assert view.more.title == paste_label(1, message)
            assert view.more.query_one(Collapsible.Contents).region.height == 0

    asyncio.run(resume())
    rt.close()


async def test_after_a_long_prompt_the_list_follows_the_end_and_ctrl_end_goes_there(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """Issue 29 (a): after a 2,000-line paste was sent the view stayed on its first
    lines, the answer below the screen, and Ctrl+End did nothing."""
    answer = "\n\n".join(f"Finding {n}: the ledger balances." for n in range(40)) + "\n\nEND"
    openai_server.respond_with(lambda body: Reply(text=answer, delta_chars=40))
    rt = make_runtime(tmp_path, openai_server)
    app = CairnApp(rt, AgentSession.new(rt))

    def messages() -> MessageList:
        return app.query_one(MessageList)

    def answer_in_view() -> bool:
        """The answer's last line is on the screen: inside the list's visible region."""
        last = rendered(app)[-1]
        bottom = last.virtual_region.y + last.virtual_region.height
        view = messages()
        return last.entry_id in {
            e.id for e in app.transcript.entries if e.kind == "assistant"
        } and (view.scroll_y < bottom <= view.scroll_y + view.scrollable_content_region.height + 1)

    async with app.run_test(size=SIZE) as pilot:
        prompt = app.query_one(PromptInput)
        await paste(pilot, log(1_200))
        await pilot.press("enter")
        await until(pilot, lambda: answered(app, 1), "the answer")
        await until(pilot, answer_in_view, "the answer on the screen")
        assert messages().max_scroll_y > 0  # there is something to scroll
        # Up to the top, then Ctrl+End (the prompt has the focus) goes back down.
        messages().scroll_home(animate=False, immediate=True)
        await until(pilot, lambda: messages().scroll_y == 0, "at the top")
        assert not answer_in_view() and prompt.has_focus
        await pilot.press("ctrl+end")
        await until(pilot, answer_in_view, "Ctrl+End to the end")
        assert messages().is_vertical_scroll_end

    rt.close()
