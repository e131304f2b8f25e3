"""One JSON mechanism for Cairn's own data: messages, records, events and session state.

Each of those is a frozen dataclass, and its JSON form is declared on the
dataclass itself — field names (or aliases), which fields are left out when
they hold their default (``OMIT_NONE``, ``OMIT_EMPTY``), and, for the rare
shape that is not a plain object, a pydantic hook on the type. A ``Codec``
wraps a pydantic ``TypeAdapter`` over such a type, so encoding and decoding
are never written by hand, and an old file, a new writer and every surface
agree by construction.

Decoding never guesses: a type marks the fields that must not be coerced
(``StrictInt``, ``StrictBool``: a string is not a count, 1 is not a flag),
and a JSON array is read as the tuple a frozen dataclass holds. Every failure
is the codec's own error with one line that names the field
(``message.tool_calls[0].id: Input should be a valid string``), never a
pydantic traceback.

``OPENAI_WIRE`` forms (``messages.to_wire``) are not here: that is the
provider's protocol, translated field by field, not Cairn's own data.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any, Generic, TypeAlias, TypeVar

from pydantic import Field, PlainSerializer, TypeAdapter, ValidationError
from pydantic_core import PydanticCustomError, PydanticSerializationError
from typing_extensions import TypeAliasType

from cairn.errors import FormatError

__all__ = [
    "OMIT_EMPTY",
    "OMIT_NONE",
    "Codec",
    "JSONDepthError",
    "JSONKey",
    "JSONObject",
    "JSONValue",
    "describe_error",
    "exceeds_depth",
    "invalid",
    "json_depth",
    "key_path",
    "scrub",
    "tag",
]

# A lone surrogate cannot be UTF-8: it makes the request body, the transcript
# line and every JSON event unencodable. A Python ``str`` holds astral
# characters as single code points, so any surrogate code point in one is a
# lone half: undecodable bytes smuggled in (``surrogateescape`` file names,
# raw tool output) or a bad ``\ud800`` escape.
_SURROGATE = re.compile("[\ud800-\udfff]")


def scrub(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub("\ufffd", text)


# Keys are scrubbed as they are encoded: pydantic would otherwise turn each
# lone surrogate in a key into three U+FFFD, where a value gets one.
JSONKey: TypeAlias = Annotated[str, PlainSerializer(scrub)]
JSONValue = TypeAliasType(
    "JSONValue",
    "str | int | float | bool | list[JSONValue] | dict[JSONKey, JSONValue] | None",
)
JSONObject = dict[str, JSONValue]

_T = TypeVar("_T")

#: On a field, ``Annotated[T, OMIT_NONE]``: the field is left out of the JSON while it is None.
OMIT_NONE: Any = Field(exclude_if=lambda value: value is None)
#: ``Annotated[T, OMIT_EMPTY]``: left out while empty (``()``, ``{}``, ``""``, False).
OMIT_EMPTY: Any = Field(exclude_if=lambda value: not value)

#: Errors named one by one in a message; the rest are counted.
_LISTED_ERRORS = 3


class JSONDepthError(FormatError):
    """A value nests deeper than the encoder goes (pydantic's limit is about 250 levels)."""


def json_depth(value: object, *, stop_above: int | None = None) -> int:
    """How many arrays (lists, tuples) and objects (dicts) deep ``value`` nests.

    The one nesting walker: every depth check (the store's records, the
    imported values) measures with it, each against its own limit. Iterative,
    so a value nested far beyond the interpreter's recursion limit is measured
    rather than crashing the measurement. With ``stop_above``, the walk ends
    at the first level past it and returns that level: enough to refuse the
    value without walking the rest of it.
    """
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Iterable[object] = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        if stop_above is not None and depth > stop_above:
            return depth
        deepest = max(deepest, depth)
        stack.extend(
            (child, depth + 1) for child in children if isinstance(child, dict | list | tuple)
        )
    return deepest


def exceeds_depth(value: object, limit: int) -> bool:
    """Whether ``value`` nests arrays and objects more than ``limit`` levels deep."""
    return json_depth(value, stop_above=limit) > limit


def invalid(message: str) -> PydanticCustomError:
    """The error a type's own validator raises: ``message`` is shown as it is."""
    return PydanticCustomError("cairn", message.replace("{", "{{").replace("}", "}}"))


class Codec(Generic[_T]):
    """The JSON form of one type: ``dump`` to JSON-ready data, ``load`` and ``load_json`` back.

    ``error`` builds the exception a failed load raises (the owning module's
    format error); ``what`` names the thing in its message. ``by_alias``
    encodes with the fields' aliases (the events' camelCase wire names).
    """

    __slots__ = ("_adapter", "_by_alias", "_error", "_type", "_what")

    def __init__(
        self,
        tp: Any,
        *,
        error: Callable[[str], Exception],
        what: str,
        by_alias: bool = False,
    ) -> None:
        self._type = tp
        self._adapter: TypeAdapter[_T] | None = None
        self._error = error
        self._what = what
        self._by_alias = by_alias

    @property
    def adapter(self) -> TypeAdapter[_T]:
        # Built on first use: the schema costs milliseconds that a command
        # which never touches this type (``cairn --help``) should not pay.
        if self._adapter is None:
            self._adapter = TypeAdapter(self._type)
        return self._adapter

    def dump(self, value: _T) -> Any:
        """``value`` as JSON-ready data (dicts, lists, strings, numbers, None).

        A value that does not fit its type (an int key, a ``Path`` in a JSON
        value, a float where a count goes) raises the codec's error instead of
        being coerced on the way out; one nested too deep raises
        ``JSONDepthError``.
        """
        try:
            return self.adapter.dump_python(
                value, mode="json", by_alias=self._by_alias, warnings="error"
            )
        except PydanticSerializationError as exc:
            raise self._error(f"{self._what} cannot be encoded as JSON: {_misfit(exc)}") from None
        except ValueError as exc:
            if "depth" in str(exc):  # pydantic-core: "Maximum serialization depth exceeded"
                raise JSONDepthError(f"{self._what} nests JSON too deep to encode") from None
            raise

    def load_json(self, raw: bytes | str) -> _T:
        """Parse and validate JSON text, raising the codec's error naming the problem."""
        try:
            return self.adapter.validate_json(raw)
        except ValidationError as exc:
            raise self._error(self.describe(exc)) from None

    def load(self, data: object) -> _T:
        """Validate decoded JSON data (``orjson.loads`` output), as ``load_json`` would."""
        try:
            return self.adapter.validate_python(data)
        except ValidationError as exc:
            raise self._error(self.describe(exc)) from None

    def describe(self, exc: ValidationError) -> str:
        errors = exc.errors(include_url=False)
        lines = [describe_error(e) for e in errors[:_LISTED_ERRORS]]
        more = len(errors) - _LISTED_ERRORS
        tail = f" (and {more} more)" if more > 0 else ""
        # "content" and "[0]: …" read as one path: "content[0]: …".
        joint = "" if lines[0].startswith("[") or not self._what else ": "
        return f"{self._what}{joint}" + "; ".join(lines) + tail


def _misfit(exc: PydanticSerializationError) -> str:
    """Pydantic's many-line serializer warnings as the one fact that matters."""
    text = str(exc)
    fields = re.findall(r"field_name='([^']*)'", text)
    types = re.findall(r"input_type=(\w+)", text)
    if fields and types:
        return f"field '{fields[0]}' holds a value of type {types[-1]} that does not fit it"
    return text.splitlines()[-1].strip() if text else "a value does not fit its type"


def describe_error(error: Mapping[str, Any]) -> str:
    """One pydantic error as ``key.path[0]: what is wrong (got VALUE)``."""
    loc: tuple[int | str, ...] = tuple(error["loc"])
    path = key_path(loc)
    kind = error["type"]
    if kind == "missing":
        message = "required key is missing"
    elif kind == "json_invalid":
        return f"not valid JSON ({error.get('ctx', {}).get('error', error['msg'])})"
    else:
        message = str(error["msg"]).removeprefix("Value error, ")
        message = _PLAIN_MESSAGES.get(kind, message)
    value = error.get("input")
    got = "" if kind in ("missing", "cairn") or isinstance(value, dict | list) else _got(value)
    return f"{path}: {message}{got}" if path else f"{message}{got}"


_PLAIN_MESSAGES: Mapping[str, str] = {
    "tuple_type": "must be a JSON array",
    "list_type": "must be a JSON array",
    "model_type": "must be a JSON object",
    "model_attributes_type": "must be a JSON object",
    "dataclass_type": "must be a JSON object",
    "dataclass_exact_type": "must be a JSON object",
    "dict_type": "must be a JSON object",
}


def key_path(loc: tuple[int | str, ...]) -> str:
    """``("hooks", "PreCompact", 0)`` → ``hooks.PreCompact[0]``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith("<") and part.endswith(">"):
            continue  # a branch of a tagged union (see ``tag``), not a key of the data
        else:
            out += f".{part}" if out else part
    return out


def tag(name: str) -> str:
    """The name of a tagged-union branch; ``key_path`` leaves it out of error paths."""
    return f"<{name}>"


def _got(value: object) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return f" (got {text if len(text) <= 60 else text[:57] + '…'})"
