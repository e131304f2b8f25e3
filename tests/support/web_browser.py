"""The browser UI in a real headless Chromium: ``cairn web``'s app served by uvicorn on
127.0.0.1 in a background thread, the model the local OpenAI server, the page driven
through playwright's sync API.

The browser is the system's ``chromium`` (``make chromium`` installs it from Debian's
packages); playwright never downloads one. Use::

    from support.web_browser import (  # noqa: F401  (the fixtures register themselves by import)
        WebServer, browser_fixture, page_fixture, web_fixture,
    )

    def test_something(web: Callable[..., WebServer], page: Page) -> None:
        server = web()  # permission_mode="bypass"
        load(page, server)

The page records every frame it sends in ``window.__sent`` and every use of
``Notification`` in ``window.__notified``, so a test can say what it did not send;
every ``alert``/``confirm``/``prompt`` in ``window.__alerted`` and every
Content-Security-Policy violation (an inline handler or script the policy stopped, a
load from elsewhere) in ``window.__violations``, so a test can say that nothing ran
or even tried to.
``window.__hold = "history"`` keeps the frames of that type from the server (in
``window.__held``) until ``window.__release()`` sends them: the page has asked, the
answer is not there yet, and the test can look at the page in between.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from playwright.sync_api import Browser, Locator, Page, sync_playwright

from cairn.agent.settings import Settings
from cairn.agent.tools.base import PermissionMode
from cairn.provider import ModelConfig, OpenAIProvider
from cairn.surfaces.web import WebSetup
from cairn.surfaces.web.server import MAX_QUEUED, create_app  # typed (the package's is lazy)
from support.openai_server import OpenAIServer

TOKEN = "browser-test-token"
#: The bound on every wait (milliseconds): long enough for a slow CI machine.
WAIT_MS = 20_000

#: Run in the page before its own scripts: what it sends, and any notification.
RECORDER = """
window.__sent = [];
window.__hold = null;
window.__held = [];
const send = WebSocket.prototype.send;
WebSocket.prototype.send = function (data) {
  const frame = JSON.parse(data);
  window.__sent.push(frame);
  if (frame.type === window.__hold) {
    window.__held.push([this, data]);
    return undefined;
  }
  return send.call(this, data);
};
window.__release = () => {
  window.__hold = null;
  for (const [socket, data] of window.__held.splice(0)) send.call(socket, data);
};
window.__notified = [];
window.Notification = class {
  constructor(...args) { window.__notified.push(args); }
  static requestPermission() { window.__notified.push("requestPermission");
                               return Promise.resolve("denied"); }
};
window.Notification.permission = "default";
window.__alerted = [];
for (const name of ["alert", "confirm", "prompt"]) {
  window[name] = (...args) => { window.__alerted.push([name, ...args]); };
}
window.__violations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__violations.push(`${event.violatedDirective} ${event.blockedURI} ${event.sample}`);
});
"""


@dataclass(frozen=True)
class WebServer:
    """A running ``cairn web`` app: where it listens, and the workspace and home it serves."""

    port: int
    workspace: Path
    home: Path

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The address ``cairn web`` prints: the token in the fragment, which no request
        carries."""
        return f"{self.origin}/#token={TOKEN}"

    @property
    def socket(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"


@pytest.fixture(name="web")
def web_fixture(tmp_path: Path, openai_server: OpenAIServer) -> Iterator[Callable[..., WebServer]]:
    """Start the app (``web(permission_mode=..., max_queued=..., context_window=...)``);
    every server started stops after the test."""
    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(
        permission_mode: PermissionMode = "bypass",
        max_queued: int = MAX_QUEUED,
        context_window: int = 32_768,
    ) -> WebServer:
        workspace = tmp_path / "ws"
        workspace.mkdir(exist_ok=True)
        home = tmp_path / "home"
        model = ModelConfig(
            model="test-model", base_url=openai_server.base_url, context_window=context_window
        )
        setup = WebSetup(
            model=model,
            provider=OpenAIProvider(model),
            workspace=workspace,
            home=home,
            permission_mode=permission_mode,
            settings=Settings(),
        )
        config = uvicorn.Config(
            create_app(setup, token=TOKEN, max_queued=max_queued),
            host="127.0.0.1",
            port=0,
            log_level="warning",
            ws="websockets-sansio",
            timeout_graceful_shutdown=5,
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, name="cairn-web", daemon=True)
        thread.start()
        servers.append((server, thread))
        for _ in range(1000):
            if server.started or not thread.is_alive():
                break
            threading.Event().wait(0.01)
        assert server.started, "the web server did not start"
        port = server.servers[0].sockets[0].getsockname()[1]
        return WebServer(int(port), workspace, home)

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(15)


@pytest.fixture(name="browser", scope="module")
def browser_fixture() -> Iterator[Browser]:
    """Headless Chromium, the system's: never skipped, never downloaded."""
    executable = shutil.which("chromium")
    if executable is None:
        pytest.fail(
            "chromium is not installed: run `make test` (its `chromium` target installs it "
            "from Debian's packages); the browser tests need it"
        )
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=args)
        yield browser
        browser.close()


