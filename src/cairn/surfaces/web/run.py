"""``cairn web``: serve the browser UI on 127.0.0.1 and print its address with the token.

The model is resolved as ``cairn -p`` resolves it; the workspace is the
folder ``cairn web`` starts in. Ctrl+C stops the server (every pane's
session is closed; their transcripts stay whole).

The address carries the token in its fragment (``http://127.0.0.1:PORT/#token=…``),
which the browser never sends to any server. ``--open`` puts no secret on a
command line either (every local user can read ``/proc/<pid>/cmdline``): it
writes a page that leads to that address into a private folder (mode 0700,
the file 0600) and opens the file's path; the file is removed after
``OPEN_FILE_S`` seconds, or when the server stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import os
import shutil
import tempfile
import threading
import webbrowser
from dataclasses import dataclass
from pathlib import Path

from cairn.provider import open_provider
from cairn.surfaces.setup import (
    EXIT_FAILED,
    EXIT_USAGE,
    SetupError,
    SurfaceArgs,
    fail,
    load_cli_model,
)

#: What ``pip install`` adds for the browser UI.
MISSING = "cairn web needs the web extra: pip install 'cairn[web]' ({})"
#: How long the page ``--open`` writes stays (seconds): a browser starts in less.
OPEN_FILE_S = 60.0


@dataclass(frozen=True, kw_only=True)
class WebArgs(SurfaceArgs):
    port: int = 0
    open_browser: bool = False


def run_web(args: WebArgs) -> int:
    try:
        import uvicorn

        from cairn.surfaces.web.panes import WebSetup
        from cairn.surfaces.web.server import create_app, new_token
    except ImportError as exc:
        return fail(MISSING.format(exc), EXIT_USAGE)
    if not 0 <= args.port <= 65535:
        return fail(f"cairn web: --port {args.port} is not a port (0-65535)", EXIT_USAGE)
    try:
        settings, model = load_cli_model(args.workspace, args)
    except SetupError as exc:
        return fail(f"cairn web: {exc}", EXIT_USAGE)
    token = new_token()

    async def serve() -> None:
        async with open_provider(model) as provider:
            setup = WebSetup(
                model,
                provider,
                args.workspace.resolve(),
                permission_mode=args.permission_mode,
                settings=settings,
                instructions=args.instructions,
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
            opened: Path | None = None
            try:
                if server.started:
                    port = server.servers[0].sockets[0].getsockname()[1]
                    url = f"http://127.0.0.1:{port}/#token={token}"
                    print(f"cairn web: {url}\n(Ctrl+C stops it)", flush=True)
                    if args.open_browser:
                        opened = open_page(url)
                        loop = asyncio.get_running_loop()
                        loop.call_later(OPEN_FILE_S, remove_page, opened)
                        # A browser command may run until the browser exits: not on the
                        # loop, and not holding up the exit (a daemon thread).
                        threading.Thread(
                            target=_open_browser, args=(opened,), name="browser", daemon=True
                        ).start()
                await starting
            finally:
                if opened is not None:
                    remove_page(opened)

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    except OSError as exc:  # the port is taken, say
        return fail(
            f"cairn web: cannot serve on 127.0.0.1:{args.port}: {exc.strerror or exc}", EXIT_FAILED
        )
    return 0


def open_page(url: str) -> Path:
    """A page that leads the browser to ``url``, in a folder only this user can read.

    The browser is handed this file's path, never ``url``: a command line is
    visible to every local user, the file is not.
    """
    folder = Path(tempfile.mkdtemp(prefix="cairn-web-"))  # mode 0700
    path = folder / "open.html"
    target = json.dumps(url)
    page = (
        '<!doctype html>\n<meta charset="utf-8">\n'
        '<meta name="referrer" content="no-referrer">\n'
        "<title>cairn web</title>\n"
        f"<script>location.replace({target});</script>\n"
        f'<p><a href="{html.escape(url)}">Open cairn web</a></p>\n'
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(page)
    return path


def remove_page(path: Path) -> None:
    with contextlib.suppress(OSError):
        shutil.rmtree(path.parent)


def _open_browser(page: Path) -> None:
    try:
        found = webbrowser.open(page.as_uri())
    except Exception as exc:  # webbrowser.Error, or the browser command's OSError
        print(f"cairn web: cannot open a browser ({exc}); open the address above", flush=True)
        return
    if not found:
        print("cairn web: no browser found; open the address above", flush=True)
