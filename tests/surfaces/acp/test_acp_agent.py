"""``cairn acp``'s protocol surface, driven by the protocol library's client over a
socket against the local OpenAI server: initialize, new, prompt with streaming, tool
calls and permissions, cancel (mid-stream and while a permission is pending), the
plan, usage, modes, the session list, the commands, and the session guard."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from acp.exceptions import RequestError
from acp.schema import PermissionOption

from support.acp_client import answering, arrived, connected, converse, is_fork, make_setup, since
from support.openai_server import (
    OpenAIServer,
    Reply,
    ToolCallSpec,
    UsageSpec,
)


def write_call(path: str, content: str) -> Reply:
    return Reply(
        tool_calls=[ToolCallSpec("write_file", json.dumps({"path": path, "content": content}))]
    )


async def test_initialize_advertises_load_the_prompt_capabilities_and_cairns_extensions(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
        response = next(m for m in editor.client.wire if m.get("id") == 0)["result"]
        assert response["protocolVersion"] == 1
        caps = response["agentCapabilities"]
        assert caps["loadSession"] is True
        assert caps["promptCapabilities"]["embeddedContext"] is True
        assert caps["promptCapabilities"]["image"] is True
        assert set(caps["sessionCapabilities"]) == {"list", "resume", "close", "delete"}
        meta = response["_meta"]["cairn"]
        # The names on the wire, underscore included.
        assert list(meta["requests"]) == ["_cairn/compact"]
        assert meta["notifications"] == [
            "_cairn/compactionStateChange",
            "_cairn/compactionContentUpdate",
            "_cairn/summaryPrepared",
        ]
        assert response["agentInfo"]["name"] == "cairn"


async def test_new_session_then_the_commands_list_with_compact_and_its_input_hint(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
        response = await editor.conn.new_session(cwd=str(editor.workspace))
        sid = response.session_id
        assert response.modes is not None and response.modes.current_mode_id == "bypass"
        assert [m.id for m in response.modes.available_modes] == [
            "ask",
            "accept-edits",
            "bypass",
            "plan",
        ]
        await arrived(editor, "available_commands_update")
        update = editor.client.updates(sid)[0]
        commands = {c["name"]: c for c in update["availableCommands"]}
        assert set(commands) == {
            "compact",
            "clear",
            "status",
            "context",
            "cost",
            "model",
            "mcp",
            "help",
        }
        assert commands["compact"]["input"]["hint"]
        assert commands["model"]["input"]["hint"]
        # The update came after the response that told the client the session id.
        response_at = next(i for i, m in enumerate(editor.client.wire) if m.get("id") == 1)
        update_at = next(
            i for i, m in enumerate(editor.client.wire) if m.get("method") == "session/update"
        )
        assert update_at > response_at


async def test_new_session_with_a_cwd_that_is_not_a_folder_is_a_one_line_error(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
        for cwd in ("relative/path", str(tmp_path / "missing")):
            with pytest.raises(RequestError) as caught:
                await editor.conn.new_session(cwd=cwd)
            assert "is not an absolute path to a folder" in str(caught.value)
        with pytest.raises(RequestError) as caught:
            await editor.ask("no-such-session", "hi")
        assert "no open session" in str(caught.value)


async def test_a_prompt_streams_as_message_chunks_and_ends_the_turn(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.script(
        Reply(
            text="calc.py subtracts in add().",
            reasoning="Look at the function.",
            usage=UsageSpec(prompt_tokens=900, completion_tokens=40, total_tokens=940),
        )
    )

    async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
        sid = await editor.new()
        assert await editor.ask(sid, "What does calc.py do?") == "end_turn"
        kinds = editor.client.kinds(sid)
        assert kinds.count("agent_message_chunk") > 1  # streamed, not one block
        assert editor.client.agent_text(sid) == "calc.py subtracts in add()."
        thoughts = "".join(
            u["content"]["text"]
            for u in editor.client.updates(sid)
            if u["sessionUpdate"] == "agent_thought_chunk"
        )
        assert thoughts == "Look at the function."
        usage = [u for u in editor.client.updates(sid) if u["sessionUpdate"] == "usage_update"]
        assert usage[-1]["used"] == 940 and usage[-1]["size"] == 32_768
        # The user's own prompt is not echoed back on a live turn.
        assert "user_message_chunk" not in kinds

    assert openai_server.bodies[0]["messages"][-1]["content"] == "What does calc.py do?"


def call_statuses(wire: list[dict[str, Any]], call_id: str) -> list[str]:
    """The statuses a tool call went through on the wire, ``asked`` where its permission
    request came."""
    out: list[str] = []
    for message in wire:
        if message.get("method") == "session/request_permission":
            if message["params"]["toolCall"]["toolCallId"] == call_id:
                out.append("asked")
        elif message.get("method") == "session/update":
            update = message["params"]["update"]
            if update.get("toolCallId") == call_id and "status" in update:
                out.append(update["status"])
    return out


async def test_a_tool_call_awaiting_permission_is_pending_until_answered_then_in_progress(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.script(write_call("a.txt", "A"), Reply(text="Wrote it."))
    answered = asyncio.Event()
    seen_while_asked: list[str] = []

    async def look_then_allow(call_id: str, options: list[PermissionOption]) -> str:
        await asyncio.sleep(0)  # the pending update reached the client before the question
        seen_while_asked.extend(call_statuses(editor_wire, call_id))
        answered.set()
        return "allow_once"

    editor_wire: list[dict[str, Any]] = []

    setup = make_setup(tmp_path, openai_server, mode="ask")
    async with connected(setup, tmp_path / "ws") as editor:
        editor_wire[:] = []
        editor.client.wire = editor_wire
        editor.client.decide = look_then_allow
        sid = await editor.new()
        assert await editor.ask(sid, "write a.txt") == "end_turn"
        ((_, tool_call, _),) = editor.client.permission_requests
        assert tool_call.status == "pending"
        assert seen_while_asked == ["pending", "asked"]  # nothing claimed it runs yet
        assert call_statuses(editor_wire, tool_call.tool_call_id) == [
            "pending",
            "asked",
            "in_progress",
            "completed",
        ]

    assert (tmp_path / "ws" / "a.txt").read_text() == "A"


async def test_a_tool_call_asks_permission_and_allow_once_lets_it_run(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.script(
        write_call("a.txt", "A"),
        Reply(text="Wrote a.txt."),
        write_call("b.txt", "B"),
        Reply(text="No."),
    )

    setup = make_setup(tmp_path, openai_server, mode="ask")
    async with connected(setup, tmp_path / "ws") as editor:
        sid = await editor.new()
        assert await editor.ask(sid, "write a.txt") == "end_turn"
        ((asked_sid, tool_call, options),) = editor.client.permission_requests
        assert asked_sid == sid
        assert [o.option_id for o in options] == ["allow_once", "allow_always", "reject"]
        assert [o.kind for o in options] == ["allow_once", "allow_always", "reject_once"]
        updates = editor.client.updates(sid)
        start = next(u for u in updates if u["sessionUpdate"] == "tool_call")
        assert start["toolCallId"] == tool_call.tool_call_id
        assert start["kind"] == "edit" and start["title"] == "write_file a.txt"
        assert start["locations"] == [{"path": str(editor.workspace / "a.txt")}]
        assert call_statuses(editor.client.wire, tool_call.tool_call_id) == [
            "pending",
            "asked",
            "in_progress",
            "completed",
        ]

        async def reject(call_id: str, options: list[PermissionOption]) -> str:
            return "reject"

        editor.client.decide = reject
        assert await editor.ask(sid, "write b.txt") == "end_turn"
        last = [u for u in editor.client.updates(sid) if u["sessionUpdate"] == "tool_call_update"]
        assert last[-1]["status"] == "failed"

    assert (tmp_path / "ws" / "a.txt").read_text() == "A"
    assert not (tmp_path / "ws" / "b.txt").exists()


async def test_allow_always_is_asked_once_per_session(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.script(
        write_call("a.txt", "A"), Reply(text="1"), write_call("b.txt", "B"), Reply(text="2")
    )

    setup = make_setup(tmp_path, openai_server, mode="ask")
    async with connected(setup, tmp_path / "ws") as editor:

        async def always(call_id: str, options: list[PermissionOption]) -> str:
            return "allow_always"

        editor.client.decide = always
        sid = await editor.new()
        await editor.ask(sid, "write a.txt")
        await editor.ask(sid, "write b.txt")
        assert len(editor.client.permission_requests) == 1

    assert (tmp_path / "ws" / "b.txt").read_text() == "B"


async def test_cancel_mid_stream_returns_cancelled_and_nothing_of_the_turn_follows(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    gate = threading.Event()
    openai_server.script(
        Reply(text="A long story about the build server. " * 20, hold=gate, hold_after=4)
    )

    try:
        async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
            sid = await editor.new()
            prompt = asyncio.ensure_future(editor.ask(sid, "tell me a story"))
            while "agent_message_chunk" not in editor.client.kinds(sid):
                await asyncio.sleep(0.01)
            await editor.conn.cancel(session_id=sid)
            assert await prompt == "cancelled"
            # Issue 29 defect 13: the cancel is the stop reason, not agent text.
            assert "interrupted" not in editor.client.agent_text(sid)
            settled = len(editor.client.wire)
            gate.set()
            await asyncio.sleep(0.3)
            assert len(editor.client.wire) == settled  # no events of the cancelled turn after it
            openai_server.script(Reply(text="Still here."))
            assert await editor.ask(sid, "are you there?") == "end_turn"
            assert editor.client.agent_text(sid).endswith("Still here.")
    finally:
        gate.set()
    # The transcript stays whole: the next request carries the interrupted answer.
    messages = openai_server.bodies[-1]["messages"]
    assert [m["role"] for m in messages[1:]] == ["user", "assistant", "user"]


async def test_cancel_while_a_permission_is_pending_answers_it_cancelled_and_the_tool_does_not_run(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.script(write_call("a.txt", "A"), Reply(text="should not be asked for"))
    asked = asyncio.Event()
    never = asyncio.Event()

    async def wait_forever(call_id: str, options: list[PermissionOption]) -> str | None:
        asked.set()
        await never.wait()
        return None

    setup = make_setup(tmp_path, openai_server, mode="ask")
    async with connected(setup, tmp_path / "ws") as editor:
        editor.client.decide = wait_forever
        sid = await editor.new()
        prompt = asyncio.ensure_future(editor.ask(sid, "write a.txt"))
        await asyncio.wait_for(asked.wait(), 10)
        await editor.conn.cancel(session_id=sid)
        assert await asyncio.wait_for(prompt, 10) == "cancelled"
        updates = editor.client.updates(sid)
        ended = [u for u in updates if u["sessionUpdate"] == "tool_call_update"]
        assert ended and ended[-1]["status"] == "failed"
        never.set()

    assert not (tmp_path / "ws" / "a.txt").exists()
    assert len(openai_server.bodies) == 1  # no request after the cancel


async def test_the_todo_list_is_sent_as_a_plan(tmp_path: Path, openai_server: OpenAIServer) -> None:
    todos = [
        {"content": "Read calc.py", "status": "completed"},
        {"content": "Fix add()", "status": "in_progress"},
        {"content": "Run the tests", "status": "pending"},
    ]
    openai_server.script(
        Reply(tool_calls=[ToolCallSpec("todo_write", json.dumps({"todos": todos}))]),
        Reply(text="Planned."),
    )

    async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
        sid = await editor.new()
        await editor.ask(sid, "plan the fix")
        plan = next(u for u in editor.client.updates(sid) if u["sessionUpdate"] == "plan")
        assert [(e["content"], e["status"]) for e in plan["entries"]] == [
            (t["content"], t["status"]) for t in todos
        ]


async def test_set_mode_switches_the_permission_mode_of_that_session(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.script(write_call("a.txt", "A"), Reply(text="done"))

    setup = make_setup(tmp_path, openai_server, mode="ask")
    async with connected(setup, tmp_path / "ws") as editor:
        sid = await editor.new()
        await editor.conn.set_session_mode(session_id=sid, mode_id="bypass")
        await editor.ask(sid, "write a.txt")
        assert editor.client.permission_requests == []
        with pytest.raises(RequestError) as caught:
            await editor.conn.set_session_mode(session_id=sid, mode_id="yolo")
        assert "unknown mode 'yolo'" in str(caught.value)

    assert (tmp_path / "ws" / "a.txt").read_text() == "A"


async def test_plan_mode_set_by_the_editor_refuses_writes_and_tells_the_model(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """Issue 29: the session's modes over ACP are AgentSession's — plan mode too."""
    openai_server.script(write_call("a.txt", "A"), Reply(text="planned"))

    async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
        sid = await editor.new()
        await editor.conn.set_session_mode(session_id=sid, mode_id="plan")
        await editor.ask(sid, "write a.txt")
        modes = [
            u["currentModeId"]
            for u in editor.client.updates(sid)
            if u["sessionUpdate"] == "current_mode_update"
        ]
        assert modes == ["plan"]

    assert not (tmp_path / "ws" / "a.txt").exists()
    first = openai_server.bodies[0]["messages"]
    assert any("Plan mode is active" in str(m.get("content")) for m in first)


async def test_the_session_list_shows_this_workspaces_sessions_newest_first(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
        first = await editor.new()
        await editor.ask(first, "the first one")
        second = await editor.new()
        await editor.ask(second, "the second one")
        listed = await editor.conn.list_sessions(cwd=str(editor.workspace))
        titles = {s.session_id: s.title for s in listed.sessions}
        assert titles[first] == "the first one" and titles[second] == "the second one"


async def test_status_and_help_are_answered_by_cairn_not_the_model(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
        sid = await editor.new()
        assert await editor.ask(sid, "/status") == "end_turn"
        status = editor.client.agent_text(sid)
        assert "window       32,768" in status and "compactions  0" in status
        assert await editor.ask(sid, "/help") == "end_turn"
        assert "/compact [instructions]" in editor.client.agent_text(sid)
        # Issue 26: the same reports as every surface, as commands.
        assert await editor.ask(sid, "/context") == "end_turn"
        assert "context      " in editor.client.agent_text(sid)
        assert await editor.ask(sid, "/cost") == "end_turn"
        assert "output       0 tokens" in editor.client.agent_text(sid)
        assert await editor.ask(sid, "/model") == "end_turn"
        assert "window       32,768" in editor.client.agent_text(sid)

    assert openai_server.bodies == []


async def test_clear_starts_a_new_session_behind_the_thread_and_the_old_one_stays_loadable(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
        sid = await editor.new()
        openai_server.script(Reply(text="first answer"))
        await editor.ask(sid, "before the clear")
        await editor.ask(sid, "/clear")
        assert "New session" in editor.client.agent_text(sid)
        openai_server.script(Reply(text="second answer"))
        await editor.ask(sid, "after the clear")
    messages = openai_server.bodies[-1]["messages"]
    assert [m.get("content") for m in messages if m["role"] == "user"] == ["after the clear"]
    async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
        await editor.conn.load_session(cwd=str(editor.workspace), session_id=sid)
        users = [
            u["content"]["text"]
            for u in editor.client.updates(sid)
            if u["sessionUpdate"] == "user_message_chunk"
        ]
        assert users == ["before the clear"]


async def test_clear_while_compacting_is_refused_and_the_summary_stays_in_its_session(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    gate = threading.Event()
    answering(openai_server)

    try:
        async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
            sid = await editor.new()
            await converse(editor, sid)
            answering(openai_server, hold=gate)
            compacting = asyncio.ensure_future(editor.ask(sid, "/compact"))
            while ("cairn/compactionStateChange", {"sessionId": sid, "isCompacting": True}) not in (
                editor.client.extensions
            ):
                await asyncio.sleep(0.01)
            mark = len(editor.client.wire)
            assert await editor.ask(sid, "/clear") == "end_turn"
            refused = "".join(
                u["content"]["text"]
                for u in since(editor, mark, sid)
                if u["sessionUpdate"] == "agent_message_chunk"
            )
            assert "cannot clear the session" in refused and "compacting" in refused
            gate.set()
            assert await compacting == "end_turn"
            result = await editor.conn.ext_method("cairn/compact", {"sessionId": sid})
            # Right after a compaction, /compact re-summarizes the history whole
            # (old summary included, issue 25 item 4): a second fork, a second block.
            assert result["status"] == "completed", result
            assert await editor.ask(sid, "/clear") == "end_turn"  # the guard is lifted
    finally:
        gate.set()
    assert sum(is_fork(b) for b in openai_server.bodies) == 2


async def test_a_provider_error_is_said_in_the_thread_and_the_session_goes_on(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.script(
        Reply.http_error(400, "This model's maximum context length is broken today", code="bad"),
        Reply(text="Recovered."),
    )

    async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
        sid = await editor.new()
        assert await editor.ask(sid, "first") == "end_turn"
        said = editor.client.agent_text(sid).strip()
        assert said.startswith("Error: ") and "Traceback" not in said
        assert said.count("Error: ") == 1
        assert await editor.ask(sid, "second") == "end_turn"
        assert editor.client.agent_text(sid).endswith("Recovered.")


async def test_a_refused_or_cut_answer_ends_with_refusal_or_max_tokens(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.script(
        Reply(text="I can't help with that.", finish_reason="content_filter"),
        Reply(text="The answer was cut", finish_reason="length"),
        Reply(text="A whole answer."),
    )

    async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
        sid = await editor.new()
        assert await editor.ask(sid, "something forbidden") == "refusal"
        assert await editor.ask(sid, "something long") == "max_tokens"
        assert await editor.ask(sid, "something fine") == "end_turn"


async def test_a_second_prompt_while_one_runs_is_refused(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    gate = threading.Event()
    openai_server.script(Reply(text="slow answer " * 10, hold=gate, hold_after=2))

    try:
        async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
            sid = await editor.new()
            first = asyncio.ensure_future(editor.ask(sid, "one"))
            while "agent_message_chunk" not in editor.client.kinds(sid):
                await asyncio.sleep(0.01)
            with pytest.raises(RequestError) as caught:
                await editor.ask(sid, "two")
            assert "already running a prompt" in str(caught.value)
            gate.set()
            assert await first == "end_turn"
    finally:
        gate.set()


async def test_compact_extension_checks_its_params(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
        sid = await editor.new()
        bad: list[dict[str, Any]] = [
            {},
            {"sessionId": 7},
            {"sessionId": sid, "customInstructions": ["x"]},
            {"sessionId": "nope"},
        ]
        for params in bad:
            with pytest.raises(RequestError):
                await editor.conn.ext_method("cairn/compact", params)
        with pytest.raises(RequestError) as caught:
            await editor.conn.ext_method("cairn/unknown", {"sessionId": sid})
        assert caught.value.code == -32601
