"""AgentSession, the facade every surface uses: prompt, compact, cancel, answer, events,
status, ui_messages, usage, and the session guard on new / resume / clear."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from cairn import AgentSession, SessionBusyError
from cairn.agent.events import (
    CompactionStateChange,
    Event,
    MessageAdded,
    PermissionRequested,
    StatusChange,
)
from cairn.agent.facade import MeterReading, SessionUsage
from cairn.agent.runtime import Runtime
from cairn.agent.settings import Settings
from cairn.provider import ModelConfig, OpenAIProvider
from cairn.store import CompactionRecord, read_transcript
from support.openai_server import (
    OpenAIServer,
    Reply,
    ToolCallSpec,
)

SUMMARY = "<summary>\n## Objective and constraints\nWrite the file.\n</summary>"


def runtime(tmp_path: Path, server: OpenAIServer) -> Runtime:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    model = ModelConfig(model="test-model", base_url=server.base_url, context_window=32_768)
    return Runtime(
        workspace,
        model,
        OpenAIProvider(model),
        settings=Settings(),
        home=tmp_path / "home",
        answers_permissions=True,
    )


def is_fork(body: dict[str, Any]) -> bool:
    last = body["messages"][-1]
    return last["role"] == "user" and "TEXT ONLY" in str(last.get("content"))


async def test_a_surface_drives_a_session_through_the_facade_alone(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    write = json.dumps({"path": "a.txt", "content": "A"})
    read = json.dumps({"path": "notes.txt"})
    plan = [
        *(Reply(tool_calls=[ToolCallSpec("read_file", read)]) for _ in range(3)),
        Reply(tool_calls=[ToolCallSpec("write_file", write)]),
        Reply(text="Wrote a.txt."),
    ]
    openai_server.respond_with(
        lambda body: Reply(text=SUMMARY) if is_fork(body) else (plan.pop(0) if plan else None)
    )
    rt = runtime(tmp_path, openai_server)
    (rt.workspace / "notes.txt").write_text(
        "".join(f"note {i}: the file is a.txt\n" for i in range(300))
    )
    agent = AgentSession.new(rt)
    seen: list[Event] = []

    async def watch() -> None:
        async for event in agent.events():
            seen.append(event)
            if isinstance(event, PermissionRequested):
                # While the tool waits, the guard holds: no switching away.
                assert agent.status == "tools"
                with pytest.raises(SessionBusyError, match="is tools"):
                    agent.clear()
                with pytest.raises(SessionBusyError):
                    await agent.prompt("and another thing")
                assert agent.answer(event.id, "allow_once")

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0)
    result = await asyncio.wait_for(agent.prompt("write a.txt"), 60)
    assert result.text == "Wrote a.txt."
    outcome = await agent.compact("keep the file name")
    assert outcome.ok, outcome.text
    rt.close()  # closes the event stream too
    await asyncio.wait_for(watcher, 5)

    assert (rt.workspace / "a.txt").read_text() == "A"
    assert sorted(p.name for p in rt.workspace.iterdir()) == ["a.txt", "notes.txt"]
    assert agent.status == "idle"
    statuses = [e.status for e in seen if isinstance(e, StatusChange)]
    assert statuses[:3] == ["streaming", "tools", "streaming"] and "compacting" in statuses
    assert any(isinstance(e, MessageAdded) for e in seen)
    usage = agent.usage
    assert usage.window == 32_768 and usage.input_budget and usage.compactions == 1
    texts = [m.text for m in agent.ui_messages()]
    assert "write a.txt" in texts and "Wrote a.txt." in texts  # kept after the compaction
    assert agent.transcript_path.exists()


def test_new_resume_and_clear_open_the_runtime_s_sessions(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    rt = runtime(tmp_path, openai_server)
    first = AgentSession.new(rt)
    asyncio.run(first.prompt("hello"))
    cleared = first.clear()
    assert cleared.id != first.id
    listed = [s.id for s in AgentSession.sessions(rt)]
    assert first.id in listed
    again = AgentSession.resume(rt, first.id)
    assert again.id == first.id and next(m.text for m in again.ui_messages()) == "hello"
    with pytest.raises(ValueError, match="is a command"):
        asyncio.run(again.prompt("/compact"))
    rt.close()


def test_usage_is_the_latest_total_tokens_only(tmp_path: Path, openai_server: OpenAIServer) -> None:
    rt = runtime(tmp_path, openai_server)
    agent = AgentSession.new(rt)
    assert agent.usage.latest_total_tokens is None
    asyncio.run(agent.prompt("hi"))
    request = openai_server.requests[-1]
    assert request.body["stream"] is True
    latest = agent.usage.latest_total_tokens
    rt.close()
    assert isinstance(latest, int) and latest > 0


def _held_fork(release: threading.Event, answers: list[str]) -> tuple[Reply, Any]:
    """A fork reply that stalls after a few deltas, and a responder using it."""
    fork = Reply(text=SUMMARY, hold=release, hold_after=3)

    def responder(body: dict[str, Any]) -> Reply:
        if is_fork(body):
            return fork
        return Reply(text=answers.pop(0) if answers else "Done.")

    return fork, responder


async def _until(condition: Any) -> None:
    for _ in range(2_000):  # a bound on polls, not a time limit
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


def test_cancel_stops_a_manual_compaction_before_it_writes_anything(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """Regression: cancel() did not reach a running /compact (the fork ran to its end)."""
    release = threading.Event()
    fork, responder = _held_fork(release, ["The plan. " * 2_000])
    openai_server.respond_with(responder)
    rt = runtime(tmp_path, openai_server)
    agent = AgentSession.new(rt)
    seen: list[Event] = []
    rt.current.events.on(seen.append)

    async def scenario() -> tuple[str, str]:
        await agent.prompt("make a plan")
        running = asyncio.create_task(agent.compact())
        await _until(lambda: fork.started.is_set() and agent.status == "compacting")
        agent.cancel()
        cancelled = await asyncio.wait_for(running, 60)  # a bound: without the cancel it hangs
        release.set()
        again = await agent.compact()  # the next one is not affected
        return cancelled.text, again.text

    try:
        cancelled, again = asyncio.run(scenario())
    finally:
        release.set()
        rt.close()
    assert cancelled == "/compact: compaction cancelled; the context is unchanged"
    assert again.startswith("compacted (llm)"), again
    states = [e.is_compacting for e in seen if isinstance(e, CompactionStateChange)]
    assert states == [True, False, True, False]
    records = read_transcript(agent.transcript_path).records
    assert sum(isinstance(r, CompactionRecord) for r in records) == 1  # the second one only


def test_cancel_during_an_automatic_compaction_stops_the_turn_and_sends_nothing(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    release = threading.Event()
    fork, responder = _held_fork(release, ["The log. " * 4_000])
    openai_server.respond_with(responder)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    model = ModelConfig(model="test-model", base_url=openai_server.base_url, context_window=12_288)
    rt = Runtime(
        workspace, model, OpenAIProvider(model), settings=Settings(), home=tmp_path / "home"
    )
    agent = AgentSession.new(rt)

    async def scenario() -> tuple[bool, int]:
        await agent.prompt("show me the log")
        sent_before = len(openai_server.bodies)
        turn = asyncio.create_task(agent.prompt("and now?"))
        await _until(lambda: fork.started.is_set())
        agent.cancel()
        result = await asyncio.wait_for(turn, 60)
        main_requests = [b for b in openai_server.bodies[sent_before:] if not is_fork(b)]
        return result.aborted, len(main_requests)

    try:
        aborted, main_requests = asyncio.run(scenario())
    finally:
        release.set()
        rt.close()
    assert aborted and main_requests == 0  # the turn's request was never sent
    records = read_transcript(agent.transcript_path).records
    assert not any(isinstance(r, CompactionRecord) for r in records)
    assert agent.status == "idle"


async def test_cancel_stops_a_response_whose_server_has_gone_quiet(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """A cancel does not wait for the next chunk: a server still reading a long
    prompt, or a stalled one, may send none for minutes."""
    quiet = threading.Event()
    openai_server.script(
        Reply(text="The first words, then silence. " * 10, hold=quiet, hold_after=3)
    )
    rt = runtime(tmp_path, openai_server)
    agent = AgentSession.new(rt)
    streamed = asyncio.Event()

    def watch(event: Event) -> None:
        if type(event).__name__ == "MessageUpdated":
            streamed.set()

    agent.on_event(watch)

    try:
        turn = asyncio.ensure_future(agent.prompt("tell me"))
        await asyncio.wait_for(streamed.wait(), 10)
        agent.cancel()
        # Without the race against the abort, this waits for as long as the server is quiet.
        result = await asyncio.wait_for(turn, 10)
        assert result.aborted
        assert agent.status == "idle"
    finally:
        quiet.set()
    kept = [m for m in agent.ui_messages() if m.role == "assistant"]
    # The partial answer is kept: whatever streamed before the cancel ("The " at least;
    # whether the next delta arrived first is a race, so it is not asserted).
    assert kept and kept[-1].text.startswith("The ")
    assert "The first words, then silence.".startswith(kept[-1].text.rstrip())
    rt.close()


def test_the_meter_shows_the_next_request_never_a_number_over_the_budget() -> None:
    """Issue 29 defect 12: the meter showed ``~4,297 / 4,096 (104%)`` and ``~36,401 / 4,096``."""
    assert SessionUsage(3_000, 8_192, 4_096, 0, 3_100).meter == MeterReading(3_000, False, False)
    assert SessionUsage(None, 8_192, 4_096, 0, 3_100).meter == MeterReading(3_100, True, False)
    assert SessionUsage(None, 8_192, 4_096, 0, 4_297).meter == MeterReading(None, True, True)
    assert SessionUsage(None, 8_192, 4_096, 2, 36_401).meter == MeterReading(None, True, True)
    # A long last answer: prompt and output together pass the budget.
    assert SessionUsage(4_200, 8_192, 4_096, 0, 4_150).meter == MeterReading(None, False, True)
    assert SessionUsage(4_096, 8_192, 4_096, 0, 4_000).meter == MeterReading(4_096, False, False)
    assert SessionUsage(None, None, None, 0, 90_000).meter == MeterReading(90_000, True, False)
