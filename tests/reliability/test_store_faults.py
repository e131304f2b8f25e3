"""Regressions for the transcript store's reliability findings (issue 12).

1. JSON nested deeper than ``orjson`` can write again (it reads 1,024 levels,
   writes 254) is a bad line at load time, and the writer never writes a line
   it could not read back: nothing downstream crashes on one.
2. A new session file appears whole or not at all; ``open`` refuses a file
   without a usable session header (empty, torn, damaged) with one clear line,
   and leaves the file as it is.
3. ``SessionState.restore`` skips each bad part of a ``state`` record with a
   warning instead of crashing the resume.
4. Lone surrogates in a record (``meta.extra``, ``meta.kind``, an image URL, a
   state value) neither crash the checkpoint checks nor the views.
"""

from __future__ import annotations

import asyncio
import io
import math
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cairn.agent.events import Notice
from cairn.agent.runtime import Runtime
from cairn.agent.state import STATE_KEY, SessionState
from cairn.messages import (
    ImagePart,
    JSONValue,
    Message,
    MessageMeta,
    ToolCall,
    assistant,
    message_to_dict,
    new_id,
    tool_result,
    user,
)
from cairn.provider import ModelConfig, OpenAIProvider
from cairn.store import (
    MAX_JSON_DEPTH,
    CheckpointFormatError,
    CompactionRecord,
    JsonlTranscriptStore,
    MessageRecord,
    NotATranscriptError,
    SessionRecord,
    StateRecord,
    StoreError,
    TranscriptHeaderError,
    TranscriptLockedError,
    TranscriptWriteError,
    api_view,
    read_transcript,
    session_path,
    ui_view,
)
from cairn.store.inspection import inspect_transcript
from cairn.store.records import check_checkpoint, encode_record, record_to_dict
from cairn.surfaces.inspect import run_inspect
from reliability.soak import count
from support.openai_server import (
    OpenAIServer,
)

ROOT = Path(__file__).resolve().parents[2]
CAIRN = ROOT / ".venv" / "bin" / "cairn"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[JsonlTranscriptStore]:
    s = JsonlTranscriptStore.create(tmp_path / "s.jsonl", SessionRecord("s1", "/ws"))
    yield s
    s.close()


def deep(depth: int, kind: str = "list") -> bytes:
    """JSON text of a value nested ``depth`` levels: lists, or objects."""
    if kind == "list":
        return b"[" * depth + b"]" * depth
    return b'{"k":' * depth + b"0" + b"}" * depth


def nested(depth: int) -> JSONValue:
    value: JSONValue = []
    for _ in range(depth - 1):
        value = [value]
    return value


def with_placeholder(record: Mapping[str, object], raw: bytes) -> bytes:
    """``record`` as a line, with the string ``"@@"`` replaced by raw JSON text."""
    return orjson.dumps(record).replace(b'"@@"', raw) + b"\n"


def deep_lines(depth: int, kind: str) -> dict[str, bytes]:
    """A record line per place a deep value can hide in."""
    message = message_to_dict(user("deep"))
    message["meta"] = {"extra": {"d": "@@"}}
    kept = message_to_dict(user("kept by the checkpoint"))
    kept["meta"] = {"extra": {"d": "@@"}}
    checkpoint = record_to_dict(
        CompactionRecord("auto", "llm", 10, 5, "summary", (user("placeholder"),))
    )
    checkpoint["replacement_messages"] = [kept]
    call = message_to_dict(assistant(None, [ToolCall("c1", "read_file", "{}")]))
    tool_calls = call["tool_calls"]
    assert isinstance(tool_calls, list) and isinstance(tool_calls[0], dict)
    tool_calls[0]["arguments"] = "@@"
    value = deep(depth, kind)
    return {
        "meta.extra": with_placeholder(
            {"v": 1, "type": "message", "ts": "t", "message": message}, value
        ),
        "checkpoint meta.extra": with_placeholder(checkpoint, value),
        "state value": with_placeholder(record_to_dict(StateRecord("k", "@@")), value),
        "unknown field": with_placeholder(
            {**record_to_dict(MessageRecord(user("x"))), "junk": "@@"}, value
        ),
        # The arguments of a tool call are a JSON string: nesting inside it is text.
        "tool call arguments": with_placeholder(
            {"v": 1, "type": "message", "ts": "t", "message": call},
            orjson.dumps(value.decode()),
        ),
    }


