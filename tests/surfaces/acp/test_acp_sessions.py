"""The stable session methods of today's protocol, driven by the library's client over a
socket: ``session/resume``, ``session/close``, ``session/delete``,
``session/set_config_option`` with the config options every session response
carries, ``$/cancel_request``; and what ``session/load`` sends before it answers."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from acp.exceptions import RequestError

from cairn.agent.settings import Settings
from cairn.store import JsonlStoreFactory, SessionRecord
from cairn.store.paths import normalize_workspace
from support.acp_client import Editor, answering, connected, converse, make_setup
from support.openai_server import (
    OpenAIServer,
    Reply,
    UsageSpec,
)


def response_at(editor: Editor, request_id: int) -> int:
    return next(
        i
        for i, m in enumerate(editor.client.wire)
        if m.get("id") == request_id and "method" not in m
    )


def options(raw: list[Any]) -> dict[str, str]:
    """``{id: currentValue}`` of a response's ``configOptions``."""
    return {o.id: o.current_value for o in raw}


async def prompt_with_id(editor: Editor, session_id: str, text: str) -> tuple[int, Any]:
    """Start a ``session/prompt``; its JSON-RPC id and the task awaiting its answer."""
    request_id = editor.conn._conn._next_request_id
    task = asyncio.ensure_future(editor.ask(session_id, text))
    await asyncio.sleep(0)
    return request_id, task


