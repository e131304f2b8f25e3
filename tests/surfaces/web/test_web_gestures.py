"""Issue 29's everyday gestures in ``cairn web``'s page, in a real headless Chromium:
``@path`` completion, lines queued while the pane works (Edit, Cancel, Stop keeps
them), a ``!command`` as a block of plain text (live and reopened), the mode control,
rewind (with and without the files) and ``/fork``, both refused while the pane works,
and a meter that never shows a number over the budget.

The server is the real app under uvicorn, the model the local OpenAI server; an
answer to a prompt holding ``slow`` waits for a gate after a few pieces, so the pane
is working for as long as the test needs. See ``tests/support/web_browser.py`` for the fixtures.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from cairn.agent.facade import SessionUsage
from cairn.surfaces.web.frames import usage_json
from support.long_session import LONG, write_long_session
from support.openai_server import (
    OpenAIServer,
    Reply,
    ToolCallSpec,
)
from support.web_browser import (
    WebServer,
    busy,
    idle,
    load,
    pane,
    rows,
    screenshot,
    sent,
    session_of,
    submit,
    wait_js,
)

CONTEXT_FULL = "context full · compacts before the next request"
NOTES = json.dumps({"path": "notes.txt", "content": "written after the second prompt\n"})


def last_user(body: dict[str, Any]) -> str:
    return next(
        (str(m.get("content")) for m in reversed(body["messages"]) if m["role"] == "user"), ""
    )


class Model:
    """Answers ``answer to <prompt>``; a prompt with ``slow`` waits for ``gate`` after a few
    pieces; a prompt with ``write notes`` writes notes.txt first."""

    def __init__(self, server: OpenAIServer) -> None:
        self.gate = threading.Event()
        self.server = server
        server.respond_with(self.reply)

    def reply(self, body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        prompt = last_user(body)
        if "write notes" in prompt and last["role"] == "user":
            return Reply(tool_calls=[ToolCallSpec("write_file", NOTES)])
        if "slow" in prompt and last["role"] == "user":
            return Reply(text=f"answer to {prompt} " * 4, hold=self.gate, hold_after=3)
        return Reply(text=f"answer to {prompt}")

    def prompts(self) -> list[str]:
        """The prompts the model was asked to answer, in order."""
        return [last_user(b) for b in self.server.bodies if b["messages"][-1]["role"] == "user"]


@pytest.fixture
def model(openai_server: OpenAIServer) -> Iterator[Model]:
    scripted = Model(openai_server)
    yield scripted
    scripted.gate.set()


def box_of(page: Page, pane_id: str = "p1") -> Any:
    return pane(page, pane_id).locator("textarea.prompt")


def ask(page: Page, text: str, pane_id: str = "p1") -> None:
    """Send ``text`` and wait until its answer is the last row and the pane is idle."""
    submit(page, pane_id, text)
    wait_js(
        page,
        "([id, text]) => Array.from(document.querySelectorAll("
        '`.pane[data-pane="${id}"] .row.assistant`)).some((r) => r.textContent.includes(text))',
        [pane_id, f"answer to {text}"],
        f"the answer to {text!r}",
    )
    idle(page, pane_id)


def test_at_path_completes_workspace_paths_folder_by_folder_and_the_file_is_attached(
    web: Callable[..., WebServer], page: Page, model: Model
) -> None:
    server = web()
    (server.workspace / "src" / "cairn").mkdir(parents=True)
    (server.workspace / "src" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (server.workspace / "README.md").write_text("# readme\n")
    load(page, server)
    box = box_of(page)
    choices = pane(page, "p1").locator(".completions .completion")
    box.focus()
    box.press_sequentially("what is in @s")
    expect(choices).to_have_text(["src/"])
    box.press("Tab")  # a folder: accepted, and completion goes on inside it
    expect(box).to_have_value("what is in @src/")
    expect(choices).to_have_text(["src/cairn/", "src/calc.py"])
    box.press("ArrowDown")
    expect(pane(page, "p1").locator(".completion.chosen")).to_have_text("src/calc.py")
    box.press("Enter")  # accepts: it does not send the prompt
    expect(box).to_have_value("what is in @src/calc.py ")
    expect(pane(page, "p1").locator(".completions")).to_be_hidden()
    box.press_sequentially("and @R")
    choices.filter(has_text="README.md").click()
    expect(box).to_have_value("what is in @src/calc.py and @README.md ")
    box.press_sequentially("@")
    expect(choices).to_have_text(["src/", "README.md"])
    box.press("Escape")  # closes the list; the pane is idle, nothing to stop
    expect(pane(page, "p1").locator(".completions")).to_be_hidden()
    expect(box).to_have_value("what is in @src/calc.py and @README.md @")
    assert not [f for f in sent(page) if f["type"] in ("prompt", "cancel")]
    prefixes = [f["prefix"] for f in sent(page) if f["type"] == "complete"]
    assert prefixes[:3] == ["", "s", "src/"]  # "@", "@s", then the folder accepted
    box.fill("what is in @src/calc.py ")  # the caret past the word: no list to accept
    box.press("Enter")
    expect(pane(page, "p1").locator(".row.assistant")).to_have_count(1)
    idle(page, "p1")
    # The core attached the file: the model read it with the prompt.
    assert "return a - b" in json.dumps(model.server.bodies[0]["messages"])


def test_lines_sent_while_the_pane_works_are_queued_edited_cancelled_and_sent_after(
    web: Callable[..., WebServer], page: Page, model: Model
) -> None:
    load(page, web())
    submit(page, "p1", "a slow question")
    busy(page, "p1")
    box = box_of(page)
    expect(box).to_be_enabled()
    submit(page, "p1", "second")
    submit(page, "p1", "third")
    queued = pane(page, "p1").locator(".queue .queued")
    expect(queued.locator(".queued-text")).to_have_text(["second", "third"])
    expect(queued.locator(".queued-label")).to_have_text(["queued", "queued"])
    screenshot(page, "queued.png")
    queued.nth(0).get_by_role("button", name="Edit").click()
    expect(box).to_have_value("second")
    expect(queued.locator(".queued-text")).to_have_text(["third"])
    queued.nth(0).get_by_role("button", name="Cancel").click()
    expect(queued).to_have_count(0)
    box.fill("second, edited")
    box.press("Enter")
    expect(queued.locator(".queued-text")).to_have_text(["second, edited"])
    assert model.prompts() == ["a slow question"]
    model.gate.set()
    expect(pane(page, "p1").locator(".row.user")).to_have_text(
        ["a slow question", "second, edited"]
    )
    idle(page, "p1")
    expect(queued).to_have_count(0)
    assert model.prompts() == ["a slow question", "second, edited"]
    assert not [f for f in sent(page) if f["type"] == "refused"]


def test_stop_keeps_the_queue(web: Callable[..., WebServer], page: Page, model: Model) -> None:
    load(page, web())
    submit(page, "p1", "a slow question")
    busy(page, "p1")
    submit(page, "p1", "later")
    queued = pane(page, "p1").locator(".queue .queued-text")
    expect(queued).to_have_text(["later"])
    pane(page, "p1").locator("button.stop").click()
    idle(page, "p1")
    expect(queued).to_have_text(["later"])
    assert model.prompts() == ["a slow question"]


def test_a_shell_command_is_a_plain_text_block_live_and_reopened(
    web: Callable[..., WebServer], page: Page, model: Model
) -> None:
    load(page, web())
    payload = "<img src=x onerror=alert(1)><b>bold</b>"
    submit(page, "p1", f"!echo '{payload}'")
    block = pane(page, "p1").locator(".row.shell .shell-block")
    expect(block.locator(".shell-command")).to_have_text(f"!echo '{payload}'")
    expect(block.locator(".shell-output")).to_contain_text(payload)
    idle(page, "p1")
    sid = session_of(page, "p1")

    def shown_as_text() -> None:
        expect(pane(page, "p1").locator(".row.shell")).to_have_count(1)
        expect(pane(page, "p1").locator(".row.user")).to_have_count(0)  # no user bubble
        assert pane(page, "p1").locator(".messages img, .messages b").count() == 0
        assert page.evaluate("window.__alerted") == []

    shown_as_text()
    page.locator("#new-chat").click()
    wait_js(page, "(sid) => document.querySelector('.pane').dataset.session !== sid", sid)
    page.locator(f'#sessions button[data-session="{sid}"]').click()
    wait_js(page, "(sid) => document.querySelector('.pane').dataset.session === sid", sid)
    shown_as_text()
    assert model.prompts() == []  # the model was never asked


def test_the_mode_control_shows_and_changes_the_session_s_mode(
    web: Callable[..., WebServer], page: Page, model: Model
) -> None:
    load(page, web(permission_mode="ask"))
    control = pane(page, "p1").locator("select.mode")
    expect(control).to_have_value("ask")
    expect(pane(page, "p1").locator(".status-line .meter")).to_be_visible()
    control.select_option("plan")
    # The pane's mode comes back from the server's modeChange, not from the control.
    expect(pane(page, "p1")).to_have_attribute("data-mode", "plan")
    assert [f["mode"] for f in sent(page) if f["type"] == "mode"] == ["plan"]
    control.select_option("accept-edits")
    expect(pane(page, "p1")).to_have_attribute("data-mode", "accept-edits")
    expect(control).to_have_value("accept-edits")


def open_rewind(page: Page, prompt: str) -> None:
    """The ⋯ of the user row ``prompt``, then Rewind to here."""
    row = pane(page, "p1").locator(".row.user").filter(has_text=prompt)
    row.hover()
    row.locator(".row-menu").click()
    pane(page, "p1").get_by_role("menuitem", name="Rewind to here").click()


def test_rewind_to_a_prompt_with_its_files_opens_the_branch_with_the_prompt_in_the_box(
    web: Callable[..., WebServer], page: Page, model: Model
) -> None:
    server = web()
    load(page, server)
    ask(page, "first question")
    ask(page, "please write notes")
    notes = server.workspace / "notes.txt"
    assert notes.exists()
    original = session_of(page, "p1")
    open_rewind(page, "please write notes")
    dialog = pane(page, "p1").locator(".rewind-confirm")
    expect(dialog.get_by_role("button")).to_have_text(
        ["Conversation only", "Conversation and files", "Cancel"]
    )
    expect(dialog.locator(".confirm-files")).to_contain_text("notes.txt")
    dialog.get_by_role("button", name="Conversation and files").click()
    wait_js(page, "(sid) => document.querySelector('.pane').dataset.session !== sid", original)
    branch = session_of(page, "p1")
    expect(box_of(page)).to_have_value("please write notes")
    expect(pane(page, "p1").locator(".row.user")).to_have_text(["first question"])
    assert not notes.exists()
    for sid in (original, branch):
        expect(page.locator(f'#sessions button[data-session="{sid}"]')).to_have_count(1)
    # No files changed after the first prompt in the branch: one way to rewind.
    open_rewind(page, "first question")
    expect(dialog.get_by_role("button")).to_have_text(["Rewind", "Cancel"])
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_have_count(0)
    assert session_of(page, "p1") == branch


def test_fork_opens_the_copy_and_both_are_refused_while_the_pane_works(
    web: Callable[..., WebServer], page: Page, model: Model
) -> None:
    load(page, web())
    ask(page, "first question")
    original = session_of(page, "p1")
    submit(page, "p1", "/fork")
    wait_js(page, "(sid) => document.querySelector('.pane').dataset.session !== sid", original)
    copy = session_of(page, "p1")
    expect(pane(page, "p1").locator(".row.user")).to_have_text(["first question"])
    for sid in (original, copy):
        expect(page.locator(f'#sessions button[data-session="{sid}"]')).to_have_count(1)
    submit(page, "p1", "a slow question")
    busy(page, "p1")
    submit(page, "p1", "/fork")
    notices = pane(page, "p1").locator(".row.notice")
    expect(notices.filter(has_text="cannot fork")).to_have_count(1)
    open_rewind(page, "first question")
    pane(page, "p1").locator(".rewind-confirm").get_by_role("button", name="Rewind").click()
    expect(notices.filter(has_text="cannot rewind")).to_have_count(1)
    assert session_of(page, "p1") == copy
    model.gate.set()
    idle(page, "p1")
    assert session_of(page, "p1") == copy
    expect(pane(page, "p1").locator(".queue .queued")).to_have_count(0)


def test_a_resumed_long_session_in_a_small_window_shows_context_full_not_a_number(
    web: Callable[..., WebServer], page: Page, model: Model
) -> None:
    """Issue 29: the meter showed ``~36,401 / 4,096`` — a request never sent at that size."""
    server = web(context_window=4_096)
    write_long_session(server.home, server.workspace, pairs=2_000)
    load(page, server)
    page.locator(f'#sessions button[data-session="{LONG}"]').click()
    wait_js(page, "(sid) => document.querySelector('.pane').dataset.session === sid", LONG)
    meter = pane(page, "p1").locator(".meter")
    expect(meter).to_have_text(f"{CONTEXT_FULL} · 1 compaction")
    # The page's own rule, on a reading under the budget: "~" marks the estimate.
    shown = page.evaluate(
        """async (usage) => (await import('/static/labels.js')).meterText(usage)""",
        usage_json_under(),
    )
    assert shown == "context ~1,500 / 3,000 tokens · 0 compactions"
    assert rows(page, "p1")


def usage_json_under() -> dict[str, Any]:
    """A reading under the budget, with no count from the provider: an estimate."""
    return dict(usage_json(SessionUsage(None, 4_096, 3_000, 0, 1_500)))
