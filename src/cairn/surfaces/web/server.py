"""``create_app``: the browser UI's ASGI app — the page, its static files, one WebSocket.

Threat model: anything else on this machine — another local port the user's
browser visits included — must gain nothing. So:

- No credential rides in a cookie: cookies are not bound to a port, so a
  cookie this server set would go to every other server on 127.0.0.1. The
  token ``cairn web`` prints travels in the URL's fragment
  (``/#token=…``), which the browser never sends; the page moves it into
  ``sessionStorage`` (one tab, one origin) and presents it in the WebSocket
  handshake, as a second subprotocol ``cairn.token.<token>`` beside
  ``cairn.v1``; the server accepts with ``cairn.v1`` only, never echoing the
  token. A token in the query is no credential.
- The page and its static files reveal nothing and are served without the
  token; session data travels only over the socket, which needs it.
- Every request's ``Host`` must name this server — 127.0.0.1, localhost or
  [::1] with its port — so a page of another site whose name was rebound to
  127.0.0.1 (DNS rebinding) is refused, token or not; the socket also needs
  an ``Origin`` of this very server.
- Every response says ``Referrer-Policy: no-referrer`` and a strict
  Content-Security-Policy.
- A frame the page should not have sent is answered with an ``error`` frame
  and changes nothing else; a page that does not read its answers is cut
  off (close code 1013) once ``MAX_QUEUED`` frames wait for it, rather than
  holding the server's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import Callable, Iterable
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from cairn.messages import JSONObject
from cairn.surfaces.web.frames import config_frame
from cairn.surfaces.web.hub import Hub
from cairn.surfaces.web.listing import SessionList
from cairn.surfaces.web.markdown import highlight_css
from cairn.surfaces.web.panes import OpenSessions, WebSetup

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
#: The WebSocket subprotocol the page speaks; the server accepts with it.
PROTOCOL = "cairn.v1"
#: How the page presents the token: the subprotocol ``cairn.token.<token>``.
TOKEN_PROTOCOL = "cairn.token."
#: The names this server answers to, with its port (``Host``).
LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")
#: How often a page's guards are looked at again (a background task may end silently).
GUARD_POLL_S = 1.0
#: The largest frame the page may send (characters): a prompt, however long, fits.
MAX_FRAME = 1024 * 1024
#: Frames that may wait for one page before it counts as not reading and is cut off.
MAX_QUEUED = 4096
#: The close code for a page cut off for not reading (RFC 6455: try again later).
CLOSE_TOO_SLOW = 1013
FORBIDDEN_HOST = "forbidden: this server answers only to 127.0.0.1, localhost and [::1]\n"

#: The page runs only its own files and talks only to this server; no frame may hold it.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

SECURITY_HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"referrer-policy", b"no-referrer"),
    (b"x-content-type-options", b"nosniff"),
    (b"cache-control", b"no-store"),
]


def new_token() -> str:
    return secrets.token_urlsafe(24)


class Guard:
    """ASGI middleware: this server's ``Host`` for everything; the token and this
    server's ``Origin`` for the socket."""

    def __init__(self, app: ASGIApp, token: str, hosts: Iterable[str] = ()) -> None:
        self.app = app
        self.token = token.encode()
        self.names = {name.lower() for name in (*LOCAL_HOSTS, *hosts)}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host_ok = self._host_ok(scope)
        if scope["type"] == "websocket":
            if not (host_ok and _same_origin(scope) and self._token_ok(scope)):
                await receive()  # websocket.connect
                await send({"type": "websocket.close", "code": 4403})  # refused: HTTP 403
                return
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", [])) + SECURITY_HEADERS
                message = {**message, "headers": headers}
            await send(message)

        if not host_ok:
            response = Response(FORBIDDEN_HOST, 403, media_type="text/plain")
            await response(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)

    def _host_ok(self, scope: Scope) -> bool:
        server = scope.get("server")
        host = _header(scope, b"host")
        if not server or host is None:
            return False
        port = server[1]
        name, _, given_port = host.lower().rpartition(":")
        if not name or "]" in given_port:  # no port: "localhost", "[::1]"
            name, given_port = host.lower(), "80"
        return name in self.names and given_port == str(port)

    def _token_ok(self, scope: Scope) -> bool:
        offered = [str(p) for p in scope.get("subprotocols", [])]
        if PROTOCOL not in offered:
            return False
        return any(
            secrets.compare_digest(p[len(TOKEN_PROTOCOL) :].encode(), self.token)
            for p in offered
            if p.startswith(TOKEN_PROTOCOL)
        )


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _same_origin(scope: Scope) -> bool:
    origin, host = _header(scope, b"origin"), _header(scope, b"host")
    return (
        origin is not None and host is not None and origin in (f"http://{host}", f"https://{host}")
    )


