"""Readers of the model's arguments: its JSON turned into typed values.

They raise ``ToolArgumentError`` (a ``ValueError``) with a message meant for
the model. They are lenient where models commonly stray — ``null`` for an
omitted optional argument, ``"10"`` for ``10``, ``"true"`` for ``true`` — and
strict about everything else.
"""

from __future__ import annotations

from cairn.errors import ToolError
from cairn.messages import JSONObject, JSONValue


class ToolArgumentError(ToolError):
    """An argument is missing or has the wrong type or value; the text is for the model."""


def str_arg(args: JSONObject, name: str, *, default: str | None = None) -> str:
    """A string argument; required unless ``default`` is given."""
    value = args.get(name)
    if value is None:
        if default is None:
            raise ToolArgumentError(f"missing required argument {name!r}")
        return default
    if not isinstance(value, str):
        raise ToolArgumentError(f"argument {name!r} must be a string, got {_shown(value)}")
    return value


def opt_str_arg(args: JSONObject, name: str) -> str | None:
    """An optional string argument; ``None`` (or an empty string) when omitted."""
    value = args.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ToolArgumentError(f"argument {name!r} must be a string, got {_shown(value)}")
    return value


def number_arg(
    args: JSONObject,
    name: str,
    *,
    default: float,
    minimum: float | None = None,
    maximum: float | None = None,
    integer: bool = False,
) -> float:
    """A number argument (``integer`` refuses fractions); numeric strings are accepted."""
    value = args.get(name)
    if value is None:
        return default
    number: float
    if isinstance(value, bool):
        raise ToolArgumentError(f"argument {name!r} must be a number, got {_shown(value)}")
    if isinstance(value, int | float):
        number = value
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise ToolArgumentError(
                f"argument {name!r} must be a number, got {_shown(value)}"
            ) from None
    else:
        raise ToolArgumentError(f"argument {name!r} must be a number, got {_shown(value)}")
    if number != number or number in (float("inf"), float("-inf")):
        raise ToolArgumentError(f"argument {name!r} must be a finite number")
    if integer and number != int(number):
        raise ToolArgumentError(f"argument {name!r} must be a whole number, got {number:g}")
    if minimum is not None and number < minimum:
        raise ToolArgumentError(f"argument {name!r} must be at least {minimum:g}, got {number:g}")
    if maximum is not None and number > maximum:
        raise ToolArgumentError(f"argument {name!r} must be at most {maximum:g}, got {number:g}")
    return number


def int_arg(args: JSONObject, name: str, *, default: int, minimum: int | None = None) -> int:
    return int(number_arg(args, name, default=default, minimum=minimum, integer=True))


def bool_arg(args: JSONObject, name: str, *, default: bool = False) -> bool:
    """A boolean argument; ``"true"`` / ``"false"`` strings are accepted."""
    value = args.get(name)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ToolArgumentError(f"argument {name!r} must be true or false, got {_shown(value)}")


def _shown(value: JSONValue) -> str:
    kind = {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
    }.get(type(value), type(value).__name__)
    text = repr(value)
    return f"{kind} {text[:60]}{'…' if len(text) > 60 else ''}"
