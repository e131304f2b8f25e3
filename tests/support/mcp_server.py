"""A real MCP server for the tests, built with the SDK's high-level ``MCPServer`` class.

Run as a script: over stdio by default, or over streamable HTTP on
127.0.0.1 with ``--http PORT`` (endpoint ``/mcp``). ``--tools N`` adds N
generated tools (``tool_00`` …) with realistic descriptions and schemas, for
the schema-share tests; ``--pid-file PATH`` makes ``hang`` write the
server's pid there once the call has arrived, so a test can kill the server
mid-call.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

#: The bytes of an "image": the client summarizes image content, it never decodes it.
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))

TOPICS = (
    "issues",
    "pull requests",
    "releases",
    "deployments",
    "build logs",
    "calendar events",
    "support tickets",
    "invoices",
    "database rows",
    "feature flags",
)


def build(pid_file: Path | None, generated: int) -> MCPServer:
    # Warnings only: a tool error is part of the tests, not news for their output.
    server = MCPServer("cairn-test", log_level="WARNING")

    @server.tool(description="Echo the given text back, prefixed with 'echo: '.")
    def echo(text: str) -> str:
        return f"echo: {text}"

    @server.tool(description="Return `lines` numbered lines of output (a big result).")
    def big(lines: int) -> str:
        return "".join(f"line {i:05d} of the big output\n" for i in range(lines))

    @server.tool(description="Wait for `seconds` (a call that does not answer in time).")
    def hang(seconds: float = 3600.0) -> str:
        if pid_file is not None:
            pid_file.write_text(str(os.getpid()))
        time.sleep(seconds)
        return "woke up"

    @server.tool(description="The server's process id.")
    def pid() -> int:
        return os.getpid()

    @server.tool(
        description="Return a small PNG image and one line of text.", structured_output=False
    )
    def picture() -> list[Any]:
        return ["a picture follows", Image(data=PNG, format="png")]

    @server.tool(description="Always fail with a tool error.")
    def fail() -> str:
        raise ToolError("this tool always fails")

    @server.tool(description="The value of one HTTP request header (streamable HTTP only).")
    def header(name: str, ctx: Context) -> str:
        request = ctx.request_context.request
        headers = getattr(request, "headers", None)
        return str(headers.get(name)) if headers is not None else "(no HTTP request)"

    for n in range(generated):
        topic = TOPICS[n % len(TOPICS)]
        server.add_tool(
            _generated(n),
            name=f"tool_{n:02d}",
            description=(
                f"Search the {topic} of project number {n} by free text and filters; returns "
                f"matching {topic} with their identifiers, titles, owners, states and the "
                "dates they were created and last updated, newest first, one per line."
            ),
        )
    return server


def _generated(n: int) -> Any:
    def search(
        query: str,
        owner: str | None = None,
        state: str = "open",
        created_after: str | None = None,
        limit: int = 20,
    ) -> str:
        return f"tool_{n:02d}: {limit} results for {query!r} ({state}, owner {owner})"

    return search


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=None, metavar="PORT")
    parser.add_argument("--pid-file", type=Path, default=None)
    parser.add_argument("--tools", type=int, default=0)
    args = parser.parse_args()
    server = build(args.pid_file, args.tools)
    if args.http is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.http)


if __name__ == "__main__":
    main()
