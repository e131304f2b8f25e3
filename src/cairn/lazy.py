"""Names a package exports but imports on first use (PEP 562).

``cairn`` and ``cairn.agent`` export names whose modules load the OpenAI SDK,
which takes most of a second; they hand this module the name → module table
and get back the package's ``__getattr__`` and ``__dir__``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, table: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, importing ``table[name]`` on first use."""

    def getattr_(name: str) -> object:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value: object = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # the next lookup is an ordinary attribute
        return value

    def dir_() -> list[str]:
        return sorted({*vars(sys.modules[package]), *table})

    return getattr_, dir_
