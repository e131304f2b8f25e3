"""``cairn web`` against what else runs on this machine (issue 24): the real server under
uvicorn, a plain HTTP server on another local port, real Chromium, raw WebSocket clients
and ``cairn web --open`` as a subprocess.

- No credential reaches another local port: cookies are not bound to a port, so the
  server sets none; the token lives in the URL fragment, the tab's sessionStorage and
  the WebSocket handshake.
- A ``Host`` other than this server's is refused, token or not (DNS rebinding).
- ``--open`` puts no secret on a command line: it opens a private file.
- A page that floods the server with ``list`` frames and never reads holds up no other
  page; the listing is read off the event loop; a page that does not read is cut off.
- Nothing the model writes runs in the page: an answer and a compaction summary full of
  HTML and markdown payloads render as sanitized markdown, and Chromium records no
  script run, no dialog, no Content-Security-Policy violation.
"""

from __future__ import annotations

import asyncio
import http.client
import http.cookiejar
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from playwright.sync_api import Page
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Origin, Subprotocol

from cairn.messages import user
from cairn.store import JsonlStoreFactory, MessageRecord, SessionRecord
from cairn.surfaces.web.server import CLOSE_TOO_SLOW
from support.long_session import LONG, write_long_session
from support.openai_server import (
    OpenAIServer,
    Reply,
)
from support.web_browser import (
    TOKEN,
    WebServer,
    idle,
    load,
    pane,
    submit,
)

PROTOCOLS = [Subprotocol("cairn.v1"), Subprotocol(f"cairn.token.{TOKEN}")]
#: The bound on every wait (seconds): a failure, never a hang.
WAIT_S = 30


@dataclass
class Recorder:
    """A plain HTTP server on another local port: what each request to it carried."""

    port: int
    requests: list[dict[str, Any]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture(name="recorder")
def recorder_fixture() -> Iterator[Recorder]:
    recorder = Recorder(0)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            recorder.requests.append(
                {"path": self.path, "headers": [(k.lower(), v) for k, v in self.headers.items()]}
            )
            body = b"<!doctype html><title>another local server</title><p>hello</p>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    recorder.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield recorder
    server.shutdown()
    server.server_close()


def assert_no_credential(recorder: Recorder) -> None:
    assert recorder.requests, "the other server was never asked"
    for request in recorder.requests:
        names = [name for name, _ in request["headers"]]
        assert "cookie" not in names, request
        assert TOKEN not in json.dumps(request), request


# -- no credential in a cookie ------------------------------------------------------------


def test_a_cookie_jar_shared_with_another_local_port_carries_no_credential(
    web: Callable[..., WebServer], recorder: Recorder
) -> None:
    """One cookie jar for every port, as a browser keeps it: loading the page (even with
    the token in the query, the old address) puts nothing in it for another port."""
    server = web()
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    for url in (
        server.url,  # the fragment stays with the client
        f"{server.origin}/?token={TOKEN}",
        f"{server.origin}/static/app.js",
        f"{server.origin}/static/style.css",
    ):
        with opener.open(url, timeout=WAIT_S) as response:
            assert response.status == 200, url
            assert response.headers.get("set-cookie") is None, url
            assert TOKEN.encode() not in response.read()
    assert list(jar) == []
    with opener.open(f"{recorder.url}/after-the-page", timeout=WAIT_S) as response:
        assert response.status == 200
    assert_no_credential(recorder)


def test_in_chromium_another_local_port_gets_no_credential_and_the_tab_keeps_working(
    web: Callable[..., WebServer], page: Page, recorder: Recorder
) -> None:
    server = web()
    load(page, server)
    assert page.url == server.origin + "/"  # the token left the address bar
    assert page.context.cookies() == []
    page.goto(f"{recorder.url}/visited-after")
    assert_no_credential(recorder)
    # Back in the same tab, without the token in the address: sessionStorage has it.
    page.goto(server.origin + "/")
    page.locator('.pane[data-pane="p1"][data-session]').wait_for()
    first = page.locator('.pane[data-pane="p1"]').get_attribute("data-session")
    page.reload()
    page.wait_for_function(
        "(first) => { const s = document.querySelector('.pane[data-pane=\"p1\"]')"
        "?.dataset.session; return s && s !== first; }",
        arg=first,
    )
    assert page.evaluate("sessionStorage.getItem('cairn.token')") == TOKEN
    assert page.context.cookies() == []
    # Another origin (the other port) cannot read this tab's storage of this origin.
    page.goto(f"{recorder.url}/again")
    assert page.evaluate("sessionStorage.getItem('cairn.token')") is None
    assert_no_credential(recorder)


# -- Host: DNS rebinding ------------------------------------------------------------------


def test_the_real_server_refuses_another_host_even_with_the_token(
    web: Callable[..., WebServer],
) -> None:
    server = web()
    for host in (f"evil.example:{server.port}", "evil.example", f"localhost:{server.port + 1}"):
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=WAIT_S)
        try:
            connection.request("GET", "/", headers={"Host": host})
            response = connection.getresponse()
            assert response.status == 403, host
            assert b"answers only to" in response.read()
        finally:
            connection.close()
        # The socket, as a rebound name reaches it: a connection to 127.0.0.1 for a URI
        # naming that host, with the token and a matching Origin. Refused all the same.
        with (
            socket.create_connection(("127.0.0.1", server.port), timeout=WAIT_S) as sock,
            pytest.raises(InvalidStatus) as refused,
        ):
            connect(
                f"ws://{host}/ws",
                sock=sock,
                origin=Origin(f"http://{host}"),
                subprotocols=PROTOCOLS,
                open_timeout=WAIT_S,
            )
        assert refused.value.response.status_code == 403, host
    for host in (f"127.0.0.1:{server.port}", f"localhost:{server.port}", f"[::1]:{server.port}"):
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=WAIT_S)
        try:
            connection.request("GET", "/", headers={"Host": host})
            assert connection.getresponse().status == 200, host
        finally:
            connection.close()