# ---------------------------------------------------------------------------
# 1. Deep nesting


@pytest.mark.parametrize("kind", ["list", "dict"])
@pytest.mark.parametrize("depth", [300, 1_000])
@pytest.mark.parametrize(
    "where", ["meta.extra", "checkpoint meta.extra", "state value", "unknown field"]
)
def test_a_record_nested_too_deep_is_a_bad_line_for_every_loader(
    tmp_path: Path, where: str, depth: int, kind: str
) -> None:
    path = tmp_path / "deep.jsonl"
    with JsonlTranscriptStore.create(path, SessionRecord("s1", "/ws")) as store:
        store.append(MessageRecord(user("before")))
    with path.open("ab") as handle:
        handle.write(deep_lines(depth, kind)[where])
        handle.write(encode_record(MessageRecord(user("after"))))
    before = path.read_bytes()

    loaded = read_transcript(path)
    assert loaded.bad_lines == 1
    assert loaded.warnings == [
        f"line 3: JSON nested more than {MAX_JSON_DEPTH} levels deep; skipped"
    ]
    view = loaded.api()
    assert [m.text for m in view.messages] == ["before", "after"]
    assert [m.text for m in loaded.ui(view)] == ["before", "after"]
    for record in loaded.records:  # every record a consumer sees can be written again
        encode_record(record)

    inspected = inspect_transcript(path)
    assert inspected.transcript.bad_lines == 1
    out, err = io.StringIO(), io.StringIO()
    assert run_inspect(path, stdout=out, stderr=err) == 0, err.getvalue()
    assert "nested more than" in out.getvalue()

    with JsonlTranscriptStore.open(path) as store:  # the session can be resumed
        assert [m.text for m in store.api_view.messages] == ["before", "after"]
        store.append(MessageRecord(user("resumed")))
    assert path.read_bytes().startswith(before)


def test_nesting_inside_a_tool_call_argument_string_is_just_text(tmp_path: Path) -> None:
    path = tmp_path / "args.jsonl"
    with JsonlTranscriptStore.create(path, SessionRecord("s1", "/ws")):
        pass
    with path.open("ab") as handle:
        handle.write(deep_lines(1_000, "list")["tool call arguments"])
    loaded = read_transcript(path)
    assert loaded.bad_lines == 0
    assert loaded.api().messages[0].tool_calls[0].arguments.startswith("[[[")


