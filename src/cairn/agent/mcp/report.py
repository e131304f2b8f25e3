"""``/mcp``: the configured servers, their state and their tools, as text."""

from __future__ import annotations

from cairn.agent.mcp.adapter import McpTool
from cairn.agent.mcp.client import McpManager, one_line
from cairn.agent.mcp.tool_search import MCP_SCHEMA_SHARE, TOOL_SEARCH, schema_limit, schema_tokens
from cairn.agent.tools.registry import ToolRegistry

#: Characters of a tool's description shown by ``/mcp``.
_DESCRIPTION_CHARS = 70


def mcp_report(manager: McpManager, registry: ToolRegistry, input_budget: int | None) -> str:
    """One block per server (``connected`` / ``failed: reason`` / ``stopped``) and its tools."""
    statuses = manager.statuses()
    if not statuses:
        return "no MCP servers configured (add them under mcpServers in settings.json)"
    tools = [t for t in registry.tools if isinstance(t, McpTool)]
    lines: list[str] = []
    for status in statuses:
        state = f"failed: {status.reason}" if status.state == "failed" else status.state
        own = [t for t in tools if t.info.server == status.name]
        count = f", {len(own)} tool{'s' if len(own) != 1 else ''}" if own else ""
        lines.append(f"{status.name} ({status.transport}): {state}{count}")
        for tool in own:
            loaded = "" if registry.is_loaded(tool.name) else " (via tool_search)"
            description = one_line(tool.description, _DESCRIPTION_CHARS)
            lines.append(f"  {tool.name}{loaded}  {description}")
    if TOOL_SEARCH in registry:
        size, limit = schema_tokens(tools), schema_limit(input_budget)
        names = [t.name for t in tools if registry.is_loaded(t.name)]
        lines.append(
            f"schemas: {size:,} tokens, more than {MCP_SCHEMA_SHARE:.0%} of the input budget "
            f"({limit:,}): found with {TOOL_SEARCH}; loaded: {', '.join(names) or 'none'}"
        )
    return "\n".join(lines)
