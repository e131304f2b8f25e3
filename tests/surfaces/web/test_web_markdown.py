"""What the page is given to show a message, worked out on the server (issue 29):
answers and summaries as sanitized markdown (``cairn.surfaces.web.markdown``), a long
user message's fold by the shared paste rule, and the ``config`` frame that hands the
page that rule's numbers. The same payloads meet real Chromium in
``test_web_security.py``."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from cairn.agent.events import CompactBlockAdded, MessageAdded, MessageUpdated
from cairn.agent.paste import FOLDED_HEAD_LINES, PASTE_CHARS, PASTE_LINES, paste_label
from cairn.messages import KIND_COMPACT_SUMMARY, KIND_ERROR, Message, MessageMeta, assistant, user
from cairn.surfaces.web.frames import config_frame, event_frame, message_json
from cairn.surfaces.web.markdown import highlight_css, render_markdown, sanitize

#: Markdown (and HTML in it) that must never become anything that runs, loads or styles.
PAYLOADS = [
    "<img src=x onerror=alert(1)>",
    "<script>alert(1)</script>",
    "<svg onload=alert(1)></svg>",
    "<iframe src=javascript:alert(1)></iframe>",
    '<a href="javascript:alert(1)">raw link</a>',
    '<div style="position:fixed;inset:0">cover</div>',
    "<style>body { display: none }</style>",
    "[click](javascript:alert(1))",
    "[click](JaVaScRiPt:alert(1))",
    "[click](&#106;avascript:alert(1))",
    "[click](vbscript:msgbox(1))",
    "[click](data:text/html,<script>alert(1)</script>)",
    "[click](/ws)",
    "[click](//evil.example/x)",
    '[click](https://example.com "x\\" onmouseover=\\"alert(1)")',
    "<javascript:alert(1)>",
    "![x](https://evil.example/track.png)",
    '![x](x" onerror="alert(1))',
    '```"><img src=x onerror=alert(1)>\nx = 1\n```',
    "| a | b |\n|---|---|\n| <img src=x onerror=alert(1)> | [c](javascript:alert(1)) |",
    "<!-- comment --><details open ontoggle=alert(1)>x</details>",
]

#: Every tag the rendered HTML may hold; anything else is a payload that got through.
SAFE_TAGS = {
    *("p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "s", "del"),
    *("code", "pre", "blockquote", "ul", "ol", "li", "table", "thead", "tbody", "tr"),
    *("th", "td", "a", "span"),
}


class Elements(HTMLParser):
    """The elements of an HTML fragment, as a browser's parser would find them."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str | None]]] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, dict(attrs)))


def unsafe(html: str) -> list[str]:
    """What in ``html`` could run, load or restyle anything (empty: nothing)."""
    problems = []
    for tag, attrs in Elements(html).found:
        if tag not in SAFE_TAGS:
            problems.append(f"<{tag}>")
        for name, value in attrs.items():
            if name.startswith("on") or name in ("style", "src", "id", "srcdoc", "formaction"):
                problems.append(f"{tag}[{name}]")
            if name == "href" and not (value or "").startswith(("http://", "https://", "mailto:")):
                problems.append(f"{tag}[href={value}]")
        if tag == "a" and (
            attrs.get("target") != "_blank" or "noopener" not in (attrs.get("rel") or "")
        ):
            problems.append("a without noopener")
    return problems


@pytest.mark.parametrize("payload", PAYLOADS)
def test_no_payload_survives_rendering(payload: str) -> None:
    html = render_markdown(f"before\n\n{payload}\n\nafter")
    assert unsafe(html) == [], html
    assert "before" in html and "after" in html


def test_the_check_finds_what_it_looks_for() -> None:
    """``unsafe`` itself, on HTML that was never sanitized: a check that cannot fail is none."""
    assert unsafe('<img src=x onerror=alert(1)><a href="javascript:x">j</a><p style="c">') == [
        "<img>",
        "img[src]",
        "img[onerror]",
        "a[href=javascript:x]",
        "a without noopener",
        "p[style]",
    ]


def test_raw_html_is_shown_as_text_not_dropped() -> None:
    assert render_markdown("<b>bold?</b>") == "<p>&lt;b&gt;bold?&lt;/b&gt;</p>"


def test_the_sanitizer_alone_strips_what_markdown_never_makes() -> None:
    """The second layer on its own: HTML as a broken renderer might have made it."""
    cleaned = sanitize(
        '<p onclick="alert(1)" style="color:red" id="x">t</p><script>alert(1)</script>'
        '<img src=x onerror=alert(1)><a href="javascript:alert(1)">j</a><a href="/ws">r</a>'
        '<span class="k evil">k</span><iframe src="https://e.com"></iframe>'
    )
    assert cleaned.replace(' target="_blank"', "") == (
        '<p>t</p><a rel="noopener noreferrer nofollow">j</a>'
        '<a rel="noopener noreferrer nofollow">r</a><span class="k">k</span>'
    )
    assert unsafe(cleaned) == []


