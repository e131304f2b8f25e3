"""MCP servers: their tools in Cairn's sessions (README, *MCP servers*).

- ``config``: the ``mcpServers`` section of ``settings.json``;
- ``client``: ``McpManager``, the connections of one runtime (start, call, stop);
- ``adapter``: a server's tool as a Cairn tool, ``mcp__<server>__<tool>``;
- ``tool_search``: past 10 % of the input budget, schemas wait behind ``tool_search``;
- ``report``: what ``/mcp`` shows.
"""
