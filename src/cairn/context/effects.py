"""What a tool does to the world, as the tool declares it (never guessed from its name).

Snip elides read-only results first and errors last; the fallback ledger lists
the files that writing tools touched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, TypeAlias

import orjson

from cairn.messages import Message

ToolEffect: TypeAlias = Literal["read_only", "write"]
#: Tool name → effect, as declared by each tool. Unknown tools count as writing:
#: keeping a result too long costs tokens, dropping a side effect's evidence costs work.
ToolEffects: TypeAlias = Mapping[str, ToolEffect]

#: Argument names under which tools conventionally pass the file they touch.
PATH_ARGUMENTS = ("path", "file_path", "filename", "file")

#: Snip order: lower classes are elided first.
CLASS_READ_ONLY = 0
CLASS_WRITE = 1
CLASS_ERROR = 2


def effect_of(tool_name: str, effects: ToolEffects) -> ToolEffect:
    return effects.get(tool_name, "write")


def turn_class(turn: Sequence[Message], effects: ToolEffects) -> int:
    """The class of one tool turn (an assistant message and its results)."""
    if any(m.role == "tool" and m.meta.tool_error for m in turn):
        return CLASS_ERROR
    calls = turn[0].tool_calls if turn else ()
    if calls and all(effect_of(c.name, effects) == "read_only" for c in calls):
        return CLASS_READ_ONLY
    return CLASS_WRITE


def call_path(arguments: str) -> str | None:
    """The file a tool call names in its JSON arguments, if any."""
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(parsed, dict):
        return None
    for key in PATH_ARGUMENTS:
        value = parsed.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def written_files(messages: Sequence[Message], effects: ToolEffects) -> list[str]:
    """Files named by writing tool calls, oldest first, each once."""
    seen: dict[str, None] = {}
    for message in messages:
        for call in message.tool_calls:
            if effect_of(call.name, effects) == "write":
                path = call_path(call.arguments)
                if path is not None:
                    seen.setdefault(path, None)
    return list(seen)
