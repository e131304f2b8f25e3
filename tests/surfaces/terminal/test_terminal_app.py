"""The terminal app (seed 004's CLI stories), driven through Textual's pilot against the
local OpenAI server: messages, compaction, the hint line, commands, the meter,
permissions, tool results, cancelling and quitting."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.cells import cell_len
from textual.binding import Binding
from textual.pilot import Pilot
from textual.widgets import Collapsible, Static

from cairn import AgentSession
from cairn.agent.runtime import Runtime
from cairn.agent.settings import Settings
from cairn.agent.tools.base import PermissionMode
from cairn.provider import ModelConfig, OpenAIProvider
from cairn.surfaces.tail import compaction_hint, stream_tail
from cairn.surfaces.terminal import CairnApp
from cairn.surfaces.terminal.permission import KEYS, PermissionScreen, key_hints
from cairn.surfaces.terminal.picker import SessionPicker
from cairn.surfaces.terminal.view import RESULT_CHARS, one_line
from cairn.surfaces.terminal.widgets import (
    CompactView,
    EntryWidget,
    MessageList,
    PromptInput,
    ToolView,
)
from support.openai_server import (
    OpenAIServer,
    Reply,
    ToolCallSpec,
    UsageSpec,
)

SUMMARY = (
    "<summary>\n## Objective and constraints\nExplain calc.py to the user.\n"
    "## Exact next action\nAnswer the next question.\n</summary>"
)
ANSWER = "calc.py defines add(), which subtracts where it should add. " * 12


def is_fork(body: dict[str, Any]) -> bool:
    last = body["messages"][-1]
    return last["role"] == "user" and "TEXT ONLY" in str(last.get("content"))


def make_runtime(
    tmp_path: Path, server: OpenAIServer, *, mode: PermissionMode = "bypass"
) -> Runtime:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    model = ModelConfig(model="test-model", base_url=server.base_url, context_window=32_768)
    return Runtime(
        workspace,
        model,
        OpenAIProvider(model),
        settings=Settings(),
        home=tmp_path / "home",
        permission_mode=mode,
        answers_permissions=True,
    )


def answering(server: OpenAIServer, main: Callable[[dict[str, Any]], Reply] | None = None) -> None:
    """Forks get the summary; everything else ``main`` (default: the long answer)."""
    server.respond_with(
        lambda body: Reply(text=SUMMARY) if is_fork(body) else (main or _answer)(body)
    )


def _answer(body: dict[str, Any]) -> Reply:
    return Reply(text=ANSWER)


async def until(pilot: Pilot[None], condition: Callable[[], bool], what: str) -> None:
    for _ in range(1000):
        if condition():
            return
        await pilot.pause(0.01)
    raise AssertionError(f"never happened: {what}")


async def submit(pilot: Pilot[None], text: str) -> None:
    pilot.app.query_one(PromptInput).value = text
    await pilot.press("enter")


def rendered(app: CairnApp) -> list[EntryWidget]:
    return app.query_one(MessageList).mounted()


def kinds(app: CairnApp) -> list[str]:
    return [e.kind for e in app.transcript.entries]


def notices(app: CairnApp) -> list[str]:
    return [e.text for e in app.transcript.entries if e.kind == "notice"]


async def converse(pilot: Pilot[None], app: CairnApp, turns: int) -> None:
    for n in range(turns):
        wanted = kinds(app).count("assistant") + 1

        def answered(wanted: int = wanted) -> bool:
            return kinds(app).count("assistant") == wanted and not app.busy

        await submit(pilot, f"question {n} about calc.py")
        await until(pilot, answered, f"answer {n}")


async def test_old_messages_stay_on_screen_and_the_compact_block_is_appended(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    answering(openai_server)
    rt = make_runtime(tmp_path, openai_server)
    app = CairnApp(rt, AgentSession.new(rt))

    async with app.run_test() as pilot:
        await converse(pilot, app, 3)
        before = [e.id for e in app.transcript.entries]
        await submit(pilot, "/compact")
        await until(pilot, lambda: "compact" in kinds(app) and not app.busy, "the block")
        ids = [e.id for e in app.transcript.entries]
        assert ids[:-1] == before and kinds(app)[-1] == "compact"
        shown = rendered(app)
        assert [w.entry_id for w in shown] == ids  # the old messages are still mounted
        block = shown[-1]
        assert isinstance(block, CompactView)
        assert re.fullmatch(r"Conversation compacted · [\d,]+ → [\d,]+ tokens · llm", block.title)
        assert block.collapsed
        block.collapsed = False  # expandable to the summary
        await pilot.pause()
        assert "Explain calc.py" in app.transcript.entries[-1].text
        await converse(pilot, app, 1)
        assert kinds(app)[-3:] == ["compact", "user", "assistant"]
        assert notices(app) == []  # the block says it; no duplicate notice

    assert app.agent.usage.compactions == 1
    rt.close()


async def test_the_compacting_hint_shows_the_tail_and_goes_when_compaction_ends(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    gate = threading.Event()
    rt = make_runtime(tmp_path, openai_server)
    app = CairnApp(rt, AgentSession.new(rt))
    held_after = 12  # the role chunk and 11 content pieces of 4 characters
    streamed = SUMMARY[: (held_after - 1) * 4]

    try:
        async with app.run_test() as pilot:
            answering(openai_server)
            await converse(pilot, app, 3)
            openai_server.respond_with(
                lambda body: (
                    Reply(text=SUMMARY, hold=gate, hold_after=held_after)
                    if is_fork(body)
                    else Reply(text=ANSWER)
                )
            )
            assert app.hint == ""
            await submit(pilot, "/compact")
            await until(pilot, lambda: app.hint == compaction_hint(streamed), "the tail")
            assert app.hint.startswith("✻ Compacting …") and "\\n" in app.hint
            assert app.query_one("#hint").display
            gate.set()
            await until(pilot, lambda: not app.busy, "the compaction ends")
            assert app.hint == "" and not app.query_one("#hint").display
            assert kinds(app)[-1] == "compact"
    finally:
        gate.set()
    rt.close()


def test_only_the_latest_30_messages_render_while_the_session_keeps_all(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(lambda body: Reply(text=f"answer {len(body['messages'])}"))
    rt = make_runtime(tmp_path, openai_server)
    first = AgentSession.new(rt)

    async def earlier() -> None:
        for n in range(20):
            await first.prompt(f"question {n}")

    asyncio.run(earlier())
    first.clear()  # the transcript has one writer: leave it before resuming it
    agent = AgentSession.resume(rt, first.id)
    app = CairnApp(rt, agent)

    async def scenario() -> None:
        async with app.run_test() as pilot:
            await pilot.pause()
            assert len(app.transcript.entries) == 40 == len(agent.ui_messages())
            shown = [w.entry_id for w in rendered(app)]
            assert shown == [e.id for e in app.transcript.entries[-30:]]
            await pilot.press("ctrl+o")
            await until(pilot, lambda: len(rendered(app)) == 10, "the expanded view")
            assert [w.entry_id for w in rendered(app)] == shown[-10:]
            await pilot.press("ctrl+o")
            await until(pilot, lambda: len(rendered(app)) == 30, "the collapsed view")
            assert [w.entry_id for w in rendered(app)] == shown
            await converse(pilot, app, 1)
            await pilot.pause()
            assert len(rendered(app)) == 30 and len(app.transcript.entries) == 42
            assert [w.entry_id for w in rendered(app)][-1] == app.transcript.entries[-1].id

    asyncio.run(scenario())
    assert len(agent.ui_messages()) == 42
    rt.close()


async def test_compact_while_streaming_is_ignored_with_a_notice(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    gate = threading.Event()
    rt = make_runtime(tmp_path, openai_server)
    app = CairnApp(rt, AgentSession.new(rt))

    try:
        async with app.run_test() as pilot:
            answering(openai_server)
            await converse(pilot, app, 2)
            answering(openai_server, lambda body: Reply(text=ANSWER, hold=gate, hold_after=4))
            await submit(pilot, "explain calc.py")
            await until(
                pilot, lambda: app.agent.status == "streaming" and bool(app.hint), "streaming"
            )
            requests = len(openai_server.requests)
            await submit(pilot, "/compact")
            await until(pilot, lambda: bool(notices(app)), "the notice")
            assert "ignored: a response is streaming" in notices(app)[-1]
            assert app.agent.status == "streaming"  # not aborted
            gate.set()
            await until(pilot, lambda: not app.busy, "the answer")
            assert app.transcript.entries[-2].text == ANSWER  # whole, then the notice
            assert len(openai_server.requests) == requests
            assert not any(is_fork(b) for b in openai_server.bodies)
    finally:
        gate.set()
    rt.close()


async def test_a_prompt_sent_while_an_answer_streams_is_queued_and_goes_when_the_turn_ends(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    gate = threading.Event()
    rt = make_runtime(tmp_path, openai_server)
    app = CairnApp(rt, AgentSession.new(rt))

    try:
        async with app.run_test() as pilot:
            prompt = app.query_one(PromptInput)
            answering(openai_server, lambda body: Reply(text=ANSWER, hold=gate, hold_after=4))
            await submit(pilot, "explain calc.py")
            await until(pilot, lambda: app.agent.status == "streaming", "streaming")
            await submit(pilot, "and then the tests")
            await until(pilot, lambda: app.queued != "", "the queued line")
            assert app.queued == "queued › and then the tests   (Esc edits)"
            assert prompt.value == "" and notices(app) == []  # it left the box, for the queue
            await submit(pilot, "and the docs")
            await until(pilot, lambda: app.queued.count("queued ›") == 2, "two lines")
            # Esc takes them back into the box for editing; the answer goes on.
            await pilot.press("escape")
            await until(pilot, lambda: app.queued == "", "the queue emptied")
            assert prompt.value == "and then the tests\n\nand the docs"
            assert app.agent.queued == () and app.agent.status == "streaming"
            prompt.value = "and then the tests, briefly"
            await pilot.press("enter")
            await until(pilot, lambda: app.queued != "", "queued again")
            gate.set()
            await until(
                pilot,
                lambda: kinds(app).count("assistant") == 2 and not app.busy,
                "the queued prompt answered",
            )
            assert [e.text for e in app.transcript.entries if e.kind == "user"] == [
                "explain calc.py",
                "and then the tests, briefly",
            ]
            assert app.queued == "" and "interrupted" not in notices(app)
    finally:
        gate.set()
    rt.close()


async def test_a_second_escape_after_taking_the_queue_back_cancels_the_turn(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    gate = threading.Event()
    rt = make_runtime(tmp_path, openai_server)
    app = CairnApp(rt, AgentSession.new(rt))

    try:
        async with app.run_test() as pilot:
            answering(openai_server, lambda body: Reply(text=ANSWER, hold=gate, hold_after=4))
            await submit(pilot, "explain calc.py")
            await until(pilot, lambda: app.agent.status == "streaming", "streaming")
            await submit(pilot, "later")
            await until(pilot, lambda: app.queued != "", "the queued line")
            await pilot.press("escape")
            await until(pilot, lambda: app.queued == "", "taken back")
            assert app.agent.status == "streaming"
            await pilot.press("escape")  # nothing queued now: this one cancels
            gate.set()
            await until(pilot, lambda: not app.busy, "the turn ends")
            assert "interrupted" in notices(app)
            assert app.query_one(PromptInput).value == "later"
            assert len([b for b in openai_server.bodies if not is_fork(b)]) == 1  # never sent
    finally:
        gate.set()
    rt.close()


def texts(app: CairnApp) -> list[str]:
    return [e.text for e in app.transcript.entries]


async def test_a_second_compact_while_one_runs_is_skipped_and_clear_while_compacting_is_refused(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    gate = threading.Event()
    rt = make_runtime(tmp_path, openai_server)
    app = CairnApp(rt, AgentSession.new(rt))

    try:
        async with app.run_test() as pilot:
            answering(openai_server)
            await converse(pilot, app, 3)
            session_id = app.agent.id
            openai_server.respond_with(
                lambda body: Reply(text=SUMMARY, hold=gate) if is_fork(body) else Reply(text="ok")
            )
            await submit(pilot, "/compact")
            await until(pilot, lambda: app.agent.status == "compacting", "compacting")
            await submit(pilot, "/compact")
            await until(pilot, lambda: bool(notices(app)), "the skip")
            assert "skipped: a compaction is already running" in notices(app)[-1]
            await submit(pilot, "/clear")
            assert "/clear refused: the session is compacting" in notices(app)[-1]
            await submit(pilot, f"/resume {session_id}")
            assert "/resume refused" in notices(app)[-1]
            await submit(pilot, "a prompt now")
            await until(pilot, lambda: app.queued != "", "queued while it compacts")
            assert app.agent.id == session_id
            gate.set()
            # The compaction ends no turn: the app sends the queued line after it.
            await until(
                pilot, lambda: "a prompt now" in texts(app) and not app.busy, "the line sent"
            )
            assert kinds(app).count("compact") == 1 and app.queued == ""
            await submit(pilot, "/clear")
            await until(pilot, lambda: app.agent.id != session_id, "the new session")
            assert notices(app) == [f"new session {app.agent.id}"]
    finally:
        gate.set()
    assert sum(is_fork(b) for b in openai_server.bodies) == 1
    rt.close()


async def test_the_meter_updates_after_a_response(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    rt = make_runtime(tmp_path, openai_server)
    app = CairnApp(rt, AgentSession.new(rt))

    async with app.run_test() as pilot:
        await pilot.pause()
        budget = app.agent.usage.input_budget
        assert budget
        # Before any response, the pipeline's estimate, marked as one.
        estimate = app.agent.usage.projected_tokens
        assert estimate
        share = estimate * 100 // budget
        assert app.meter == f"context ~{estimate:,} / {budget:,} tokens ({share}%) · 0 compactions"
        # A response without usage moves the estimate, and the meter with it.
        answering(openai_server, lambda body: Reply(text=ANSWER, omit_usage=True))
        await converse(pilot, app, 1)
        later = app.agent.usage.projected_tokens
        assert later and later > estimate and app.agent.usage.latest_total_tokens is None
        assert app.meter.startswith(f"context ~{later:,} / {budget:,} tokens")
        answering(
            openai_server,
            lambda body: Reply(text=ANSWER, usage=UsageSpec(1000, 234, total_tokens=1234)),
        )
        await converse(pilot, app, 3)
        share = 1234 * 100 // budget
        assert app.meter == f"context 1,234 / {budget:,} tokens ({share}%) · 0 compactions"
        await submit(pilot, "/compact")
        await until(pilot, lambda: "1 compaction" in app.meter, "the meter after /compact")
        block = next(e for e in app.transcript.entries if e.kind == "compact")
        post = block.detail.split("→ ")[1].split(" tokens")[0]
        assert app.meter.startswith(f"context {post} / {budget:,} tokens")
        # The compaction's count is not kept past a turn whose responses reported none.
        answering(openai_server, lambda body: Reply(text=ANSWER, omit_usage=True))
        await converse(pilot, app, 1)
        now = app.agent.usage.projected_tokens
        assert now and app.meter.startswith(f"context ~{now:,} / {budget:,} tokens")

    rt.close()


async def test_a_permission_request_is_a_modal_and_its_answer_reaches_the_tool(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    plan = [
        Reply(
            tool_calls=[ToolCallSpec("write_file", json.dumps({"path": "a.txt", "content": "A"}))]
        ),
        Reply(text="Wrote a.txt."),
        Reply(
            tool_calls=[ToolCallSpec("write_file", json.dumps({"path": "b.txt", "content": "B"}))]
        ),
        Reply(text="Did not write b.txt."),
    ]
    openai_server.respond_with(lambda body: plan.pop(0) if plan else None)
    rt = make_runtime(tmp_path, openai_server, mode="ask")
    app = CairnApp(rt, AgentSession.new(rt))

    async with app.run_test() as pilot:
        await submit(pilot, "write a.txt")
        await until(pilot, lambda: isinstance(app.screen, PermissionScreen), "the modal")
        assert app.agent.status == "tools"
        keys = app.screen.query_one("#keys", Static)
        assert str(keys.content) == "y allow once · a allow always · n deny · Esc deny"
        assert keys.region.height == 1  # on the screen, not only in the tree
        await pilot.click("#allow-once")
        await until(pilot, lambda: not app.busy, "the turn ends")
        assert not isinstance(app.screen, PermissionScreen)
        assert app.transcript.entries[-1].text == "Wrote a.txt."
        await submit(pilot, "write b.txt")
        await until(pilot, lambda: isinstance(app.screen, PermissionScreen), "the modal")
        await pilot.press("escape")  # Esc in the modal denies
        await until(pilot, lambda: not app.busy, "the turn ends")
        tool = next(e for e in reversed(app.transcript.entries) if e.kind == "tool")
        assert "denied" in tool.detail

    assert (rt.workspace / "a.txt").read_text() == "A"
    assert not (rt.workspace / "b.txt").exists()
    rt.close()


async def test_a_long_tool_result_is_short_until_expanded(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    plan = [
        Reply(tool_calls=[ToolCallSpec("read_file", json.dumps({"path": "ledger.txt"}))]),
        Reply(text="The ledger balances."),
        Reply(tool_calls=[ToolCallSpec("read_file", json.dumps({"path": "one.txt"}))]),
        Reply(text="One line."),
    ]
    openai_server.respond_with(lambda body: plan.pop(0) if plan else None)
    rt = make_runtime(tmp_path, openai_server)
    (rt.workspace / "ledger.txt").write_text(
        "".join(f"entry {n}: the ledger balances\n" for n in range(60)), encoding="utf-8"
    )
    (rt.workspace / "one.txt").write_text("x", encoding="utf-8")
    app = CairnApp(rt, AgentSession.new(rt))

    def tools() -> list[ToolView]:
        return [w for w in rendered(app) if isinstance(w, ToolView)]

    async with app.run_test(size=(100, 50)) as pilot:
        await submit(pilot, "read ledger.txt")
        await until(pilot, lambda: len(tools()) == 1 and not app.busy, "the tool call")
        await until(pilot, lambda: kinds(app)[-1] == "assistant", "the answer")
        result = next(m for m in app.agent.ui_messages() if m.role == "tool").text
        assert "entry 59: the ledger balances" in result and len(result.splitlines()) >= 60
        view = tools()[0]
        entry = app.transcript.get(view.entry_id)
        assert entry is not None and entry.text == 'read_file {"path": "ledger.txt"}'
        short = one_line(result)
        assert entry.detail == short and len(short) == RESULT_CHARS and short.endswith("…")
        head = str(view.head.content) + "\n" + str(view.result.content)  # call, result rows
        assert entry.text in head and short in head and "entry 59" not in head
        assert view.more.display and view.more.collapsed  # collapsed by default
        assert str(view.full.content) == result.strip("\n").rstrip()
        contents = view.more.query_one(Collapsible.Contents)
        assert contents.region.height == 0 and view.full.region.height == 0
        await pilot.click(view.more.query_one("CollapsibleTitle"))
        await until(pilot, lambda: not view.more.collapsed, "expanded")
        await until(pilot, lambda: view.full.region.height > 0, "the full result shown")
        assert view.full.size.height == len(result.strip("\n").splitlines())
        assert "entry 59: the ledger balances" in str(view.full.content)
        title = view.more.query_one("CollapsibleTitle")
        title.focus()
        await pilot.press("enter")  # the keyboard folds it again
        await until(pilot, lambda: view.more.collapsed, "collapsed again")
        await until(pilot, lambda: view.full.region.height == 0, "the full result hidden")
        # The expanded view (Ctrl+O) opens every result, and closes them again.
        app.query_one(PromptInput).focus()
        await pilot.press("ctrl+o")
        await until(pilot, lambda: not tools()[0].more.collapsed, "opened by Ctrl+O")
        await pilot.press("ctrl+o")
        await until(pilot, lambda: tools()[0].more.collapsed, "closed by Ctrl+O")
        title.focus()
        # Typing while the title has the focus goes to the prompt.
        await pilot.press("r")
        prompt = app.query_one(PromptInput)
        await until(pilot, lambda: prompt.has_focus and prompt.value == "r", "typed")
        prompt.value = ""
        # A result the short form shows whole has nothing to expand.
        await submit(pilot, "read one.txt")
        await until(pilot, lambda: kinds(app)[-1] == "assistant" and not app.busy, "answer")
        small = tools()[-1]
        entry = app.transcript.get(small.entry_id)
        assert entry is not None and entry.full == "" and not small.more.display

    rt.close()


def test_the_permission_keys_shown_are_the_ones_that_answer() -> None:
    assert key_hints(("allow_once", "reject")) == "y allow once · n deny · Esc deny"
    assert key_hints(()) == "n deny · Esc deny"  # a question can always be refused
    bound = {b.key: b.action for b in PermissionScreen.BINDINGS if isinstance(b, Binding)}
    for key, decision, _ in KEYS:
        assert bound[{"Esc": "escape"}.get(key, key)] == f"decide('{decision}')"


async def test_a_wide_character_result_stays_one_row_under_its_call(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """Issue 29 (b): the short result of a Chinese file wrapped to the screen's first column."""
    plan = [
        Reply(tool_calls=[ToolCallSpec("read_file", json.dumps({"path": "账本.txt"}))]),
        Reply(text="读完了。"),
    ]
    openai_server.respond_with(lambda body: plan.pop(0) if plan else None)
    rt = make_runtime(tmp_path, openai_server)
    (rt.workspace / "账本.txt").write_text("账本平衡。" * 30, encoding="utf-8")
    app = CairnApp(rt, AgentSession.new(rt))

    async with app.run_test(size=(100, 50)) as pilot:
        await submit(pilot, "read 账本.txt")
        await until(pilot, lambda: kinds(app)[-1] == "assistant" and not app.busy, "answer")
        (view,) = [w for w in rendered(app) if isinstance(w, ToolView)]
        entry = app.transcript.get(view.entry_id)
        assert entry is not None and "账本平衡" in entry.detail
        assert cell_len(entry.detail) <= RESULT_CHARS
        # The call's row, the result's row, then the fold's title: nothing wrapped.
        await until(pilot, lambda: view.more.region.height > 0, "laid out")
        assert view.more.region.y - view.region.y == 2

    rt.close()