def test_cairn_inspect_reports_a_deep_checkpoint_without_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "deep-checkpoint.jsonl"
    with JsonlTranscriptStore.create(path, SessionRecord("s1", "/ws")) as store:
        store.append(MessageRecord(user("before")))
    with path.open("ab") as handle:
        handle.write(deep_lines(300, "list")["checkpoint meta.extra"])
    for args in ((), ("--json",)):
        done = subprocess.run(
            [str(CAIRN), "inspect", str(path), *args], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr + done.stdout
        assert done.stderr == ""
    assert orjson.loads(done.stdout)["bad_lines"] == 1


def test_check_checkpoint_refuses_deep_replacement_messages_with_a_checkpoint_error() -> None:
    kept = Message("user", "kept", meta=MessageMeta(extra={"d": nested(300)}))
    record = CompactionRecord("auto", "llm", 10, 5, "summary", (kept,))
    with pytest.raises(CheckpointFormatError, match="nest JSON more than"):
        check_checkpoint(record)
    assert api_view([record]).ignored_checkpoints == {record.id}
    assert ui_view([record]) == []


def test_the_writer_writes_the_deepest_record_it_reads_and_refuses_one_level_more(
    store: JsonlTranscriptStore,
) -> None:
    # A message line nests record > message > meta > extra > the value.
    deepest = Message("user", "deepest", meta=MessageMeta(extra={"d": nested(MAX_JSON_DEPTH - 4)}))
    store.append(MessageRecord(deepest))
    store.sync()
    assert read_transcript(store.path).api().messages[-1] == deepest
    before = store.path.read_bytes()

    too_deep = Message("user", "x", meta=MessageMeta(extra={"d": nested(MAX_JSON_DEPTH - 3)}))
    with pytest.raises(TranscriptWriteError, match="would not read back: JSON nested more than"):
        store.append(MessageRecord(too_deep))
    way_too_deep = Message("user", "x", meta=MessageMeta(extra={"d": nested(5_000)}))
    with pytest.raises(TranscriptWriteError, match=f"more than {MAX_JSON_DEPTH} levels"):
        store.append(MessageRecord(way_too_deep))
    assert store.path.read_bytes() == before
    assert store.api_view.messages[-1] == deepest  # memory did not change either


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        (StateRecord("k", 2**70), "Integer exceeds 64-bit range"),
        (StateRecord("k", {1: "x"}), "field 'value' holds a value of type dict"),  # type: ignore[dict-item]
        (StateRecord("k", {"path": Path("/x")}), "field 'value' holds a value of type PosixPath"),  # type: ignore[dict-item]
        (
            CompactionRecord("auto", "llm", 1.5, 1, "s", ()),  # type: ignore[arg-type]
            "field 'pre_tokens' holds a value of type float",
        ),
        (CompactionRecord("often", "llm", 1, 1, "s", ()), "trigger: Input should be 'auto'"),  # type: ignore[arg-type]
        (MessageRecord(Message("user", "x", id="")), "message.id: String should have at least 1"),
    ],
)
def test_the_writer_refuses_a_record_the_loader_would_skip(
    store: JsonlTranscriptStore,
    record: MessageRecord | StateRecord | CompactionRecord,
    problem: str,
) -> None:
    before = store.path.read_bytes()
    with pytest.raises(TranscriptWriteError, match=problem) as caught:
        if isinstance(record, CompactionRecord):
            store.save_compaction(record)
        else:
            store.append(record)
    assert str(store.path) in str(caught.value) and "\n" not in str(caught.value)
    assert store.path.read_bytes() == before
    store.append(MessageRecord(user("still writable")))
    assert read_transcript(store.path).api().messages[-1].text == "still writable"


# ---------------------------------------------------------------------------
# 2. Session headers


