"""``cairn web``: serve the browser UI on 127.0.0.1 and print its address with the token.

The model is resolved as ``cairn -p`` resolves it; the workspace is the
folder ``cairn web`` starts in. Ctrl+C stops the server (every pane's
session is closed; their transcripts stay whole).
"""

from __future__ import annotations

import asyncio
import sys
import webbrowser
from dataclasses import dataclass
from pathlib import Path

from cairn.agent.tools.base import PermissionMode
from cairn.provider import OpenAIProvider
from cairn.surfaces.print_mode import EXIT_USAGE, SetupError, load_cli_model

#: What ``pip install`` adds for the browser UI.
MISSING = "cairn web needs the web extra: pip install 'cairn[web]' ({})"


@dataclass(frozen=True)
class WebArgs:
    port: int = 0
    open_browser: bool = False
    model: str | None = None
    context_window: int | None = None
    max_output_tokens: int | None = None
    permission_mode: PermissionMode = "accept-edits"
    workspace: Path = Path()


def run_web(args: WebArgs) -> int:
    try:
        import uvicorn

        from cairn.surfaces.web.hub import WebSetup
        from cairn.surfaces.web.server import create_app, new_token
    except ImportError as exc:
        print(MISSING.format(exc), file=sys.stderr)
        return EXIT_USAGE
    if not 0 <= args.port <= 65535:
        print(f"cairn web: --port {args.port} is not a port (0-65535)", file=sys.stderr)
        return EXIT_USAGE
    try:
        settings, model = load_cli_model(
            args.workspace,
            model=args.model,
            context_window=args.context_window,
            max_output_tokens=args.max_output_tokens,
        )
    except SetupError as exc:
        print(f"cairn web: {exc}", file=sys.stderr)
        return EXIT_USAGE
    token = new_token()

    async def serve() -> None:
        async with OpenAIProvider(model) as provider:
            setup = WebSetup(
                model,
                provider,
                args.workspace.resolve(),
                permission_mode=args.permission_mode,
                settings=settings,
            )
            config = uvicorn.Config(
                create_app(setup, token),
                host="127.0.0.1",
                port=args.port,
                log_level="warning",
                ws="websockets-sansio",
            )
            server = uvicorn.Server(config)
            starting = asyncio.create_task(server.serve())
            while not server.started and not starting.done():
                await asyncio.sleep(0.05)
            if server.started:
                port = server.servers[0].sockets[0].getsockname()[1]
                url = f"http://127.0.0.1:{port}/?token={token}"
                print(f"cairn web: {url}\n(Ctrl+C stops it)", flush=True)
                if args.open_browser:
                    webbrowser.open(url)
            await starting

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    except OSError as exc:  # the port is taken, say
        print(
            f"cairn web: cannot serve on 127.0.0.1:{args.port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 1
    return 0
