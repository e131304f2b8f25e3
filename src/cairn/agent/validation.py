"""Pydantic validation errors as messages a user can act on.

One line per error: the key path (``hooks.PreCompact[0].hooks[0].timeout``),
what is wrong, what was given — and for an unknown key, the keys allowed
there, found by walking the models' annotations from the root model.
"""

from __future__ import annotations

import json
import types
from collections.abc import Mapping
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

#: Errors listed one per line; the rest are counted.
_MAX_LISTED_ERRORS = 10


def describe_validation_error(where: str, exc: ValidationError, root: type[BaseModel]) -> str:
    """``invalid settings in WHERE:`` then one line per error, naming its key path."""
    errors = exc.errors(include_url=False)
    lines = [f"invalid settings in {where}:"]
    lines.extend(f"  {_describe_error(e, root)}" for e in errors[:_MAX_LISTED_ERRORS])
    if len(errors) > _MAX_LISTED_ERRORS:
        lines.append(f"  … and {len(errors) - _MAX_LISTED_ERRORS} more")
    return "\n".join(lines)


def _describe_error(error: Mapping[str, Any], root: type[BaseModel]) -> str:
    loc: tuple[int | str, ...] = tuple(error["loc"])
    path = _key_path(loc) or "(top level)"
    kind = error["type"]
    if kind == "extra_forbidden":
        allowed = _allowed_keys(root, loc[:-1])
        listed = f"; allowed: {', '.join(allowed)}" if allowed else ""
        return f"{path}: unknown key{listed}"
    if kind == "missing":
        return f"{path}: required key is missing"
    message = str(error["msg"]).removeprefix("Value error, ")
    message = {
        "tuple_type": "must be a JSON array",
        "model_type": "must be a JSON object",
        "model_attributes_type": "must be a JSON object",
        "dict_type": "must be a JSON object",
    }.get(kind, message)
    value = error.get("input")
    got = "" if isinstance(value, dict | list) else f" (got {_short_json(value)})"
    return f"{path}: {message}{got}"


def _key_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def _allowed_keys(root: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The keys the object at ``loc`` accepts, found by walking the models' annotations."""
    tp: Any = root
    for part in loc:
        tp = _without_none(tp)
        if isinstance(part, int):
            args = get_args(tp)
            if not args:
                return []
            tp = args[0]
        elif isinstance(tp, type) and issubclass(tp, BaseModel) and part in tp.model_fields:
            tp = tp.model_fields[part].annotation
        elif get_origin(tp) in (dict, Mapping) and len(get_args(tp)) == 2:
            tp = get_args(tp)[1]  # a key the user names (``models.<name>``): the value's type
        else:
            return []
    tp = _without_none(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [field.alias or name for name, field in tp.model_fields.items()]
    return []


def _without_none(tp: Any) -> Any:
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _short_json(value: object) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "…"
