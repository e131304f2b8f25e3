"""The event protocol: stable wire names, one codec, the ordering rules, one state machine."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cairn.agent.commands import run_command
from cairn.agent.events import (
    EVENT_TYPES,
    CompactBlockAdded,
    CompactionContentUpdate,
    CompactionStateChange,
    ErrorEvent,
    Event,
    EventFormatError,
    MessageAdded,
    MessageUpdated,
    Notice,
    PermissionRequested,
    StatusChange,
    ToolFinished,
    ToolStarted,
    UsageUpdate,
    event_from_wire,
    event_to_wire,
)
from cairn.agent.loop import run_turn
from cairn.agent.runtime import Runtime
from cairn.agent.settings import Settings
from cairn.messages import ToolCall, assistant, tool_result, user
from cairn.provider import ModelConfig, OpenAIProvider
from support.cli_run import cairn_p
from support.openai_server import (
    OpenAIServer,
    Reply,
    ToolCallSpec,
)

#: DESIGN §7: the wire names every surface and client relies on.
WIRE_NAMES = {
    "messageAdded", "messageUpdated", "toolStarted", "toolFinished", "permissionRequested",
    "statusChange", "compactionStateChange", "compactionContentUpdate", "compactBlockAdded",
    "summaryPrepared", "usage", "notice", "error", "modeChange", "queueChange",
}  # fmt: skip
SUMMARY = "<summary>\n## Objective and constraints\nRead the notes.\n</summary>"


def test_every_event_has_its_stable_wire_name() -> None:
    assert {t.WIRE for t in EVENT_TYPES} == WIRE_NAMES
    assert len(EVENT_TYPES) == len(WIRE_NAMES)


def test_fields_go_on_the_wire_in_camel_case() -> None:
    assert event_to_wire(CompactionStateChange(True)) == {
        "type": "compactionStateChange",
        "isCompacting": True,
    }
    assert event_to_wire(UsageUpdate(1_234, window=8_192, input_budget=4_096)) == {
        "type": "usage",
        "latestTotalTokens": 1_234,
        "window": 8_192,
        "inputBudget": 4_096,
    }
    message = user("hi")
    wire = event_to_wire(MessageAdded(message))
    assert wire["type"] == "messageAdded"
    assert isinstance(wire["message"], dict) and wire["message"]["id"] == message.id


texts = st.text(max_size=40)
messages = st.builds(
    lambda role, text: user(text) if role == "user" else assistant(text),
    st.sampled_from(["user", "assistant"]),
    texts,
)
calls = st.builds(ToolCall, texts, texts, texts)
events: st.SearchStrategy[Event] = st.one_of(
    st.builds(MessageAdded, messages),
    st.builds(MessageUpdated, texts, texts, texts),
    st.builds(ToolStarted, calls),
    st.builds(ToolFinished, texts, st.builds(lambda t: tool_result("c1", t), texts)),
    st.builds(CompactionStateChange, st.booleans()),
    st.builds(CompactionContentUpdate, texts),
    st.builds(CompactBlockAdded, messages),
    st.builds(UsageUpdate, st.integers(0, 10**7), st.none() | st.integers(1, 10**6)),
    st.builds(StatusChange, st.sampled_from(["idle", "streaming", "tools", "compacting"])),
    st.builds(Notice, texts),
    st.builds(PermissionRequested, texts, texts, texts),
    st.builds(ErrorEvent, texts, st.none() | texts),
)


@given(events)
def test_the_codec_round_trips_every_event_through_json(event: Event) -> None:
    wire = json.loads(json.dumps(event_to_wire(event)))
    assert event_from_wire(wire) == event


@pytest.mark.parametrize(
    "bad",
    [
        None,
        [],
        {"type": 3},
        {"type": "nope"},
        {"type": "notice"},
        {"type": "messageAdded", "message": 1},
    ],
)
def test_a_bad_wire_event_is_an_error_naming_it(bad: Any) -> None:
    with pytest.raises(EventFormatError):
        event_from_wire(bad)


# ---------------------------------------------------------------------------
# The state machine and the ordering rules, on a real turn


def is_fork(body: dict[str, Any]) -> bool:
    last = body["messages"][-1]
    return last["role"] == "user" and "TEXT ONLY" in str(last.get("content"))


def runtime(workspace: Path, server: OpenAIServer, tmp_path: Path, window: int) -> Runtime:
    model = ModelConfig(model="test-model", base_url=server.base_url, context_window=window)
    return Runtime(
        workspace,
        model,
        OpenAIProvider(model),
        settings=Settings(),
        home=tmp_path / "home",
        permission_mode="bypass",
    )


def test_status_goes_streaming_tools_streaming_idle_and_compacting_is_its_own_state(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """Regression: the status went back to idle while tools ran (a /compact then passed
    the guard) and 'compacting' was declared but never set."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("a note about the build\n" * 300)
    plan = [
        Reply(tool_calls=[ToolCallSpec("read_file", '{"path": "notes.txt"}')]) for _ in range(6)
    ]

    def model(body: dict[str, Any]) -> Reply:
        if is_fork(body):
            return Reply(text=SUMMARY)
        return plan.pop(0) if plan else Reply(text="Done.")

    openai_server.respond_with(model)
    rt = runtime(workspace, openai_server, tmp_path, window=12_288)
    session = rt.new_session()
    seen: list[Event] = []
    compact_while_tools: list[str] = []

    def watch(event: Event) -> None:
        seen.append(event)
        if isinstance(event, ToolStarted) and not compact_while_tools:
            # What the /compact guard sees while a tool runs.
            compact_while_tools.append(session.status)

    session.events.on(watch)
    result = asyncio.run(run_turn(session, "read the notes again and again"))
    outcome = asyncio.run(run_command(rt, "/compact", ""))
    rt.close()
    assert result.text == "Done."
    assert compact_while_tools == ["tools"]
    statuses = [e.status for e in seen if isinstance(e, StatusChange)]
    # Only the transitions the machine allows, starting and ending idle.
    allowed = {
        ("idle", "streaming"), ("streaming", "tools"), ("tools", "streaming"),
        ("streaming", "idle"), ("tools", "idle"),
        ("idle", "compacting"), ("compacting", "idle"),
        ("tools", "compacting"), ("compacting", "tools"),
    }  # fmt: skip
    path = ["idle", *statuses]
    assert all((a, b) in allowed for a, b in itertools.pairwise(path)), path
    assert path[-1] == "idle" and "tools" in path and "compacting" in path
    # compactionStateChange(true) is always followed by exactly one (false); the tail
    # and the block come only between the two.
    depth = 0
    for event in seen:
        if isinstance(event, CompactionStateChange):
            assert event.is_compacting == (depth == 0)
            depth += 1 if event.is_compacting else -1
        elif isinstance(event, CompactionContentUpdate | CompactBlockAdded):
            assert depth == 1
    assert depth == 0
    # Each tool call starts before it finishes, and both come before its result's message.
    order = {id(e): i for i, e in enumerate(seen)}
    for started in (e for e in seen if isinstance(e, ToolStarted)):
        finished = next(
            e for e in seen if isinstance(e, ToolFinished) and e.call_id == started.call.id
        )
        added = next(
            e for e in seen
            if isinstance(e, MessageAdded) and e.message.tool_call_id == started.call.id
        )  # fmt: skip
        assert order[id(started)] < order[id(finished)] < order[id(added)]
    assert outcome.text.startswith("compacted") or "nothing to compact" in outcome.text


def test_compact_while_tools_run_is_ignored(tmp_path: Path, openai_server: OpenAIServer) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    rt = runtime(workspace, openai_server, tmp_path, window=32_768)
    session = rt.new_session()
    session.set_status("tools")
    outcome = asyncio.run(run_command(rt, "/compact", ""))
    rt.close()
    assert outcome.text == "/compact ignored: tools are running; try again when the turn ends"


def test_stream_json_prints_the_wire_form(tmp_path: Path, openai_server: OpenAIServer) -> None:
    """cairn -p --output-format stream-json speaks the same codec as every surface."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {
        "CAIRN_MODEL": "test-model",
        "OPENAI_BASE_URL": openai_server.base_url,
        "CAIRN_HOME": str(tmp_path / "home"),
    }
    done = cairn_p("-p", "hi", "--output-format", "stream-json", cwd=workspace, env=env)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    *streamed, result = lines
    assert result["type"] == "result"
    assert {e["type"] for e in streamed} <= WIRE_NAMES
    assert {"messageAdded", "statusChange"} <= {e["type"] for e in streamed}
    for wire in streamed:
        event_from_wire(wire)  # every line decodes with the one codec
    assert any(isinstance(event_from_wire(w), MessageAdded) for w in streamed)