def test_resume_reattaches_without_replaying_the_history(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    answering(openai_server)
    workspace = tmp_path / "ws"

    async def scenario() -> None:
        async with connected(make_setup(tmp_path, openai_server), workspace) as editor:
            sid = await editor.new()
            await converse(editor, sid, 2)
        async with connected(make_setup(tmp_path, openai_server), workspace) as editor:
            response = await editor.conn.resume_session(cwd=str(workspace), session_id=sid)
            assert options(response.config_options or []) == {
                "model": "test-model",
                "mode": "bypass",
                "context_window": "32768",
                "keep_rounds": "2",
            }
            assert response.modes is not None and response.modes.current_mode_id == "bypass"
            # No history: only the commands and the meter, both before the answer.
            assert editor.client.kinds(sid) == ["available_commands_update", "usage_update"]
            assert response_at(editor, 1) > max(
                i for i, m in enumerate(editor.client.wire) if m.get("method") == "session/update"
            )
            assert await editor.ask(sid, "and now?") == "end_turn"

    asyncio.run(scenario())
    sent = [m.get("content") for m in openai_server.bodies[-1]["messages"] if m["role"] == "user"]
    assert sent == ["question 0 about calc.py", "question 1 about calc.py", "and now?"]


async def test_resume_of_an_unknown_session_is_not_found(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
        with pytest.raises(RequestError) as caught:
            await editor.conn.resume_session(cwd=str(editor.workspace), session_id="nope")
        assert caught.value.code == -32002


async def test_close_cancels_the_running_turn_and_releases_the_session(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    gate = threading.Event()
    openai_server.script(Reply(text="a long answer " * 30, hold=gate, hold_after=3))

    try:
        async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
            sid = await editor.new()
            running = asyncio.ensure_future(editor.ask(sid, "tell me everything"))
            while "agent_message_chunk" not in editor.client.kinds(sid):
                await asyncio.sleep(0.01)
            await editor.conn.close_session(session_id=sid)
            assert await asyncio.wait_for(running, 30) == "cancelled"
            with pytest.raises(RequestError) as caught:
                await editor.ask(sid, "still there?")
            assert "no open session" in str(caught.value)
            await editor.conn.close_session(session_id=sid)  # closing twice does nothing
            # Released: another process (here, another connection) opens it for writing.
            async with connected(make_setup(tmp_path, openai_server), editor.workspace) as other:
                await other.conn.resume_session(cwd=str(other.workspace), session_id=sid)
                openai_server.script(Reply(text="Back."))
                assert await other.ask(sid, "still there?") == "end_turn"
                await other.conn.close_session(session_id=sid)
            # And this connection loads it again.
            await editor.conn.load_session(cwd=str(editor.workspace), session_id=sid)
            assert editor.client.agent_text(sid).endswith("Back.")
    finally:
        gate.set()


async def test_delete_removes_the_session_from_the_list_and_the_store(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    answering(openai_server)
    home = tmp_path / "home"

    async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
        workspace = editor.workspace
        doomed = await editor.new()
        await converse(editor, doomed, 1)
        kept = await editor.new()
        await converse(editor, kept, 1)
        # What belongs to the session: a background task's transcript and a saved output.
        stores = JsonlStoreFactory(home)
        header = SessionRecord("task-1", normalize_workspace(workspace))
        stores.create_subagent(workspace, doomed, header).close()
        artifact = stores.artifacts_dir(workspace, doomed) / "outputs" / "big.txt"
        artifact.parent.mkdir(parents=True, exist_ok=True)
        artifact.write_text("saved")

        # Open here: closed first, then deleted.
        await editor.conn._conn.send_request("session/delete", {"sessionId": doomed})
        listed = await editor.conn.list_sessions(cwd=str(workspace))
        assert [s.session_id for s in listed.sessions] == [kept]
        assert not stores.exists(workspace, doomed)
        assert stores.subagents(workspace, doomed) == []
        assert not artifact.exists()
        with pytest.raises(RequestError):
            await editor.ask(doomed, "hello?")
        with pytest.raises(RequestError):
            await editor.conn.load_session(cwd=str(workspace), session_id=doomed)
        # Deleting it again, or a session that never was, succeeds silently.
        for gone in (doomed, "never-was"):
            assert await editor.conn._conn.send_request("session/delete", {"sessionId": gone}) == {}
        assert await editor.ask(kept, "still here?") == "end_turn"


async def test_delete_refuses_a_session_another_process_holds_open(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    answering(openai_server)

    async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as writer:
        sid = await writer.new()
        await converse(writer, sid, 1)
        async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as other:
            with pytest.raises(RequestError) as caught:
                await other.conn._conn.send_request("session/delete", {"sessionId": sid})
            assert "close it there first" in str(caught.value)
            listed = await other.conn.list_sessions(cwd=str(other.workspace))
            assert [s.session_id for s in listed.sessions] == [sid]


async def test_config_options_are_advertised_and_setting_one_changes_the_live_session(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    answering(openai_server)

    setup = make_setup(tmp_path, openai_server, mode="ask")
    async with connected(setup, tmp_path / "ws") as editor:
        created = await editor.conn.new_session(cwd=str(editor.workspace))
        sid = created.session_id
        advertised = {o.id: o for o in created.config_options or []}
        assert list(advertised) == ["model", "mode", "context_window", "keep_rounds"]
        assert [c.value for c in advertised["mode"].options] == [
            "ask",
            "accept-edits",
            "bypass",
            "plan",
        ]
        windows = [c.value for c in advertised["context_window"].options]
        assert "32768" in windows and "8192" in windows
        await converse(editor, sid, 1)

        changed = await editor.conn.set_config_option(
            config_id="context_window", session_id=sid, value="8192"
        )
        assert options(changed.config_options) == {
            "model": "test-model",
            "mode": "ask",
            "context_window": "8192",
            "keep_rounds": "2",
        }
        # The live session measures against the new window: the meter and /status say so.
        meter = [u for u in editor.client.updates(sid) if u["sessionUpdate"] == "usage_update"]
        assert meter[-1]["size"] == 8_192
        assert await editor.ask(sid, "/status") == "end_turn"
        assert "window       8,192" in editor.client.agent_text(sid)

        changed = await editor.conn.set_config_option(
            config_id="keep_rounds", session_id=sid, value="0"
        )
        changed = await editor.conn.set_config_option(
            config_id="mode", session_id=sid, value="bypass"
        )
        assert options(changed.config_options)["keep_rounds"] == "0"
        assert options(changed.config_options)["mode"] == "bypass"
        for config_id, value in (("context_window", "12"), ("speed", "fast"), ("model", "x")):
            with pytest.raises(RequestError) as caught:
                await editor.conn.set_config_option(
                    config_id=config_id, session_id=sid, value=value
                )
            assert caught.value.code == -32602
        # Load answers with the options as they are now.
        loaded = await editor.conn.load_session(cwd=str(editor.workspace), session_id=sid)
        assert options(loaded.config_options or [])["context_window"] == "8192"


def test_cancel_request_of_a_prompt_in_flight_ends_it_cancelled(
    tmp_path: Path, openai_server: OpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    gate = threading.Event()
    openai_server.script(Reply(text="slow " * 40, hold=gate, hold_after=3))

    async def scenario() -> None:
        async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
            sid = await editor.new()
            # Ids nothing runs under, and params without an id: ignored, no answer.
            for params in ({"requestId": 999}, {"requestId": "x"}, {}, {"requestId": None}):
                await editor.conn._conn.send_notification("$/cancel_request", params)
            request_id, running = await prompt_with_id(editor, sid, "go on")
            while "agent_message_chunk" not in editor.client.kinds(sid):
                await asyncio.sleep(0.01)
            await editor.conn._conn.send_notification("$/cancel_request", {"requestId": request_id})
            assert await asyncio.wait_for(running, 30) == "cancelled"
            settled = len(editor.client.wire)
            gate.set()
            openai_server.script(Reply(text="Fine."))
            assert await editor.ask(sid, "again") == "end_turn"
            assert editor.client.agent_text(sid).endswith("Fine.")
            # Only the prompt's own answer to what came after: no error replies to the
            # notifications.
            assert not any("error" in m for m in editor.client.wire[:settled])

    with caplog.at_level(logging.WARNING):
        try:
            asyncio.run(scenario())
        finally:
            gate.set()
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


async def test_load_sends_every_update_before_its_answer_and_the_meter_after_the_compaction(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    usage = UsageSpec(prompt_tokens=9_000, completion_tokens=500, total_tokens=9_500)
    openai_server.respond_with(
        lambda body: (
            Reply(text="<summary>kept</summary>")
            if "TEXT ONLY" in str(body["messages"][-1].get("content"))
            else Reply(text="An answer about calc.py. " * 40, usage=usage)
        )
    )

    async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
        sid = await editor.new()
        await converse(editor, sid, 3)
        result = await editor.conn.ext_method("cairn/compact", {"sessionId": sid})
        assert result["status"] == "completed"
        post = result["postTokens"]
    assert post != 9_500
    async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
        await editor.conn.load_session(cwd=str(editor.workspace), session_id=sid)
        answered = response_at(editor, 1)
        kinds = editor.client.kinds(sid)
        updates_at = [
            i for i, m in enumerate(editor.client.wire) if m.get("method") == "session/update"
        ]
        assert max(updates_at) < answered  # nothing of the load after its answer
        assert kinds.count("available_commands_update") == 1
        meter = [u for u in editor.client.updates(sid) if u["sessionUpdate"] == "usage_update"]
        assert [u["used"] for u in meter] == [post]  # the size after the compaction


async def test_cancel_request_before_the_turn_runs_answers_request_cancelled(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    # A SessionStart hook that takes its time: the prompt is in flight, the turn not begun.
    started = tmp_path / "hook-started"
    settings = Settings.model_validate(
        {
            "hooks": {
                "SessionStart": [
                    {"hooks": [{"type": "command", "command": f"touch {started}; sleep 30"}]}
                ]
            }
        }
    )
    openai_server.script(Reply(text="never asked"), Reply(text="Now."))

    setup = make_setup(tmp_path, openai_server, settings=settings)
    async with connected(setup, tmp_path / "ws") as editor:
        sid = await editor.new()
        request_id, running = await prompt_with_id(editor, sid, "first")
        while not started.exists():
            await asyncio.sleep(0.01)
        await editor.conn._conn.send_notification("$/cancel_request", {"requestId": request_id})
        with pytest.raises(RequestError) as caught:
            await asyncio.wait_for(running, 30)
        assert caught.value.code == -32800

    assert openai_server.bodies == []  # the turn never reached the model