def test_a_create_that_fails_mid_header_leaves_no_file(tmp_path: Path) -> None:
    """A real short write (file size limit, like a full disk) while creating a session."""
    folder = tmp_path / "projects" / "ws"
    path = folder / "new.jsonl"
    code = textwrap.dedent(
        f"""
        import resource, signal
        from cairn.store import JsonlTranscriptStore, SessionRecord, TranscriptWriteError
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (40, resource.RLIM_INFINITY))
        try:
            JsonlTranscriptStore.create({str(path)!r}, SessionRecord("s1", "/ws"))
        except TranscriptWriteError as exc:
            print("refused:", exc)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"refused: cannot create {path}: ")
    assert done.stdout.count("\n") == 1
    assert not path.exists()
    assert list(folder.iterdir()) == []  # no half-written file, no temporary left behind
    with JsonlTranscriptStore.create(path, SessionRecord("s1", "/ws")):  # and it can be retried
        pass
    assert read_transcript(path).session_id == "s1"


def test_create_leaves_only_the_session_file(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "s.jsonl"
    with JsonlTranscriptStore.create(path, SessionRecord("s1", "/ws")):
        assert sorted(p.name for p in path.parent.iterdir()) == ["s.jsonl"]
    with pytest.raises(TranscriptWriteError, match="already exists; open it to resume"):
        JsonlTranscriptStore.create(path, SessionRecord("s2", "/ws"))
    assert read_transcript(path).session_id == "s1"


def header_line() -> bytes:
    return encode_record(SessionRecord("s1", "/ws"))


def message_line(text: str) -> bytes:
    return encode_record(MessageRecord(user(text)))


REFUSED: dict[str, tuple[bytes, type[StoreError], str]] = {
    "empty": (b"", TranscriptHeaderError, "the file is empty, not a session"),
    "blank lines": (b"\n\n", TranscriptHeaderError, "the file is empty, not a session"),
    "torn header": (header_line()[:30], TranscriptHeaderError, "session header is incomplete"),
    "torn header, newline": (
        header_line()[:30] + b"\n",
        TranscriptHeaderError,
        "session header is incomplete",
    ),
    "messages without a header": (
        message_line("a") + message_line("b"),
        TranscriptHeaderError,
        "no session header on line 1: it is a message record",
    ),
    "damaged header": (
        b"{" + header_line()[2:] + message_line("a"),
        TranscriptHeaderError,
        "no session header on line 1: not valid JSON",
    ),
    "header swapped with a message": (
        message_line("a") + header_line(),
        TranscriptHeaderError,
        "no session header on line 1",
    ),
    "not a transcript": (b"# notes\nplain text\n", NotATranscriptError, "not a Cairn transcript"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_open_refuses_a_file_without_a_usable_header_and_leaves_it_alone(
    tmp_path: Path, case: str
) -> None:
    content, error, problem = REFUSED[case]
    path = tmp_path / "broken.jsonl"
    path.write_bytes(content)
    with pytest.raises(error) as caught:
        JsonlTranscriptStore.open(path)
    message = str(caught.value)
    assert message.startswith(f"cannot resume {path}: ")
    assert problem in message
    assert "\n" not in message
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.jsonl"]


def test_records_of_a_headerless_file_are_still_readable(tmp_path: Path) -> None:
    path = tmp_path / "headerless.jsonl"
    path.write_bytes(b"{" + header_line()[2:] + message_line("a") + message_line("b"))
    loaded = read_transcript(path)
    assert [m.text for m in loaded.api().messages] == ["a", "b"]
    assert "the file does not start with a session header" in loaded.warnings


def test_a_header_after_blank_lines_still_opens(tmp_path: Path) -> None:
    path = tmp_path / "blank-first.jsonl"
    path.write_bytes(b"\n" + header_line() + message_line("a"))
    with JsonlTranscriptStore.open(path) as store:
        assert store.session_id == "s1"


@pytest.fixture
def other_writer(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    path = tmp_path / "busy.jsonl"
    JsonlTranscriptStore.create(path, SessionRecord("s1", "/ws")).close()
    code = textwrap.dedent(
        f"""
        import sys
        from cairn.store import JsonlTranscriptStore
        store = JsonlTranscriptStore.open({str(path)!r})
        print("open", flush=True)
        sys.stdin.readline()
        store.close()
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline() == "open\n"
    yield path, child
    assert child.stdin is not None
    child.stdin.close()
    child.wait(timeout=60)


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="the holder's pid comes from Linux")
def test_a_locked_session_names_the_process_that_holds_it(
    other_writer: tuple[Path, subprocess.Popen[str]],
) -> None:
    path, child = other_writer
    with pytest.raises(TranscriptLockedError) as caught:
        JsonlTranscriptStore.open(path)
    assert str(caught.value) == (
        f"cannot resume {path}: it is already open for writing by another Cairn process "
        f"(pid {child.pid}); close it there first (one writer per session file)"
    )


def test_a_second_writer_in_this_process_is_told_so(store: JsonlTranscriptStore) -> None:
    with pytest.raises(TranscriptLockedError, match=r"by this Cairn process \(pid \d+\)"):
        JsonlTranscriptStore.open(store.path)


def test_every_open_error_is_one_line_naming_the_file(tmp_path: Path) -> None:
    blocker = tmp_path / "plain-file"
    blocker.write_text("x")
    cases: list[Path] = [tmp_path / "missing.jsonl", tmp_path, blocker / "under-a-file.jsonl"]
    for name, (content, _, _) in REFUSED.items():
        path = tmp_path / f"{name.replace(' ', '-').replace(',', '')}.jsonl"
        path.write_bytes(content)
        cases.append(path)
    for path in cases:
        with pytest.raises(StoreError) as caught:
            JsonlTranscriptStore.open(path)
        message = str(caught.value)
        assert message.startswith(f"cannot resume {path}: "), message
        assert "\n" not in message


