"""``create_app``: the browser UI's ASGI app — the page, its static files, one WebSocket.

Nothing is served without the token ``cairn web`` printed in the URL: the
first page load carries it in the query and gets it back as a
``SameSite=Strict`` HttpOnly cookie, so the page's own files load without it
in their URLs; the page then drops it from the address bar. The WebSocket
needs the token too and an ``Origin`` of this very server (another site open
in the same browser cannot drive the agent). Every response says
``Referrer-Policy: no-referrer``, so the token never leaks in a Referer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from cairn.messages import JSONObject
from cairn.surfaces.web.hub import Hub, OpenSessions, WebSetup

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
COOKIE = "cairn_token"
#: How often a page's guards are looked at again (a background task may end silently).
GUARD_POLL_S = 1.0
FORBIDDEN = "forbidden: open the address `cairn web` printed (it carries the token)\n"

#: The page runs only its own files and talks only to this server; no frame may hold it.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self' ws://127.0.0.1:* ws://localhost:*; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)

SECURITY_HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"referrer-policy", b"no-referrer"),
    (b"x-content-type-options", b"nosniff"),
    (b"cache-control", b"no-store"),
]


def new_token() -> str:
    return secrets.token_urlsafe(24)


class TokenGuard:
    """ASGI middleware: the token (query or cookie) for everything, the Origin for the socket."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        query, cookie = _credentials(scope)
        allowed = any(secrets.compare_digest(c, self.token) for c in (query, cookie) if c)
        if scope["type"] == "websocket":
            if not (allowed and _same_origin(scope)):
                await receive()  # websocket.connect
                await send({"type": "websocket.close", "code": 4403})  # refused: HTTP 403
                return
            await self.app(scope, receive, send)
            return
        if not allowed:
            await Response(FORBIDDEN, 403, media_type="text/plain")(scope, receive, send)
            return
        set_cookie = query is not None and secrets.compare_digest(query, self.token)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", [])) + SECURITY_HEADERS
                if set_cookie:
                    value = f"{COOKIE}={self.token}; Path=/; HttpOnly; SameSite=Strict"
                    headers.append((b"set-cookie", value.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _credentials(scope: Scope) -> tuple[str | None, str | None]:
    query = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [None])[0]
    cookie = None
    for name, value in scope.get("headers", []):
        if name == b"cookie":
            jar: SimpleCookie = SimpleCookie()
            with contextlib.suppress(Exception):
                jar.load(value.decode("latin-1"))
            if COOKIE in jar:
                cookie = jar[COOKIE].value
    return query, cookie


def _same_origin(scope: Scope) -> bool:
    headers = {name: value.decode("latin-1") for name, value in scope.get("headers", [])}
    origin, host = headers.get(b"origin"), headers.get(b"host")
    return (
        origin is not None and host is not None and origin in (f"http://{host}", f"https://{host}")
    )


def create_app(setup: WebSetup, token: str) -> ASGIApp:
    """The whole browser UI for ``setup``'s workspace, behind ``token``."""
    open_sessions = OpenSessions()
    hubs: set[Hub] = set()

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    def sessions_changed() -> None:
        for hub in list(hubs):
            hub.send_sessions()

    async def socket(websocket: WebSocket) -> None:
        await websocket.accept()
        outbox: asyncio.Queue[JSONObject] = asyncio.Queue()
        hub = Hub(setup, outbox.put_nowait, open_sessions, sessions_changed)
        hubs.add(hub)
        writer = asyncio.create_task(_write(websocket, outbox))
        guards = asyncio.create_task(_poll_guards(hub))
        try:
            while True:
                raw = await websocket.receive_text()
                try:
                    frame = json.loads(raw)
                except ValueError:
                    outbox.put_nowait({"type": "error", "pane": None, "text": "a frame is JSON"})
                    continue
                await hub.handle(frame)
        except WebSocketDisconnect:
            pass
        finally:
            hubs.discard(hub)
            guards.cancel()
            await hub.close()
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer

    app = Starlette(
        routes=[
            Route("/", index),
            WebSocketRoute("/ws", socket),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ]
    )
    return TokenGuard(app, token)


async def _write(websocket: WebSocket, outbox: asyncio.Queue[JSONObject]) -> None:
    while True:
        frame = await outbox.get()
        try:
            await websocket.send_text(json.dumps(frame, ensure_ascii=False))
        except (WebSocketDisconnect, RuntimeError):
            return  # the page went away; its hub is being closed


async def _poll_guards(hub: Hub) -> None:
    while True:
        await asyncio.sleep(GUARD_POLL_S)
        hub.refresh_guards()
