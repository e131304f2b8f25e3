"""Fuzzing the transcript loaders with damaged real session files.

A real session is written through ``JsonlTranscriptStore`` — chat, parallel
tool rounds, images, a hidden handoff, a context edit, agent state, two
compaction checkpoints, an error block — and then damaged: cut short, bits
flipped, non-UTF-8 bytes written or inserted, lines duplicated, deleted or
swapped, a value replaced by one of another type, a huge or NaN-ish number, a
lone surrogate escape, or JSON nested up to 1,100 levels deep, a key dropped.

Every loader must take every result: ``read_transcript`` (and both views,
and the agent state a resume restores), ``JsonlTranscriptStore.open`` (then
an append and ``close``) and ``cairn inspect`` (in-process, every output
form). Each either works or raises its documented one-line error
(``NotATranscriptError`` and its subclass ``TranscriptHeaderError``,
``TranscriptWriteError``; ``InspectError`` and exit code 2 for inspect).
Any other exception is a crash. Besides not crashing:

- every record before the first damaged byte is still read, in order, and
  ``open`` succeeds whenever the header line is intact;
- every record a loader returns can be written again;
- reading and inspecting never modify the file; ``open`` and the append keep
  every record that was readable, and the appended message ends the API view.

A few damaged files also go through a real ``cairn inspect`` subprocess.
"""

from __future__ import annotations

import io
import random
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cairn.agent.state import STATE_KEY, SessionState, Todo
from cairn.context.restoration_source import BackgroundTask, InvokedSkill
from cairn.messages import (
    KIND_COMPACT_SUMMARY,
    KIND_HANDOFF,
    ImagePart,
    JSONValue,
    Message,
    MessageMeta,
    TextPart,
    ToolCall,
    Usage,
    assistant,
    new_id,
    system,
    tool_result,
    user,
)
from cairn.store import (
    CompactionRecord,
    ContentEdit,
    ContextEditRecord,
    ErrorRecord,
    HandoffRecord,
    JsonlTranscriptStore,
    MessageRecord,
    NotATranscriptError,
    Record,
    SessionRecord,
    StateRecord,
    Transcript,
    TranscriptLockedError,
    TranscriptWriteError,
    read_transcript,
)
from cairn.store.inspection import InspectError, inspect_transcript, summary_to_dict, view_to_list
from cairn.store.records import encode_record
from cairn.surfaces.inspect import run_inspect
from reliability.soak import count, record

ROOT = Path(__file__).resolve().parents[2]
CAIRN = ROOT / ".venv" / "bin" / "cairn"

# ---------------------------------------------------------------------------
# The tally


@dataclass
class Tally:
    inputs: int = 0
    crashes: int = 0
    read: int = 0
    refused_read: int = 0
    opened: int = 0
    refused_open: int = 0
    inspected: int = 0
    subprocess_runs: int = 0


TALLY = Tally()


@pytest.fixture(scope="module", autouse=True)
def _figures() -> Iterator[None]:
    yield
    record(
        "store_fuzz",
        inputs=TALLY.inputs,
        crashes=TALLY.crashes,
        read=TALLY.read,
        refused_read=TALLY.refused_read,
        opened=TALLY.opened,
        refused_open=TALLY.refused_open,
        inspected=TALLY.inspected,
        subprocess_runs=TALLY.subprocess_runs,
    )
    shutil.rmtree(workdir(), ignore_errors=True)


@cache
def workdir() -> Path:
    # Module-level: hypothesis runs many examples per test, and function-scoped
    # fixtures are not reset between them.
    return Path(tempfile.mkdtemp(prefix="cairn-store-fuzz-"))


# ---------------------------------------------------------------------------
# The real session


@dataclass(frozen=True)
class Base:
    data: bytes
    lines: tuple[bytes, ...]
    records: tuple[Record, ...]


def _tool_round(tag: str, n: int) -> list[Message]:
    calls = [ToolCall(new_id("call"), "read_file", f'{{"path": "{tag}{i}.py"}}') for i in range(n)]
    head = assistant(f"reading {tag}", calls, usage=Usage(1_200, 40, 1_240, cached_tokens=800))
    return [
        head,
        *(
            tool_result(c.id, f"def f{i}():\n    return {i}  # 日本語 ✓\n")
            for i, c in enumerate(calls)
        ),
    ]