def test_links_open_apart_from_the_page_with_noopener() -> None:
    html = render_markdown("[docs](https://example.com/a?b=1) and <mailto:x@example.com>")
    assert html == (
        '<p><a href="https://example.com/a?b=1" target="_blank" '
        'rel="noopener noreferrer nofollow">docs</a> and '
        '<a href="mailto:x@example.com" target="_blank" '
        'rel="noopener noreferrer nofollow">mailto:x@example.com</a></p>'
    )


def test_code_blocks_tables_and_lists() -> None:
    html = render_markdown(
        "Steps:\n\n1. read\n2. fix\n\n- a\n- b\n\n"
        "| name | size |\n|:-----|-----:|\n| calc.py | 12 |\n\n"
        "```python\ndef add(a, b):\n    return a - b\n```\n\n"
        "```\nplain <code>\n```\n\n`inline`, **bold**, _em_, ~~gone~~"
    )
    assert "<ol>\n<li>read</li>\n<li>fix</li>\n</ol>" in html
    assert "<ul>\n<li>a</li>\n<li>b</li>\n</ul>" in html
    assert '<th class="align-left">name</th>' in html and '<td class="align-right">12</td>' in html
    # Highlighted: Pygments' token classes, no inline style.
    assert '<span class="k">def</span><span class="w"> </span><span class="nf">add</span>' in html
    assert '<span class="k">return</span>' in html
    assert "<pre><code>plain &lt;code&gt;\n</code></pre>" in html  # no language: escaped
    assert "<code>inline</code>, <strong>bold</strong>, <em>em</em>, <s>gone</s>" in html


def test_an_unknown_language_or_a_huge_block_is_escaped_not_highlighted() -> None:
    assert render_markdown("```nosuchlang\n<x>\n```") == "<pre><code>&lt;x&gt;\n</code></pre>"
    huge = "x = 1\n" * 10_000
    html = render_markdown(f"```python\n{huge}```")
    assert "<span" not in html and html.count("x = 1") == 10_000


def test_the_highlight_stylesheet_colours_the_token_classes_inside_rendered_code_only() -> None:
    css = highlight_css()
    assert ".markdown pre .k {" in css and ".markdown pre {" in css
    for line in css.splitlines():
        assert line.startswith(".markdown pre"), line  # nothing outside the code blocks


def test_answers_and_summaries_carry_html_other_messages_do_not() -> None:
    answer = message_json(assistant("**yes**"))
    assert answer["html"] == "<p><strong>yes</strong></p>"
    assert answer["content"] == "**yes**"  # the text goes too: copy, search, streaming
    summary = Message("user", "## Objective\nfix calc", meta=MessageMeta(kind=KIND_COMPACT_SUMMARY))
    assert message_json(summary)["html"] == "<h2>Objective</h2>\n<p>fix calc</p>"
    for plain in (
        user("**typed by the user**"),
        assistant(None),
        Message("assistant", "**error**", meta=MessageMeta(kind=KIND_ERROR)),
    ):
        assert "html" not in message_json(plain), plain


def test_a_long_user_message_is_folded_by_the_shared_rule() -> None:
    lines = "\n".join(f"line {n}" for n in range(1, 2001))
    folded = message_json(user(lines))
    assert folded["fold"] == {
        "label": "[Pasted text #1 · 2,000 lines]",
        "head": "line 1\nline 2\nline 3",
    }
    assert FOLDED_HEAD_LINES == 3
    wide = "w" * (PASTE_CHARS + 1)
    assert message_json(user(wide))["fold"] == {"label": paste_label(1, wide), "head": wide}
    # At the threshold, not over it: shown whole.
    assert "fold" not in message_json(user("\n".join(["x"] * PASTE_LINES)))
    assert "fold" not in message_json(user("y" * PASTE_CHARS))
    assert "fold" not in message_json(assistant(lines))  # answers are markdown, not folded


def test_events_carry_their_message_as_the_history_does() -> None:
    answer = assistant("`x`")
    frame = event_frame("p1", MessageAdded(answer))
    assert frame["type"] == "event" and frame["pane"] == "p1"
    assert frame["event"] == {"type": "messageAdded", "message": message_json(answer)}
    block = Message("user", "*s*", meta=MessageMeta(kind=KIND_COMPACT_SUMMARY))
    frame = event_frame("p2", CompactBlockAdded(block))
    assert frame["event"] == {"type": "compactBlockAdded", "block": message_json(block)}
    streamed = event_frame("p1", MessageUpdated(answer.id, "**so far"))
    assert "html" not in str(streamed)  # a streaming answer is plain text until it is whole


def test_the_config_frame_holds_the_paste_rule_s_numbers() -> None:
    assert config_frame() == {
        "type": "config",
        "paste": {"lines": PASTE_LINES, "chars": PASTE_CHARS, "headLines": FOLDED_HEAD_LINES},
    }
