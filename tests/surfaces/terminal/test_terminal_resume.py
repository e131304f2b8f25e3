"""Seed 004 CLI story 加载历史会话: a resumed session of 10,000 messages reads only its
last page and renders only the latest 30; going up to the top of the list mounts the
earlier ones above, a page read at a time, and leaves what is on the screen where it was.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from textual.pilot import Pilot

from cairn import AgentSession
from cairn.agent.runtime import Runtime
from cairn.agent.settings import Settings
from cairn.provider import ModelConfig, OpenAIProvider
from cairn.surfaces.terminal import CairnApp
from cairn.surfaces.terminal.view import EARLIER_STEP, HISTORY_PAGE
from cairn.surfaces.terminal.widgets import EntryWidget, MessageList, PromptInput
from support.long_session import LONG, write_long_session
from support.openai_server import (
    OpenAIServer,
    Reply,
)

PAIRS = 5_000
#: The app's screen in these tests: a common terminal.
SIZE = (100, 40)


def runtime(
    tmp_path: Path, base_url: str = "http://127.0.0.1:9/v1", window: int = 32_768
) -> Runtime:
    model = ModelConfig(model="test-model", base_url=base_url, context_window=window)
    return Runtime(
        tmp_path / "ws", model, OpenAIProvider(model), settings=Settings(), home=tmp_path / "home"
    )


def long_session(tmp_path: Path, pairs: int = PAIRS) -> list[str]:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    return write_long_session(tmp_path / "home", workspace, pairs)


def mounted(app: CairnApp) -> list[str]:
    return [w.entry_id for w in app.query_one(MessageList).mounted()]


def earlier_line(app: CairnApp) -> str | None:
    """The line above the entries (``None``: not shown)."""
    line = app.query_one(MessageList).earlier
    return str(line.content) if line.display else None


def row_of(app: CairnApp, widget: EntryWidget) -> int:
    """The row of the screen ``widget`` starts on, counted from the list's top."""
    return widget.virtual_region.y - round(app.query_one(MessageList).scroll_y)


async def until(pilot: Pilot[None], condition: Callable[[], bool], what: str) -> None:
    for _ in range(1000):
        if condition():
            return
        await pilot.pause(0.01)
    raise AssertionError(f"never happened: {what}")


async def settled(pilot: Pilot[None]) -> None:
    """Let the refresh after a mount run, and the scroll that keeps the screen after it."""
    for _ in range(3):
        await pilot.pause()


async def test_a_resumed_session_of_10000_messages_reads_its_last_page_and_renders_the_latest_30(
    tmp_path: Path,
) -> None:
    ids = long_session(tmp_path)
    assert len(ids) == 2 * PAIRS + 1
    rt = runtime(tmp_path)
    agent = AgentSession.resume(rt, LONG)  # as --resume and --continue open it
    app = CairnApp(rt, agent)
    seen: dict[str, object] = {}

    async with app.run_test(size=SIZE) as pilot:
        await settled(pilot)
        seen["entries"] = [e.id for e in app.transcript.entries]
        seen["mounted"] = mounted(app)
        seen["line"] = earlier_line(app)
        seen["at end"] = app.query_one(MessageList).is_vertical_scroll_end

    # Only the last page was read, the latest 30 of it are shown, and the view is at the end.
    assert seen["entries"] == ids[-HISTORY_PAGE:]
    assert seen["mounted"] == ids[-30:]
    assert seen["at end"] is True
    assert seen["line"] == "9,971 earlier messages — scroll up to load (Ctrl+Home)"
    assert len(agent.ui_messages()) == 2 * PAIRS + 1  # the session keeps every one
    rt.close()