def test_cairn_p_resume_of_an_empty_session_is_one_line(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    workspace = tmp_path / "project"
    workspace.mkdir()
    home = tmp_path / "home"
    path = session_path(workspace, "s-empty", home)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("CAIRN_", "OPENAI_"))}
    done = subprocess.run(
        [str(CAIRN), "-p", "hello", "--resume", "s-empty"],
        cwd=workspace,
        env={
            **environ,
            "CAIRN_MODEL": "test-model",
            "OPENAI_BASE_URL": openai_server.base_url,
            "CAIRN_HOME": str(home),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"cannot resume {path}: the file is empty" in done.stderr
    assert openai_server.requests == []  # nothing was sent
    assert path.read_bytes() == b""


# ---------------------------------------------------------------------------
# 3. State records


def test_restore_skips_each_bad_part_of_a_state_snapshot_with_a_warning() -> None:
    state = SessionState("s1", Path("/ws"))
    warnings = state.restore(
        {
            "reads": [
                {"path": "good.py", "read_at": 12.5},
                {"path": "bad-time.py", "read_at": "yesterday"},
                {"path": 5, "read_at": 1},
                {"path": "nul\0.py", "read_at": 1},
                {"path": "inf.py", "read_at": 1e308 * 10},
                "not an object",
                {"path": "flag.py", "read_at": True},
            ],
            "plan_file": 3,
            "skills": [{"name": ["x"], "skill_file": "s.md"}, {"name": "ok", "skill_file": "s.md"}],
            "tasks": {"not": "a list"},
            "todos": [{"content": {"a": 1}}, {"content": "write tests", "status": "pending"}],
        }
    )
    assert [str(r.path) for r in state.reads] == ["good.py"]
    assert state.plan is None
    assert [s.name for s in state.skills] == ["ok"]
    assert state.tasks == {}
    assert [t.content for t in state.todos] == ["write tests"]
    assert warnings == [
        "state 'reads' item 1: read_at: Input should be a valid number, unable to parse string"
        ' as a number (got "yesterday"); skipped',
        "state 'reads' item 2: path: Input should be a valid string (got 5); skipped",
        "state 'reads' item 3: path: holds a NUL character, which no path can; skipped",
        "state 'reads' item 4: read_at: Input should be a finite number (got Infinity); skipped",
        "state 'reads' item 5: must be a JSON object (got \"not an object\"); skipped",
        "state 'reads' item 6: read_at: is a boolean, not a number (got true); skipped",
        "state 'plan_file': Input should be a valid string (got 3); plan mode not restored",
        "state 'skills' item 0: name: Input should be a valid string; skipped",
        "state 'tasks' is an object, not a list; skipped",
        "state 'todos' item 0: content: Input should be a valid string; skipped",
    ]


def test_resume_survives_a_bad_state_record(tmp_path: Path, openai_server: OpenAIServer) -> None:
    workspace = tmp_path / "project"
    workspace.mkdir()
    home = tmp_path / "home"
    path = session_path(workspace, "s-state", home)
    with JsonlTranscriptStore.create(path, SessionRecord("s-state", str(workspace))) as store:
        store.append(MessageRecord(user("hello")))
        bad: JSONValue = {
            "reads": [{"path": "a.py", "read_at": "soon"}, {"path": "b.py", "read_at": 3}],
            "tasks": [{"id": None}, {"id": "t1", "status": "running"}],
            "skills": [{"name": {}}],
            "plan_file": ["x"],
        }
        store.append(StateRecord(STATE_KEY, bad))
    model = ModelConfig(model="test-model", base_url=openai_server.base_url)
    runtime = Runtime(workspace, model, OpenAIProvider(model), home=home, permission_mode="bypass")
    try:
        session = runtime.resume("s-state")
        assert [str(r.path) for r in session.state.reads] == ["b.py"]
        assert session.state.tasks["t1"].status == "interrupted (session restarted)"
        assert session.state.plan is None
        # What was skipped reaches the user once a surface listens.
        seen: list[object] = []
        session.events.on(seen.append)
        asyncio.run(session.start())
        notices = [e.text for e in seen if isinstance(e, Notice)]
        assert any("read_at" in n and "skipped" in n for n in notices), notices
    finally:
        runtime.close()


# Any JSON value, including what only memory can hold (NaN, huge integers,
# lone surrogates), in the places a snapshot has them.
any_text = st.text(max_size=12)
any_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | any_text
    | st.sampled_from(["running", "", "\0", "\ud800", "1e999", "12.5"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(any_text, inner, max_size=3),
    max_leaves=10,
)
fields = (
    "path",
    "read_at",
    "name",
    "skill_file",
    "description",
    "body_as_seen",
    "id",
    "status",
    "content",
)
items = st.dictionaries(st.sampled_from(fields), any_json, max_size=6) | any_json
snapshots = any_json | st.fixed_dictionaries(
    {},
    optional={
        key: st.lists(items, max_size=4) | any_json for key in ("reads", "skills", "tasks", "todos")
    }
    | {"plan_file": any_text | any_json},
)


@settings(
    max_examples=count(200, 5_000),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(snapshots)
def test_restore_never_raises_and_what_it_keeps_survives_a_round_trip(data: JSONValue) -> None:
    state = SessionState("s1", Path("/ws"))
    warnings = state.restore(data)
    assert all(isinstance(w, str) and "\n" not in w for w in warnings)
    assert all(math.isfinite(r.read_at) for r in state.reads)
    snapshot = state.to_json()
    encode_record(StateRecord(STATE_KEY, snapshot))  # what it keeps can be persisted
    again = SessionState("s1", Path("/ws"))
    assert again.restore(snapshot) == []
    # A running task restored once reads "interrupted"; the rest is unchanged.
    assert again.to_json() == snapshot


# ---------------------------------------------------------------------------
# 4. Lone surrogates


def surrogate_message() -> Message:
    return Message(
        "user",
        (ImagePart("https://x/\udcff.png", detail="\ud800"),),
        meta=MessageMeta(kind="odd\udc80", extra={"key\udc80": ["\ud800", {"k": "\udfff"}]}),
    )


def test_check_checkpoint_measures_lone_surrogates_as_they_will_be_written() -> None:
    call = ToolCall(new_id("call"), "read_file", "{}")
    kept = (surrogate_message(), assistant(None, [call]), tool_result(call.id, "ok"))
    record = CompactionRecord("auto", "llm", 10, 5, "summary", kept)
    size = check_checkpoint(record)  # raised TypeError: str is not valid UTF-8
    written = orjson.loads(encode_record(record))["replacement_messages"]
    assert size == len(orjson.dumps(written))
    assert "\\ud800" not in orjson.dumps(written).decode("ascii", "backslashreplace")
    assert api_view([record]).messages == list(kept)
    assert len(ui_view([record])) == 1


def test_records_with_lone_surrogates_are_stored_scrubbed_and_memory_matches_the_file(
    store: JsonlTranscriptStore,
) -> None:
    message = surrogate_message()
    store.append(MessageRecord(message))
    store.append(StateRecord(STATE_KEY, {"reads": [{"path": "\udcff.py", "read_at": 1.0}]}))
    store.save_compaction(CompactionRecord("manual", "fallback", 9, 3, "s\ud800", (message,)))
    store.sync()
    loaded = read_transcript(store.path)
    assert loaded.bad_lines == 0
    assert loaded.api().messages == store.api_view.messages  # memory holds what reload holds
    kept = store.api_view.messages[0]
    assert kept.meta.kind == "odd\ufffd"
    assert kept.meta.extra == {"key\ufffd": ["\ufffd", {"k": "\ufffd"}]}
    assert kept.images[0].url == "https://x/\ufffd.png"
    assert [m.text for m in loaded.ui()][-1] == "s\ufffd"
    state = loaded.records[2]
    assert isinstance(state, StateRecord)
    assert state.value == {"reads": [{"path": "\ufffd.py", "read_at": 1.0}]}


@pytest.mark.parametrize(
    "escape", [b'"\\ud800"', b'"a\\udc00b"', b'"\\ud800\\u0041"', b'"\\udfff\\ud800"']
)
def test_a_lone_surrogate_escape_on_disk_is_a_bad_line(tmp_path: Path, escape: bytes) -> None:
    path = tmp_path / "escape.jsonl"
    with JsonlTranscriptStore.create(path, SessionRecord("s1", "/ws")) as store:
        store.append(MessageRecord(user("before")))
    message = message_to_dict(user("x"))
    message["meta"] = {"extra": {"d": "@@"}}
    with path.open("ab") as handle:
        handle.write(
            with_placeholder({"v": 1, "type": "message", "ts": "t", "message": message}, escape)
        )
    loaded = read_transcript(path)
    assert loaded.bad_lines == 1
    assert "surrogate" in loaded.warnings[0]
    assert [m.text for m in loaded.api().messages] == ["before"]
    out, err = io.StringIO(), io.StringIO()
    assert run_inspect(path, as_json=True, stdout=out, stderr=err) == 0, err.getvalue()
    with JsonlTranscriptStore.open(path):
        pass
