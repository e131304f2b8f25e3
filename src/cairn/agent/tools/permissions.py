"""The ``permissions`` section of ``settings.json``: tools allowed without asking.

``permissions.allow`` lists tool-name patterns, in Claude Code's spirit:

- an exact name (``"bash"``, ``"mcp__github__create_issue"``);
- a glob with ``*`` and ``?`` (``"mcp__github__*"``: every tool of one server);
- ``"mcp__<server>"`` alone: every tool of that MCP server, as in Claude Code.

A matching writing tool runs without a permission request in any permission
mode; plan mode still refuses it (plan mode exists to change nothing). The
user's and the project's lists are combined.
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

MCP_PREFIX = "mcp__"


def _pattern(pattern: str) -> str:
    if not pattern.strip() or pattern != pattern.strip():
        raise ValueError("a pattern must be a tool name or a glob, without surrounding spaces")
    return pattern


class PermissionsSettings(BaseModel):
    """What may run without asking."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    allow: tuple[Annotated[str, AfterValidator(_pattern)], ...] = ()


def is_allowed(tool: str, patterns: Iterable[str]) -> bool:
    """Whether ``tool`` matches one of the ``permissions.allow`` patterns (case-sensitive)."""
    for pattern in patterns:
        if fnmatchcase(tool, pattern):
            return True
        # ``mcp__github`` names the whole server; the separator keeps it from
        # also matching a server called ``github2``.
        if (
            pattern.startswith(MCP_PREFIX)
            and pattern.count("__") == 1
            and tool.startswith(pattern + "__")
        ):
            return True
    return False