def create_app(
    setup: WebSetup, token: str, *, hosts: Iterable[str] = (), max_queued: int = MAX_QUEUED
) -> ASGIApp:
    """The whole browser UI for ``setup``'s workspace, behind ``token``.

    ``hosts``: names besides 127.0.0.1, localhost and [::1] the server answers
    to (the ``Host`` header, with the port it listens on). ``max_queued``: the
    frames that may wait for one page before it is cut off for not reading.
    """
    open_sessions = OpenSessions()
    session_list = SessionList(setup.runtime)
    hubs: set[Hub] = set()

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    # Made from the Pygments that highlights the code, so the two never disagree.
    highlight = highlight_css()

    async def highlight_stylesheet(request: Request) -> Response:
        return Response(highlight, media_type="text/css")

    def sessions_changed(session_id: str) -> None:
        session_list.forget(session_id)
        for hub in list(hubs):
            hub.send_sessions()

    async def socket(websocket: WebSocket) -> None:
        await websocket.accept(subprotocol=PROTOCOL)
        outbox: asyncio.Queue[JSONObject] = asyncio.Queue(maxsize=max_queued)
        too_slow = asyncio.Event()

        def send(frame: JSONObject) -> None:
            try:
                outbox.put_nowait(frame)
            except asyncio.QueueFull:
                # Dropping a frame would leave the page showing something that is not so:
                # cut the page off instead; it reconnects and opens its panes again.
                too_slow.set()

        send(config_frame())  # before anything else: the page folds pastes by it
        hub = Hub(setup, send, open_sessions, sessions_changed, session_list)
        hubs.add(hub)
        writer = asyncio.create_task(_write(websocket, outbox))
        guards = asyncio.create_task(_poll_guards(hub))
        reader = asyncio.create_task(_read(websocket, hub, send))
        slow = asyncio.create_task(too_slow.wait())
        try:
            await asyncio.wait([reader, slow], return_when=asyncio.FIRST_COMPLETED)
            if reader.done() and not reader.cancelled() and reader.exception() is not None:
                log.error("cairn web: the connection failed", exc_info=reader.exception())
        finally:
            hubs.discard(hub)
            for task in (reader, slow, guards, writer):
                task.cancel()
            await hub.close()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
        if too_slow.is_set():
            log.warning("cairn web: a page did not read its frames; its connection is closed")
            with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
                await websocket.close(CLOSE_TOO_SLOW, "too many frames unread")

    app = Starlette(
        routes=[
            Route("/", index),
            Route("/static/highlight.css", highlight_stylesheet),
            WebSocketRoute("/ws", socket),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ]
    )
    return Guard(app, token, hosts)


async def _read(websocket: WebSocket, hub: Hub, send: Callable[[JSONObject], None]) -> None:
    """Hand the page's frames to ``hub`` until the page goes; a bad frame is answered
    with an ``error`` frame and changes nothing else (the other panes' turns go on)."""
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        text = message.get("text")
        if text is None:
            send(_error("a frame is JSON text, not binary"))
            continue
        if len(text) > MAX_FRAME:
            send(_error(f"a frame is at most {MAX_FRAME:,} characters"))
            continue
        try:
            frame = json.loads(text)
        except ValueError:
            send(_error("a frame is JSON"))
            continue
        except RecursionError:
            send(_error("a frame is JSON nested too deeply"))
            continue
        try:
            await hub.handle(frame)
        except Exception:
            # A frame the protocol's checks missed: a bug here, but not the page's end.
            log.exception("cairn web: a frame could not be handled")
            send(_error("the server could not handle that frame (see its log)"))


def _error(text: str) -> JSONObject:
    return {"type": "error", "pane": None, "text": text}


async def _write(websocket: WebSocket, outbox: asyncio.Queue[JSONObject]) -> None:
    while True:
        frame = await outbox.get()
        try:
            await websocket.send_text(json.dumps(frame, ensure_ascii=False))
        except (WebSocketDisconnect, RuntimeError, OSError):
            return  # the page went away; its hub is being closed


async def _poll_guards(hub: Hub) -> None:
    while True:
        await asyncio.sleep(GUARD_POLL_S)
        hub.refresh_guards()