async def test_scrolling_to_the_top_mounts_earlier_entries_above_and_reads_the_page_before(
    tmp_path: Path,
) -> None:
    ids = long_session(tmp_path)
    rt = runtime(tmp_path)
    app = CairnApp(rt, AgentSession.resume(rt, LONG))
    # Up to the first of the page read when it opened, then one step from the page before.
    steps = (HISTORY_PAGE - 30) // EARLIER_STEP + 1

    async with app.run_test(size=SIZE) as pilot:
        await settled(pilot)
        messages = app.query_one(MessageList)
        for step in range(1, steps + 1):
            # The first entry: on the screen, just under the line, once at the top.
            top = messages.mounted()[0]
            row = top.virtual_region.y
            messages.scroll_to(y=0, animate=False)  # the wheel, up to the top
            first = top.entry_id

            def moved(first: str | None = first) -> bool:
                return mounted(app)[0] != first

            await until(pilot, moved, f"step {step}")
            await settled(pilot)
            assert mounted(app) == ids[-30 - EARLIER_STEP * step :]
            held = HISTORY_PAGE * (2 if step == steps else 1)
            assert [e.id for e in app.transcript.entries] == ids[-held:]
            left = len(ids) - 30 - EARLIER_STEP * step
            assert earlier_line(app) == (
                f"{left:,} earlier messages — scroll up to load (Ctrl+Home)"
            )
            # What was at the top of the screen is still there, the earlier ones above.
            assert row_of(app, top) == row

    rt.close()


async def test_ctrl_home_goes_up_to_the_first_message_of_a_resumed_session_and_a_new_turn_follows(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(lambda body: Reply(text="the live answer"))
    ids = long_session(tmp_path, pairs=200)  # 401 entries: two pages
    rt = runtime(tmp_path, openai_server.base_url)
    app = CairnApp(rt, AgentSession.new(rt))

    async with app.run_test(size=SIZE) as pilot:
        app.query_one(PromptInput).value = f"/resume {LONG}"
        await pilot.press("enter")
        await until(pilot, lambda: app.agent.id == LONG, "the long session")
        await settled(pilot)
        assert [e.id for e in app.transcript.entries][:-1] == ids[-HISTORY_PAGE:]
        assert app.transcript.entries[-1].text == f"resumed session {LONG}"
        assert earlier_line(app) == "372 earlier messages — scroll up to load (Ctrl+Home)"
        messages = app.query_one(MessageList)
        presses = 0
        while earlier_line(app) is not None:
            top = messages.mounted()[0]
            row = top.virtual_region.y  # its row once the list is at its top
            await pilot.press("ctrl+home")
            await settled(pilot)
            presses += 1
            # The first entry of before is where going to the top put it.
            assert row_of(app, top) == row
            assert presses < 20
        assert presses == 13  # 371 entries above the first 30, 30 at a time
        assert mounted(app)[:-1] == ids and [e.id for e in app.transcript.entries][:-1] == ids
        await pilot.press("ctrl+home")  # to the top; nothing more to mount or read
        await settled(pilot)
        assert mounted(app)[:-1] == ids
        assert messages.scroll_y == 0 and row_of(app, messages.mounted()[0]) == 0
        # A new turn comes after everything, once, and what was mounted stays.
        app.query_one(PromptInput).value = "a question after the history"
        await pilot.press("enter")
        await until(
            pilot, lambda: app.transcript.entries[-1].text == "the live answer", "the answer"
        )
        await until(pilot, lambda: not app.busy, "idle")
        await settled(pilot)
        texts = [e.text for e in app.transcript.entries]
        assert texts[-2:] == ["a question after the history", "the live answer"]
        assert texts.count("the live answer") == 1
        assert mounted(app) == [e.id for e in app.transcript.entries]
        assert earlier_line(app) is None

    rt.close()


async def test_a_resumed_session_over_the_budget_says_the_context_is_full_not_a_number(
    tmp_path: Path,
) -> None:
    """Issue 29: a resumed session of 2,000 messages in a 4,096-token window read
    ``~36,401 / 4,096`` — a request that is never sent, since the next one compacts
    first. The meter says so instead (``SessionUsage.meter``)."""
    long_session(tmp_path, pairs=1_000)
    rt = runtime(tmp_path, window=4_096)
    agent = AgentSession.resume(rt, LONG)
    app = CairnApp(rt, agent)
    seen: dict[str, object] = {}

    async with app.run_test(size=SIZE) as pilot:
        await settled(pilot)
        seen["meter"] = app.meter

    usage = agent.usage
    assert usage.input_budget and usage.projected_tokens  # the premise: far over the budget
    assert usage.projected_tokens > usage.input_budget
    assert seen["meter"] == "context full · compacts before the next request · 1 compaction"
    rt.close()