async def test_the_resume_command_names_the_open_session_once_it_has_a_message(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """Issue 29 (d): what ``cairn`` prints on the way out (the tmux test sees it printed)."""
    answering(openai_server)
    rt = make_runtime(tmp_path, openai_server)
    app = CairnApp(rt, AgentSession.new(rt))

    async with app.run_test() as pilot:
        assert app.resume_command is None  # nothing to come back to
        await converse(pilot, app, 1)
        assert app.resume_command == f"cairn --resume {app.agent.id}"
        first = app.agent.id
        await submit(pilot, "/clear")
        await until(pilot, lambda: app.agent.id != first, "the new session")
        assert app.resume_command is None
        await submit(pilot, f"/resume {first}")
        await until(pilot, lambda: app.agent.id == first, "back")
        assert app.resume_command == f"cairn --resume {first}"
        await pilot.press("ctrl+d")
    assert app.resume_command == f"cairn --resume {first}"  # still known after the exit

    rt.close()


async def test_escape_aborts_a_streaming_response_and_the_transcript_stays_whole(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    gate = threading.Event()
    openai_server.respond_with(lambda body: Reply(text=ANSWER, hold=gate, hold_after=9))
    rt = make_runtime(tmp_path, openai_server)
    app = CairnApp(rt, AgentSession.new(rt))
    streamed = ANSWER[:32]  # 8 pieces of 4 characters

    try:
        async with app.run_test() as pilot:
            await submit(pilot, "explain calc.py")
            await until(pilot, lambda: app.hint.endswith(stream_tail(streamed)), "the spinner")
            assert app.hint.endswith(" …" + streamed[-30:])
            await pilot.press("escape")
            gate.set()  # the next piece is the safe point where the abort is seen
            await until(pilot, lambda: not app.busy, "the turn ends")
            assert "interrupted" in notices(app)
            assert app.hint == ""
    finally:
        gate.set()
    ui = app.agent.ui_messages()
    assert [m.role for m in ui] == ["user", "assistant"]
    assert ANSWER.startswith(ui[1].text) and len(ui[1].text) < len(ANSWER)
    rt.close()


async def test_a_provider_error_is_an_error_block_and_the_app_goes_on(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    replies = [Reply.http_error(400, "the model is not loaded"), Reply(text="Back again.")]
    openai_server.respond_with(lambda body: replies.pop(0) if replies else None)
    rt = make_runtime(tmp_path, openai_server)
    app = CairnApp(rt, AgentSession.new(rt))

    async with app.run_test() as pilot:
        await submit(pilot, "hello")
        await until(pilot, lambda: "error" in kinds(app) and not app.busy, "the error")
        errors = [e.text for e in app.transcript.entries if e.kind == "error"]
        assert len(errors) == 1 and "the model is not loaded" in errors[0]
        await submit(pilot, "hello again")
        await until(pilot, lambda: app.transcript.entries[-1].text == "Back again.", "answer")

    rt.close()


async def test_commands_history_and_bad_input_are_one_line_notices(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    rt = make_runtime(tmp_path, openai_server)
    app = CairnApp(rt, AgentSession.new(rt))

    async with app.run_test() as pilot:
        await submit(pilot, "/frobnicate now")
        assert notices(app)[-1] == "unknown command /frobnicate; /help lists the commands"
        await submit(pilot, "/resume no-such-session")
        assert "no session 'no-such-session'" in notices(app)[-1]
        await submit(pilot, "/status")
        await until(pilot, lambda: notices(app)[-1].startswith("session"), "the status")
        assert f"session      {app.agent.id}" in notices(app)[-1]
        await submit(pilot, "/context")
        await until(pilot, lambda: notices(app)[-1].startswith("context"), "the context")
        await submit(pilot, "/cost")
        await until(pilot, lambda: notices(app)[-1].startswith("cost"), "the cost")
        await submit(pilot, "/model")
        await until(pilot, lambda: notices(app)[-1].startswith("model"), "the model")
        await submit(pilot, "/help")
        assert "/compact [instructions]" in notices(app)[-1] and "Ctrl+O" in notices(app)[-1]
        prompt = app.query_one(PromptInput)
        prompt.value = "half typed"
        await pilot.press("up")
        assert prompt.value == "/help"
        await pilot.press(*["up"] * 5)
        assert prompt.value == "/resume no-such-session"
        await pilot.press(*["down"] * 6)
        assert prompt.value == "half typed"

    rt.close()


async def test_ctrl_c_twice_on_an_idle_prompt_exits(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    rt = make_runtime(tmp_path, openai_server)
    app = CairnApp(rt, AgentSession.new(rt))

    async with app.run_test() as pilot:
        await pilot.press("ctrl+c")
        assert app.hint == "Press Ctrl+C again to exit" and app.is_running
        await pilot.press("x")  # typing disarms it
        assert app.hint == ""
        await pilot.press("ctrl+c")  # clears the typed line first
        assert app.query_one(PromptInput).value == "" and app.is_running
        await pilot.press("ctrl+c", "ctrl+c")
        await pilot.pause()
        assert not app.is_running

    rt.close()


def test_resume_with_no_id_opens_a_picker_of_the_other_sessions(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(lambda body: Reply(text="noted"))
    rt = make_runtime(tmp_path, openai_server)
    older = AgentSession.new(rt)
    asyncio.run(older.prompt("remember the quokka"))
    app = CairnApp(rt, older.clear())

    async def scenario() -> None:
        async with app.run_test() as pilot:
            await submit(pilot, "/resume")
            await until(pilot, lambda: isinstance(app.screen, SessionPicker), "the picker")
            picker = app.screen
            assert isinstance(picker, SessionPicker)
            assert [s.id for s in picker.sessions] == [older.id]  # not the open one
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, SessionPicker), "cancelled")
            assert app.agent.id != older.id
            await submit(pilot, "/resume")
            await until(pilot, lambda: isinstance(app.screen, SessionPicker), "the picker")
            await pilot.press("down", "enter")
            await until(pilot, lambda: app.agent.id == older.id, "the resumed session")
            assert [e.text for e in app.transcript.entries] == [
                "remember the quokka",
                "noted",
                f"resumed session {older.id}",
            ]
            await submit(pilot, f"/resume {older.id}")
            assert notices(app)[-1] == f"already in session {older.id}"

    asyncio.run(scenario())
    rt.close()


async def test_escape_cancels_a_running_compaction_and_nothing_is_written(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    gate = threading.Event()
    rt = make_runtime(tmp_path, openai_server)
    app = CairnApp(rt, AgentSession.new(rt))

    try:
        async with app.run_test() as pilot:
            answering(openai_server)
            await converse(pilot, app, 3)
            openai_server.respond_with(
                lambda body: (
                    Reply(text=SUMMARY, hold=gate, hold_after=3)
                    if is_fork(body)
                    else Reply(text="after")
                )
            )
            await submit(pilot, "/compact")
            await until(pilot, lambda: app.hint.startswith("✻ Compacting"), "compacting")
            await pilot.press("escape")
            await until(pilot, lambda: not app.busy and app.hint == "", "the compaction ends")
            assert notices(app)[-1] == "/compact: compaction cancelled; the context is unchanged"
            assert "compact" not in kinds(app)
            await converse(pilot, app, 1)  # the session goes on
            assert app.transcript.entries[-1].text == "after"
    finally:
        gate.set()
    assert app.agent.usage.compactions == 0
    assert not any(m.meta.kind == "compact_summary" for m in app.agent.ui_messages())
    rt.close()