def _state() -> SessionState:
    state = SessionState("fuzz-1", Path("/work/app"))
    state.record_read(Path("calc.py"), 1_700_000_000.25)
    state.record_read(Path("/work/app/check.py"), 1_700_000_100.5)
    state.enter_plan_mode(Path("/work/app/.cairn/plan.md"))
    state.record_skill(InvokedSkill("review", Path("/skills/review.md"), "Review code", "body"))
    state.set_task(BackgroundTask("t1", "pytest -q", "running"))
    state.set_todos([Todo("fix add()", "in_progress"), Todo("run tests")])
    return state


@cache
def base() -> Base:
    path = workdir() / "base" / "session.jsonl"
    with JsonlTranscriptStore.create(path, SessionRecord("fuzz-1", "/work/app", model="m")) as s:
        first = _tool_round("a", 2)
        for message in (system("You are Cairn."), user("Fix add() in calc.py"), *first):
            s.append(MessageRecord(message))
        s.append(ContextEditRecord((ContentEdit(first[1].id, "[snipped]", "snip"),)))
        s.append(StateRecord(STATE_KEY, _state().to_json()))
        s.append(
            HandoffRecord(
                Message(
                    "user",
                    "You are near the limit.",
                    meta=MessageMeta(kind=KIND_HANDOFF, hidden=True),
                ),
                epoch=0,
            )
        )
        summary = Message(
            "user",
            "## Goal\nFix add()\n## Files\ncalc.py",
            meta=MessageMeta(kind=KIND_COMPACT_SUMMARY, synthetic=True, extra={"ledger": {"v": 1}}),
        )
        kept = _tool_round("b", 1)
        for message in kept:
            s.append(MessageRecord(message))
        s.save_compaction(
            CompactionRecord(
                "auto", "llm", 9_000, 2_000, "Fixed add()", (summary, *kept), files=("calc.py",)
            )
        )
        picture = user([TextPart("what is this?"), ImagePart("https://x/cat.png", "low")])
        for message in (
            picture,
            assistant("A cat. 🐱", reasoning="looks like a cat"),
            *_tool_round("c", 3),
        ):
            s.append(MessageRecord(message))
        s.append(ErrorRecord("Compaction failed: the summary was empty", source="compact"))
        s.append(StateRecord(STATE_KEY, _state().to_json()))
        tail = _tool_round("d", 1)
        s.save_compaction(
            CompactionRecord("manual", "fallback", 8_000, 1_500, "again", (summary, *tail))
        )
        for message in (
            user("thanks", source="cli"),
            assistant("Done.", usage=Usage(900, 10, 910)),
        ):
            s.append(MessageRecord(message))
    data = path.read_bytes()
    loaded = read_transcript(path)
    assert loaded.bad_lines == 0 and not loaded.warnings
    return Base(data, tuple(data.splitlines(keepends=True)), tuple(loaded.records))


# ---------------------------------------------------------------------------
# Damage


