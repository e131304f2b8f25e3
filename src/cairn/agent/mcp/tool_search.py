"""Lean by design: past a share of the budget, MCP schemas wait behind ``tool_search``.

Tool schemas are fixed context: every request carries them. A few MCP
servers can bring hundreds of tools, tens of thousands of tokens the model
pays for on every request whether it uses them or not. So when the MCP
tools' schemas would take more than ``MCP_SCHEMA_SHARE`` (10 %) of the input
budget, they are registered *deferred* — known, not sent — and one small
tool, ``tool_search``, is sent instead: the model finds tools by name or
description words (``query`` → matching names with one line each) and loads
the ones it needs (``load``). A loaded tool's schema is sent from the next
request on, for the rest of the session: the fixed context changes once per
load, deliberately, and is measured again (its fingerprint changes, so the
calibration starts over). Which tools were loaded is session state, so a
resumed session sends them again.

The share is measured with the same estimate the fixed context uses
(``cairn.tokens.estimate_tokens`` on the schemas' JSON). With no known
window a 128k budget is assumed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from cairn.agent.mcp.adapter import McpTool, mcp_tools
from cairn.agent.mcp.client import McpManager
from cairn.agent.state import SessionState
from cairn.agent.tools.base import Tool, ToolContext, ToolResult, tool_schema
from cairn.agent.tools.registry import ToolRegistry
from cairn.context.effects import ToolEffect
from cairn.context.tool_budget import DEFAULT_WINDOW
from cairn.context.tracker import schema_tokens as estimate_schemas
from cairn.messages import JSONObject

#: The share of the input budget MCP tool schemas may take before they are
#: deferred behind ``tool_search``.
MCP_SCHEMA_SHARE = 0.10
TOOL_SEARCH = "tool_search"
#: Matches listed for one query.
MAX_MATCHES = 10
#: Characters of a description shown in a match line.
_LINE_CHARS = 120
_WORD = re.compile(r"[a-z0-9]+")


def schema_tokens(tools: Sequence[Tool]) -> int:
    """The tokens these tools' schemas add to every request (the fixed context's estimate)."""
    return estimate_schemas([tool_schema(t) for t in tools])


def schema_limit(input_budget: int | None) -> int:
    """The most tokens MCP schemas may take before they are deferred."""
    return int(MCP_SCHEMA_SHARE * (input_budget or DEFAULT_WINDOW))


def install_mcp_tools(
    manager: McpManager, registry: ToolRegistry, state: SessionState, input_budget: int | None
) -> list[McpTool]:
    """Register the connected servers' tools in a session's registry, deferred or not.

    Deferred when their schemas pass the share: then ``tool_search`` is
    registered too, and the tools the session loaded before (a resume) are
    loaded again. Returns the tools registered.
    """
    tools = [t for t in mcp_tools(manager) if t.name not in registry]
    if not tools:
        return []
    deferred = schema_tokens(tools) > schema_limit(input_budget)
    for tool in tools:
        registry.register(tool, deferred=deferred)
    if deferred:
        if TOOL_SEARCH not in registry:
            registry.register(ToolSearch(registry))
        registry.load(state.loaded_tools)
    return tools


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _first_line(text: str) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= _LINE_CHARS else line[: _LINE_CHARS - 1] + "…"


class ToolSearch:
    """Find deferred MCP tools and load their schemas."""

    name = TOOL_SEARCH
    description = (
        "Find tools of the connected MCP servers that are not loaded yet, and load them. "
        "`query`: words to look for in tool names and descriptions; lists matching tool "
        "names, one line each. `load`: exact tool names to load; their schemas are in your "
        "tool list from the next step on, for the rest of the session."
    )
    effect: ToolEffect = "read_only"

    def __init__(self, registry: ToolRegistry) -> None:
        self._registry = registry
        self.parameters: JSONObject = {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "words to find in names, descriptions"},
                "load": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "exact tool names to load",
                },
            },
        }

    async def run(self, args: JSONObject, ctx: ToolContext) -> ToolResult:
        query = args.get("query", "")
        load = args.get("load", [])
        if not isinstance(query, str):
            return ToolResult("query must be a string", is_error=True)
        if not isinstance(load, list) or not all(isinstance(n, str) for n in load):
            return ToolResult("load must be a list of tool names", is_error=True)
        names = [n for n in load if isinstance(n, str)]
        if not query.strip() and not names:
            return ToolResult("give a query to search, or tool names to load", is_error=True)
        parts: list[str] = []
        failed = False
        if query.strip():
            parts.append(self._search(query))
        if names:
            text, failed = self._load(names, ctx)
            parts.append(text)
        return ToolResult("\n".join(parts), is_error=failed)

    def _search(self, query: str) -> str:
        wanted = _words(query)
        scored: list[tuple[int, int, Tool]] = []
        for index, tool in enumerate(self._registry.deferred_tools()):
            if tool.name.lower() == query.strip().lower():
                scored.append((1_000, index, tool))
                continue
            name_words, described = set(_words(tool.name)), set(_words(tool.description))
            score = sum(2 * (w in name_words) + (w in described) for w in wanted)
            if score:
                scored.append((score, index, tool))
        if not scored:
            servers = sorted({t.name.split("__")[1] for t in self._registry.deferred_tools()})
            return (
                f"no tool matches {query!r}; {len(self._registry.deferred_tools())} tools "
                f"are available from {', '.join(servers)}: try other words"
            )
        scored.sort(key=lambda item: (-item[0], item[1]))
        lines = [
            f"{tool.name} — {_first_line(tool.description)}"
            + (" (loaded)" if self._registry.is_loaded(tool.name) else "")
            for _, _, tool in scored[:MAX_MATCHES]
        ]
        if len(scored) > MAX_MATCHES:
            lines.append(f"… and {len(scored) - MAX_MATCHES} more: narrow the query")
        lines.append('load the ones you need: {"load": ["<name>", …]}')
        return "\n".join(lines)

    def _load(self, names: list[str], ctx: ToolContext) -> tuple[str, bool]:
        deferred = {t.name for t in self._registry.deferred_tools()}
        unknown = [n for n in names if n not in deferred]
        known = [n for n in names if n in deferred]
        self._registry.load(known)
        ctx.state.record_loaded_tools(known)
        lines = []
        if known:
            lines.append(f"loaded {', '.join(known)}: call them directly from the next step on")
        if unknown:
            lines.append(
                f"no such tool to load: {', '.join(unknown)}; search with a query for the names"
            )
        return "\n".join(lines), bool(unknown) and not known
