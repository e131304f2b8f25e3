"""``cairn web``'s page in a real headless Chromium (seed 004's browser stories): the
compaction hint and its tail, split panes working in parallel, the guard, a resumed
history with three compactions, a 10,000-message session paged in as the user scrolls
up, the token, permissions; and issue 29's: answers and summaries as markdown, a large
paste folded to its label in the prompt box and in the list, the sidebar at 390 px, a
new chat listed by its first prompt during its first turn, one highlighted session per
tab.

The server is the real app under uvicorn, the model the local OpenAI server; a held
reply (``Reply(hold=..., hold_after=...)``) stops a stream at an exact character, so
the page can be looked at there. See ``tests/support/web_browser.py`` for the fixtures.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect
from websockets.typing import Origin, Subprotocol

from cairn.agent.paste import (
    FOLDED_HEAD_LINES,
    PASTE_CHARS,
    PASTE_LINES,
    is_large_paste,
    paste_label,
)
from cairn.messages import ToolCall, assistant, tool_result, user
from cairn.store import JsonlStoreFactory, MessageRecord, SessionRecord
from cairn.surfaces.tail import stream_tail
from support.long_session import LONG, write_long_session
from support.openai_server import (
    OpenAIServer,
    Reply,
    ToolCallSpec,
)
from support.web_browser import (
    TOKEN,
    WAIT_MS,
    WebServer,
    busy,
    idle,
    load,
    pane,
    paste,
    rows,
    screenshot,
    sent,
    session_of,
    submit,
    total_rows,
    wait_js,
    wait_text,
)

#: The fork's summary: its first 31 characters have no newline, then come four (one \r\n).
FORK = (
    "<summary>## Objective: explain calc.py\n## Files\r\ncalc.py\n## Next\n"
    "answer the next question\n</summary>"
)
ANSWER = "calc.py defines add(), which subtracts where it should add. " * 12
COMPACT_LABEL = re.compile(r"Conversation compacted · [\d,]+ → [\d,]+ tokens · llm")
HINT = ".pane[data-pane='{}'] .compaction-hint"
PROTOCOL = Subprotocol("cairn.v1")


def is_fork(body: dict[str, Any]) -> bool:
    last = body["messages"][-1]
    return last["role"] == "user" and "TEXT ONLY" in str(last.get("content"))


def last_user(body: dict[str, Any]) -> str:
    return next(
        (str(m.get("content")) for m in reversed(body["messages"]) if m["role"] == "user"), ""
    )


class Model:
    """The scripted model: forks get ``FORK`` and answers ``ANSWER`` (or ``answer``'s).

    ``hold_fork`` / ``hold_answer`` (characters, with a gate) stall the next forks or
    the answers to prompts containing ``slow`` after exactly that many characters.
    """

    def __init__(self, server: OpenAIServer) -> None:
        self.answer: Callable[[dict[str, Any]], str] = lambda body: ANSWER
        self.fork_gate: threading.Event | None = None
        self.fork_chars = 0
        self.answer_gate: threading.Event | None = None
        self.gates: list[threading.Event] = []
        server.respond_with(self.reply)

    def reply(self, body: dict[str, Any]) -> Reply:
        if is_fork(body):
            if self.fork_gate is None:
                return Reply(text=FORK)
            # One character per chunk: after the role chunk and n chunks, n have streamed.
            return Reply(
                text=FORK, delta_chars=1, hold=self.fork_gate, hold_after=self.fork_chars + 1
            )
        if self.answer_gate is not None and "slow" in last_user(body):
            return Reply(text=ANSWER, hold=self.answer_gate, hold_after=6)
        return Reply(text=self.answer(body))

    def hold_fork(self, chars: int) -> threading.Event:
        self.fork_gate, self.fork_chars = threading.Event(), chars
        self.gates.append(self.fork_gate)
        return self.fork_gate

    def hold_answer(self) -> threading.Event:
        self.answer_gate = threading.Event()
        self.gates.append(self.answer_gate)
        return self.answer_gate

    def release(self) -> None:
        for gate in self.gates:
            gate.set()
        self.fork_gate = self.answer_gate = None


@pytest.fixture
def model(openai_server: OpenAIServer) -> Iterator[Model]:
    scripted = Model(openai_server)
    yield scripted
    scripted.release()


def converse(page: Page, pane_id: str, turns: int, prefix: str = "question") -> None:
    """``turns`` prompts, each waited for until answered and idle."""
    for n in range(turns):
        grown(
            page,
            pane_id,
            functools.partial(submit, page, pane_id, f"{prefix} {n} about calc.py"),
            2,
        )
        assert rows(page, pane_id)[-1]["kind"] == "assistant"


def compact(page: Page, pane_id: str) -> None:
    """``/compact`` (unheld), waited for until its block is the last row."""
    grown(page, pane_id, lambda: submit(page, pane_id, "/compact"), 1)
    last = rows(page, pane_id)[-1]
    assert last["kind"] == "compact", last


def grown(page: Page, pane_id: str, action: Callable[[], None], by: int) -> None:
    """Do ``action``, then wait until the pane's list holds ``by`` more rows and it is idle."""
    wanted = total_rows(page, pane_id) + by
    action()
    wait_js(
        page,
        "([id, wanted]) => Number(document.querySelector("
        '`.pane[data-pane="${id}"] .spacer`)?.dataset.rows) >= wanted',
        [pane_id, wanted],
        f"{by} more rows in {pane_id}",
    )
    idle(page, pane_id)


def all_rows(page: Page, pane_id: str) -> list[dict[str, str]]:
    """Every row, when the pane is small enough that all are rendered (checked)."""
    shown = rows(page, pane_id)
    assert len(shown) == total_rows(page, pane_id)
    return shown


def test_the_hint_shows_the_tail_at_0_29_30_31_characters_and_with_newlines(
    web: Callable[..., WebServer], page: Page, model: Model
) -> None:
    load(page, web())
    hint = HINT.format("p1")
    cases = [
        (0, "Compacting conversation…"),
        (29, "Compacting conversation… <summary>## Objective: explai"),
        (30, "Compacting conversation… <summary>## Objective: explain"),
        (31, "Compacting conversation… …summary>## Objective: explain "),
        (66, "Compacting conversation… …py\\n## Files\\ncalc.py\\n## Next\\na"),
    ]
    for chars, expected in cases:
        assert expected == (
            f"Compacting conversation… {stream_tail(FORK[:chars])}"
            if chars
            else "Compacting conversation…"
        )
        converse(page, "p1", 3)
        gate = model.hold_fork(chars)
        submit(page, "p1", "/compact")
        wait_text(page, hint, expected)
        # The hint comes right after the blinking cursor at the end of the list.
        assert page.evaluate(
            "(hint) => document.querySelector(hint).previousElementSibling"
            "?.classList.contains('cursor')",
            hint,
        )
        if chars == 66:
            screenshot(page, "compaction-hint.png")
        grown(page, "p1", gate.set, 1)
        expect(page.locator(hint)).to_have_count(0)
        last = rows(page, "p1")[-1]
        assert last["kind"] == "compact", last
    assert page.evaluate("window.__notified") == []


def test_the_hint_goes_when_compaction_ends_and_the_state_change_adds_no_row(
    web: Callable[..., WebServer], page: Page, model: Model
) -> None:
    load(page, web())
    meter = pane(page, "p1").locator(".meter")
    # No response yet: the pipeline's estimate, marked with ~.
    expect(meter).to_have_text(re.compile(r"^context ~[\d,]+ / 24,576 tokens · 0 compactions$"))
    converse(page, "p1", 3)
    expect(meter).to_have_text(re.compile(r"^context [\d,]+ / 24,576 tokens · 0 compactions$"))
    before = all_rows(page, "p1")
    gate = model.hold_fork(12)
    submit(page, "p1", "/compact")
    wait_text(page, HINT.format("p1"), f"Compacting conversation… {stream_tail(FORK[:12])}")
    assert all_rows(page, "p1") == before  # the state change inserted nothing
    gate.set()
    expect(page.locator(".compaction-hint")).to_have_count(0)
    idle(page, "p1")
    after = all_rows(page, "p1")
    assert after[:-1] == before  # the old rows stay, the block is appended
    assert after[-1]["kind"] == "compact"
    assert COMPACT_LABEL.fullmatch(after[-1]["text"])
    assert [r["kind"] for r in after].count("notice") == 0
    expect(meter).to_have_text(re.compile(r"^context [\d,]+ / 24,576 tokens · 1 compaction$"))
    # Expandable to the summary.
    block = pane(page, "p1").locator(".compact-block")
    block.locator("summary").click()
    expect(block.locator(".summary-text")).to_contain_text("Objective")
    assert page.evaluate("window.__notified") == []
    # New messages follow the block.
    converse(page, "p1", 1, prefix="after")
    assert [r["kind"] for r in all_rows(page, "p1")][-3:] == ["compact", "user", "assistant"]


def test_a_summary_prepared_in_the_band_shows_quietly_in_the_meter_never_as_the_hint(
    web: Callable[..., WebServer], page: Page, model: Model, openai_server: OpenAIServer
) -> None:
    """Issue 28: while the summary is prepared in the background the meter says
    ``preparing summary`` then ``summary ready``; no hint, no guard (nobody waits);
    the line commits it without a second fork."""
    model.answer = lambda body: ANSWER * 3
    load(page, web())
    meter = pane(page, "p1").locator(".meter")
    new_chat = page.locator("#new-chat")
    gate = model.hold_fork(12)  # the background fork stalls after 12 characters
    for turn in range(80):
        converse(page, "p1", 1, prefix=f"part {turn}:")
        if "preparing summary" in (meter.text_content() or ""):
            break
    expect(meter).to_have_text(
        re.compile(r"^context [\d,]+ / 24,576 tokens · 0 compactions · preparing summary$")
    )
    expect(page.locator(".compaction-hint")).to_have_count(0)
    expect(new_chat).to_be_enabled()  # no guard: switching is not refused
    assert "compact" not in [r["kind"] for r in rows(page, "p1")]  # the newest rows
    gate.set()  # the summary arrives while the user reads
    expect(meter).to_have_text(
        re.compile(r"^context [\d,]+ / 24,576 tokens · 0 compactions · summary ready$")
    )
    expect(page.locator(".compaction-hint")).to_have_count(0)
    for turn in range(20):
        converse(page, "p1", 1, prefix=f"more {turn}:")
        if any(r["kind"] == "compact" for r in rows(page, "p1")):
            break
    expect(meter).to_have_text(re.compile(r"^context [\d,]+ / 24,576 tokens · 1 compaction$"))
    assert sum(is_fork(b) for b in openai_server.bodies) == 1  # committed, not asked again
    assert page.evaluate("window.__notified") == []


def test_only_the_compacting_pane_shows_the_hint(
    web: Callable[..., WebServer], page: Page, model: Model
) -> None:
    load(page, web())
    converse(page, "p1", 3)
    first = session_of(page, "p1")
    page.locator("#split").click()
    page.locator('.pane[data-pane="p2"][data-session]').wait_for()
    assert session_of(page, "p2") != first
    answer_gate = model.hold_answer()
    fork_gate = model.hold_fork(40)
    submit(page, "p2", "answer slowly please")
    p2_streaming = pane(page, "p2").locator(".row.assistant .cursor")
    expect(p2_streaming).to_have_count(1)  # p2 streams its answer ...
    submit(page, "p1", "/compact")  # ... while p1 compacts
    wait_text(page, HINT.format("p1"), f"Compacting conversation… {stream_tail(FORK[:40])}")
    expect(pane(page, "p2").locator(".compaction-hint")).to_have_count(0)
    expect(p2_streaming).to_have_count(1)
    screenshot(page, "split-panes.png")
    fork_gate.set()
    expect(page.locator(".compaction-hint")).to_have_count(0)
    idle(page, "p1")
    expect(pane(page, "p2").locator(".compaction-hint")).to_have_count(0)
    answer_gate.set()
    idle(page, "p2")
    expect(pane(page, "p1").locator(".compact-block")).to_have_count(1)
    expect(pane(page, "p2").locator(".compact-block")).to_have_count(0)
    expect(pane(page, "p2").locator(".row.assistant")).to_have_text([ANSWER])


def test_the_guard_keeps_a_working_pane_on_its_session(
    web: Callable[..., WebServer], page: Page, model: Model
) -> None:
    load(page, web())
    converse(page, "p1", 1, prefix="the first session")
    first = session_of(page, "p1")
    new_chat = page.locator("#new-chat")
    new_chat.click()
    wait_js(
        page,
        "(first) => { const s = document.querySelector('.pane[data-pane=\"p1\"]')"
        ".dataset.session; return s && s !== first; }",
        first,
        "a new session in p1",
    )
    second = session_of(page, "p1")
    other = page.locator(f'#sessions .session[data-session="{first}"]')
    expect(other).to_have_count(1)

    def refused_while_working() -> None:
        expect(new_chat).to_be_disabled()
        page.evaluate("window.__sent.length = 0")
        shown = rows(page, "p1")
        other.click()  # another session, for the working pane: ignored
        new_chat.click(force=True)  # disabled: does nothing
        submit(page, "p1", "/clear")  # ignored, with at most a note by the prompt box
        assert sent(page) == []
        assert session_of(page, "p1") == second
        assert rows(page, "p1") == shown  # nothing went into the list
        expect(pane(page, "p1").locator(".note")).not_to_be_empty()
        pane(page, "p1").locator("textarea.prompt").fill("")

    # While a response streams.
    gate = model.hold_answer()
    submit(page, "p1", "answer slowly please")
    busy(page, "p1")
    wait_text(page, ".pane[data-pane='p1'] .row.assistant .text", ANSWER[:20])  # held there
    refused_while_working()
    gate.set()
    idle(page, "p1")
    expect(new_chat).to_be_enabled()

    # While a compaction runs.
    converse(page, "p1", 2, prefix="more")
    gate = model.hold_fork(10)
    submit(page, "p1", "/compact")
    wait_text(page, HINT.format("p1"), f"Compacting conversation… {stream_tail(FORK[:10])}")
    refused_while_working()
    gate.set()
    idle(page, "p1")

    # Idle again: both work.
    expect(new_chat).to_be_enabled()
    other.click()
    wait_js(
        page,
        "(first) => document.querySelector('.pane[data-pane=\"p1\"]').dataset.session === first",
        first,
        "p1 switched to the first session",
    )
    expect(pane(page, "p1").locator(".row.user")).to_have_text(
        ["the first session 0 about calc.py"]
    )
    new_chat.click()
    wait_js(
        page,
        "(first) => { const s = document.querySelector('.pane[data-pane=\"p1\"]')"
        ".dataset.session; return s && s !== first; }",
        first,
        "a new session in p1 again",
    )


def test_a_resumed_session_with_three_compact_blocks_renders_in_order(
    web: Callable[..., WebServer], page: Page, model: Model
) -> None:
    model.answer = lambda body: f"answer to {last_user(body)}: {ANSWER}"
    page.set_viewport_size({"width": 1400, "height": 3200})  # every row rendered, to compare
    server = web()
    load(page, server)
    for round_ in range(3):
        converse(page, "p1", 3, prefix=f"round {round_} question")
        compact(page, "p1")
    converse(page, "p1", 1, prefix="last question")
    built = all_rows(page, "p1")
    session_id = session_of(page, "p1")
    kinds = [r["kind"] for r in built]
    assert kinds == (["user", "assistant"] * 3 + ["compact"]) * 3 + ["user", "assistant"]

    load(page, server)  # the page again: p1 starts on a new session
    assert session_of(page, "p1") != session_id
    listed = page.locator(f'#sessions .session[data-session="{session_id}"]')
    note = pane(page, "p1").locator(".note")
    for _ in range(50):  # the old page's pane may hold it a moment longer: refused, again
        note.evaluate("(n) => { n.textContent = ''; }")
        listed.click()
        wait_js(
            page,
            """(id) => {
                 const p = document.querySelector('.pane[data-pane="p1"]');
                 return p.dataset.session === id || p.querySelector('.note').textContent;
               }""",
            session_id,
            "the session reopened, or refused",
        )
        if session_of(page, "p1") == session_id:
            break
    resumed = all_rows(page, "p1")
    assert [(r["kind"], r["text"]) for r in resumed] == [(r["kind"], r["text"]) for r in built]
    assert [r["key"] for r in resumed if r["kind"] != "compact"] == [
        r["key"] for r in built if r["kind"] != "compact"
    ]
    labels = [r["text"] for r in resumed if r["kind"] == "compact"]
    assert len(labels) == 3 and all(COMPACT_LABEL.fullmatch(label) for label in labels)
    meter = pane(page, "p1").locator(".meter")
    expect(meter).to_contain_text("3 compactions")


#: In a page's function: wait until the list settled — two frames (a layout, then the
#: one its scroll event asks for).
SETTLED = "const settled = () => new Promise((done) => requestAnimationFrame(() => "
SETTLED += "requestAnimationFrame(done)));\n"

#: The first row in the pane's view: its key and where it is on the screen.
FIRST_IN_VIEW = (
    "async (id) => {"
    + SETTLED
    + """  await settled();
  const s = document.querySelector(`.pane[data-pane="${id}"] .messages`);
  const box = s.getBoundingClientRect();
  const row = [...s.querySelectorAll(".row")]
    .filter((r) => r.getBoundingClientRect().bottom > box.top)
    .sort((a, b) => Number(a.dataset.index) - Number(b.dataset.index))[0];
  return { key: row.dataset.key, top: row.getBoundingClientRect().top };
}"""
)

#: Where the row with ``key`` is on the screen now (null: not rendered), and the DOM's rows.
WHERE_IS = (
    "async ([id, key]) => {"
    + SETTLED
    + """  await settled();
  const s = document.querySelector(`.pane[data-pane="${id}"] .messages`);
  const row = s.querySelector(`.row[data-key="${key}"]`);
  return { top: row ? row.getBoundingClientRect().top : null,
           rows: s.querySelectorAll(".row").length };
}"""
)

#: Scroll the whole list from its top to its end a view at a time: every row once, by
#: its index (kind, key, text), the most rows the DOM held, and whether two overlapped.
SWEEP = (
    "async (id) => {"
    + SETTLED
    + """
  const s = document.querySelector(`.pane[data-pane="${id}"] .messages`);
  const seen = new Map();
  let most = 0;
  let overlaps = 0;
  s.scrollTop = 0;
  for (let step = 0; step < 100000; step++) {
    await settled();
    const placed = [...s.querySelectorAll(".row")]
      .sort((a, b) => Number(a.dataset.index) - Number(b.dataset.index));
    most = Math.max(most, placed.length);
    for (let i = 0; i < placed.length; i++) {
      const row = placed[i];
      const summary = row.querySelector(":scope > details > summary");
      seen.set(Number(row.dataset.index),
               [row.classList[1], row.dataset.key, (summary ?? row).textContent]);
      const above = i ? placed[i - 1].getBoundingClientRect().bottom : -Infinity;
      if (row.getBoundingClientRect().top < above - 0.5) overlaps += 1;
    }
    if (s.scrollTop + s.clientHeight >= s.scrollHeight - 1) break;
    s.scrollTop += s.clientHeight + 400;  // the list renders 800 px beyond the view
  }
  const indices = [...seen.keys()].sort((a, b) => a - b);
  return { indices, rows: indices.map((i) => seen.get(i)), most, overlaps };
}"""
)


def start_of(page: Page, pane_id: str) -> int:
    """The history position of the first message the pane holds (0: it holds them all)."""
    return int(pane(page, pane_id).get_attribute("data-start") or 0)


def earlier_line(page: Page, pane_id: str) -> str | None:
    """The line before the list while earlier messages are not there (``None``: hidden)."""
    line = pane(page, pane_id).locator(".earlier")
    return None if line.is_hidden() else line.text_content()


def open_long(page: Page, server: WebServer) -> None:
    load(page, server)
    page.locator(f'#sessions .session[data-session="{LONG}"]').click()
    page.locator(f'.pane[data-pane="p1"][data-session="{LONG}"]').wait_for()


def scroll_to_top(page: Page, pane_id: str) -> None:
    pane(page, pane_id).locator(".messages").evaluate("(s) => { s.scrollTop = 0; }")


def page_back(page: Page, pane_id: str) -> None:
    """Scroll to the top and wait until the page asked for has come and is laid out.

    The frame is held until the row in view is measured, and the row must be where it
    was once the earlier page is in: prepending moved nothing on the screen.
    """
    before = start_of(page, pane_id)
    page.evaluate("window.__hold = 'history'")
    scroll_to_top(page, pane_id)
    wait_js(page, "() => window.__held.length === 1", what="the page asks for earlier messages")
    assert earlier_line(page, pane_id) == "loading earlier messages…"
    first = page.evaluate(FIRST_IN_VIEW, pane_id)
    page.evaluate("window.__release()")
    wait_js(
        page,
        "([id, before]) => Number(document.querySelector("
        '`.pane[data-pane="${id}"]`).dataset.start) < before',
        [pane_id, before],
        f"the page before {before}",
    )
    now = page.evaluate(WHERE_IS, [pane_id, first["key"]])
    assert now["top"] is not None and abs(now["top"] - first["top"]) <= 1, (first, now)
    assert now["rows"] < 200


def history_asked(page: Page) -> list[tuple[int, int]]:
    return [(f["before"], f["limit"]) for f in sent(page) if f["type"] == "history"]


def test_a_10000_message_session_opens_at_its_end_and_pages_back_to_the_first_in_order(
    web: Callable[..., WebServer], page: Page, model: Model
) -> None:
    server = web()
    ids = write_long_session(server.home, server.workspace)
    assert len(ids) == 10_001
    open_long(page, server)

    def row(text: str) -> Any:
        return pane(page, "p1").locator(".row", has_text=re.compile(f"^{text}$"))

    # It opens with the last page only, at its end: the last message in view.
    assert total_rows(page, "p1") == 300 and start_of(page, "p1") == 9_701
    expect(row("answer 4999")).to_be_in_viewport()
    assert earlier_line(page, "p1") == "9,701 earlier messages"
    assert history_asked(page) == []  # far from the top: nothing asked yet
    # Each time the view reaches the top, the page before comes, and nothing moves.
    pages = 0
    while start_of(page, "p1") > 0:
        page_back(page, "p1")
        pages += 1
        assert total_rows(page, "p1") == 10_001 - start_of(page, "p1")
    assert pages == 33 and earlier_line(page, "p1") is None
    befores = [before for before, _ in history_asked(page)]
    assert befores == list(range(9_701, 0, -300)) and {n for _, n in history_asked(page)} == {300}
    # Every entry is there once, in order, and the DOM never held 200 rows.
    swept = page.evaluate(SWEEP, "p1")
    assert swept["indices"] == list(range(10_001))
    assert [key for _, key, _ in swept["rows"]] == ids
    assert swept["most"] < 200 and swept["overlaps"] == 0
    texts = [text for kind, _, text in swept["rows"] if kind != "compact"]
    assert texts[:2] == ["question 0", "answer 0"] and texts[-1] == "answer 4999"
    # The scroll ends at the end, and the first message is back at the top.
    expect(row("answer 4999")).to_be_in_viewport()
    scroll_to_top(page, "p1")
    expect(row("question 0")).to_be_in_viewport()
    assert pane(page, "p1").locator(".row").count() < 200
    assert len(history_asked(page)) == 33  # nothing more to ask for


def test_a_message_arriving_while_an_earlier_page_loads_shows_once_at_the_end(
    web: Callable[..., WebServer], page: Page, model: Model
) -> None:
    model.answer = lambda body: "the live answer"
    server = web()
    ids = write_long_session(server.home, server.workspace, pairs=400)  # 801 entries
    open_long(page, server)
    assert start_of(page, "p1") == 501
    page.evaluate("window.__hold = 'history'")
    scroll_to_top(page, "p1")
    wait_js(page, "() => window.__held.length === 1", what="the page asks for earlier messages")
    # While the page before is on its way, a turn: its messages come live.
    grown(page, "p1", lambda: submit(page, "p1", "a question while the page loads"), 2)
    assert [(r["kind"], r["text"]) for r in rows(page, "p1")][-2:] == [
        ("user", "a question while the page loads"),
        ("assistant", "the live answer"),
    ]
    assert earlier_line(page, "p1") == "loading earlier messages…"
    page.evaluate("window.__release()")
    wait_js(
        page,
        "() => document.querySelector('.pane[data-pane=\"p1\"]').dataset.start === '201'",
        what="the page before 501",
    )
    while start_of(page, "p1") > 0:
        page_back(page, "p1")
    assert history_asked(page) == [(501, 300), (201, 300)]
    swept = page.evaluate(SWEEP, "p1")
    assert swept["indices"] == list(range(803)) and swept["most"] < 200
    assert [key for _, key, _ in swept["rows"]][:801] == ids
    assert [(kind, text) for kind, _, text in swept["rows"][801:]] == [
        ("user", "a question while the page loads"),
        ("assistant", "the live answer"),
    ]


def test_a_tool_call_whose_result_begins_the_last_page_is_one_row_once_the_page_before_comes(
    web: Callable[..., WebServer], page: Page
) -> None:
    server = web()
    call = ToolCall("c1", "bash", '{"command": "ls calc"}')
    with JsonlStoreFactory(server.home).create(
        server.workspace, SessionRecord(LONG, str(server.workspace))
    ) as store:
        # Positions 0 and 1 (the call) fall before the last 300 entries; 2 (its result) begins them.
        store.append(MessageRecord(user("list the calc files")))
        store.append(MessageRecord(assistant(None, [call])))
        store.append(MessageRecord(tool_result("c1", "calc.py", name="bash")))
        for n in range(299):
            store.append(MessageRecord(user(f"question {n}") if n % 2 else assistant(f"a{n}")))
    open_long(page, server)
    assert start_of(page, "p1") == 2
    while start_of(page, "p1") > 0:
        page_back(page, "p1")
    first = rows(page, "p1")[:3]
    assert [(r["kind"], r["text"]) for r in first] == [
        ("user", "list the calc files"),
        ("tool", 'bash {"command": "ls calc"}'),
        ("assistant", "a0"),
    ]
    tool = pane(page, "p1").locator(".row.tool")
    expect(tool).to_have_count(1)
    tool.locator("summary").click()
    expect(tool.locator(".tool-result")).to_have_text("calc.py")


def test_without_the_token_the_page_shows_nothing_and_the_socket_is_refused(
    web: Callable[..., WebServer], page: Page
) -> None:
    server = web()
    response = page.goto(server.origin + "/")  # the page is no secret; the sessions are
    assert response is not None and response.status == 200
    expect(page.locator("#connection")).to_contain_text("No token in this tab")
    expect(page.locator("#sessions .session")).to_have_count(0)
    origin = Origin(server.origin)
    for protocols in (None, [PROTOCOL], [PROTOCOL, Subprotocol("cairn.token.wrong")]):
        with pytest.raises(InvalidStatus) as ws_refused:
            connect(server.socket, origin=origin, subprotocols=protocols, open_timeout=10)
        assert ws_refused.value.response.status_code == 403, protocols
    with pytest.raises(InvalidStatus) as in_query:  # a token in the query is no credential
        connect(f"{server.socket}?token={TOKEN}", origin=origin, open_timeout=10)
    assert in_query.value.response.status_code == 403
    # With the token in the handshake (and this server's Origin) it opens.
    protocols = [PROTOCOL, Subprotocol(f"cairn.token.{TOKEN}")]
    with connect(server.socket, origin=origin, subprotocols=protocols, open_timeout=10) as ws:
        assert ws.subprotocol == PROTOCOL  # the token is never echoed
        assert json.loads(ws.recv(timeout=10))["type"] == "config"  # always the first frame
        ws.send(json.dumps({"type": "list"}))
        assert json.loads(ws.recv(timeout=10))["type"] == "sessions"
    # The printed address: the page drops the token from the address bar.
    load(page, server)
    assert page.url == server.origin + "/"


def test_a_permission_dialog_appears_and_its_answer_reaches_the_tool(
    web: Callable[..., WebServer], page: Page, openai_server: OpenAIServer
) -> None:
    arguments = json.dumps({"path": "notes.txt", "content": "written from the page\n"})

    def reply(body: dict[str, Any]) -> Reply:
        if body["messages"][-1]["role"] == "tool":
            return Reply(text="Wrote notes.txt.")
        return Reply(tool_calls=[ToolCallSpec("write_file", arguments)])

    openai_server.respond_with(reply)
    server = web(permission_mode="ask")
    load(page, server)
    submit(page, "p1", "write a note")
    dialog = pane(page, "p1").locator(".permission")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("write_file")
    expect(dialog).to_contain_text("notes.txt")
    expect(dialog.locator("button")).to_have_count(3)
    assert not (server.workspace / "notes.txt").exists()  # it waits for the answer
    request_id = dialog.get_attribute("data-permission")
    dialog.locator('button[data-decision="allow_once"]').click()
    expect(dialog).to_have_count(0)
    expect(pane(page, "p1").locator(".row.assistant")).to_have_text(["Wrote notes.txt."])
    idle(page, "p1")
    assert (server.workspace / "notes.txt").read_text() == "written from the page\n"
    answers = [f for f in sent(page) if f["type"] == "answer"]
    assert answers == [
        {"type": "answer", "pane": "p1", "permissionId": request_id, "decision": "allow_once"}
    ]
    tool = pane(page, "p1").locator(".row.tool details.tool")
    expect(tool.locator("summary")).to_contain_text("write_file")
    tool.locator("summary").click()
    expect(tool.locator(".tool-result")).not_to_be_empty()


def test_stream_tail_in_the_page_matches_the_python_rule(
    web: Callable[..., WebServer], page: Page
) -> None:
    load(page, web())
    texts = [
        "",
        "a",
        "x" * 29,
        "x" * 30,
        "y" * 31,
        "line one\nline two\r\nline three, and then more text",
        "\n" * 40,
        "a\r\n" * 15,
        "b" * 29 + "\r\n",
        "emoji 🙂 " * 6,
        "🙂" * 31,
    ]
    shown = page.evaluate(
        "async (texts) => { const tail = await import('/static/tail.js');"
        " return texts.map((t) => [tail.streamTail(t), tail.compactionHint(t)]); }",
        texts,
    )
    assert shown == [
        [
            stream_tail(t),
            f"Compacting conversation… {stream_tail(t)}" if t else "Compacting conversation…",
        ]
        for t in texts
    ]


def test_a_second_worker_shows_a_session_the_first_is_writing_read_only_and_live(
    web: Callable[..., WebServer], page: Page, model: Model, browser: Browser
) -> None:
    """Two ``cairn web`` workers on one store: the session the first page writes is
    followed in the second page, its prompt box disabled, new rows arriving as written."""
    first, second = web(), web()
    load(page, first)
    converse(page, "p1", 1, prefix="written by the first worker")
    session_id = session_of(page, "p1")
    built = all_rows(page, "p1")

    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(WAIT_MS)
    other = context.new_page()
    try:
        load(other, second)
        other.locator(f'#sessions .session[data-session="{session_id}"]').click()
        follower = pane(other, "p1")
        expect(follower).to_have_attribute("data-session", session_id)
        expect(follower).to_have_class(re.compile(r"\bread-only\b"))
        box = follower.locator("textarea.prompt")
        expect(box).to_be_disabled()
        expect(box).to_have_attribute("placeholder", re.compile("another process"))
        expect(follower.locator(".row.notice")).to_contain_text("being written by another process")
        shown = [(r["kind"], r["text"]) for r in rows(other, "p1") if r["kind"] != "notice"]
        assert shown == [(r["kind"], r["text"]) for r in built]

        # The first page goes on; the second shows each new message as it is committed.
        wanted = total_rows(other, "p1") + 2
        converse(page, "p1", 1, prefix="live from the first worker")
        wait_js(
            other,
            "([id, wanted]) => Number(document.querySelector("
            '`.pane[data-pane="${id}"] .spacer`)?.dataset.rows) >= wanted',
            ["p1", wanted],
            "the first worker's new round in the second page",
        )
        last = rows(other, "p1")[-2:]
        assert [r["kind"] for r in last] == ["user", "assistant"]
        assert last[0]["text"].startswith("live from the first worker 0")
        screenshot(other, "web-follower")
    finally:
        context.close()


# -- issue 29: markdown, pasted blocks, the sidebar ------------------------------------------

MARKDOWN = """Here is the fix:

1. open `calc.py`
2. change the operator

| file | change |
|:-----|-------:|
| calc.py | 1 line |

```python
def add(a, b):
    return a + b
```

See [the docs](https://docs.python.org/3/) for **more**."""


def text_of(page: Page, selector: str) -> str | None:
    """The exact ``textContent`` of the first match (playwright's matchers fold whitespace)."""
    found: str | None = page.evaluate(
        "(selector) => document.querySelector(selector)?.textContent ?? null", selector
    )
    return found


def test_answers_and_summaries_render_as_markdown_with_highlighted_code(
    web: Callable[..., WebServer], page: Page, model: Model
) -> None:
    model.answer = lambda body: MARKDOWN
    load(page, web())
    converse(page, "p1", 1, prefix="**how** do I fix")
    answer = pane(page, "p1").locator(".row.assistant .text.markdown").last
    expect(answer.locator("ol > li")).to_have_text(["open calc.py", "change the operator"])
    expect(answer.locator("ol code")).to_have_text("calc.py")
    expect(answer.locator("table th")).to_have_text(["file", "change"])
    expect(answer.locator("table td.align-right")).to_have_text("1 line")
    keyword = answer.locator("pre code span.k").first
    expect(keyword).to_have_text("def")
    # The highlight stylesheet is served and colours the tokens apart from plain code.
    colours = answer.locator("pre code").evaluate(
        """(code) => [getComputedStyle(code.querySelector(".k")).color,
                      getComputedStyle(code.querySelector(".nf")).color,
                      getComputedStyle(code).color]"""
    )
    assert len(set(colours)) == 3, colours
    link = answer.locator("a")
    expect(link).to_have_attribute("href", "https://docs.python.org/3/")
    expect(link).to_have_attribute("target", "_blank")
    expect(link).to_have_attribute("rel", re.compile(r"\bnoopener\b"))
    expect(answer.locator("strong")).to_have_text("more")
    screenshot(page, "markdown.png")
    # What the user typed is shown as typed, never as markdown.
    bubble = pane(page, "p1").locator(".row.user .bubble")
    expect(bubble).to_have_text("**how** do I fix 0 about calc.py")
    expect(bubble.locator("strong")).to_have_count(0)

    model.answer = lambda body: ANSWER  # enough context for the summary to be smaller
    converse(page, "p1", 3)
    compact(page, "p1")
    block = pane(page, "p1").locator(".compact-block")
    block.locator("summary").click()
    summary = block.locator(".summary-text.markdown")
    expect(summary.locator("h2")).to_have_text(["Objective: explain calc.py", "Files", "Next"])
    assert page.evaluate("window.__violations") == []


def test_a_large_paste_is_its_label_in_the_box_is_sent_whole_and_folds_in_the_list(
    web: Callable[..., WebServer], page: Page, model: Model, openai_server: OpenAIServer
) -> None:
    model.answer = lambda body: "read it"
    server = web()
    load(page, server)
    box = pane(page, "p1").locator("textarea.prompt")
    pasted = "\n".join(f"log line {n}" for n in range(1, 2001))
    box.fill("look at this: ")
    paste(page, box, pasted)
    label = paste_label(1, pasted)
    assert label == "[Pasted text #1 · 2,000 lines]"
    expect(box).to_have_value(f"look at this: {label}")
    wide = "w" * (PASTE_CHARS + 500)
    box.press_sequentially(" and ")
    paste(page, box, wide)
    second = paste_label(2, wide)
    assert second == "[Pasted text #2 · 2,500 characters]"
    expect(box).to_have_value(f"look at this: {label} and {second}")
    small = "two\nlines"  # under the threshold: pasted as it is
    box.press_sequentially(" ")
    paste(page, box, small)
    expect(box).to_have_value(f"look at this: {label} and {second} {small}")
    grown(page, "p1", lambda: box.press("Enter"), 2)
    whole = f"look at this: {pasted} and {wide} {small}"
    assert [f["text"] for f in sent(page) if f["type"] == "prompt"] == [whole]
    assert last_user(openai_server.bodies[-1]) == whole  # the model got every line
    expect(box).to_have_value("")

    def folded_as_it_should() -> None:
        fold = pane(page, "p1").locator(".row.user details.fold")
        expect(fold).to_have_count(1)
        head = ".pane[data-pane='p1'] .row.user .fold-head"
        lines = whole.split("\n")[:FOLDED_HEAD_LINES]
        assert text_of(page, head) == "\n".join(lines)
        expect(fold.locator(".fold-label")).to_have_text(paste_label(1, whole))
        expect(fold.locator(".fold-body")).to_be_hidden()
        fold.locator("summary").click()  # expanded: the whole message, the head gone
        expect(fold.locator(".fold-body")).to_be_visible()
        expect(fold.locator(".fold-head")).to_be_hidden()
        assert text_of(page, ".pane[data-pane='p1'] .row.user .fold-body") == whole
        fold.locator("summary").click()
        expect(fold.locator(".fold-body")).to_be_hidden()

    folded_as_it_should()
    # A short message is not folded.
    converse(page, "p1", 1, prefix="short")
    expect(pane(page, "p1").locator(".row.user details.fold")).to_have_count(1)
    # Resumed, the session folds the same way (the history comes folded from the server).
    session_id = session_of(page, "p1")
    page.locator("#new-chat").click()
    page.locator(f'.pane[data-pane="p1"]:not([data-session="{session_id}"])').wait_for()
    page.locator(f'#sessions .session[data-session="{session_id}"]').click()
    page.locator(f'.pane[data-pane="p1"][data-session="{session_id}"]').wait_for()
    folded_as_it_should()


def test_the_page_folds_pastes_by_the_server_s_numbers_not_a_copy(
    web: Callable[..., WebServer], page: Page, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's rule changed (5 lines, 100 characters): the page follows it at once."""
    monkeypatch.setattr("cairn.surfaces.web.frames.PASTE_LINES", 5)
    monkeypatch.setattr("cairn.surfaces.web.frames.PASTE_CHARS", 100)
    load(page, web())
    box = pane(page, "p1").locator("textarea.prompt")
    five, six = "\n".join("abcde"), "\n".join("abcdef")
    paste(page, box, five)
    expect(box).to_have_value(five)
    box.fill("")
    paste(page, box, six)
    expect(box).to_have_value("[Pasted text #1 · 6 lines]")
    box.fill("")
    paste(page, box, "x" * 101)
    expect(box).to_have_value("[Pasted text #1 · 101 characters]")


def test_the_page_s_paste_label_matches_the_python_rule(
    web: Callable[..., WebServer], page: Page
) -> None:
    load(page, web())
    texts = [
        "",
        "x",
        "\n".join(["a"] * PASTE_LINES),
        "\n".join(["a"] * (PASTE_LINES + 1)),
        "\n" * PASTE_LINES,
        "y" * PASTE_CHARS,
        "y" * (PASTE_CHARS + 1),
        "🙂" * PASTE_CHARS,  # characters as Python counts them, not UTF-16 units
        "🙂" * (PASTE_CHARS + 1),
        "\n".join(["b" * 300] * 10),
        "\n".join(["c"] * 123_456),
    ]
    rule = {"lines": PASTE_LINES, "chars": PASTE_CHARS}
    shown = page.evaluate(
        """async ([texts, rule]) => { const paste = await import('/static/paste.js');
           return texts.map((t, i) => [paste.isLargePaste(t, rule),
                                       paste.pasteLabel(i + 1, t, rule)]); }""",
        [texts, rule],
    )
    assert shown == [[is_large_paste(t), paste_label(n, t)] for n, t in enumerate(texts, 1)]


def test_at_390_px_the_sidebar_folds_behind_a_toggle_and_the_chat_gets_the_width(
    web: Callable[..., WebServer], page: Page, model: Model
) -> None:
    """Issue 29: at 390 px the sidebar kept ~255 px and the chat ~130 px, no way to hide it."""
    page.set_viewport_size({"width": 390, "height": 844})
    load(page, web())
    converse(page, "p1", 1, prefix="the first chat")
    first = session_of(page, "p1")
    messages = pane(page, "p1").locator(".messages").bounding_box()
    assert messages is not None and messages["width"] >= 360, messages
    screenshot(page, "narrow-390.png")
    sidebar, toggle = page.locator("#sidebar"), page.locator("#sidebar-toggle")
    expect(sidebar).to_be_hidden()
    expect(toggle).to_be_visible()
    expect(toggle).to_have_attribute("aria-expanded", "false")
    toggle.click()
    expect(sidebar).to_be_visible()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    page.locator("#new-chat").click()  # acts, and gives the chat its width back
    expect(sidebar).to_be_hidden()
    page.locator(f'.pane[data-pane="p1"]:not([data-session="{first}"])').wait_for()
    toggle.click()
    page.locator(f'#sessions .session[data-session="{first}"]').click()
    expect(sidebar).to_be_hidden()
    page.locator(f'.pane[data-pane="p1"][data-session="{first}"]').wait_for()
    toggle.click()
    expect(sidebar).to_be_visible()
    page.keyboard.press("Escape")
    expect(sidebar).to_be_hidden()
    # Wide again: the sidebar is always there, no toggle.
    page.set_viewport_size({"width": 1400, "height": 900})
    expect(sidebar).to_be_visible()
    expect(toggle).to_be_hidden()


def test_a_new_chat_is_listed_by_its_first_prompt_during_its_first_turn(
    web: Callable[..., WebServer], page: Page, model: Model
) -> None:
    """Issue 29: it said "(no prompt yet) · 0 messages" until the first turn ended."""
    load(page, web())
    gate = model.hold_answer()
    prompt = "slow: what does calc.py do?"
    submit(page, "p1", prompt)
    busy(page, "p1")
    current = page.locator("#sessions .session.current")
    expect(current.locator(".first-prompt")).to_have_text(prompt)
    expect(current.locator(".count")).to_have_text("1 message")
    expect(pane(page, "p1").locator(".pane-head .title")).to_have_text(prompt)
    assert "busy" in (pane(page, "p1").get_attribute("class") or "")  # still the first turn
    gate.set()
    idle(page, "p1")


#: The sidebar's items that look highlighted: bordered like the current session.
HIGHLIGHTED = """() => {
  const items = [...document.querySelectorAll("#sessions .session")];
  const current = document.querySelector("#sessions .session.current");
  const accent = getComputedStyle(current).borderTopColor;
  return items.filter((item) => getComputedStyle(item).borderTopColor === accent)
    .map((item) => item.dataset.session);
}"""


def test_in_a_second_tab_only_its_own_current_session_is_highlighted(
    web: Callable[..., WebServer], page: Page, model: Model
) -> None:
    """Issue 29: the second tab's click on the first tab's session is refused, and the
    item under the pointer was bordered like the current one: two highlighted."""
    server = web()
    load(page, server)
    converse(page, "p1", 1, prefix="the first tab")
    first = session_of(page, "p1")
    second = page.context.new_page()
    try:
        load(second, server)
        converse(second, "p1", 1, prefix="the second tab")
        own = session_of(second, "p1")
        other = second.locator(f'#sessions .session[data-session="{first}"]')
        other.click()  # open in the first tab: refused, the pointer stays on it
        expect(pane(second, "p1").locator(".note")).to_contain_text("open in another pane")
        assert session_of(second, "p1") == own
        expect(second.locator("#sessions .session.current")).to_have_count(1)
        assert second.evaluate(HIGHLIGHTED) == [own]
        assert page.evaluate(HIGHLIGHTED) == [first]
    finally:
        second.close()