@pytest.fixture(name="page")
def page_fixture(browser: Browser, web: Callable[..., WebServer]) -> Iterator[Page]:
    """A fresh page (its own storage), closed before the servers stop."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    page.add_init_script(RECORDER)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert errors == [], f"the page threw: {errors}"


# -- driving the page -------------------------------------------------------------------


def load(page: Page, server: WebServer) -> None:
    """Open the page at the printed address and wait until its first pane holds a session."""
    # Only the fragment differs from the page already shown: without leaving it first,
    # the browser would just scroll, not load it again.
    page.goto("about:blank")
    page.goto(server.url)
    page.locator('.pane[data-pane="p1"][data-session]').wait_for()


def pane(page: Page, pane_id: str) -> Locator:
    return page.locator(f'.pane[data-pane="{pane_id}"]')


def session_of(page: Page, pane_id: str) -> str:
    value = pane(page, pane_id).get_attribute("data-session")
    assert value
    return value


def submit(page: Page, pane_id: str, text: str) -> None:
    """Type ``text`` into the pane's prompt box and press Enter."""
    box = pane(page, pane_id).locator("textarea.prompt")
    box.fill(text)
    box.press("Enter")


def wait_js(page: Page, expression: str, arg: Any = None, what: str = "") -> None:
    """Wait (bounded) until ``expression`` — a JS function of ``arg`` — is true."""
    try:
        page.wait_for_function(expression, arg=arg, timeout=WAIT_MS)
    except Exception as exc:  # a timeout: say what was awaited
        raise AssertionError(f"never happened: {what or expression}") from exc


def wait_text(page: Page, selector: str, expected: str) -> None:
    """Wait until the first element matching ``selector`` has exactly ``expected`` as text."""
    try:
        page.wait_for_function(
            "([selector, expected]) => document.querySelector(selector)?.textContent === expected",
            arg=[selector, expected],
            timeout=WAIT_MS,
        )
    except Exception as exc:
        actual = page.evaluate(
            "(selector) => document.querySelector(selector)?.textContent ?? null", selector
        )
        raise AssertionError(f"{selector}: wanted {expected!r}, shows {actual!r}") from exc


def idle(page: Page, pane_id: str) -> None:
    """Wait until the pane's session is idle: no cursor, no Stop button."""
    wait_js(
        page,
        """(id) => {
          const pane = document.querySelector(`.pane[data-pane="${id}"]`);
          return pane !== null && !pane.classList.contains("busy")
            && pane.querySelector(".cursor") === null
            && pane.querySelector(".stop").hidden;
        }""",
        pane_id,
        f"pane {pane_id} idle",
    )


def busy(page: Page, pane_id: str) -> None:
    wait_js(
        page,
        "(id) => document.querySelector(`.pane[data-pane=\"${id}\"]`)?.classList.contains('busy')",
        pane_id,
        f"pane {pane_id} busy",
    )


def rows(page: Page, pane_id: str) -> list[dict[str, str]]:
    """The pane's rendered rows in order: their kind and text (all rendered when few)."""
    found: list[dict[str, str]] = page.evaluate(
        """async (id) => {
           await new Promise((done) => requestAnimationFrame(() => done()));  // laid out
           return Array.from(
             document.querySelectorAll(`.pane[data-pane="${id}"] .row`))
           .sort((a, b) => Number(a.dataset.index) - Number(b.dataset.index))
           .map((row) => ({
             kind: row.classList[1],
             key: row.dataset.key,
             text: (row.querySelector(":scope > details > summary") ?? row).textContent,
           }));
         }""",
        pane_id,
    )
    return found


def total_rows(page: Page, pane_id: str) -> int:
    """How many rows the pane's list holds (rendered or not)."""
    value = pane(page, pane_id).locator(".spacer").get_attribute("data-rows")
    return int(value or 0)


def paste(page: Page, box: Locator, text: str) -> None:
    """Paste ``text`` into ``box`` at its cursor, as the user does: through the system
    clipboard and Ctrl+V, so the page sees a real, trusted paste event."""
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.evaluate("(text) => navigator.clipboard.writeText(text)", text)
    box.focus()
    box.press("ControlOrMeta+V")


def sent(page: Page) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = page.evaluate("window.__sent")
    return frames


def screenshot(page: Page, name: str) -> None:
    """Save ``name`` (a PNG) into ``CAIRN_SCREENSHOT_DIR`` when it is set."""
    folder = os.environ.get("CAIRN_SCREENSHOT_DIR")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / name))