def deep(depth: int, kind: int) -> bytes:
    if kind == 0:
        return b"[" * depth + b"]" * depth
    if kind == 1:
        return b'{"k":' * depth + b'"leaf"' + b"}" * depth
    return b'[{"k":' * (depth // 2) + b"0" + b"}]" * (depth // 2)


#: Raw JSON texts a value is replaced by: wrong types, numbers at and past
#: every limit, NaN-ish literals, lone surrogates, non-UTF-8, control bytes.
RAW_VALUES: tuple[bytes, ...] = (
    b"null",
    b"true",
    b"false",
    b"0",
    b"-1",
    b"1.5",
    b'""',
    b'"x"',
    b"[]",
    b"{}",
    b"[1]",
    b'{"a":1}',
    b"[null]",
    b'{"":null}',
    b"18446744073709551615",
    b"18446744073709551616",
    b"9223372036854775807",
    b"-9223372036854775808",
    b"-9223372036854775809",
    b"1e308",
    b"1e400",
    b"-1e400",
    b"1" * 400,
    b"0." + b"0" * 400 + b"1",
    b"-0",
    b"-0.0",
    b"1E+2",
    b"4.9e-324",
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"nan",
    b'"NaN"',
    b'"Infinity"',
    b'"\\ud800"',
    b'"\\udc00"',
    b'"x\\ud83d"',
    b'"\\ud83d\\ude00"',
    b'"\\udfff\\ud800"',
    b'"\\ud800\\u0041"',
    b'"\xff"',
    b'"\xc3"',
    b'"\xed\xa0\x80"',
    b'"\xf4\x90\x80\x80"',
    b'"\\u0000"',
    b'"\x01"',
    b'"\\u001b[31mred"',
    b'"\xe2\x80\xae"',
    b'"a\\nb"',
    b'"' + b"x" * 70_000 + b'"',
)
#: Whole lines a line is replaced by.
RAW_LINES: tuple[bytes, ...] = (
    b"",
    b" ",
    b"{}",
    b"[]",
    b"null",
    b"1",
    b'""',
    b"\xff\xfe",
    b"{" * 2_000,
    b'{"v":1}',
    b'{"v":1,"type":"session"}',
    b'{"v":1,"type":"message","ts":"t"}',
    b'{"v":2,"type":"message"}',
    b'{"v":true,"type":"message"}',
    b'{"v":1.0,"type":"state"}',
)

#: Byte offsets, line numbers and value choices are taken modulo the current
#: size; the ranges keep hypothesis from favouring the first line and byte.
offsets = st.integers(0, 20_000)
line_numbers = st.integers(1, 40) | st.integers(1, 40) | st.integers(0, 40)
slot_numbers = st.integers(0, 400)
depths = st.sampled_from(
    [127, 128, 129, 200, 252, 253, 254, 255, 256, 300, 1_023, 1_024, 1_025]
) | st.integers(1, 1_100)
raw_values = st.sampled_from(RAW_VALUES) | st.builds(deep, depths, st.integers(0, 2))
operations = st.one_of(
    st.tuples(st.just("truncate"), offsets),
    st.tuples(st.just("flip"), offsets, st.integers(0, 7)),
    st.tuples(
        st.just("bytes"),
        offsets,
        st.sampled_from(
            [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\x00", b"\n", b"\r\n", b'"', b"}"]
        )
        | st.binary(min_size=1, max_size=6),
        st.booleans(),
    ),
    st.tuples(st.just("duplicate"), line_numbers),
    st.tuples(st.just("delete"), line_numbers),
    st.tuples(st.just("swap"), line_numbers, line_numbers),
    st.tuples(
        st.just("line"),
        line_numbers,
        st.sampled_from(RAW_LINES) | st.builds(deep, depths, st.integers(0, 2)),
    ),
    st.tuples(st.just("value"), line_numbers, slot_numbers, raw_values),
    st.tuples(st.just("kept"), line_numbers, slot_numbers, raw_values),
    st.tuples(st.just("drop"), line_numbers, slot_numbers),
)

_SLOT = "\x00@@slot@@\x00"


def _slots(value: object) -> list[tuple[dict[str, object] | list[object], str | int]]:
    """Every (container, key) of a decoded line, depth first."""
    found: list[tuple[dict[str, object] | list[object], str | int]] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found.extend((item, key) for key in item)
            stack.extend(item.values())
        elif isinstance(item, list):
            found.extend((item, index) for index in range(len(item)))
            stack.extend(item)
    return found


def _edit_line(line: bytes, which: int, raw: bytes | None) -> bytes:
    """``line`` with one value replaced by ``raw`` (or its key dropped when ``raw`` is None)."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return line
    slots = _slots(value)
    if not slots:
        return line
    container, key = slots[which % len(slots)]
    if raw is None:
        if isinstance(container, dict):
            del container[key]  # type: ignore[arg-type]
        else:
            container.pop(key)  # type: ignore[arg-type]
    else:
        container[key] = _SLOT  # type: ignore[index]
    try:
        text = orjson.dumps(value)
    except orjson.JSONEncodeError:  # an earlier edit nested it deeper than orjson writes
        return line
    return (text if raw is None else text.replace(orjson.dumps(_SLOT), raw)) + b"\n"


def _kept_slots(value: object) -> list[tuple[dict[str, object] | list[object], str | int]]:
    """Where a record keeps any JSON value it is given: ``meta.extra`` and state values."""
    if not isinstance(value, dict):
        return []
    holders: list[object] = []
    if value.get("type") == "state":
        holders.append(value)
        holders.append(value.get("value"))
    messages = [value.get("message")]
    if isinstance(value.get("replacement_messages"), list):
        messages += value["replacement_messages"]
    for message in messages:
        if isinstance(message, dict):
            meta = message.setdefault("meta", {})
            if isinstance(meta, dict):
                holders.append(meta.setdefault("extra", {}))
    found: list[tuple[dict[str, object] | list[object], str | int]] = []
    for holder in holders:
        if holder is value:
            found.append((value, "value"))
        elif isinstance(holder, dict | list):
            found += _slots(holder)
            if isinstance(holder, dict):
                found.append((holder, "fuzz"))
    return found


def _edit_kept(line: bytes, which: int, raw: bytes) -> bytes:
    """``line`` with a value that its record keeps as is replaced by ``raw``."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return line
    slots = _kept_slots(value)
    if not slots:
        return line
    container, key = slots[which % len(slots)]
    container[key] = _SLOT  # type: ignore[index]
    try:
        text = orjson.dumps(value)
    except orjson.JSONEncodeError:
        return line
    return text.replace(orjson.dumps(_SLOT), raw) + b"\n"


def _int(value: object) -> int:
    """An operation's integer argument (the strategies above draw only ints)."""
    assert isinstance(value, int)
    return value


def _bytes(value: object) -> bytes:
    """An operation's bytes argument (the strategies above draw only bytes)."""
    assert isinstance(value, bytes)
    return value


def damage(data: bytes, ops: list[tuple[object, ...]]) -> bytes:
    for op in ops:
        kind, *args = op
        lines = data.splitlines(keepends=True) or [b""]
        size = max(len(data), 1)

        def pick(n: object, lines: list[bytes] = lines) -> int:
            return _int(n) % len(lines)

        if kind == "truncate":
            data = data[: _int(args[0]) % (len(data) + 1)]
        elif kind == "flip":
            at = _int(args[0]) % size
            if data:
                data = data[:at] + bytes([data[at] ^ (1 << _int(args[1]))]) + data[at + 1 :]
        elif kind == "bytes":
            at, raw, insert = _int(args[0]) % size, _bytes(args[1]), bool(args[2])
            data = data[:at] + raw + data[at + (0 if insert else len(raw)) :]
        elif kind == "duplicate":
            i = pick(args[0])
            lines.insert(i, lines[i])
            data = b"".join(lines)
        elif kind == "delete":
            del lines[pick(args[0])]
            data = b"".join(lines)
        elif kind == "swap":
            i, j = pick(args[0]), pick(args[1])
            lines[i], lines[j] = lines[j], lines[i]
            data = b"".join(lines)
        elif kind == "line":
            lines[pick(args[0])] = _bytes(args[1]) + b"\n"
            data = b"".join(lines)
        elif kind == "kept":
            i = pick(args[0])
            lines[i] = _edit_kept(lines[i], _int(args[1]), _bytes(args[2]))
            data = b"".join(lines)
        elif kind in ("value", "drop"):
            i = pick(args[0])
            value = _bytes(args[2]) if kind == "value" else None
            lines[i] = _edit_line(lines[i], _int(args[1]), value)
            data = b"".join(lines)
    return data


def intact_records(data: bytes) -> int:
    """How many of the session's lines precede the first damaged byte, whole."""
    original = base().data
    limit = min(len(data), len(original))
    same = next((i for i in range(limit) if data[i] != original[i]), limit)
    return original[:same].count(b"\n")


# ---------------------------------------------------------------------------
# The checks


def check_error(exc: BaseException, path: Path) -> None:
    text = str(exc)
    assert text and "\n" not in text, f"not one line: {text!r}"
    assert str(path) in text, f"does not name the file: {text!r}"


def check_loaded(transcript: Transcript, intact: int) -> None:
    expected = base().records[:intact]
    assert tuple(transcript.records[:intact]) == expected, "a record before the damage was lost"
    for rec in transcript.records:
        encode_record(rec)  # everything a loader hands out can be written again
    view = transcript.api()
    transcript.ui(view)
    for rec in transcript.records:
        if isinstance(rec, StateRecord) and rec.key == STATE_KEY:
            warnings = SessionState("fuzz-1", Path("/work/app")).restore(rec.value)
            assert all("\n" not in w for w in warnings)
    for warning in (*transcript.warnings, *view.warnings):
        assert "\n" not in warning, f"warning not one line: {warning!r}"


def check_inspect(path: Path, transcript: Transcript | None, render: bool) -> None:
    usable = transcript is not None and bool(transcript.records)
    try:
        inspection = inspect_transcript(path)
    except InspectError as exc:
        assert not usable, f"inspect gave up on a loadable file: {exc}"
        check_error(exc, path)
    else:
        assert usable
        # What --json and --view print, without loading the file once per form.
        orjson.dumps(summary_to_dict(inspection))
        for view in ("api", "ui"):
            orjson.dumps(view_to_list(inspection, view))
    TALLY.inspected += 1
    out, err = io.StringIO(), io.StringIO()
    code = run_inspect(path, as_json=not render, stdout=out, stderr=err)
    if usable:
        assert code == 0 and err.getvalue() == "", err.getvalue()
        if not render:
            orjson.loads(out.getvalue())
    else:
        assert code == 2 and err.getvalue().count("\n") == 1, err.getvalue()


def check_open(path: Path, transcript: Transcript | None, intact: int) -> None:
    before = path.read_bytes()
    try:
        store = JsonlTranscriptStore.open(path)
    except TranscriptLockedError:
        raise  # nobody else holds it: this would be a bug
    except (NotATranscriptError, TranscriptWriteError) as exc:
        TALLY.refused_open += 1
        check_error(exc, path)
        assert intact == 0, f"refused a file whose header is intact: {exc}"
        assert transcript is None or transcript.header is None
        assert path.read_bytes() == before, "a refused open changed the file"
        return
    TALLY.opened += 1
    assert transcript is not None and transcript.header is not None
    mark = user(f"resumed {TALLY.inputs}")
    try:
        assert store.api_view.messages == transcript.api().messages
        store.append(MessageRecord(mark))
    finally:
        store.close()
    after = read_transcript(path)
    assert tuple(after.records[:intact]) == base().records[:intact]
    assert after.records[:-1] == transcript.records, "open lost or changed a readable record"
    assert after.api().messages[-1] == mark
    assert after.bad_lines == transcript.bad_lines


def attempt(data: bytes, *, render: bool) -> None:
    """Every loader on ``data``; anything but their documented errors is a crash."""
    TALLY.inputs += 1
    folder = workdir() / "input"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    path = folder / "session.jsonl"
    path.write_bytes(data)
    intact = intact_records(data)
    try:
        try:
            transcript: Transcript | None = read_transcript(path)
        except NotATranscriptError as exc:
            TALLY.refused_read += 1
            check_error(exc, path)
            assert intact == 0, f"refused a file with intact records: {exc}"
            transcript = None
        else:
            TALLY.read += 1
            assert transcript is not None
            check_loaded(transcript, intact)
        check_inspect(path, transcript, render)
        assert path.read_bytes() == data, "reading or inspecting changed the file"
        check_open(path, transcript, intact)
    except AssertionError:
        raise
    except Exception:
        TALLY.crashes += 1
        raise


# ---------------------------------------------------------------------------
# The campaign

FUZZ_INPUTS = count(250, 50_000)


@settings(
    max_examples=FUZZ_INPUTS,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(operations, min_size=1, max_size=3), st.integers(0, 1))
def _fuzz(ops: list[tuple[object, ...]], roll: int) -> None:
    # Rendering costs as much as all the loading; half the inputs are rendered.
    attempt(damage(base().data, ops), render=roll % 2 == 0)


def test_loaders_survive_damaged_session_files() -> None:
    start = TALLY.inputs
    _fuzz()
    assert TALLY.inputs - start >= FUZZ_INPUTS
    assert TALLY.crashes == 0


def test_the_undamaged_session_loads_whole() -> None:
    attempt(base().data, render=True)
    assert intact_records(base().data) == len(base().records)


def _seeded_damage(seed: int) -> bytes:
    rng = random.Random(seed)
    data = base().data
    lines = list(base().lines)
    i = rng.randrange(1, len(lines))
    lines[i] = _edit_line(lines[i], rng.randrange(1_000), deep(300 + seed, seed % 3))
    data = b"".join(lines)
    at = rng.randrange(len(data))
    return data[:at] + b"\xff\xfe" + data[at + 2 :]


@pytest.mark.parametrize("usable", [True, False])
def test_cairn_inspect_subprocess_on_damaged_files(tmp_path: Path, usable: bool) -> None:
    # Deep nesting plus non-UTF-8 bytes after the header, or a torn header alone.
    content = _seeded_damage(1) if usable else base().lines[0][:25]
    path = tmp_path / "damaged.jsonl"
    path.write_bytes(content)
    try:
        loadable = bool(read_transcript(path).records)
    except NotATranscriptError:
        loadable = False
    assert loadable is usable
    TALLY.subprocess_runs += 1
    done = subprocess.run(
        [str(CAIRN), "inspect", str(path)], capture_output=True, text=True, timeout=60
    )
    assert "Traceback" not in done.stderr + done.stdout
    if usable:
        assert done.returncode == 0 and done.stderr == "", done.stderr
        assert "Warnings" in done.stdout
    else:
        assert done.returncode == 2
        assert done.stderr.startswith("cairn inspect: ") and done.stderr.count("\n") == 1
    assert path.read_bytes() == content


def test_the_sessions_state_record_restores_without_warnings() -> None:
    """The state record the fuzz damages is a real, complete snapshot."""
    value: JSONValue = orjson.loads(
        next(line for line in base().lines if b'"type":"state"' in line)
    )["value"]
    assert SessionState("fuzz-1", Path("/work/app")).restore(value) == []
