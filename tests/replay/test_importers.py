"""Importers of recorded sessions, on real recordings (``tests/fixtures/sessions``).

Expected counts were read off the fixture files themselves (see each test).
Tests marked ``shared`` run on the full files in ``../shared/data`` and skip
when that folder is absent.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import cast

import orjson
import pytest

from cairn.messages import (
    ImagePart,
    Message,
    MessageMeta,
    ToolCall,
    Usage,
    assistant,
    find_orphans,
    message_to_dict,
    system,
    tool_result,
    user,
)
from cairn.replay.importers import (
    FORMATS,
    IMPORTERS,
    PLACEHOLDER_RESULT,
    detect_format,
    import_sessions,
)
from cairn.replay.session import ImportResult, RecordedSession, SessionImportError
from cairn.store import (
    CompactionRecord,
    HandoffRecord,
    JsonlTranscriptStore,
    MessageRecord,
    SessionRecord,
)

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "sessions"
PYDICOM = FIXTURES / "swe-agent" / "pydicom-1458.traj"
MARSHMALLOW = FIXTURES / "swe-agent" / "marshmallow-1867-function-calling.traj"
TAU = FIXTURES / "tau-bench" / "gpt-4o-airline-first2.json"
OPENHANDS = FIXTURES / "openhands" / "multi-swe-bench-output-first.jsonl"
CLAUDE = FIXTURES / "formats" / "claude-code.jsonl"
CODEX = FIXTURES / "formats" / "codex-rollout.jsonl"
DEMO = ROOT / "examples" / "sessions" / "ctf-web-i_got_id_demo.traj"

#: The full recordings the fixtures above are cut from, shipped with their
#: licenses (a copy of the shared data, so that no test needs ``../shared``).
RECORDED = FIXTURES.parent / "recorded"
SHARED_SESSIONS = RECORDED / "sessions"

FIXTURE_FORMATS = {
    PYDICOM: "swe-agent",
    MARSHMALLOW: "swe-agent",
    TAU: "tau-bench",
    OPENHANDS: "openhands",
    CLAUDE: "claude-code",
    CODEX: "codex",
    DEMO: "swe-agent",
}


def only(result: ImportResult) -> RecordedSession:
    assert len(result.sessions) == 1
    return result.sessions[0]


def calls(session: RecordedSession) -> list[ToolCall]:
    return [c for m in session.messages for c in m.tool_calls]


def tool_names(session: RecordedSession) -> list[str]:
    names = []
    for tool in session.tools:
        function = tool.get("function")
        assert isinstance(function, dict)
        names.append(str(function.get("name")))
    return names


def roles(session: RecordedSession) -> str:
    return "".join(m.role[0].upper() for m in session.messages)


def assert_sound(session: RecordedSession) -> None:
    """The invariants every importer promises."""
    assert not find_orphans(session.messages)
    ids = [m.id for m in (*session.system, *session.messages)]
    assert len(ids) == len(set(ids)), "message ids must be unique"
    assert all(m.role != "system" for m in session.messages)
    assert all(m.role == "system" for m in session.system)
    for i, m in enumerate(session.messages):
        if m.role == "tool":  # a result sits in its call's round
            j = i
            while session.messages[j].role == "tool":
                j -= 1
            head = session.messages[j]
            assert head.role == "assistant"
            assert m.tool_call_id in {c.id for c in head.tool_calls}


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def error_of(path: Path, fmt: str = "auto", session: int | None = None) -> str:
    with pytest.raises(SessionImportError) as info:
        import_sessions(path, fmt, session)
    text = str(info.value)
    assert "\n" not in text, "an import error is one line"
    return text


# ---------------------------------------------------------------------------
# Each importer on its real fixture


def test_tau_bench_two_sessions() -> None:
    result = import_sessions(TAU)
    assert result.format == "tau-bench" and result.warnings == ()
    first, second = result.sessions
    assert (first.name, second.name) == ("task 0 trial 0", "task 1 trial 0")
    # traj: 32 and 12 messages, one system message each
    assert (len(first.messages), len(second.messages)) == (31, 11)
    assert len(calls(first)) == 8 and calls(second) == []
    assert first.system[0].text.startswith("# Airline Agent Policy")
    assert first.messages[0].text.startswith("Hi! I'm looking to book a flight from New York")
    assert first.messages[-1].text == "Thank you so much for your help! ###STOP###"
    call = calls(first)[0]
    assert (call.name, call.arguments) == ("get_user_details", '{"user_id":"mia_li_3668"}')
    assert call.id.startswith("call_")  # the recorded id is kept
    result_message = next(m for m in first.messages if m.tool_call_id == call.id)
    assert result_message.name == "get_user_details"
    assert result_message.text.startswith('{"name": {"first_name": "Mia", "last_name": "Li"}')
    assert sum(m.role == "tool" for m in first.messages) == 8
    for session in result.sessions:
        assert_sound(session)
        assert session.tools == ()


def test_tau_bench_session_n_and_stable_ids() -> None:
    second = only(import_sessions(TAU, session=1))
    assert second.name == "task 1 trial 0"
    again = import_sessions(TAU).sessions[1]
    assert [m.id for m in second.messages] == [m.id for m in again.messages]
    assert second.messages == again.messages
    assert "out of range" in error_of(TAU, session=2)
    assert "out of range" in error_of(TAU, session=-1)


def test_swe_agent_thought_action() -> None:
    result = import_sessions(PYDICOM)
    session = only(result)
    assert result.format == "swe-agent" and session.name == "pydicom-1458"
    # history: system, demo (dropped), the issue, then 12 actions and 11 observations;
    # the final ``submit`` has no observation and gets the placeholder.
    assert len(session.messages) == 25
    assert roles(session) == "U" + "AT" * 12
    assert len(session.system) == 1 and session.system[0].text.startswith("SETTING:")
    assert not any("--- DEMONSTRATION ---" in m.text for m in session.messages)
    assert session.messages[0].text.startswith("We're currently solving the following issue")
    names = [c.name for c in calls(session)]
    assert names[:4] == ["create", "edit", "bash", "find_file"]  # ``python …`` runs in bash
    assert names[-1] == "submit"
    first = session.messages[1]
    assert first.text.startswith("First, I'll create a new Python script")
    assert "```" not in first.text  # the thought, without the action block
    assert orjson.loads(first.tool_calls[0].arguments) == {"command": "create reproduce_bug.py"}
    observation = session.messages[2]
    assert observation.role == "tool" and observation.tool_call_id == first.tool_calls[0].id
    assert observation.text.startswith("[File: /pydicom__pydicom/reproduce_bug.py (1 lines total)]")
    last = session.messages[-1]
    assert last.text == PLACEHOLDER_RESULT and last.meta.synthetic
    assert len(result.warnings) == 1
    assert result.warnings[0].startswith("history[25]: call ")
    assert "(submit) has no recorded result" in result.warnings[0]
    assert_sound(session)


def test_swe_agent_function_calling() -> None:
    result = import_sessions(MARSHMALLOW)
    session = only(result)
    # history: system, the issue, 13 assistant messages with one tool call each, 13 tool messages
    assert result.warnings == ()
    assert len(session.messages) == 27 and roles(session) == "U" + "AT" * 13
    assert len(calls(session)) == 13
    first = calls(session)[0]
    assert (first.id, first.name, first.arguments) == (
        "call_9diWc1DYm4RLmPfHgIaP2wd",
        "bash",
        '{"command":"ls -F"}',
    )
    assert session.messages[2].tool_call_id == first.id  # paired through ``tool_call_ids``
    assert session.messages[2].text.startswith("AUTHORS.rst")
    assert calls(session)[-1].name == "submit"
    assert session.messages[-1].text.lstrip().startswith("diff --git a/src/marshmallow/fields.py")
    assert session.system[0].text.startswith("SETTING:")
    assert_sound(session)


def test_openhands_events() -> None:
    result = import_sessions(OPENHANDS)
    session = only(result)
    assert result.format == "openhands" and session.name == "ponylang__ponyc-4595"
    # 49 events: system, the task, recall action + observation (skipped), 23 actions
    # with tool_call_metadata and 22 observations; ``finish`` has no observation.
    assert len(session.messages) == 47
    assert roles(session) == "U" + "AT" * 23
    assert len(calls(session)) == 23
    assert tool_names(session) == ["execute_bash", "think", "finish", "str_replace_editor"]
    assert session.system[0].text.startswith("You are OpenHands agent")
    assert session.messages[0].text.startswith("<uploaded_files>\n/workspace/ponylang__ponyc__0.1")
    head = session.messages[1]
    assert head.id == "gen-1746001974-alxKxkQSJ8j9QsfNTvnX"  # model_response.id
    assert head.text.startswith("The task involves fixing an issue")
    assert head.tool_calls == (
        ToolCall(
            "toolu_01", "execute_bash", '{"command": "ls -l /workspace/ponylang__ponyc__0.1"}'
        ),
    )
    assert head.meta.usage == Usage(5920, 128, 6048)
    output = session.messages[2]
    assert output.id == "event-6" and output.name == "execute_bash"
    assert output.text.startswith("total 300\n")
    assert output.text.endswith("\n[The command completed with exit code 0.]")
    assert sum(m.meta.tool_error for m in session.messages) == 5  # ``success: false``
    assert calls(session)[-1].name == "finish"
    assert session.messages[-1].text == PLACEHOLDER_RESULT
    assert result.warnings == (
        "line 1: history[48]: call toolu_23 (finish) has no recorded result; "
        "added a placeholder result",
    )
    assert_sound(session)


def test_claude_code_transcript() -> None:
    result = import_sessions(CLAUDE)
    session = only(result)
    assert result.format == "claude-code" and result.warnings == ()
    assert session.name == "5b0c2e7a-91d4-4f3e-8a62-3c7d1e9f0b45"
    assert session.system == () and session.tools == ()
    # 20 records: 5 user + 8 assistant conversation records; the compact summary,
    # the API-error stand-in and every non-conversation record are skipped, and
    # the assistant records merge into 5 messages by message.id.
    assert roles(session) == "UATATATAA"
    assert [m.id for m in session.messages if m.role == "assistant"] == [
        "msg_synthA0001",
        "msg_synthB0002",
        "msg_synthC0003",
        "msg_synthD0004",
        "msg_synthE0005",
    ]
    first = session.messages[1]
    assert first.content is None  # only thinking and a tool call: thinking dropped
    assert first.tool_calls == (
        ToolCall(
            "toolu_synth01", "Read", '{"file_path":"/home/dev/invoicekit/invoicekit/money.py"}'
        ),
    )
    # usage of the group's last record: context = input + cache read + cache creation
    assert first.meta.usage == Usage(
        3 + 9800 + 4100,
        88,
        3 + 9800 + 4100 + 88,
        cache_read_input_tokens=9800,
        cache_creation_input_tokens=4100,
    )
    second = session.messages[3]
    assert second.text == (
        "round() uses banker's rounding on floats. Let me run the failing test to confirm."
    )
    assert [c.name for c in second.tool_calls] == ["Bash"]
    read = session.messages[2]
    assert read.id == "00000000-0000-4000-8000-000000000005"
    assert (read.tool_call_id, read.name) == ("toolu_synth01", "Read")
    assert read.text.startswith("     1→def round_money(x):")
    failed = session.messages[4]
    assert failed.meta.tool_error and failed.text.startswith("Exit code 1\nF.")
    texts = " ".join(m.text for m in session.messages)
    assert "[synthetic compact summary]" not in texts
    assert "Usage limit reached" not in texts
    assert session.messages[-1].text == "Adding the missing import, then rerunning the tests."
    assert_sound(session)


def test_codex_rollout() -> None:
    result = import_sessions(CODEX)
    session = only(result)
    assert result.format == "codex" and result.warnings == ()
    assert session.name == "0195a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
    # base instructions, then the leading developer message
    assert [m.text for m in session.system] == [
        "You are a coding agent. (synthetic base instructions)",
        "<permissions instructions>synthetic sandbox notes</permissions instructions>",
    ]
    assert roles(session) == "UUATTATA"
    context, question = session.messages[:2]
    assert context.text.startswith("<environment_context>") and context.meta.synthetic
    assert question.text == "Why does test_total_rounds_half_up fail?"
    assert not question.meta.synthetic
    parallel = session.messages[2]
    assert parallel.text == "I'll look at the rounding helper and run the test."
    assert [c.id for c in parallel.tool_calls] == ["call_synth0001", "call_synth0002"]
    assert parallel.meta.usage == Usage(9200, 240, 9440, cached_tokens=3072)
    ok, failed = session.messages[3:5]
    assert not ok.meta.tool_error and ok.name == "exec_command"
    assert failed.meta.tool_error  # "Process exited with code 1"
    assert "assert 2.67 == 2.68" in failed.text
    patch = session.messages[5]
    assert patch.tool_calls[0].name == "apply_patch"
    assert orjson.loads(patch.tool_calls[0].arguments)["input"].startswith("*** Begin Patch")
    assert patch.meta.usage == Usage(10700, 370, 11070, cached_tokens=9088)
    assert session.messages[6].text.startswith('{"output": "Success.')
    final = session.messages[-1]
    assert final.text.startswith("Python's round() uses banker's rounding")
    assert final.meta.usage is not None and final.meta.usage.prompt_tokens == 11700
    assert not any("Inspecting rounding helper" in m.text for m in session.messages)
    assert len(calls(session)) == 3
    assert_sound(session)


def test_cairn_transcript(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    prompt = system("You are Cairn.")
    ask = user("Fix the export.")
    call = ToolCall("call_1", "read_file", '{"path": "a.py"}')
    head = assistant("Reading.", [call], usage=Usage(100, 10, 110))
    answer = tool_result("call_1", "print('a')")
    hidden = Message("user", "budget note", meta=MessageMeta(hidden=True))
    restoration = Message("user", "restored a.py", meta=MessageMeta(synthetic=True))
    done = assistant("Done.")
    with JsonlTranscriptStore.create(path, SessionRecord("sess-1", "/ws")) as store:
        for message in (prompt, ask, head, answer):
            store.append(MessageRecord(message))
        store.append(HandoffRecord(Message("user", "handoff", meta=MessageMeta(hidden=True)), 1))
        store.save_compaction(
            CompactionRecord("manual", "fallback", 500, 50, "summary", (ask, head, answer))
        )
        for message in (hidden, restoration, done):
            store.append(MessageRecord(message))
    result = import_sessions(path)
    session = only(result)
    assert result.format == "cairn" and session.name == "sess-1"
    assert session.system == (prompt,)
    # ids, usage and flags as stored; a result gets the name of the call it answers
    assert session.messages == (ask, head, replace(answer, name="read_file"), done)
    assert_sound(session)


def test_openai_array_and_object(tmp_path: Path) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "What is this?"}, _image()]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "two"},  # out of order: fine
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "one"}]},
        {"role": "assistant", "content": "A cat.", "id": "m-final"},
    ]
    array = write(tmp_path / "chat.json", orjson.dumps(messages))
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    obj = write(tmp_path / "request.json", orjson.dumps({"messages": messages, "tools": tools}))
    for path in (array, obj):
        result = import_sessions(path)
        session = only(result)
        assert result.format == "openai" and result.warnings == ()
        assert session.system[0].text == "Be brief."
        assert roles(session) == "UATTA"
        assert session.messages[0].images == (ImagePart("data:image/png;base64,iVBORw0KGgo="),)
        assert [m.tool_call_id for m in session.messages[2:4]] == ["c2", "c1"]
        assert session.messages[3].text == "one" and session.messages[3].name == "f"
        assert session.messages[-1].id == "m-final"
        assert_sound(session)
    assert import_sessions(obj).sessions[0].tools == tuple(tools)
    assert import_sessions(array).sessions[0].tools == ()


def _image() -> dict[str, object]:
    return {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}


# ---------------------------------------------------------------------------
# Detection


@pytest.mark.parametrize("path", list(FIXTURE_FORMATS), ids=lambda p: p.name)
def test_detects_every_fixture(path: Path) -> None:
    assert detect_format(path) == FIXTURE_FORMATS[path]
    result = import_sessions(path)
    assert result.format == FIXTURE_FORMATS[path]
    assert result.source == path
    for session in result.sessions:
        assert_sound(session)


def test_detects_by_content_not_name(tmp_path: Path) -> None:
    renamed = {
        "a.txt": CLAUDE,
        "b.json": CODEX,
        "c.log": PYDICOM,
        "d.jsonl": TAU,
        "e.data": OPENHANDS,
    }
    for name, original in renamed.items():
        copy = write(tmp_path / name, original.read_bytes())
        assert detect_format(copy) == FIXTURE_FORMATS[original]


def test_detects_cairn_openai_and_openhands_events(tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    with JsonlTranscriptStore.create(transcript, SessionRecord("s", "/ws")) as store:
        store.append(MessageRecord(user("hi")))
    assert detect_format(transcript) == "cairn"
    assert detect_format(write(tmp_path / "m.json", '[{"role": "user", "content": "x"}]')) == (
        "openai"
    )
    assert detect_format(write(tmp_path / "o.json", '{"messages": []}')) == "openai"
    events = [{"id": 1, "source": "user", "action": "message", "args": {"content": "hello"}}]
    path = write(tmp_path / "events.json", orjson.dumps(events))
    assert detect_format(path) == "openhands"
    assert only(import_sessions(path)).messages[0].text == "hello"


def test_damaged_first_line_does_not_hide_the_format(tmp_path: Path) -> None:
    lines = CLAUDE.read_bytes().splitlines(keepends=True)
    path = write(tmp_path / "c.jsonl", b"{not json\n" + b"".join(lines))
    result = import_sessions(path)
    assert result.format == "claude-code"
    assert result.warnings[0].startswith("line 1: not valid JSON")
    assert roles(only(result)) == "UATATATAA"


def test_unrecognised_content(tmp_path: Path) -> None:
    text = error_of(write(tmp_path / "notes.md", "# hello\n"))
    assert str(tmp_path / "notes.md") in text and "no known session format" in text
    text = error_of(write(tmp_path / "x.json", '{"hello": 1}\n'))
    assert "no known session format" in text
    text = error_of(write(tmp_path / "y.json", "[1, 2]"))
    assert "no known session format" in text
    assert "empty" in error_of(write(tmp_path / "empty.jsonl", "\n\n"))


def test_unknown_format_name() -> None:
    text = error_of(PYDICOM, "swe")
    assert "unknown format 'swe'" in text
    assert all(name in text for name in FORMATS)
    assert (
        set(FORMATS)
        == set(IMPORTERS)
        == {
            "openai",
            "tau-bench",
            "swe-agent",
            "openhands",
            "claude-code",
            "codex",
            "cairn",
        }
    )


# ---------------------------------------------------------------------------
# Broken input


def test_missing_path_and_directory(tmp_path: Path) -> None:
    missing = tmp_path / "nope.traj"
    assert error_of(missing) == f"{missing}: no such file"
    assert error_of(tmp_path, "swe-agent") == f"{tmp_path} is a directory, not a session file"
    with pytest.raises(SessionImportError, match="no such file"):
        detect_format(missing)


@pytest.mark.parametrize(
    ("path", "fmt"),
    [(TAU, "tau-bench"), (PYDICOM, "swe-agent"), (MARSHMALLOW, "swe-agent")],
    ids=lambda v: v.name if isinstance(v, Path) else v,
)
def test_truncated_json_documents(tmp_path: Path, path: Path, fmt: str) -> None:
    data = path.read_bytes()
    cut = data[: len(data) // 3]
    line = cut.count(b"\n") + 1  # the parser runs out of text on the last line
    broken = write(tmp_path / path.name, cut)
    # named explicitly, and by auto-detection: a .traj is read as swe-agent, so the
    # error says where it breaks; a truncated .json matches nothing and says why
    assert error_of(broken, fmt).startswith(f"{fmt}: line {line}: not valid JSON")
    auto = error_of(broken)
    if path.suffix == ".traj":
        assert auto.startswith(f"swe-agent: line {line}: not valid JSON")
    else:
        assert "no known session format" in auto and f"line {line}: not valid JSON" in auto


def test_truncated_json_lines_keep_what_they_can(tmp_path: Path) -> None:
    for original, fmt, messages in ((CLAUDE, "claude-code", 9), (CODEX, "codex", 8)):
        data = original.read_bytes().rstrip(b"\n")
        last = data.rindex(b"\n")
        broken = write(tmp_path / original.name, data[: last + 40])  # the last line torn
        result = import_sessions(broken)
        assert result.format == fmt
        total = data.count(b"\n") + 1
        assert result.warnings[0].startswith(f"line {total}: not valid JSON")
        # the torn last record carried nothing conversational
        assert len(only(result).messages) == messages
    one = OPENHANDS.read_bytes()
    torn = write(tmp_path / "oh.jsonl", one[: len(one) // 2])
    assert error_of(torn, "openhands").startswith("openhands: line 1: not valid JSON")


@pytest.mark.parametrize(
    ("path", "fmt", "message"),
    [
        (PYDICOM, "tau-bench", "tau-bench: expected a JSON array of task results, found an object"),
        (TAU, "swe-agent", "swe-agent: expected a JSON object, found an array"),
        (TAU, "openai", "openai: [0]: key 'role' missing"),
        (PYDICOM, "openai", "openai: key 'messages' missing"),
        (OPENHANDS, "swe-agent", "swe-agent: history[0]: key 'role' missing"),
        (CLAUDE, "codex", "codex: no response_item record (line 1 has type 'queue-operation')"),
        (CODEX, "claude-code", "claude-code: no user or assistant record with a 'message' "),
        (CLAUDE, "openhands", "openhands: line 1: key 'history' missing"),
        (CODEX, "cairn", "cairn: line 1: unsupported record version None"),
        (PYDICOM, "claude-code", "claude-code: no user or assistant record with a 'message'"),
    ],
)
def test_wrong_format_named_explicitly(path: Path, fmt: str, message: str) -> None:
    assert error_of(path, fmt).startswith(message)


def test_openhands_without_history(tmp_path: Path) -> None:
    path = write(tmp_path / "o.jsonl", '{"instance_id": "x", "events": []}\n')
    assert error_of(path, "openhands") == "openhands: line 1: key 'history' missing"


def test_swe_agent_history_missing_or_wrong(tmp_path: Path) -> None:
    path = write(tmp_path / "t.traj", '{"trajectory": [], "info": {}}')
    assert error_of(path) == "swe-agent: key 'history' missing"
    path = write(tmp_path / "u.traj", '{"history": {"role": "user"}}')
    assert error_of(path) == "swe-agent: key 'history' must be a list, found an object"
    path = write(tmp_path / "v.traj", '{"history": [{"role": "robot", "content": "x"}]}')
    assert error_of(path) == "swe-agent: history[0]: unknown role 'robot'"


def test_tau_bench_result_without_traj(tmp_path: Path) -> None:
    path = write(tmp_path / "t.json", '[{"task_id": 1, "traj": []}, {"task_id": 2}]')
    assert error_of(path, "tau-bench") == "tau-bench: [1]: key 'traj' missing"
    assert only(import_sessions(path, session=0)).messages == ()


def test_unpaired_tool_calls_and_results(tmp_path: Path) -> None:
    def fn(call_id: str, name: str = "f") -> dict[str, object]:
        return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}

    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [fn("a"), fn("b", "g")]},
        {"role": "tool", "tool_call_id": "b", "content": "B"},
        {"role": "tool", "tool_call_id": "b", "content": "B again"},  # second result
        {"role": "user", "content": "stop"},  # "a" never answered
        {"role": "tool", "tool_call_id": "a", "content": "late"},  # after the round closed
        {"role": "tool", "tool_call_id": "zzz", "content": "stray"},  # no such call
        {"role": "assistant", "content": "ok", "tool_calls": [fn("c")]},  # last call unanswered
    ]
    result = import_sessions(write(tmp_path / "chat.json", orjson.dumps(messages)))
    session = only(result)
    assert roles(session) == "UATTUAT"
    placeholder = session.messages[3]
    assert (placeholder.tool_call_id, placeholder.name) == ("a", "f")
    assert placeholder.text == PLACEHOLDER_RESULT and placeholder.meta.synthetic
    assert session.messages[-1].tool_call_id == "c" and session.messages[-1].meta.synthetic
    assert list(result.warnings) == [
        "[3]: a second result for call b; dropped",
        "[1]: call a (f) has no recorded result; added a placeholder result",
        "[5]: result for call a arrives after the conversation moved on; dropped",
        "[6]: result for unknown call 'zzz'; dropped",
        "[7]: call c (f) has no recorded result; added a placeholder result",
    ]
    assert_sound(session)


def test_openhands_bad_line_in_the_middle(tmp_path: Path) -> None:
    line = OPENHANDS.read_bytes()
    path = write(tmp_path / "out.jsonl", line + b'{"instance_id": "broken", "hist\n' + line)
    result = import_sessions(path)
    assert result.format == "openhands"
    assert [s.name for s in result.sessions] == ["ponylang__ponyc-4595"] * 2
    assert result.warnings[0].startswith("ponylang__ponyc-4595: line 1: history[48]")
    assert any(w.startswith("line 2: not valid JSON") for w in result.warnings)
    assert len(result.sessions[1].messages) == 47
    # session numbers follow the lines, so a damaged line does not shift them
    assert only(import_sessions(path, session=2)).name == "ponylang__ponyc-4595"
    assert error_of(path, session=1).startswith("openhands: line 2: not valid JSON")
    assert "out of range" in error_of(path, session=3)


@pytest.mark.parametrize(("original", "fmt"), [(CLAUDE, "claude-code"), (CODEX, "codex")])
def test_json_lines_bad_line_in_the_middle(tmp_path: Path, original: Path, fmt: str) -> None:
    lines = original.read_bytes().splitlines(keepends=True)
    # break the first assistant tool call's line (claude line 6, codex line 13)
    target = 5 if fmt == "claude-code" else 12
    lines[target] = lines[target][:30] + b"\n"
    result = import_sessions(write(tmp_path / original.name, b"".join(lines)))
    assert result.format == fmt
    assert result.warnings[0].startswith(f"line {target + 1}: not valid JSON")
    session = only(result)
    # the result that answered the lost call is dropped, with a warning
    assert any("unknown call" in w for w in result.warnings)
    assert len(calls(session)) == 2
    assert_sound(session)


def test_single_session_formats_accept_only_session_zero() -> None:
    for path in (PYDICOM, CLAUDE, CODEX):
        assert len(import_sessions(path, session=0).sessions) == 1
        assert "out of range (the file holds 1 session" in error_of(path, session=1)


# ---------------------------------------------------------------------------
# Fixtures are what SOURCE.md says they are


def test_fixture_files_have_licence_and_source() -> None:
    for folder in ("swe-agent", "tau-bench", "openhands"):
        assert (FIXTURES / folder / "LICENSE").read_text().count("MIT") >= 1
        assert "Commit:" in (FIXTURES / folder / "SOURCE.md").read_text()
    assert "synthetic" in (FIXTURES / "formats" / "SOURCE.md").read_text()
    assert (DEMO.parent / "LICENSE").is_file() and (DEMO.parent / "SOURCE.md").is_file()


def test_fixtures_match_the_shared_copies() -> None:
    manifest = orjson.loads((SHARED_SESSIONS / "manifest.json").read_bytes())
    digests = {entry["file"]: entry["sha256"] for entry in manifest}
    for path, name in (
        (PYDICOM, "swe-agent/pydicom-1458.traj"),
        (MARSHMALLOW, "swe-agent/marshmallow-1867-function-calling.traj"),
        (DEMO, "swe-agent/ctf-web-i_got_id_demo.traj"),
    ):
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digests[name]
    whole = (SHARED_SESSIONS / "openhands" / "multi-swe-bench-output.jsonl").read_bytes()
    assert whole.startswith(OPENHANDS.read_bytes()) and OPENHANDS.read_bytes().count(b"\n") == 1
    tau = (SHARED_SESSIONS / "tau-bench" / "gpt-4o-airline.json").read_bytes()
    excerpt = TAU.read_bytes()
    assert tau.startswith(excerpt[: -len(b"\n]\n")])
    formats = RECORDED / "formats"
    for path in (CLAUDE, CODEX):
        assert path.read_bytes() == (formats / path.name).read_bytes()


# ---------------------------------------------------------------------------
# The full shared recordings


def _manifest() -> list[dict[str, object]]:
    return list(orjson.loads((SHARED_SESSIONS / "manifest.json").read_bytes()))


@pytest.mark.parametrize("entry", _manifest(), ids=lambda e: str(e["file"]))
def test_shared_session_files(entry: dict[str, object]) -> None:
    path = SHARED_SESSIONS / str(entry["file"])
    result = import_sessions(path)
    expected_format = str(entry["file"]).split("/")[0]
    assert result.format == expected_format
    assert len(result.sessions) == entry["sessions"]
    for session in result.sessions:
        assert_sound(session)
    made = sum(len(calls(s)) for s in result.sessions)
    if expected_format == "swe-agent":
        assert made == entry["steps"]  # one call per step, in both styles
        assert len(result.warnings) <= 1  # at most the final ``submit`` without output
    else:
        assert made == entry["tool_calls"]
    if expected_format == "tau-bench":
        kept = sum(len(s.messages) + len(s.system) for s in result.sessions)
        assert kept == entry["messages"] and result.warnings == ()


def test_shared_openhands_sessions() -> None:
    path = SHARED_SESSIONS / "openhands" / "multi-swe-bench-output.jsonl"
    result = import_sessions(path)
    assert [s.name for s in result.sessions] == [
        "ponylang__ponyc-4595",
        "ponylang__ponyc-4593",
        "ponylang__ponyc-4588",
    ]
    # the two rejected tool calls come back as synthetic user messages
    rejected = [
        m for s in result.sessions for m in s.messages if m.meta.synthetic and m.role == "user"
    ]
    assert len(rejected) == 2 and all("Parameter 'command'" in m.text for m in rejected)
    last = only(import_sessions(path, session=2))
    assert len(calls(last)) == 49
    peak = max(m.meta.usage.prompt_tokens for m in last.messages if m.meta.usage)
    assert peak <= 33_459
    all_peaks = [
        m.meta.usage.prompt_tokens for s in result.sessions for m in s.messages if m.meta.usage
    ]
    assert max(all_peaks) == 33_459


def test_shared_tau_bench_session_selection() -> None:
    path = SHARED_SESSIONS / "tau-bench" / "gpt-4o-airline.json"
    picked = only(import_sessions(path, session=50))
    assert picked.name == "task 0 trial 1"


# ---------------------------------------------------------------------------
# Format details on small hand-written records


def jsonl(path: Path, records: list[dict[str, object]]) -> Path:
    return write(path, b"".join(orjson.dumps(r) + b"\n" for r in records))


def claude(kind: str, uuid: str, content: object, **extra: object) -> dict[str, object]:
    message: dict[str, object] = {"role": kind, "content": content}
    if kind == "assistant":
        message["id"] = extra.pop("message_id")
    return {"type": kind, "uuid": uuid, "sessionId": "s1", "message": message, **extra}


def test_claude_code_details(tmp_path: Path) -> None:
    png = {"type": "base64", "media_type": "image/png", "data": "AAAA"}
    records = [
        claude("user", "u1", "look at both files"),
        claude("user", "u0", "<command caveat>", isMeta=True),
        # one response, two parallel calls, split over two records with a result between
        claude("assistant", "a1", [{"type": "text", "text": "Reading."}], message_id="m1"),
        claude(
            "assistant",
            "a2",
            [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"p": "a"}}],
            message_id="m1",
        ),
        claude("user", "u2", [{"type": "tool_result", "tool_use_id": "t1", "content": "A"}]),
        claude(
            "assistant",
            "a3",
            [{"type": "tool_use", "id": "t2", "name": "Shot", "input": {}}],
            message_id="m1",
        ),
        claude(
            "user",
            "u3",
            [
                {
                    "type": "tool_result",
                    "tool_use_id": "t2",
                    "content": [{"type": "text", "text": "shot"}, {"type": "image", "source": png}],
                },
                {"type": "text", "text": "and this one"},
            ],
        ),
        claude("user", "s1", "sub-agent prompt", isSidechain=True),
        claude(
            "assistant", "s2", [{"type": "text", "text": "sub"}], message_id="m9", isSidechain=True
        ),
        claude("assistant", "a4", [{"type": "text", "text": "Both read."}], message_id="m2"),
    ]
    result = import_sessions(jsonl(tmp_path / "c.jsonl", records))
    session = only(result)
    assert result.format == "claude-code" and result.warnings == ()
    assert roles(session) == "UUATTUA"
    assert session.messages[1].meta.synthetic  # isMeta
    merged = session.messages[2]
    assert merged.id == "m1" and merged.text == "Reading."
    assert [c.id for c in merged.tool_calls] == ["t1", "t2"]
    assert merged.tool_calls[0].arguments == '{"p":"a"}'
    shot = session.messages[4]
    assert shot.id == "u3" and shot.text == "shot"
    assert shot.images == (ImagePart("data:image/png;base64,AAAA"),)
    after = session.messages[5]
    assert (after.id, after.text) == ("u3#2", "and this one")
    assert "sub" not in [m.text for m in session.messages]
    assert_sound(session)
    # a sub-agent's own file holds only sidechain records: those are the conversation
    sub = import_sessions(jsonl(tmp_path / "agent-x.jsonl", records[7:9]))
    assert [m.text for m in only(sub).messages] == ["sub-agent prompt", "sub"]


def test_codex_details(tmp_path: Path) -> None:
    def item(payload: dict[str, object]) -> dict[str, object]:
        return {"timestamp": "t", "type": "response_item", "payload": payload}

    def message(role: str, text: str) -> dict[str, object]:
        kind = "output_text" if role == "assistant" else "input_text"
        return item({"type": "message", "role": role, "content": [{"type": kind, "text": text}]})

    meta: dict[str, object] = {
        "timestamp": "t",
        "type": "session_meta",
        "payload": {"id": "r1", "instructions": "Sys"},
    }
    records: list[dict[str, object]] = [
        meta,
        message("user", "show me"),
        item({"type": "function_call", "name": "view_image", "arguments": "{}", "call_id": "c1"}),
        item({"type": "web_search_call", "status": "completed"}),
        item(
            {
                "type": "function_call_output",
                "call_id": "c1",
                "output": [
                    {"type": "input_text", "text": "the image"},
                    {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
                ],
            }
        ),
        meta,  # resumed: written again
        message("developer", "<collaboration_mode>plan</collaboration_mode>"),
        item({"type": "function_call", "name": "exec_command", "arguments": "{}", "call_id": "c2"}),
        {"timestamp": "t", "type": "compacted", "payload": {"message": "summary"}},
        message("user", "aborted; go on"),
        message("assistant", "ok"),
    ]
    result = import_sessions(jsonl(tmp_path / "rollout.jsonl", records))
    session = only(result)
    assert result.format == "codex" and session.name == "r1"
    assert [m.text for m in session.system] == ["Sys"]
    assert roles(session) == "UATUATUA"
    assert session.messages[2].images == (ImagePart("data:image/png;base64,AAAA"),)
    developer = session.messages[3]
    assert developer.meta.synthetic and developer.meta.extra == {"role": "developer"}
    assert session.messages[5].text == PLACEHOLDER_RESULT  # the aborted call
    assert not session.messages[6].meta.synthetic  # no user_message events to compare with
    assert list(result.warnings) == [
        "line 4: response_item type 'web_search_call' not replayed; skipped",
        "line 8: call c2 (exec_command) has no recorded result; added a placeholder result",
    ]


def test_openhands_details(tmp_path: Path) -> None:
    def action(event_id: int, call_id: str, response: str, calls: list[str]) -> dict[str, object]:
        tool_calls = [
            {"id": c, "type": "function", "function": {"name": "run", "arguments": "{}"}}
            for c in calls
        ]
        model_response = {
            "id": response,
            "choices": [
                {"message": {"role": "assistant", "content": "go", "tool_calls": tool_calls}}
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
        }
        return {
            "id": event_id,
            "source": "agent",
            "action": "run",
            "args": {"command": "ls"},
            "tool_call_metadata": {
                "function_name": "run",
                "tool_call_id": call_id,
                "model_response": model_response,
            },
        }

    def observation(event_id: int, call_id: str, text: str) -> dict[str, object]:
        return {
            "id": event_id,
            "source": "agent",
            "observation": "run",
            "content": text,
            "tool_call_metadata": {"function_name": "run", "tool_call_id": call_id},
        }

    no_response = action(7, "c3", "", [])
    no_response["tool_call_metadata"] = {"function_name": "run", "tool_call_id": "c3"}
    no_response["args"] = {"command": "pwd", "thought": "where am I?", "blocking": False}
    history = [
        {
            "id": 1,
            "source": "user",
            "action": "message",
            "args": {"content": "hi", "image_urls": ["u"]},
        },
        action(2, "c1", "r1", ["c1", "c2"]),
        action(3, "c2", "r1", ["c1", "c2"]),  # the same response: no second message
        observation(5, "c2", "two"),
        observation(4, "c1", "one"),
        no_response,
        observation(8, "c3", "/w"),
        {"id": 9, "source": "agent", "action": "message", "args": {"content": "done"}},
    ]
    path = write(tmp_path / "o.jsonl", orjson.dumps({"instance_id": "i1", "history": history}))
    result = import_sessions(path)
    session = only(result)
    assert result.warnings == () and session.name == "i1"
    assert roles(session) == "UATTATA"
    assert session.messages[0].images == (ImagePart("u"),)
    assert session.messages[1].id == "r1" and len(session.messages[1].tool_calls) == 2
    assert session.messages[1].meta.usage == Usage(10, 2, 12)
    rebuilt = session.messages[4]
    assert rebuilt.id == "event-7" and rebuilt.text == "where am I?"
    assert rebuilt.tool_calls == (ToolCall("c3", "run", '{"command":"pwd"}'),)
    assert session.messages[-1].text == "done"
    assert_sound(session)


def test_swe_agent_other_agents_are_skipped(tmp_path: Path) -> None:
    history = [
        {"role": "system", "content": "sys", "agent": "main"},
        {"role": "user", "content": "task", "agent": "main"},
        {"role": "user", "content": "summarise", "agent": "summarizer"},
        {
            "role": "assistant",
            "content": "t\n```\nls\n```",
            "thought": "t",
            "action": "ls\n",
            "agent": "main",
        },
        {"role": "user", "content": "a.py", "agent": "main"},
    ]
    result = import_sessions(write(tmp_path / "x.traj", orjson.dumps({"history": history})))
    session = only(result)
    assert roles(session) == "UAT"
    assert session.messages[1].tool_calls[0].name == "bash"  # no documented commands
    assert result.warnings == (
        "history: 1 message(s) of agent 'summarizer' skipped (main agent 'main')",
    )


def test_cairn_bad_line_in_the_middle(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with JsonlTranscriptStore.create(path, SessionRecord("s", "/ws")) as store:
        for text in ("one", "two", "three"):
            store.append(MessageRecord(user(text)))
    lines = path.read_bytes().splitlines(keepends=True)
    lines[2] = b'{"v": 1, "type": "mess\n'
    broken = write(tmp_path / "broken.jsonl", b"".join(lines))
    result = import_sessions(broken)
    assert result.format == "cairn"
    assert [m.text for m in only(result).messages] == ["one", "three"]
    assert result.warnings[0].startswith("line 3: not valid JSON")


# ---------------------------------------------------------------------------
# Content the host injected into user turns is synthetic


def test_injected_split_rules() -> None:
    from cairn.replay.importers._conversion import Injected

    rules = Injected(tags=("system-reminder", "ide_selection"), markers=frozenset({"[stop]"}))
    assert rules.split("plain text\n") == [("plain text\n", False)]  # untouched
    assert rules.split("a <system-reminder>r</system-reminder>\n\n b") == [
        ("a", False),
        ("<system-reminder>r</system-reminder>", True),
        ("b", False),
    ]
    tagged = '<ide_selection path="x.py">\nsel\n</ide_selection>'
    assert rules.split(tagged) == [(tagged, True)]
    assert rules.split("<ide_selection>never closed") == [("<ide_selection>never closed", False)]
    assert rules.split(" [stop] ") == [(" [stop] ", True)]
    assert rules.split("<system-reminder>r</system-reminder>[stop]") == [
        ("<system-reminder>r</system-reminder>", True),
        ("[stop]", True),
    ]


def test_claude_code_ide_content_and_reminders_are_not_typed(tmp_path: Path) -> None:
    opened = (
        "<ide_opened_file>The user opened the file /w/money.py in the IDE. This may or may "
        "not be related to the current task.</ide_opened_file>"
    )
    selection = (
        "<ide_selection>The user selected lines 1 to 2 of /w/money.py:\nx = 1\n</ide_selection>"
    )
    reminder = "<system-reminder>The todo list is empty.</system-reminder>"
    records = [
        claude(
            "user",
            "u1",
            [{"type": "text", "text": opened}, {"type": "text", "text": "Why does rounding fail?"}],
        ),
        claude("assistant", "a1", [{"type": "text", "text": "Looking."}], message_id="m1"),
        claude("user", "u2", f"{selection}\n\nexplain this {reminder} briefly"),
        claude("assistant", "a2", [{"type": "text", "text": "It sets x."}], message_id="m2"),
        claude("user", "u3", reminder),
        claude("user", "u4", [{"type": "text", "text": "[Request interrupted by user]"}]),
        claude("assistant", "a3", [{"type": "text", "text": "Stopped."}], message_id="m3"),
    ]
    session = only(import_sessions(jsonl(tmp_path / "c.jsonl", records)))
    typed = [(m.id, m.text) for m in session.messages if m.role == "user" and not m.meta.synthetic]
    injected = [(m.id, m.text) for m in session.messages if m.role == "user" and m.meta.synthetic]
    assert typed == [
        ("u1#2", "Why does rounding fail?"),
        ("u2#2", "explain this"),
        ("u2#4", "briefly"),
    ]
    assert injected == [
        ("u1", opened),
        ("u2", selection),
        ("u2#3", reminder),
        ("u3", reminder),  # a turn that is all injected content is wholly synthetic
        ("u4", "[Request interrupted by user]"),
    ]
    assert roles(session) == "UUAUUUUAUUA"  # kept in place: the model saw all of it
    assert_sound(session)


def test_codex_injected_instructions_and_environment_are_not_typed(tmp_path: Path) -> None:
    def user_item(*texts: str) -> dict[str, object]:
        content = [{"type": "input_text", "text": t} for t in texts]
        return {
            "timestamp": "t",
            "type": "response_item",
            "payload": {"type": "message", "role": "user", "content": content},
        }

    agents = "# AGENTS.md instructions for /repo\n\n<INSTRUCTIONS>\nRun make test.\n</INSTRUCTIONS>"
    environment = "<environment_context>\n  <cwd>/repo</cwd>\n</environment_context>"
    answer: dict[str, object] = {
        "timestamp": "t",
        "type": "response_item",
        "payload": {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "ok"}],
        },
    }
    records: list[dict[str, object]] = [
        {"timestamp": "t", "type": "session_meta", "payload": {"id": "r2"}},
        user_item(agents),
        user_item(environment),
        user_item("<user_instructions>Be terse.</user_instructions>", "Fix the rounding bug."),
        answer,
    ]
    # No user_message events here: the markers alone tell what Codex wrote.
    session = only(import_sessions(jsonl(tmp_path / "rollout.jsonl", records)))
    users = [(m.text, m.meta.synthetic) for m in session.messages if m.role == "user"]
    assert users == [
        (agents, True),
        (environment, True),
        ("<user_instructions>Be terse.</user_instructions>", True),
        ("Fix the rounding bug.", False),
    ]
    assert_sound(session)


# ---------------------------------------------------------------------------
# Wrong shapes, deep nesting, lone surrogates: an error or a warning, never a crash


def nested(depth: int) -> bytes:
    """A JSON array ``depth`` levels deep (deeper than orjson writes, as deep as it reads)."""
    return b"[" * depth + b"1" + b"]" * depth


def with_raw(value: object, raw: bytes) -> bytes:
    """``value`` as JSON with the string ``"@RAW@"`` replaced by the JSON text ``raw``."""
    return orjson.dumps(value).replace(b'"@RAW@"', raw)


@pytest.mark.parametrize("fmt", ["auto", *FORMATS])
def test_a_type_that_is_not_a_string_is_refused_not_a_crash(tmp_path: Path, fmt: str) -> None:
    path = write(tmp_path / "t.jsonl", b'{"v":1,"type":[]}\n{"type":{}, "payload":{}}\n')
    error_of(path, fmt)


def test_claude_code_records_and_blocks_typed_with_lists_are_skipped(tmp_path: Path) -> None:
    records: list[dict[str, object]] = [
        claude("user", "u1", "hello"),
        {"type": [], "message": {"role": "user", "content": "junk"}},
        claude("assistant", "a1", [{"type": {}}, {"type": "text", "text": "Hi."}], message_id="m1"),
    ]
    result = import_sessions(jsonl(tmp_path / "c.jsonl", records))
    assert result.format == "claude-code"
    assert [m.text for m in only(result).messages] == ["hello", "Hi."]
    assert result.warnings == ("line 3: content block of type an object not replayed; skipped",)


def test_codex_items_typed_with_lists_are_skipped(tmp_path: Path) -> None:
    def item(payload: dict[str, object]) -> dict[str, object]:
        return {"timestamp": "t", "type": "response_item", "payload": payload}

    records: list[dict[str, object]] = [
        {"timestamp": "t", "type": "session_meta", "payload": {"id": "r1"}},
        item({"type": "message", "role": "user", "content": "go"}),
        item({"type": ["function_call"], "name": "shell", "call_id": "c1"}),
        {"timestamp": "t", "type": ["response_item"], "payload": {"type": "message"}},
        item({"type": "message", "role": ["assistant"], "content": "?"}),
        item({"type": "message", "role": "assistant", "content": "done"}),
    ]
    result = import_sessions(jsonl(tmp_path / "rollout.jsonl", records), "codex")
    assert [m.text for m in only(result).messages] == ["go", "done"]
    assert result.warnings == ("line 5: message with unknown role an array; skipped",)


def test_codex_token_counts_nested_a_thousand_deep_are_compared_safely(tmp_path: Path) -> None:
    # Codex repeats a token count after each turn_context; telling a repeat
    # must not compare two foreign objects as a whole (recursion per level).
    answer = {
        "timestamp": "t",
        "type": "response_item",
        "payload": {"type": "message", "role": "assistant", "content": "ok"},
    }
    count = {
        "timestamp": "t",
        "type": "event_msg",
        "payload": {"type": "token_count", "info": {"junk": "@RAW@"}},
    }
    lines = [orjson.dumps(answer), with_raw(count, nested(1000)), with_raw(count, nested(1000))]
    path = write(tmp_path / "rollout.jsonl", b"\n".join(lines) + b"\n")
    assert [m.text for m in only(import_sessions(path)).messages] == ["ok"]


def test_wrong_names_do_not_name_sessions(tmp_path: Path) -> None:
    tau = [{"task_id": "@RAW@", "trial": {"n": 1}, "traj": [{"role": "user", "content": "x"}]}]
    result = import_sessions(write(tmp_path / "t.json", with_raw(tau, nested(1000))))
    assert [s.name for s in result.sessions] == ["session 0"]
    events = [{"action": "message", "source": "user", "args": {"content": "x"}}]
    line = orjson.dumps({"instance_id": ["a", "b"], "history": events})
    result = import_sessions(write(tmp_path / "o.jsonl", line + b"\n"))
    assert [s.name for s in result.sessions] == ["line 1"]


def test_token_counts_past_any_context_are_dropped_so_the_session_stays_storable(
    tmp_path: Path,
) -> None:
    huge = 2**64 - 1  # each fits 64 bits; their sum would not
    answer = claude("assistant", "a1", "Hello.", message_id="m1")
    answer["message"] = {
        **cast(dict[str, object], answer["message"]),
        "usage": {"input_tokens": huge, "cache_read_input_tokens": huge, "output_tokens": 5},
    }
    session = only(
        import_sessions(jsonl(tmp_path / "c.jsonl", [claude("user", "u1", "hi"), answer]))
    )
    assert session.messages[1].meta.usage == Usage(
        0, 5, 5, cache_read_input_tokens=0, cache_creation_input_tokens=0
    )
    orjson.dumps([message_to_dict(m) for m in session.messages])


def test_tool_input_nested_300_deep_skips_its_line_naming_it(tmp_path: Path) -> None:
    records = [
        claude("user", "u1", "go"),
        claude(
            "assistant",
            "a1",
            [
                {"type": "text", "text": "Calling."},
                {"type": "tool_use", "id": "t1", "name": "Read", "input": "@RAW@"},
            ],
            message_id="m1",
        ),
        claude("user", "u2", [{"type": "tool_result", "tool_use_id": "t1", "content": "A"}]),
        claude("assistant", "a2", "Done.", message_id="m2"),
    ]
    lines = [with_raw(r, nested(300)) for r in records]
    result = import_sessions(write(tmp_path / "c.jsonl", b"\n".join(lines) + b"\n"))
    session = only(result)
    assert roles(session) == "UA"  # the whole line is skipped, not half of it
    assert result.warnings == (
        "line 2: tool_use t1: a value nested 300 levels deep (at most 254 are replayed); skipped",
        "line 3: result for unknown call 't1'; dropped",
    )
    assert_sound(session)


def test_openai_arguments_nested_300_deep_are_an_error_naming_the_key(tmp_path: Path) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "@RAW@"}}
    messages = [{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": [call]}]
    path = write(tmp_path / "o.json", with_raw(messages, nested(300)))
    assert error_of(path) == (
        "openai: [1].tool_calls[0].function.arguments: a value nested 300 levels deep "
        "(at most 254 are replayed)"
    )


def test_tool_schemas_nested_300_deep_are_refused(tmp_path: Path) -> None:
    document = {"messages": [{"role": "user", "content": "x"}], "tools": [{"schema": "@RAW@"}]}
    path = write(tmp_path / "o.json", with_raw(document, nested(300)))
    assert error_of(path) == (
        "openai: tools[0]: cannot be written as JSON (nested 301 levels deep; at most 250 are "
        "replayed)"
    )
    system_event = {"action": "system", "args": {"content": "sys", "tools": ["@RAW@", {"n": 1}]}}
    events = [system_event, {"action": "message", "source": "user", "args": {"content": "x"}}]
    line = with_raw({"instance_id": "i", "history": events}, b'{"deep": ' + nested(300) + b"}")
    result = import_sessions(write(tmp_path / "o.jsonl", line + b"\n"))
    assert only(result).tools == ({"n": 1},)
    assert result.warnings == (
        "line 1: history[0].args.tools[0]: cannot be written as JSON (nested 301 levels deep; "
        "at most 250 are replayed); skipped",
    )


def test_lone_surrogates_are_read_as_replacement_characters(tmp_path: Path) -> None:
    # Python's json.dumps writes a string holding undecodable bytes (a tool's
    # raw output) with "\\udcff" escapes, which orjson refuses to read.
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "bash", "arguments": {"\ud800": "\udc80", "n": 2**70}},
    }
    history = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "bad \udcff byte"},
        {"role": "assistant", "content": "run", "tool_calls": [call]},
        {"role": "tool", "content": "\ud83d", "tool_call_ids": ["c1"]},
    ]
    text = json.dumps({"history": history})
    assert "\\ud800" in text
    session = only(import_sessions(write(tmp_path / "s.traj", text)))
    assert [m.text for m in session.messages] == ["bad \ufffd byte", "run", "\ufffd"]
    # the integer beyond 64 bits is kept exactly, as the standard library reads it
    assert session.messages[1].tool_calls[0].arguments == f'{{"\ufffd":"\ufffd","n":{2**70}}}'
    orjson.dumps([message_to_dict(m) for m in session.messages])


def test_a_lone_surrogate_does_not_cost_a_json_line(tmp_path: Path) -> None:
    lines = [
        orjson.dumps(claude("user", "u1", "@RAW@")).replace(b'"@RAW@"', b'"caf\\udce9"'),
        orjson.dumps(claude("assistant", "a1", "ok", message_id="m1")),
    ]
    result = import_sessions(write(tmp_path / "c.jsonl", b"\n".join(lines) + b"\n"))
    assert [m.text for m in only(result).messages] == ["caf\ufffd", "ok"]
    assert result.warnings == ()


def test_foreign_values_in_warnings_and_names_are_one_short_line(tmp_path: Path) -> None:
    events = [
        {"action": "message", "source": "user", "args": {"content": "x"}},
        {"observation": "run", "tool_call_metadata": {"tool_call_id": "c\n" + "9" * 500}},
    ]
    line = orjson.dumps({"instance_id": "a\nb", "history": events})
    result = import_sessions(write(tmp_path / "o.jsonl", line + b"\n"))
    assert [s.name for s in result.sessions] == ["a b"]
    (warning,) = result.warnings
    assert "\n" not in warning and len(warning) < 200
    assert warning.startswith("line 1: history[1]: result for unknown call 'c 999")


def test_system_and_conversation_share_one_id_space(tmp_path: Path) -> None:
    messages = [
        {"role": "system", "content": "a", "id": "m1"},
        {"role": "user", "content": "b", "id": "m1"},
    ]
    result = import_sessions(write(tmp_path / "o.json", orjson.dumps(messages)))
    session = only(result)
    assert [m.id for m in (*session.system, *session.messages)] == ["m1", "m1~2"]
    assert result.warnings == ("message id m1 repeated; the later one is now m1~2",)
