"""What every importer shares: the source file, ids, content conversion, pairing.

An importer reads its format into a ``SessionBuilder`` one message at a time,
in recorded order, naming where each message came from (``line 7``,
``history[3]``). ``SessionBuilder.build`` then makes the session sound: every
tool call is followed by all of its results, a call nobody answered gets a
placeholder result, a result nobody asked for is dropped, and every message
id is unique. Each repair is one warning that names the place.

Values of a foreign file are checked at the edge: whatever shape a file
holds (a list where an object belongs, a number for a string, null, a huge
integer, a value nested a thousand deep), an importer either reads it or
reports it as ``RecordError`` / ``SessionImportError`` naming the line or
key — never another exception. So a foreign value is not hashed, indexed,
printed or compared as a whole before its type is checked (``opt_str``,
``describe``), and what is kept (tool arguments, tool schemas, names) is
checked to be writable as JSON again.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import NoReturn, cast

import orjson

from cairn.errors import CairnError
from cairn.messages import (
    Content,
    ContentPart,
    ImagePart,
    JSONObject,
    Message,
    MessageMeta,
    Role,
    TextPart,
    ToolCall,
    Usage,
    find_orphans,
    json_kind,
    scrub,
)
from cairn.replay.fixed_context import (
    CONTEXT_NOT_RECORDED,
    ELSEWHERE_RATIO,
    UNRECORDED_TOKENS,
    context_not_recorded,
    first_response_with_usage,
    recorded_fixed,
    usage_exceeds_recording,
)
from cairn.replay.session import RecordedSession, SessionImportError
from cairn.tokens import estimate_messages_tokens

#: The text of the result added for a tool call that has none in the recording.
PLACEHOLDER_RESULT = "[no result was recorded for this call]"

_BOM = b"\xef\xbb\xbf"

#: The deepest nesting ``dump_json`` writes: what orjson can write back (the
#: transcript, the request body), so every argument text stays re-encodable.
MAX_DEPTH = 254
#: Token counts above this are not counts (no context is a trillion tokens);
#: sums of a few stay far inside the 64 bits JSON writers accept.
MAX_COUNT = 2**40


class RecordError(CairnError, ValueError):
    """One record or message has the wrong shape; the text names the key at fault."""


Warn = Callable[[str], None]


@dataclass(frozen=True)
class Loaded:
    """What one importer read: the sessions and the warnings, in file order."""

    sessions: tuple[RecordedSession, ...]
    warnings: tuple[str, ...] = ()


# ---------------------------------------------------------------------------
# The source file


class Source:
    """The bytes of one session file, read once, with lazily parsed views of them."""

    def __init__(self, path: Path, data: bytes) -> None:
        self.path = path
        self.data = data[len(_BOM) :] if data.startswith(_BOM) else data
        self._document: object = _UNPARSED
        self._document_error: orjson.JSONDecodeError | None = None

    @classmethod
    def read(cls, path: str | Path) -> Source:
        path = Path(path)
        if path.is_dir():
            raise SessionImportError(f"{path} is a directory, not a session file")
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise SessionImportError(f"{path}: no such file") from None
        except OSError as exc:
            raise SessionImportError(f"{path}: cannot read ({exc.strerror or exc})") from None
        return cls(path, data)

    @cached_property
    def digest(self) -> str:
        """A short hash of the contents: generated ids are stable for the same file."""
        return hashlib.sha256(self.data).hexdigest()[:10]

    @property
    def head(self) -> bytes:
        """The first non-blank byte (``b""`` for a blank file)."""
        return self.data.lstrip()[:1]

    def document(self, fmt: str) -> object:
        """The whole file as one JSON value, or ``SessionImportError`` naming the line."""
        if self._document is _UNPARSED and self._document_error is None:
            try:
                self._document = load_json(self.data)
            except orjson.JSONDecodeError as exc:
                self._document_error = exc
        error = self._document_error
        if error is not None:
            raise SessionImportError(f"{fmt}: line {error.lineno}: not valid JSON ({error.msg})")
        return self._document

    def try_document(self) -> object | None:
        """The whole file as one JSON value, or ``None`` if it is not one."""
        try:
            return self.document("json")
        except SessionImportError:
            return None

    def lines(self) -> Iterator[tuple[int, bytes]]:
        """Every non-blank line with its 1-based number."""
        for number, line in enumerate(self.data.split(b"\n"), start=1):
            if line.strip():
                yield number, line

    def parsed_lines(self) -> list[tuple[int, object]]:
        """Every non-blank line parsed as JSON (a ``BadLine`` where that fails).

        A file that is one pretty-printed JSON value (its first line alone
        does not parse, the whole file does) counts as one record on line 1.
        """
        entries: list[tuple[int, object]] = []
        for number, line in self.lines():
            try:
                entries.append((number, load_json(line)))
            except orjson.JSONDecodeError as exc:
                entries.append((number, BadLine(exc.msg)))
        if entries and isinstance(entries[0][1], BadLine) and self.head in (b"{", b"["):
            document = self.try_document()
            if document is not None:
                return [(1, document)]
        return entries

    def json_lines(self, fmt: str, warn: Warn) -> list[tuple[int, object]]:
        """The lines that parse as JSON, with their numbers; bad lines are warned about.

        If no line parses at all, ``SessionImportError`` names the first bad line.
        """
        entries = self.parsed_lines()
        records = [(n, value) for n, value in entries if not isinstance(value, BadLine)]
        if not records:
            first_bad(fmt, entries)
        for number, value in entries:
            if isinstance(value, BadLine):
                warn(f"line {number}: not valid JSON ({value.message}); skipped")
        return records


@dataclass(frozen=True)
class BadLine:
    """A line of a JSON Lines file that is not valid JSON."""

    message: str


def first_bad(fmt: str, entries: list[tuple[int, object]]) -> NoReturn:
    """Raise for a JSON Lines file in which no line could be read."""
    for number, value in entries:
        if isinstance(value, BadLine):
            raise SessionImportError(f"{fmt}: line {number}: not valid JSON ({value.message})")
    raise SessionImportError(f"{fmt}: the file is empty")


_UNPARSED = object()


def load_json(data: bytes) -> object:
    """One JSON value; ``orjson.JSONDecodeError`` (orjson's message) if it is not one.

    orjson refuses lone surrogates (``"\\ud800"`` escapes, which Python's own
    ``json.dumps`` writes for undecodable bytes); such text is read with the
    standard library instead and every lone surrogate, in keys and strings,
    becomes U+FFFD, so no string past this point is unencodable.
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if "surrogate" not in exc.msg:
            raise
        try:
            value = json.loads(data, parse_constant=_no_constant)
        except (ValueError, RecursionError):  # not JSON either, or nested past the stack
            raise exc from None
        return scrub_value(value)


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def scrub_value(value: object) -> object:
    """``value`` with every string and key scrubbed in place (iteratively: it may nest deep)."""
    if isinstance(value, str):
        return scrub(value)
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            for index, item in enumerate(node):
                if isinstance(item, str):
                    node[index] = scrub(item)
                elif isinstance(item, list | dict):
                    stack.append(item)
        elif isinstance(node, dict):
            items = list(node.items())
            node.clear()
            for key, item in items:
                node[scrub(key)] = scrub(item) if isinstance(item, str) else item
                if isinstance(item, list | dict):
                    stack.append(item)
    return value


# ---------------------------------------------------------------------------
# Small typed accessors


def expect_dict(value: object, where: str) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise RecordError(f"{where}: expected a JSON object, found {kind_of(value)}")
    return cast(Mapping[str, object], value)


def expect_list(data: Mapping[str, object], key: str, where: str = "") -> list[object]:
    value = data.get(key)
    at = f"{where}: " if where else ""
    if value is None and key not in data:
        raise RecordError(f"{at}key '{key}' missing")
    if not isinstance(value, list):
        raise RecordError(f"{at}key '{key}' must be a list, found {kind_of(value)}")
    return value


def opt_str(data: Mapping[str, object], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) else None


def opt_dict(data: Mapping[str, object], key: str) -> Mapping[str, object]:
    value = data.get(key)
    return cast(Mapping[str, object], value) if isinstance(value, dict) else {}


def describe(value: object) -> str:
    """A foreign value for a message: a scalar's short repr, else what kind it is."""
    if isinstance(value, str):
        return repr(short(value, 60))
    if value is None or isinstance(value, bool | int | float):
        return short(repr(value), 60)
    return kind_of(value)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def short(text: str, limit: int = 80) -> str:
    """``text`` on one line and at most ``limit`` characters, for a warning or a name."""
    text = _CONTROL.sub(" ", text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def label_of(value: object) -> str | None:
    """A recorded id or number as a name (``task_id``, ``instance_id``); others name nothing."""
    if isinstance(value, str) or (isinstance(value, int | float) and not isinstance(value, bool)):
        return str(value)
    return None


def kind_of(value: object) -> str:
    return json_kind(value)


def dump_json(value: object, where: str) -> str:
    """Compact JSON text, as a model writes tool arguments.

    What orjson cannot write — an integer beyond 64 bits, a lone surrogate —
    is written by the standard library (lone surrogates become U+FFFD). A
    value nested deeper than ``MAX_DEPTH`` (orjson reads 1,024 levels but
    writes 254) is refused: ``RecordError`` naming ``where``, so the record
    holding it is skipped or the file refused, as for any wrong shape.
    """
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        pass
    depth = json_depth(value)
    if depth > MAX_DEPTH:
        raise RecordError(
            f"{where}: a value nested {depth} levels deep (at most {MAX_DEPTH} are replayed)"
        )
    return scrub(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def json_depth(value: object) -> int:
    """How many arrays and objects deep ``value`` nests (counted without recursion)."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            stack.extend((item, depth + 1) for item in node.values())
        elif isinstance(node, list):
            stack.extend((item, depth + 1) for item in node)
        else:
            continue
        deepest = max(deepest, depth + 1)
    return deepest


#: Levels a tool schema leaves for what holds it (the request body, its tools list).
TOOL_ROOM = 4


def json_problem(value: object, room: int = 0) -> str | None:
    """Why ``value`` cannot be written back as JSON ``room`` levels down (``None`` if it can)."""
    limit = MAX_DEPTH - room
    depth = json_depth(value)
    if depth > limit:
        return f"nested {depth} levels deep; at most {limit} are replayed"
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError as exc:
        return str(exc)
    return None


def pick_sessions(fmt: str, total: int, session: int | None) -> range:
    """The indexes to import: all, or the one ``session`` names (0-based)."""
    if session is None:
        return range(total)
    if not 0 <= session < total:
        held = f"{total} session" + ("" if total == 1 else "s")
        raise SessionImportError(
            f"{fmt}: session {session} is out of range (the file holds {held}, numbered from 0)"
        )
    return range(session, session + 1)


# ---------------------------------------------------------------------------
# Content


def make_content(parts: Sequence[ContentPart]) -> Content:
    """``None`` for no parts, a plain string for one text part, else the parts."""
    if not parts:
        return None
    if len(parts) == 1 and isinstance(parts[0], TextPart):
        return parts[0].text
    return tuple(parts)


def content_parts(raw: object, where: str, warn: Warn) -> list[ContentPart]:
    """Parts of a string or a list of OpenAI, Responses-API or Anthropic content blocks.

    Text blocks become ``TextPart``, image blocks ``ImagePart`` (Anthropic base64
    sources as ``data:`` URLs); any other block is skipped with a warning.
    """
    if raw is None:
        return []
    if isinstance(raw, str):
        return [TextPart(raw)] if raw else []
    if not isinstance(raw, list):
        raise RecordError(f"{where}: content must be a string or a list, found {kind_of(raw)}")
    parts: list[ContentPart] = []
    for index, block in enumerate(raw):
        if isinstance(block, str):
            parts.append(TextPart(block))
            continue
        if not isinstance(block, dict):
            raise RecordError(f"{where}.content[{index}]: expected an object")
        part = content_part(block)
        if part is None:
            kind = describe(block.get("type"))
            warn(f"{where}: content block of type {kind} not replayed; skipped")
        else:
            parts.append(part)
    return parts


def content_part(block: Mapping[str, object]) -> ContentPart | None:
    kind = block.get("type")
    if kind in ("text", "input_text", "output_text"):
        text = block.get("text")
        return TextPart(text) if isinstance(text, str) else None
    if kind == "refusal":
        text = block.get("refusal")
        return TextPart(text) if isinstance(text, str) else None
    if kind in ("image_url", "input_image"):
        image = block.get("image_url")
        if isinstance(image, dict):
            url, detail = image.get("url"), image.get("detail")
        else:
            url, detail = image, block.get("detail")
        if isinstance(url, str):
            return ImagePart(url, detail if isinstance(detail, str) else None)
        return None
    if kind == "image":  # Anthropic
        source = opt_dict(block, "source")
        if source.get("type") == "base64":
            media, data = source.get("media_type"), source.get("data")
            if isinstance(media, str) and isinstance(data, str):
                return ImagePart(f"data:{media};base64,{data}")
        url = source.get("url")
        return ImagePart(url) if isinstance(url, str) else None
    return None


# ---------------------------------------------------------------------------
# Content the host injected into user turns


@dataclass(frozen=True)
class Injected:
    """How a format's host marks what it writes into user turns.

    ``tags``: elements ``<tag …>…</tag>`` the host wraps its text in (an IDE
    selection, a reminder, the environment); ``markers``: whole texts the
    host writes in the user's place; ``prefixes``: texts the host starts with
    (a heading it puts before injected instructions).
    """

    tags: tuple[str, ...] = ()
    markers: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()

    @cached_property
    def pattern(self) -> re.Pattern[str] | None:
        if not self.tags:
            return None
        names = "|".join(re.escape(tag) for tag in self.tags)
        return re.compile(rf"<({names})(?:\s[^>]*)?>.*?</\1>", re.S)

    def whole(self, text: str) -> bool:
        """Is all of ``text`` written by the host?"""
        stripped = text.strip()
        return stripped in self.markers or stripped.startswith(self.prefixes)

    def split(self, text: str) -> list[tuple[str, bool]]:
        """``text`` as ``(segment, injected)`` pairs in order.

        Each injected element is a segment of its own; what lies between
        them is the user's, trimmed (the host joins its blocks with blank
        lines), and dropped when blank. A text with no injected element comes
        back whole and unchanged.
        """
        if self.whole(text):
            return [(text, True)]
        pattern = self.pattern
        if pattern is None or pattern.search(text) is None:
            return [(text, False)]
        segments: list[tuple[str, bool]] = []
        position = 0
        for match in pattern.finditer(text):
            typed = text[position : match.start()].strip()
            if typed:
                segments.append((typed, self.whole(typed)))
            segments.append((match.group(0), True))
            position = match.end()
        rest = text[position:].strip()
        if rest:
            segments.append((rest, self.whole(rest)))
        return segments


def injected_runs(
    parts: Sequence[ContentPart], injected: Injected
) -> list[tuple[list[ContentPart], bool]]:
    """The parts of one user turn, grouped into runs that are all typed or all injected.

    Text parts are split at injected elements; an image goes with the text
    around it as the user's. The runs keep the recorded order.
    """
    runs: list[tuple[list[ContentPart], bool]] = []
    for part in parts:
        pieces: list[tuple[ContentPart, bool]] = (
            [(TextPart(text), flag) for text, flag in injected.split(part.text)]
            if isinstance(part, TextPart)
            else [(part, False)]
        )
        for piece, flag in pieces:
            if runs and runs[-1][1] == flag:
                runs[-1][0].append(piece)
            else:
                runs.append(([piece], flag))
    return runs


# ---------------------------------------------------------------------------
# OpenAI chat messages (openai, tau-bench, SWE-agent, OpenHands responses)

_ROLE_ALIASES: Mapping[str, Role] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}


def chat_message(raw: object, where: str, ids: IdMaker, warn: Warn) -> Message:
    """One OpenAI chat-completions message; ``developer`` counts as ``system``."""
    data = expect_dict(raw, where)
    role_raw = data.get("role")
    if role_raw is None:
        raise RecordError(f"{where}: key 'role' missing")
    role = _ROLE_ALIASES.get(role_raw) if isinstance(role_raw, str) else None
    if role is None:
        raise RecordError(f"{where}: unknown role {describe(role_raw)}")
    calls: tuple[ToolCall, ...] = ()
    if role == "assistant":
        calls_raw = data.get("tool_calls") or []
        if not isinstance(calls_raw, list):
            raise RecordError(f"{where}: key 'tool_calls' must be a list")
        calls = tuple(
            chat_tool_call(c, f"{where}.tool_calls[{i}]", ids, warn)
            for i, c in enumerate(calls_raw)
        )
    reasoning = data.get("reasoning_content", data.get("reasoning"))
    return Message(
        role=role,
        content=make_content(content_parts(data.get("content"), where, warn)),
        id=opt_str(data, "id") or ids.next("msg"),
        tool_calls=calls,
        tool_call_id=opt_str(data, "tool_call_id") if role == "tool" else None,
        name=opt_str(data, "name"),
        reasoning=reasoning if isinstance(reasoning, str) and reasoning else None,
    )


def chat_tool_call(raw: object, where: str, ids: IdMaker, warn: Warn) -> ToolCall:
    data = expect_dict(raw, where)
    function = data.get("function")
    if not isinstance(function, dict):
        raise RecordError(f"{where}: key 'function' missing")
    name = function.get("name")
    if not isinstance(name, str):
        raise RecordError(f"{where}: key 'function.name' missing")
    arguments = function.get("arguments", "{}")
    if not isinstance(arguments, str):
        arguments = dump_json(arguments, f"{where}.function.arguments")
    call_id = data.get("id")
    if not isinstance(call_id, str) or not call_id:
        call_id = ids.next("call")
        warn(f"{where}: tool call {describe(name)} has no id; gave it {call_id}")
    return ToolCall(call_id, name, arguments)


def openai_usage(raw: object) -> Usage | None:
    """Usage from an OpenAI-style ``usage`` object (``prompt_tokens`` …), if any."""
    if not isinstance(raw, dict):
        return None
    prompt, completion = count(raw.get("prompt_tokens")), count(raw.get("completion_tokens"))
    total = count(raw.get("total_tokens")) or prompt + completion
    if not (prompt or completion or total):
        return None
    details = raw.get("prompt_tokens_details")
    cached = count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return Usage(prompt, completion, total, cached_tokens=cached or None)


def count(value: object) -> int:
    """A positive token count (at most ``MAX_COUNT``), or 0 for anything else."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_COUNT:
        return value
    return 0


# ---------------------------------------------------------------------------
# Ids


class IdMaker:
    """Deterministic ids for messages and calls the recording gave none.

    ``msg_<file hash>_<session>_<n>``: the same file imports to the same ids.
    """

    def __init__(self, digest: str, session: int) -> None:
        self._stem = f"{digest}_{session}"
        self._n = 0

    def next(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}_{self._stem}_{self._n}"


# ---------------------------------------------------------------------------
# Building one session


@dataclass
class Draft:
    """An assistant message still being assembled from several records."""

    id: str
    parts: list[ContentPart] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    usage: Usage | None = None

    def add_text(self, text: str) -> None:
        if text:
            self.parts.append(TextPart(text))

    def message(self) -> Message:
        return Message(
            role="assistant",
            content=make_content(self.parts),
            id=self.id,
            tool_calls=tuple(self.calls),
            meta=MessageMeta(usage=self.usage) if self.usage is not None else MessageMeta(),
        )


class SessionBuilder:
    """Collects one session's messages in order and makes the result sound."""

    def __init__(self, name: str, ids: IdMaker, *, label: str | None = None) -> None:
        self.name = name
        self.ids = ids
        self.system: list[Message] = []
        self.tools: list[JSONObject] = []
        self.warnings: list[str] = []
        self._label = label
        self._entries: list[tuple[Message | Draft, str]] = []

    def warn(self, text: str) -> None:
        label = f"{short(self._label)}: " if self._label else ""
        self.warnings.append(short(f"{label}{text}", 1000))

    def add(self, message: Message, where: str) -> None:
        if message.role == "system":
            self.system.append(message)
        else:
            self._entries.append((message, where))

    def add_draft(self, draft: Draft, where: str) -> Draft:
        self._entries.append((draft, where))
        return draft

    @property
    def has_messages(self) -> bool:
        return bool(self._entries)

    def build(self) -> RecordedSession:
        # One id space for both: the replay stores system and other messages alike.
        taken: set[str] = set()
        system = _unique_ids(self.system, self.warn, taken)
        messages = _unique_ids(self._pair(), self.warn, taken)
        orphans = find_orphans(messages)
        if orphans:  # pragma: no cover - _pair makes this impossible
            raise SessionImportError(f"{self.name}: tool calls left unpaired: {orphans}")
        return RecordedSession(
            name=short(self.name, 200),
            messages=tuple(messages),
            system=tuple(system),
            tools=tuple(self.tools),
        )

    def _pair(self) -> list[Message]:
        out: list[Message] = []
        pending: dict[str, ToolCall] = {}
        this_round: set[str] = set()
        earlier: set[str] = set()
        round_where = ""

        def close_round() -> None:
            for call_id, call in pending.items():
                out.append(
                    Message(
                        role="tool",
                        content=PLACEHOLDER_RESULT,
                        id=self.ids.next("msg"),
                        tool_call_id=call_id,
                        name=call.name,
                        meta=MessageMeta(synthetic=True),
                    )
                )
                self.warn(
                    f"{round_where}: call {short(call_id)} ({short(call.name)}) has no recorded "
                    "result; added a placeholder result"
                )
            pending.clear()

        for entry, where in self._entries:
            message = entry.message() if isinstance(entry, Draft) else entry
            if message.role == "assistant" and not message.tool_calls and message.content is None:
                self.warn(
                    f"{where}: assistant message {short(message.id)} has no text and no tool call"
                )
                continue
            if message.role == "tool":
                call_id = message.tool_call_id
                if call_id is not None and call_id in pending:
                    call = pending.pop(call_id)
                    if not message.name:
                        message = replace(message, name=call.name)
                    if message.content is None:
                        message = replace(message, content="")
                    out.append(message)
                elif call_id in this_round:
                    self.warn(f"{where}: a second result for call {short(call_id)}; dropped")
                elif call_id in earlier:
                    self.warn(
                        f"{where}: result for call {short(call_id)} arrives after the "
                        "conversation moved on; dropped"
                    )
                else:
                    self.warn(f"{where}: result for unknown call {describe(call_id)}; dropped")
                continue
            close_round()
            earlier |= this_round
            this_round = set()
            if message.role == "assistant" and message.tool_calls:
                message = self._distinct_calls(message, where)
                pending = {call.id: call for call in message.tool_calls}
                this_round = set(pending)
                round_where = where
            out.append(message)
        close_round()
        return out

    def _distinct_calls(self, message: Message, where: str) -> Message:
        seen: set[str] = set()
        calls: list[ToolCall] = []
        changed = False
        for call in message.tool_calls:
            if call.id in seen:
                new = f"{call.id}~{len(calls) + 1}"
                self.warn(
                    f"{where}: tool call id {short(call.id)} repeated in one message; "
                    f"renamed {short(new)}"
                )
                call = replace(call, id=new)
                changed = True
            seen.add(call.id)
            calls.append(call)
        return replace(message, tool_calls=tuple(calls)) if changed else message


def _unique_ids(messages: list[Message], warn: Warn, seen: set[str]) -> list[Message]:
    """``messages`` with each id not in ``seen`` (renamed ``<id>~2`` …); ``seen`` grows."""
    out: list[Message] = []
    for message in messages:
        if message.id in seen:
            n = 2
            while f"{message.id}~{n}" in seen:
                n += 1
            new = f"{message.id}~{n}"
            warn(f"message id {short(message.id)} repeated; the later one is now {short(new)}")
            message = replace(message, id=new)
        seen.add(message.id)
        out.append(message)
    return out


# ---------------------------------------------------------------------------
# Exit codes in tool output (Codex, OpenHands)

_EXIT_CODE = re.compile(r"^Process exited with code (-?\d+)$", re.M)


def nonzero_exit(text: str) -> bool:
    """``Process exited with code N`` with N ≠ 0 in the header of a Codex exec output."""
    match = _EXIT_CODE.search(text[:400])
    return match is not None and int(match.group(1)) != 0


# ---------------------------------------------------------------------------
# Usage that counts context the file does not hold


def carried_tokens(session: RecordedSession, before: int) -> int:
    """What the file can account for in request ``before``'s prompt (an estimate).

    The estimate of the messages before it plus the format's documented
    default fixed context: what the file records of it and the tokens its
    recordings leave out (``UNRECORDED_TOKENS``).
    """
    fixed = recorded_fixed(session).tokens + UNRECORDED_TOKENS.get(session.format, 0)
    return estimate_messages_tokens(session.messages[:before]) + fixed


def usage_beyond_file(session: RecordedSession) -> str | None:
    """Why the first response's usage counts context the file lacks, by the size rule.

    ``None`` unless the format documents a default fixed context (it leaves
    some out: ``UNRECORDED_TOKENS``) and the first recorded prompt is over
    ``ELSEWHERE_RATIO`` times ``carried_tokens`` (``usage_exceeds_recording``);
    whatever the file is called. A format without a documented default has
    nothing better to fall back on: where it does not record its tool schemas
    (an OpenAI chat log, say), the usage is the only measure of them.
    """
    if not UNRECORDED_TOKENS.get(session.format, 0):
        return None
    index = first_response_with_usage(session.messages)
    usage = session.messages[index].meta.usage if index is not None else None
    if index is None or usage is None:
        return None
    carried = carried_tokens(session, index)
    if not usage_exceeds_recording(usage.prompt_tokens, carried):
        return None
    return (
        f"the first request's recorded usage ({usage.prompt_tokens:,} prompt tokens) is over "
        f"{ELSEWHERE_RATIO}x what the file carries (~{carried:,} tokens with the format's "
        "documented default fixed context): the rest of that context (a summarized "
        "conversation?) is not in the file"
    )


def mark_context_not_recorded(session: RecordedSession, reason: str) -> RecordedSession:
    """``session`` with its first response marked ``CONTEXT_NOT_RECORDED`` (``reason``).

    The replay then gives the session the format's documented default fixed
    context instead of one inferred from that response's usage, and says why.
    A session without recorded usage is returned as it is.
    """
    index = first_response_with_usage(session.messages)
    if index is None:
        return session
    message = session.messages[index]
    extra = {**message.meta.extra, CONTEXT_NOT_RECORDED: reason}
    marked = replace(message, meta=replace(message.meta, extra=extra))
    messages = (*session.messages[:index], marked, *session.messages[index + 1 :])
    return replace(session, messages=messages)


def check_context_not_recorded(session: RecordedSession) -> tuple[RecordedSession, str | None]:
    """Mark ``session`` by the size rule unless its importer did; the warning, if marked."""
    reason = context_not_recorded(session.messages)
    if reason is None:
        reason = usage_beyond_file(session)
        if reason is None:
            return session, None
        session = mark_context_not_recorded(session, reason)
    return session, (
        f"session {short(session.name)}: {reason}; the replay gives it the format's "
        "documented default fixed context, not one inferred from that usage"
    )
