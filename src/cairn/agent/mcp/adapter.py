"""An MCP server's tool as a Cairn tool: ``mcp__<server>__<tool>``, its schema, its call.

The name is Claude Code's convention, so ``permissions.allow`` patterns carry
over. OpenAI-compatible APIs take tool names of at most 64 letters, digits,
``_`` and ``-``: other characters become ``_``, and a longer name is cut and
given a short hash of the whole, so two tools never share a name.

Every MCP tool counts as a writing tool: a server's tools can do anything,
and its own hints (``readOnlyHint``) are the server's claim, not a guarantee.
So each call asks for permission unless ``permissions.allow`` matches, and
snip keeps its results longer than read-only tools' (``cairn.context.effects``).
"""

from __future__ import annotations

import hashlib
import re

from cairn.agent.mcp.client import McpManager, McpToolInfo
from cairn.agent.tools.base import ToolContext, ToolResult
from cairn.agent.tools.permissions import MCP_PREFIX
from cairn.context.effects import ToolEffect
from cairn.messages import JSONObject

#: The longest tool name OpenAI-compatible APIs accept.
MAX_TOOL_NAME = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_HASH_CHARS = 8


def tool_name(server: str, tool: str) -> str:
    """``mcp__<server>__<tool>``, made safe for the API (see the module docstring)."""
    name = _UNSAFE.sub("_", f"{MCP_PREFIX}{server}__{tool}")
    if len(name) <= MAX_TOOL_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:_HASH_CHARS]
    return f"{name[: MAX_TOOL_NAME - _HASH_CHARS - 1]}_{digest}"


def _object_schema(schema: JSONObject) -> JSONObject:
    # A function's parameters must be an object schema; a server that sends
    # none (or an empty one) gets the empty object.
    if schema.get("type") != "object":
        return {"type": "object", "properties": {}}
    return schema


class McpTool:
    """One tool of a connected MCP server."""

    effect: ToolEffect = "write"

    def __init__(self, manager: McpManager, info: McpToolInfo, name: str) -> None:
        self._manager = manager
        self.info = info
        self.name = name
        self.description = info.description.strip() or f"{info.name} (MCP server {info.server})"
        self.parameters = _object_schema(info.input_schema)

    async def run(self, args: JSONObject, ctx: ToolContext) -> ToolResult:
        outcome = await self._manager.call(
            self.info.server, self.info.name, args, label=self.name, abort=ctx.abort
        )
        return ToolResult(outcome.text, is_error=outcome.is_error)


def mcp_tools(manager: McpManager) -> list[McpTool]:
    """The tools of every connected server; a name already used gets a hash suffix."""
    used: set[str] = set()
    tools: list[McpTool] = []
    for info in manager.tools():
        name = tool_name(info.server, info.name)
        if name in used:  # two tools that differ only in characters the API refuses
            digest = hashlib.sha256(f"{info.server}\0{info.name}".encode()).hexdigest()
            name = f"{name[: MAX_TOOL_NAME - _HASH_CHARS - 1]}_{digest[:_HASH_CHARS]}"
        used.add(name)
        tools.append(McpTool(manager, info, name))
    return tools
