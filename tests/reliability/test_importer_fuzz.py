"""Fuzzing the session importers: damaged real recordings and generated files.

Every importer reads files written by other programs, so every input must end
in either sessions that keep the importers' promises (module docstring of
``cairn.replay.importers``: calls paired with results, unique ids, system
messages apart, everything storable as JSON) or one ``SessionImportError``
line. Any other exception is a crash.

Three sources of input, each imported under ``auto`` and under every format:

- the real recordings in ``tests/fixtures/sessions`` and ``examples/sessions``
  (plus an OpenAI chat file and a Cairn transcript made from them), with
  JSON-aware mutations: a value replaced by one of another type (a list, an
  object, a huge integer, null, a string with a lone surrogate, a value nested
  300 or 1,000 deep), a key deleted, a value wrapped, lines duplicated,
  dropped, swapped or cut;
- the same recordings damaged byte by byte: flips, cuts, non-UTF-8 bytes;
- files generated from scratch in the shape of each format, every field
  either plausible or any JSON value.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import cast

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cairn.messages import (
    Message,
    MessageMeta,
    ToolCall,
    Usage,
    assistant,
    find_orphans,
    message_to_dict,
    system,
    to_wire,
    tool_result,
    user,
)
from cairn.replay.importers import FORMATS, import_sessions
from cairn.replay.session import ImportResult, SessionImportError
from cairn.store import JsonlTranscriptStore, MessageRecord, SessionRecord
from reliability.soak import count, record

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = (
    *sorted((ROOT / "tests" / "fixtures" / "sessions").glob("*/*.json*")),
    *sorted((ROOT / "tests" / "fixtures" / "sessions").glob("*/*.traj")),
    *sorted((ROOT / "examples" / "sessions").glob("*.traj")),
)

# ---------------------------------------------------------------------------
# The tally


@dataclass
class Tally:
    inputs: int = 0
    imports: int = 0
    imported: int = 0
    refused: int = 0
    crashes: int = 0


TALLY = Tally()


@pytest.fixture(scope="module", autouse=True)
def _figures() -> Iterator[None]:
    yield
    shutil.rmtree(workdir(), ignore_errors=True)
    record(
        "importer_fuzz",
        inputs=TALLY.inputs,
        crashes=TALLY.crashes,
        imports=TALLY.imports,
        imported=TALLY.imported,
        refused=TALLY.refused,
    )


@cache
def workdir() -> Path:
    # A module-level directory: hypothesis runs many examples per test and
    # function-scoped fixtures are not reset between them.
    return Path(tempfile.mkdtemp(prefix="cairn-importer-fuzz-"))


def attempt(data: bytes, suffix: str, session: int | None) -> None:
    """Import ``data`` under every format; anything but ``SessionImportError`` is a crash."""
    TALLY.inputs += 1
    path = workdir() / f"input{suffix}"
    path.write_bytes(data)
    for fmt in ("auto", *FORMATS):
        TALLY.imports += 1
        try:
            result = import_sessions(path, format=fmt, session=None if fmt == "auto" else session)
        except SessionImportError as exc:
            TALLY.refused += 1
            check_error(str(exc))
            continue
        except Exception:
            TALLY.crashes += 1
            raise
        TALLY.imported += 1
        check_result(result)


def check_error(text: str) -> None:
    assert text and "\n" not in text, f"not one line: {text!r}"
    assert len(text) < 2000, f"error of {len(text)} characters: {text[:200]!r}…"
    text.encode()


def check_result(result: ImportResult) -> None:
    assert result.format in FORMATS
    for warning in result.warnings:
        check_error(warning)
    for session in result.sessions:
        assert session.format == result.format
        assert isinstance(session.name, str)
        session.name.encode()
        assert not find_orphans(session.messages), find_orphans(session.messages)
        assert all(m.role != "system" for m in session.messages)
        assert all(m.role == "system" for m in session.system)
        everything = (*session.system, *session.messages)
        ids = [m.id for m in everything]
        assert len(set(ids)) == len(ids), "message ids repeated"
        check_rounds(session.messages)
        # What the replay stores, sends and counts must be encodable as is.
        orjson.dumps([message_to_dict(m) for m in everything])
        orjson.dumps(to_wire(everything))
        assert all(isinstance(tool, dict) for tool in session.tools)
        orjson.dumps({"body": {"tools": list(session.tools)}})  # as a request holds them


def check_rounds(messages: tuple[Message, ...]) -> None:
    """Each tool result answers a call of the assistant message that opens its round."""
    head: Message | None = None
    for message in messages:
        if message.role != "tool":
            head = message
            continue
        assert head is not None and head.role == "assistant", "a result outside a round"
        assert message.tool_call_id in {c.id for c in head.tool_calls}, "a stray result"


# ---------------------------------------------------------------------------
# Seeds: the real recordings, and files in the two formats no recording has


@cache
def seeds() -> tuple[tuple[str, bytes], ...]:
    found = [(p.suffix, p.read_bytes()) for p in RECORDINGS]
    tau = orjson.loads(
        (ROOT / "tests/fixtures/sessions/tau-bench/gpt-4o-airline-first2.json").read_bytes()
    )
    traj = tau[0]["traj"]
    tools = [{"type": "function", "function": {"name": "get_user", "parameters": {}}}]
    found.append((".json", orjson.dumps(traj)))
    found.append(
        (".json", orjson.dumps({"messages": traj, "tools": tools}, option=orjson.OPT_INDENT_2))
    )
    found.append((".jsonl", cairn_transcript()))
    return tuple(found)


def cairn_transcript() -> bytes:
    path = workdir() / "seed-cairn.jsonl"
    call = ToolCall("call_1", "read_file", '{"path": "a.py"}')
    messages = [
        system("You are Cairn."),
        user("Fix the export."),
        assistant("Reading.", [call], usage=Usage(100, 10, 110)),
        tool_result("call_1", "print('a')"),
        Message("user", "restored a.py", meta=MessageMeta(synthetic=True)),
        assistant("Done."),
    ]
    with JsonlTranscriptStore.create(path, SessionRecord("sess-1", "/ws")) as store:
        for message in messages:
            store.append(MessageRecord(message))
    return path.read_bytes()


# ---------------------------------------------------------------------------
# Values of the wrong type

# Placeholders that ``encode`` swaps for text ``json.dumps`` cannot make
# itself (it would recurse once per level): values nested n deep.
_DEEP = re.compile(r'"@@deep:(\d+):([ld])@@"')


def deep(depth: int, kind: str) -> str:
    return f"@@deep:{depth}:{kind}@@"


def encode(value: object, indent: int | None = None) -> bytes:
    """JSON text; lone surrogates come out as ``\\ud800`` escapes, as Python writes them."""
    text = json.dumps(value, indent=indent, ensure_ascii=True)
    return _DEEP.sub(_deep_text, text).encode()


def _deep_text(match: re.Match[str]) -> str:
    depth, kind = int(match.group(1)), match.group(2)
    if kind == "l":
        return "[" * depth + "1" + "]" * depth
    return '{"a":' * depth + "1" + "}" * depth


VOCABULARY = [
    "user",
    "assistant",
    "system",
    "tool",
    "developer",
    "message",
    "text",
    "tool_use",
    "tool_result",
    "thinking",
    "image",
    "input_text",
    "output_text",
    "image_url",
    "input_image",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "local_shell_call",
    "reasoning",
    "session_meta",
    "response_item",
    "event_msg",
    "token_count",
    "user_message",
    "compacted",
    "session",
    "handoff",
    "context_edit",
    "compaction",
    "state",
    "error",
    "function",
    "observation",
    "action",
    "run",
    "recall",
    "base64",
    "call_1",
    "call_2",
    "toolu_1",
    "msg_1",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**63, 2**64 + 1, -(2**63) - 1, 10**30, 0, -1]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(VOCABULARY),
    st.sampled_from(["\ud800", "a\udfffb", "\udc80\ud800", "line\nbreak", "x" * 3000]),
    st.sampled_from([deep(n, k) for n in (250, 255, 300, 1000) for k in "ld"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(VOCABULARY), inner, max_size=3)
    ),
    max_leaves=6,
)


# ---------------------------------------------------------------------------
# JSON-aware mutation of a recording

Path_ = tuple[str | int, ...]


def nodes(value: object) -> list[Path_]:
    """The path of every value inside ``value``, the root first (iteratively: files nest deep)."""
    found: list[Path_] = []
    stack: list[tuple[Path_, object]] = [((), value)]
    while stack:
        path, node = stack.pop()
        found.append(path)
        if isinstance(node, dict):
            stack.extend(((*path, k), v) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend(((*path, i), v) for i, v in enumerate(node))
    return found


def get(value: object, path: Path_) -> object:
    for step in path:
        value = value[step]  # type: ignore[index]
    return value


def mutate_value(value: object, draw: st.DrawFn) -> object:
    """``value`` with one node replaced, deleted or wrapped."""
    paths = nodes(value)
    path = paths[draw(st.integers(0, len(paths) - 1), label="node")]
    if not path:
        return draw(json_values, label="root")
    parent, key = get(value, path[:-1]), path[-1]
    op = draw(st.sampled_from(["replace", "replace", "delete", "wrap", "vocabulary"]))
    if op == "delete":
        if isinstance(parent, dict):
            del parent[key]
        else:
            cast(list[object], parent).pop(cast(int, key))
        return value
    old = get(value, path)
    new: object
    if op == "wrap":
        new = draw(st.sampled_from([[old], {"type": old}, [old, old]]))
    elif op == "vocabulary":
        new = draw(st.sampled_from(VOCABULARY))
    else:
        new = draw(json_values, label="new")
    parent[key] = new  # type: ignore[index]
    return value


def units(raw: bytes) -> tuple[list[object], bool]:
    """The file as JSON values to mutate: one document, or one value per line."""
    try:
        return [orjson.loads(raw)], False
    except orjson.JSONDecodeError:
        return [orjson.loads(line) for line in raw.split(b"\n") if line.strip()], True


@st.composite
def mutated_recordings(draw: st.DrawFn) -> tuple[bytes, str]:
    suffix, raw = draw(st.sampled_from(seeds()))
    values, lines = units(raw)
    changed: set[int] = set()
    for _ in range(draw(st.integers(1, 4))):
        index = draw(st.integers(0, len(values) - 1))
        values[index] = mutate_value(values[index], draw)
        changed.add(index)
    if not lines:
        return encode(values[0], indent=draw(st.sampled_from([None, 2]))), suffix
    texts = [encode(v) if i in changed else orjson.dumps(v) for i, v in enumerate(values)]
    for _ in range(draw(st.integers(0, 2))):
        texts = draw(line_edits(texts))
    return b"\n".join(texts) + b"\n", suffix


@st.composite
def line_edits(draw: st.DrawFn, texts: list[bytes]) -> list[bytes]:
    if not texts:
        return [draw(st.sampled_from([b"[]", b"null", b'{"type": []}']))]
    i = draw(st.integers(0, len(texts) - 1))
    j = draw(st.integers(0, len(texts) - 1))
    op = draw(st.sampled_from(["duplicate", "drop", "swap", "cut", "junk"]))
    out = list(texts)
    if op == "duplicate":
        out.insert(j, out[i])
    elif op == "drop":
        del out[i]
    elif op == "swap":
        out[i], out[j] = out[j], out[i]
    elif op == "cut":
        out[i] = out[i][: draw(st.integers(0, len(out[i])))]
    else:
        junk = [b"[]", b"null", b"1", b'"x"', b'{"type": []}', b'{"type": {}}', b'{"v": 1}']
        out.insert(i, draw(st.sampled_from(junk)))
    return out


# ---------------------------------------------------------------------------
# Byte-level damage

_BYTES = [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x00", b"\n", b"{", b"]", b'"', b"\xef\xbb\xbf"]


@st.composite
def damaged_recordings(draw: st.DrawFn) -> tuple[bytes, str]:
    suffix, raw = draw(st.sampled_from(seeds()))
    data = bytearray(raw)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["flip", "cut", "insert", "delete"]))
        if op == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "cut":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.sampled_from(_BYTES))
        else:
            del data[at : at + draw(st.integers(1, 64))]
    return bytes(data), suffix


# ---------------------------------------------------------------------------
# Files generated in the shape of each format

Shape = dict[str, st.SearchStrategy[object]]


def shaped(fields: Shape) -> st.SearchStrategy[dict[str, object]]:
    """An object with any of ``fields``; each value mostly plausible, sometimes any JSON."""
    return st.fixed_dictionaries(
        {}, optional={k: st.one_of(v, v, v, json_values) for k, v in fields.items()}
    )


def one_of_words(*words: str) -> st.SearchStrategy[object]:
    return st.sampled_from(words)


ids = one_of_words("call_1", "call_2", "toolu_1", "m1", "m2")
texts = st.one_of(st.text(max_size=20), one_of_words("<system-reminder>x</system-reminder>hi"))
arguments = st.one_of(st.just('{"path": "a"}'), json_values)
blocks: st.SearchStrategy[dict[str, object]] = shaped(
    {
        "type": one_of_words(
            "text", "tool_use", "tool_result", "thinking", "image", "input_text", "image_url"
        ),
        "text": texts,
        "id": ids,
        "name": one_of_words("bash", "read_file"),
        "input": json_values,
        "tool_use_id": ids,
        "content": st.one_of(texts, st.lists(st.deferred(lambda: blocks), max_size=2)),
        "is_error": st.booleans(),
        "image_url": st.one_of(st.just("data:image/png;base64,AA"), shaped({"url": texts})),
        "source": shaped(
            {"type": one_of_words("base64"), "media_type": texts, "data": texts, "url": texts}
        ),
    }
)
content = st.one_of(texts, st.lists(blocks, max_size=3))
chat_messages = shaped(
    {
        "role": one_of_words("system", "developer", "user", "assistant", "tool"),
        "content": content,
        "id": ids,
        "tool_calls": st.lists(
            shaped(
                {
                    "id": ids,
                    "type": one_of_words("function"),
                    "function": shaped({"name": one_of_words("bash"), "arguments": arguments}),
                }
            ),
            max_size=3,
        ),
        "tool_call_id": ids,
        "tool_call_ids": st.lists(ids, max_size=2),
        "name": texts,
        "reasoning_content": texts,
        "agent": one_of_words("main", "other"),
        "is_demo": st.booleans(),
        "thought": texts,
        "action": texts,
        "message_type": one_of_words("observation", "action"),
    }
)
tools = st.lists(
    shaped({"type": one_of_words("function"), "function": shaped({"name": texts})}), max_size=2
)

openhands_events = shaped(
    {
        "id": st.one_of(st.integers(0, 5), ids),
        "action": one_of_words("system", "message", "run", "recall"),
        "observation": one_of_words("run", "error", "recall"),
        "source": one_of_words("user", "agent"),
        "args": shaped(
            {
                "content": texts,
                "thought": texts,
                "tools": tools,
                "image_urls": st.lists(texts, max_size=2),
                "command": texts,
            }
        ),
        "tool_call_metadata": shaped(
            {
                "tool_call_id": ids,
                "function_name": one_of_words("bash"),
                "model_response": shaped(
                    {
                        "id": ids,
                        "choices": st.lists(shaped({"message": chat_messages}), max_size=1),
                        "usage": shaped({"prompt_tokens": json_values}),
                    }
                ),
            }
        ),
        "content": content,
        "message": texts,
        "success": st.booleans(),
        "extras": shaped({"metadata": shaped({"prefix": texts, "suffix": texts})}),
    }
)
usage = shaped(
    {
        "input_tokens": st.integers(0, 2**64),
        "output_tokens": st.integers(0, 2**64),
        "cache_read_input_tokens": st.integers(0, 2**64),
        "cache_creation_input_tokens": st.integers(0, 2**64),
        "cached_input_tokens": st.integers(0, 2**64),
        "total_tokens": st.integers(0, 2**64),
    }
)
claude_records = shaped(
    {
        "type": one_of_words("user", "assistant", "system", "summary", "progress"),
        "message": shaped(
            {
                "id": ids,
                "role": one_of_words("user", "assistant"),
                "model": one_of_words("claude", "<synthetic>"),
                "content": content,
                "usage": usage,
            }
        ),
        "uuid": ids,
        "sessionId": texts,
        "isSidechain": st.booleans(),
        "isMeta": st.booleans(),
        "isCompactSummary": st.booleans(),
        "isApiErrorMessage": st.booleans(),
    }
)
codex_records = shaped(
    {
        "type": one_of_words("session_meta", "response_item", "event_msg", "turn_context"),
        "payload": shaped(
            {
                "type": one_of_words(
                    "message",
                    "function_call",
                    "custom_tool_call",
                    "local_shell_call",
                    "function_call_output",
                    "custom_tool_call_output",
                    "reasoning",
                    "token_count",
                    "user_message",
                    "other",
                ),
                "role": one_of_words("user", "assistant", "developer", "system"),
                "content": content,
                "id": ids,
                "call_id": ids,
                "name": one_of_words("shell", "apply_patch"),
                "arguments": arguments,
                "input": json_values,
                "action": json_values,
                "output": st.one_of(
                    texts,
                    st.just("Process exited with code 1\n"),
                    shaped({"content": content, "success": st.booleans()}),
                ),
                "message": texts,
                "info": shaped({"last_token_usage": usage}),
                "base_instructions": shaped({"text": texts}),
                "instructions": texts,
            }
        ),
    }
)
stored_messages = shaped(
    {
        "id": ids,
        "role": one_of_words("system", "user", "assistant", "tool"),
        "content": content,
        "tool_calls": st.lists(
            shaped({"id": ids, "name": one_of_words("bash"), "arguments": arguments}), max_size=2
        ),
        "tool_call_id": ids,
        "meta": shaped({"synthetic": st.booleans(), "hidden": st.booleans(), "usage": usage}),
    }
)
cairn_records = shaped(
    {
        "v": st.just(1),
        "type": one_of_words("session", "message", "handoff", "state", "error"),
        "id": ids,
        "ts": texts,
        "session_id": texts,
        "workspace": texts,
        "message": stored_messages,
    }
)


def jsonl(records: st.SearchStrategy[dict[str, object]]) -> st.SearchStrategy[bytes]:
    return st.lists(records, max_size=8).map(lambda rs: b"\n".join(encode(r) for r in rs) + b"\n")


GENERATED: dict[str, tuple[st.SearchStrategy[bytes], str]] = {
    "openai": (
        st.one_of(
            st.lists(chat_messages, max_size=8),
            shaped({"messages": st.lists(chat_messages, max_size=8), "tools": tools}),
        ).map(encode),
        ".json",
    ),
    "tau-bench": (
        st.lists(
            shaped(
                {
                    "task_id": st.integers(0, 3),
                    "trial": st.integers(0, 3),
                    "traj": st.lists(chat_messages, max_size=6),
                }
            ),
            max_size=3,
        ).map(encode),
        ".json",
    ),
    "swe-agent": (
        shaped({"history": st.lists(chat_messages, max_size=8), "trajectory": st.just([])}).map(
            lambda d: encode(d, indent=2)
        ),
        ".traj",
    ),
    "openhands": (
        jsonl(
            shaped(
                {
                    "instance_id": st.one_of(texts, st.integers()),
                    "history": st.lists(openhands_events, max_size=8),
                }
            )
        ),
        ".jsonl",
    ),
    "claude-code": (jsonl(claude_records), ".jsonl"),
    "codex": (jsonl(codex_records), ".jsonl"),
    "cairn": (jsonl(cairn_records), ".jsonl"),
}


@st.composite
def generated_files(draw: st.DrawFn) -> tuple[bytes, str]:
    files, suffix = GENERATED[draw(st.sampled_from(sorted(GENERATED)))]
    return draw(files), suffix


sessions = st.sampled_from([None, None, None, 0, 1, -1, 7])


def fuzzing(quick: int, soak: int) -> settings:
    return settings(
        max_examples=count(quick, soak),
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# ---------------------------------------------------------------------------
# The campaign


@fuzzing(150, 25_000)
@given(mutated_recordings(), sessions)
def test_mutated_recordings_import_or_fail_cleanly(
    file: tuple[bytes, str], session: int | None
) -> None:
    attempt(*file, session)


@fuzzing(100, 12_500)
@given(damaged_recordings(), sessions)
def test_damaged_bytes_import_or_fail_cleanly(file: tuple[bytes, str], session: int | None) -> None:
    attempt(*file, session)


@fuzzing(150, 12_500)
@given(generated_files(), sessions)
def test_generated_files_import_or_fail_cleanly(
    file: tuple[bytes, str], session: int | None
) -> None:
    attempt(*file, session)


def test_every_seed_imports_as_is() -> None:
    # The mutations start from sound files: each seed imports under detection.
    for suffix, raw in seeds():
        path = workdir() / f"seed{suffix}"
        path.write_bytes(raw)
        check_result(import_sessions(path))
