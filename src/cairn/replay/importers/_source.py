"""The defensive reader of a foreign session file: bytes, JSON, typed accessors.

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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import NoReturn, cast

import orjson

from cairn.codec import json_depth
from cairn.errors import FormatError
from cairn.messages import (
    json_kind,
    scrub,
)
from cairn.replay.session import SessionImportError

_BOM = b"\xef\xbb\xbf"

#: The deepest nesting ``dump_json`` writes: what orjson can write back (the
#: transcript, the request body), so every argument text stays re-encodable.
MAX_DEPTH = 254


class RecordError(FormatError):
    """One record or message has the wrong shape; the text names the key at fault."""


Warn = Callable[[str], None]


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