# -- --open: no secret on a command line ----------------------------------------------------

BROWSER = """\
#!{python}
import json, os, sys
from pathlib import Path
from urllib.parse import urlparse

opened = Path(urlparse(sys.argv[1]).path)
info = os.stat(opened)
record = {{
    "argv": sys.argv,
    "cmdline": Path("/proc/self/cmdline").read_bytes().decode("utf-8", "replace"),
    "parent_cmdline": Path(f"/proc/{{os.getppid()}}/cmdline").read_bytes().decode(),
    "file_mode": info.st_mode & 0o777,
    "dir_mode": os.stat(opened.parent).st_mode & 0o777,
    "owner": info.st_uid,
    "content": opened.read_text(encoding="utf-8"),
}}
Path({out!r} + ".part").write_text(json.dumps(record))
os.replace({out!r} + ".part", {out!r})
"""


def test_open_hands_the_browser_a_private_file_never_the_token(tmp_path: Path) -> None:
    record = tmp_path / "browser.json"
    browser = tmp_path / "browser"
    browser.write_text(BROWSER.format(python=sys.executable, out=str(record)))
    browser.chmod(0o700)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {
        **os.environ,
        "BROWSER": str(browser),
        "CAIRN_MODEL": "test-model",
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",  # never asked: nobody prompts
        "CAIRN_HOME": str(tmp_path / "home"),
        "PYTHONUNBUFFERED": "1",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "cairn", "web", "--open"],
        cwd=workspace,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("cairn web: http://127.0.0.1:"), line
        url = line.removeprefix("cairn web: ").strip()
        token = url.partition("#token=")[2]
        assert len(token) >= 24 and "?" not in url  # in the fragment, not the query
        for _ in range(WAIT_S * 10):
            if record.exists() or process.poll() is not None:
                break
            threading.Event().wait(0.1)
        assert record.exists(), "the browser was never started"
        seen = json.loads(record.read_text())
        cmdline = Path(f"/proc/{process.pid}/cmdline").read_bytes().decode()
    finally:
        process.send_signal(signal.SIGINT)
        try:
            _, stderr = process.communicate(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
    assert process.returncode == 0, stderr
    for shown in (seen["argv"], seen["cmdline"], seen["parent_cmdline"], cmdline):
        assert token not in json.dumps(shown), shown
    opened = seen["argv"][1]
    assert opened.startswith("file:///") and opened.endswith("/open.html")
    assert (seen["file_mode"], seen["dir_mode"]) == (0o600, 0o700)
    assert seen["owner"] == os.getuid()
    # The file leads to the address with the token, in its fragment.
    assert f"location.replace({json.dumps(url)})" in seen["content"]
    # And it is gone once the server stopped.
    assert not Path(urlparse(opened).path).parent.exists()


# -- a page that does not read --------------------------------------------------------------


def socket_to(server: WebServer) -> ClientConnection:
    return connect(
        server.socket,
        origin=Origin(server.origin),
        subprotocols=PROTOCOLS,
        open_timeout=WAIT_S,
        max_size=None,
    )


def until(ws: ClientConnection, match: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    for _ in range(10_000):
        frame: dict[str, Any] = json.loads(ws.recv(timeout=WAIT_S))
        if match(frame):
            return frame
        assert frame["type"] != "error", frame
    raise AssertionError("the frame never came")


def a_turn_in_a_new_session(server: WebServer) -> None:
    """What a second page does: open a session, prompt it, get the whole answer."""
    with socket_to(server) as ws:
        ws.send(json.dumps({"type": "open", "pane": "p1", "sessionId": None}))
        until(ws, lambda f: f["type"] == "opened" and f["pane"] == "p1")
        ws.send(json.dumps({"type": "prompt", "pane": "p1", "text": "are you there?"}))
        added = until(
            ws,
            lambda f: (
                f["type"] == "event"
                and f["event"]["type"] == "messageAdded"
                and f["event"]["message"]["role"] == "assistant"
            ),
        )
        assert added["event"]["message"]["content"]
        until(ws, lambda f: f["type"] == "state" and not f["busy"])


def on_a_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def stored_sessions(server: WebServer, count: int) -> None:
    stores = JsonlStoreFactory(server.home)
    for n in range(count):
        with stores.create(server.workspace, SessionRecord(f"s{n}", str(server.workspace))) as s:
            s.append(MessageRecord(user(f"stored question {n}")))


def test_2000_unread_list_frames_hold_up_no_other_page_and_the_store_is_read_off_the_loop(
    web: Callable[..., WebServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's describe is held until the test lets it go: a listing read on the
    event loop would stop every page (the second page could not even connect)."""
    server = web()
    stored_sessions(server, 5)
    held, entered = threading.Event(), threading.Event()
    on_loop: list[bool] = []
    describe = JsonlStoreFactory.describe

    def held_describe(self: JsonlStoreFactory, workspace: Path, session_id: str) -> Any:
        on_loop.append(on_a_loop())
        entered.set()
        held.wait(WAIT_S)
        return describe(self, workspace, session_id)

    monkeypatch.setattr(JsonlStoreFactory, "describe", held_describe)
    try:
        with socket_to(server) as flood:
            for _ in range(2_000):
                flood.send(json.dumps({"type": "list"}))
            assert entered.wait(WAIT_S), "the listing never started"
            a_turn_in_a_new_session(server)  # while the listing is held
            held.set()
            sessions = until(flood, lambda f: f["type"] == "sessions")["sessions"]
            assert {f"s{n}" for n in range(5)} <= {s["id"] for s in sessions}
            assert {s["firstPrompt"] for s in sessions} >= {"stored question 0"}
    finally:
        held.set()
    assert on_loop and not any(on_loop)
    # Coalesced: 2,000 asks, a handful of reads (each describes the 5 sessions, or 6).
    assert len(on_loop) <= 6 * 4


def test_a_page_that_does_not_read_is_cut_off_and_holds_up_no_other(
    web: Callable[..., WebServer],
) -> None:
    server = web(max_queued=16)
    write_long_session(server.home, server.workspace, pairs=500)  # 1,001 entries
    with socket_to(server) as slow:
        slow.send(json.dumps({"type": "open", "pane": "p1", "sessionId": LONG}))
        page = {"type": "history", "pane": "p1", "before": 1_000, "limit": 1_000}
        for _ in range(400):  # ~400 × 100 kB of answers it never reads
            slow.send(json.dumps(page))
        a_turn_in_a_new_session(server)
        # Reading at last: what was sent, then the close that says why.
        with pytest.raises(ConnectionClosed) as closed:
            for _ in range(1_000):
                slow.recv(timeout=WAIT_S)
        assert closed.value.rcvd is not None
        assert closed.value.rcvd.code == CLOSE_TOO_SLOW


# -- nothing the model writes runs --------------------------------------------------------

#: Markdown and HTML that would run script, load something or restyle the page if the
#: page inserted them as they are; each would set ``window.__pwned`` or call ``alert``.
PAYLOADS = "\n\n".join(
    [
        "# Payloads",
        "<img src=x onerror=\"window.__pwned='img'\">",
        "<script>window.__pwned = 'script'</script>",
        "<svg onload=\"window.__pwned='svg'\"></svg>",
        "<iframe src=\"javascript:window.__pwned='iframe'\"></iframe>",
        "<a href=\"javascript:window.__pwned='raw link'\" id=rawlink>raw link</a>",
        "<details open ontoggle=\"window.__pwned='details'\">x</details>",
        '<div style="position:fixed;inset:0;background:red" id=cover>cover</div>',
        "<style>body { display: none }</style>",
        "[md link](javascript:alert('md link'))",
        "[md link upper](JaVaScRiPt:alert('upper'))",
        "[entity link](&#106;avascript:alert('entity'))",
        "[data link](data:text/html,<script>alert('data')</script>)",
        "[relative link](/ws)",
        "<javascript:alert('autolink')>",
        "![image](x\\\" onerror=\\\"alert('image'))",
        "![tracker](http://127.0.0.1:9/track.png)",
        '[title](https://example.com "x\\" onmouseover=\\"alert(\'title\')")',
        "```\\\"><img src=x onerror=alert('info')>\nx = 1\n```",
        "| a | b |\n|---|---|\n| <img src=x onerror=alert('cell')> | [c](javascript:alert('c')) |",
    ]
)

#: What must be absent from every rendered answer and summary.
UNSAFE_IN_DOM = """(root) => {
  const found = [];
  for (const el of root.querySelectorAll("*")) {
    const tag = el.tagName.toLowerCase();
    if (["script", "img", "svg", "iframe", "style", "details", "object", "embed",
         "form", "input", "link", "meta", "base"].includes(tag)) found.push(tag);
    for (const attr of el.attributes) {
      if (/^on/i.test(attr.name) || ["style", "src", "id"].includes(attr.name)) {
        found.push(`${tag}[${attr.name}]`);
      }
    }
    if (tag === "a") {
      if (el.hasAttribute("href") && !/^(https?|mailto):/.test(el.getAttribute("href"))) {
        found.push(`a[href=${el.getAttribute("href")}]`);
      }
      if (!/\\bnoopener\\b/.test(el.rel) || el.target !== "_blank") found.push("a: opener");
    }
  }
  return found;
}"""


def test_no_payload_in_an_answer_or_a_summary_runs_in_chromium(
    web: Callable[..., WebServer], page: Page, openai_server: OpenAIServer
) -> None:
    def reply(body: dict[str, Any]) -> Reply:
        last = str(body["messages"][-1].get("content"))
        if "TEXT ONLY" in last:  # the compaction's fork: the summary holds them too
            return Reply(text=f"<summary>{PAYLOADS}</summary>")
        return Reply(text=PAYLOADS)

    openai_server.respond_with(reply)
    load(page, web())
    for n in range(3):
        submit(page, "p1", f"question {n}")
        idle(page, "p1")
    submit(page, "p1", "/compact")
    block = pane(page, "p1").locator(".compact-block")
    block.wait_for()
    idle(page, "p1")
    block.locator("summary").click()
    rendered = page.locator(".pane[data-pane='p1'] .markdown")
    assert rendered.count() >= 2  # answers and the summary, as markdown
    summary = block.locator(".summary-text.markdown")
    for root in (rendered.first, summary):
        # The payloads are there, as words: nothing was silently lost.
        assert "onerror" in (root.text_content() or "")
        assert root.evaluate(UNSAFE_IN_DOM) == []
        for link in root.locator("a").all():
            link.hover()  # an onmouseover would fire now
    assert page.locator("#cover").count() == 0 and page.locator("#rawlink").count() == 0
    assert page.locator("body").is_visible()  # no <style> hid it
    assert page.evaluate("window.__pwned ?? null") is None
    assert page.evaluate("window.__alerted") == []
    assert page.evaluate("window.__violations") == []  # nothing even tried to run or load
    assert pane(page, "p1").locator(".row.assistant .text:not(.markdown)").count() == 0
