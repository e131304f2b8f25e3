"""Seed 004, 手动压缩与压缩状态内联提示 (the IDE story), the agent's side, scenario by
scenario: ``/compact`` typed in an editor reaches Cairn over ACP as a compact request,
and the compaction state goes out as notifications scoped to its session — Cairn's
``_cairn/…`` extensions always, the protocol's compaction updates when the client
advertises them, a ``think`` tool call when it does not."""

from __future__ import annotations

import asyncio
import itertools
import threading
from pathlib import Path

from cairn.surfaces.tail import stream_tail
from support.acp_client import (
    ANSWER,
    SUMMARY,
    answering,
    arrived,
    capabilities,
    compaction_notices,
    connected,
    converse,
    is_fork,
    make_setup,
    since,
)
from support.openai_server import (
    OpenAIServer,
    Reply,
)


async def test_compact_typed_in_the_client_runs_a_compaction_and_is_never_sent_to_the_model(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    answering(openai_server)

    async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
        sid = await editor.new()
        await converse(editor, sid)
        assert await editor.ask(sid, "/compact") == "end_turn"
        await converse(editor, sid, 2)
        result = await editor.conn.ext_method("cairn/compact", {"sessionId": sid})
        assert result["status"] == "completed"
        assert result["preTokens"] > result["postTokens"] > 0
        assert result["strategy"] == "llm"

    bodies = openai_server.bodies
    assert sum(is_fork(b) for b in bodies) == 2
    sent = [str(m.get("content")) for b in bodies for m in b["messages"] if m["role"] == "user"]
    assert not any("/compact" in text for text in sent)


async def test_compact_instructions_travel_as_custom_instructions_and_reach_the_summary_request(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    answering(openai_server)

    async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
        sid = await editor.new()
        await converse(editor, sid)
        await editor.conn.ext_method(
            "cairn/compact",
            {"sessionId": sid, "customInstructions": "focus on the API design"},
        )
        await converse(editor, sid, 2)
        assert await editor.ask(sid, "/compact keep the failing test names") == "end_turn"

    forks = [b for b in openai_server.bodies if is_fork(b)]
    assert len(forks) == 2
    assert "focus on the API design" in str(forks[0]["messages"][-1]["content"])
    assert "keep the failing test names" in str(forks[1]["messages"][-1]["content"])


async def test_compaction_start_sends_compaction_state_change_true_for_manual_and_automatic(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    answering(openai_server)

    # An 8k window: a few long answers cross the compaction threshold by themselves.
    setup = make_setup(tmp_path, openai_server, context_window=8_192)
    async with connected(setup, tmp_path / "ws") as editor:
        sid = await editor.new()
        await converse(editor, sid, 2)
        await editor.ask(sid, "/compact")
        manual = compaction_notices(editor, sid)
        assert manual[0] == ("state", True) and manual[-1] == ("state", False)
        openai_server.respond_with(
            lambda body: Reply(text=SUMMARY) if is_fork(body) else Reply(text=ANSWER * 6)
        )
        turns = 0
        while sum(is_fork(b) for b in openai_server.bodies) < 2 and turns < 30:
            await editor.ask(sid, f"more about calc.py, part {turns}")
            turns += 1
        automatic = compaction_notices(editor, sid)[len(manual) :]
        assert automatic[0] == ("state", True) and automatic[-1] == ("state", False)
        states = [value for kind, value in compaction_notices(editor, sid) if kind == "state"]
        assert states == [True, False, True, False]


async def test_compaction_content_update_carries_the_accumulated_fork_text_and_none_before_any(
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
            for _ in range(500):
                if any(kind == "content" for kind, _ in compaction_notices(editor, sid)):
                    break
                await asyncio.sleep(0.01)
            held = compaction_notices(editor, sid)
            assert held[0] == ("state", True) and ("state", False) not in held
            gate.set()
            assert await compacting == "end_turn"
            notices = compaction_notices(editor, sid)
            contents = [value for kind, value in notices if kind == "content"]
            assert contents and contents[-1] == SUMMARY
            # Accumulated, not deltas: each one extends the one before.
            assert all(b.startswith(a) for a, b in itertools.pairwise(contents))
            assert notices[1][0] == "content"  # no content before the fork wrote any
    finally:
        gate.set()


async def test_compaction_end_sends_compaction_state_change_false_also_when_it_fails(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    answering(openai_server)

    async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
        sid = await editor.new()
        await converse(editor, sid)
        openai_server.respond_with(
            lambda body: Reply.http_error(500, "summarizer down") if is_fork(body) else None
        )
        result = await editor.conn.ext_method("cairn/compact", {"sessionId": sid})
        assert result["status"] == "failed" and result["error"]
        states = [v for k, v in compaction_notices(editor, sid) if k == "state"]
        assert states == [True, False]
        # The session goes on, and compacts once the summarizer is back.
        answering(openai_server)
        assert await editor.ask(sid, "still there?") == "end_turn"
        result = await editor.conn.ext_method("cairn/compact", {"sessionId": sid})
        assert result["status"] == "completed"
        states = [v for k, v in compaction_notices(editor, sid) if k == "state"]
        assert states == [True, False, True, False]


async def test_a_second_compact_while_one_runs_is_skipped(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    gate = threading.Event()
    answering(openai_server)

    try:
        async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
            sid = await editor.new()
            await converse(editor, sid)
            answering(openai_server, hold=gate)
            first = asyncio.ensure_future(
                editor.conn.ext_method("cairn/compact", {"sessionId": sid})
            )
            while ("state", True) not in compaction_notices(editor, sid):
                await asyncio.sleep(0.01)
            second = await editor.conn.ext_method("cairn/compact", {"sessionId": sid})
            assert second["status"] == "skipped"
            assert "already running" in second["message"]
            mark = len(editor.client.wire)
            assert await editor.ask(sid, "/compact") == "end_turn"
            assert "already running" in "".join(
                u["content"]["text"]
                for u in since(editor, mark, sid)
                if u["sessionUpdate"] == "agent_message_chunk"
            )
            gate.set()
            assert (await first)["status"] == "completed"
    finally:
        gate.set()
    assert sum(is_fork(b) for b in openai_server.bodies) == 1


async def test_compact_while_a_prompt_streams_is_ignored_with_a_notice(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    gate = threading.Event()
    answering(openai_server)

    try:
        async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
            sid = await editor.new()
            await converse(editor, sid)
            openai_server.script(Reply(text=ANSWER, hold=gate, hold_after=3))
            streaming = asyncio.ensure_future(editor.ask(sid, "explain it again"))
            while "agent_message_chunk" not in editor.client.kinds(sid)[-1:]:
                await asyncio.sleep(0.01)
            result = await editor.conn.ext_method("cairn/compact", {"sessionId": sid})
            assert result["status"] == "skipped" and "streaming" in result["message"]
            gate.set()
            assert await streaming == "end_turn"  # the response was not aborted
    finally:
        gate.set()
    assert not any(is_fork(b) for b in openai_server.bodies)


async def test_compaction_state_changes_insert_no_message_into_the_thread(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    answering(openai_server)

    for advertised in (False, True):
        workspace = tmp_path / f"ws-{advertised}"
        caps = capabilities(compaction=advertised)
        setup = make_setup(tmp_path, openai_server)
        async with connected(setup, workspace, client_capabilities=caps) as editor:
            sid = await editor.new()
            await converse(editor, sid)
            mark = len(editor.client.wire)
            await editor.ask(sid, "/compact")
            kinds = {u["sessionUpdate"] for u in since(editor, mark, sid)}
            assert not kinds & {"agent_message_chunk", "user_message_chunk"}, kinds


async def test_the_compaction_hint_is_scoped_to_the_session_that_compacts(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    answering(openai_server)

    async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
        left = await editor.new()
        right = await editor.new(tmp_path / "ws")
        assert left != right
        await converse(editor, left)
        await converse(editor, right, 1)
        mark = len(editor.client.wire)
        await editor.ask(left, "/compact")
        assert compaction_notices(editor, left)
        assert compaction_notices(editor, right) == []
        assert not any("compact" in str(u).lower() for u in since(editor, mark, right)), (
            "the other pane got compaction updates"
        )


async def test_a_client_that_advertises_session_compaction_gets_the_protocols_updates(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    answering(openai_server)

    caps = capabilities(compaction=True)
    setup = make_setup(tmp_path, openai_server)
    async with connected(setup, tmp_path / "ws", client_capabilities=caps) as editor:
        sid = await editor.new()
        await converse(editor, sid)
        mark = len(editor.client.wire)
        await editor.ask(sid, "/compact")
        got = [
            u
            for u in since(editor, mark, sid)
            if u["sessionUpdate"] in ("compaction_update", "compaction_summary_chunk")
        ]
        assert got[0]["sessionUpdate"] == "compaction_update"
        assert got[0]["status"] == "in_progress"
        compaction_id = got[0]["compactionId"]
        assert all(u["compactionId"] == compaction_id for u in got)
        chunks = "".join(
            u["content"]["text"] for u in got if u["sessionUpdate"] == "compaction_summary_chunk"
        )
        assert chunks == SUMMARY
        assert got[-1]["status"] == "completed"
        assert got[-1]["summary"][0]["type"] == "text" and got[-1]["summary"][0]["text"]
        assert not any(u["sessionUpdate"] == "tool_call" for u in since(editor, mark, sid))


async def test_a_client_without_the_capability_sees_the_compaction_as_a_think_tool_call(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    answering(openai_server)

    async with connected(make_setup(tmp_path, openai_server), tmp_path / "ws") as editor:
        sid = await editor.new()
        await converse(editor, sid)
        mark = len(editor.client.wire)
        await editor.ask(sid, "/compact")
        got = since(editor, mark, sid)
        assert not any(u["sessionUpdate"].startswith("compaction") for u in got)
        start = next(u for u in got if u["sessionUpdate"] == "tool_call")
        assert start["kind"] == "think" and start["title"] == "Compacting conversation"
        progress = [
            u
            for u in got
            if u["sessionUpdate"] == "tool_call_update" and u["toolCallId"] == start["toolCallId"]
        ]
        texts = [u["content"][0]["content"]["text"] for u in progress if u.get("content")]
        # While it runs: the 30-character tail of what the fork streamed so far.
        contents = [v for k, v in compaction_notices(editor, sid) if k == "content"]
        assert texts[:-1] == [stream_tail(c) for c in contents]
        assert texts[-2] == stream_tail(SUMMARY)
        assert progress[-1]["status"] == "completed"
        assert texts[-1].startswith("Conversation compacted · ")


async def test_load_replays_the_history_with_the_compact_block_in_place_before_it_answers(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    answering(openai_server)

    setup = make_setup(tmp_path, openai_server)
    async with connected(setup, tmp_path / "ws") as editor:
        sid = await editor.new()
        await converse(editor, sid, 2)
        await editor.ask(sid, "/compact")
        await editor.ask(sid, "after the compaction")
    setup = make_setup(tmp_path, openai_server)  # a new process: nothing open
    async with connected(setup, tmp_path / "ws") as editor:
        await editor.conn.load_session(cwd=str(tmp_path / "ws"), session_id=sid)
        response_at = next(
            i for i, m in enumerate(editor.client.wire) if "result" in m and m["id"] == 1
        )
        before = [
            m["params"]["update"]
            for m in editor.client.wire[:response_at]
            if m.get("method") == "session/update"
        ]
        kinds = [u["sessionUpdate"] for u in before]
        users = [u["content"]["text"] for u in before if u["sessionUpdate"] == "user_message_chunk"]
        assert users == [
            "question 0 about calc.py",
            "question 1 about calc.py",
            "after the compaction",
        ]
        block = kinds.index("tool_call")
        assert before[block]["title"] == "Compacting conversation"
        # Old messages before the block, the new ones after it.
        assert kinds[:block].count("agent_message_chunk") == 2
        assert kinds[block:].count("agent_message_chunk") == 1
        label = before[block + 1]["content"][0]["content"]["text"]
        assert label.startswith("Conversation compacted · ")
        # Every update of the load before its response: the commands, then the meter.
        assert kinds[-2:] == ["available_commands_update", "usage_update"]
        assert kinds.count("available_commands_update") == 1
        assert editor.client.kinds() == kinds  # and nothing of it after


async def test_cancel_during_a_compaction_ends_it_cancelled_with_the_state_back_to_false(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    gate = threading.Event()
    answering(openai_server)

    try:
        caps = capabilities(compaction=True)
        setup = make_setup(tmp_path, openai_server)
        async with connected(setup, tmp_path / "ws", client_capabilities=caps) as editor:
            sid = await editor.new()
            await converse(editor, sid)
            answering(openai_server, hold=gate)
            mark = len(editor.client.wire)
            compacting = asyncio.ensure_future(
                editor.conn.ext_method("cairn/compact", {"sessionId": sid})
            )
            while ("state", True) not in compaction_notices(editor, sid):
                await asyncio.sleep(0.01)
            await editor.conn.cancel(session_id=sid)
            result = await asyncio.wait_for(compacting, 10)
            assert result["status"] == "cancelled"
            states = [v for k, v in compaction_notices(editor, sid) if k == "state"]
            assert states == [True, False]
            updates = [
                u for u in since(editor, mark, sid) if u["sessionUpdate"] == "compaction_update"
            ]
            assert [u["status"] for u in updates] == ["in_progress", "cancelled"]
            # Nothing was written: the next compaction still has the whole history to work on.
            gate.set()
            answering(openai_server)
            result = await editor.conn.ext_method("cairn/compact", {"sessionId": sid})
            assert result["status"] == "completed"
    finally:
        gate.set()


async def test_cairn_notifications_go_only_to_a_client_that_asked_for_them(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    answering(openai_server)

    for asked in (False, True):
        caps = capabilities(compaction=True, cairn=asked)
        setup = make_setup(tmp_path, openai_server)
        async with connected(setup, tmp_path / f"ws-{asked}", client_capabilities=caps) as ed:
            sid = await ed.new()
            await converse(ed, sid)
            await ed.ask(sid, "/compact")
            methods = [m for m in ed.client.methods() if m.startswith("_")]
            if asked:
                assert methods[0] == "_cairn/compactionStateChange"
                assert methods[-1] == "_cairn/compactionStateChange"
                assert "_cairn/compactionContentUpdate" in methods
            else:
                assert methods == []
            # The protocol's own updates go to the client that advertised them either way.
            statuses = [
                u["status"]
                for u in ed.client.updates(sid)
                if u["sessionUpdate"] == "compaction_update"
            ]
            assert statuses == ["in_progress", "completed"]


async def test_a_failed_compactions_error_says_why_as_compact_does(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    answering(openai_server)

    caps = capabilities(compaction=True)
    setup = make_setup(tmp_path, openai_server)
    async with connected(setup, tmp_path / "ws", client_capabilities=caps) as editor:
        sid = await editor.new()
        await converse(editor, sid)
        openai_server.respond_with(
            lambda body: Reply.http_error(500, "summarizer down") if is_fork(body) else None
        )
        result = await editor.conn.ext_method("cairn/compact", {"sessionId": sid})
        assert result["status"] == "failed"
        mark = len(editor.client.wire)
        assert await editor.ask(sid, "/compact") == "end_turn"
        said = "".join(
            u["content"]["text"]
            for u in since(editor, mark, sid)
            if u["sessionUpdate"] == "agent_message_chunk"
        ).strip()
    failed = [u for u in editor.client.updates(sid) if u["sessionUpdate"] == "compaction_update"]
    assert [u["status"] for u in failed] == ["in_progress", "failed"] * 2
    assert failed[1]["error"] == result["error"]
    assert failed[3]["error"] == said
    assert "summarizer" in said or "500" in said


def test_a_summary_prepared_in_the_band_is_a_quiet_notification_and_no_hint(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """Issue 28: the summary prepared in the background reaches a client that asked for
    Cairn's extensions as ``_cairn/summaryPrepared`` (preparing → ready → none) — never
    the compaction hint, a compaction update or a think tool call while nobody waits."""
    openai_server.respond_with(
        lambda body: Reply(text=SUMMARY) if is_fork(body) else Reply(text=ANSWER * 3)
    )

    async def scenario() -> None:
        caps = capabilities(compaction=True, cairn=True)
        setup = make_setup(tmp_path, openai_server, context_window=65_536)
        async with connected(setup, tmp_path / "ws", client_capabilities=caps) as editor:
            sid = await editor.new()
            for turn in itertools.count():
                assert turn < 80, ("never compacted", editor.client.extensions[-8:])
                await editor.ask(sid, f"more about calc.py, part {turn}")
                if any(is_fork(b) for b in openai_server.bodies) and any(
                    m == "cairn/summaryPrepared" and p["state"] is None
                    for m, p in editor.client.extensions
                ):
                    break
            await arrived(editor, "usage_update")
            wire = [
                (m, p.get("state", p.get("isCompacting")))
                for m, p in editor.client.extensions
                if p["sessionId"] == sid
            ]
            prepared = [v for m, v in wire if m == "cairn/summaryPrepared"]
            assert prepared[0] == "preparing" and prepared[-1] is None
            assert set(prepared) <= {"preparing", "ready", None}
            # While it was prepared nobody waited: no hint until the line commits it.
            first = wire.index(("cairn/summaryPrepared", "preparing"))
            hint = wire.index(("cairn/compactionStateChange", True))
            assert hint > first
            assert ("cairn/summaryPrepared", "ready") in wire[first:hint] or prepared[
                : prepared.index(None)
            ] == ["preparing"]
            statuses = [
                u["status"]
                for u in editor.client.updates(sid)
                if u["sessionUpdate"] == "compaction_update"
            ]
            assert statuses == ["in_progress", "completed"]  # the commit alone

    asyncio.run(scenario())
    forks = [b for b in openai_server.bodies if is_fork(b)]
    assert len(forks) == 1  # prepared once, committed without a second
