"""Answers and compaction summaries as HTML the page may insert: markdown, highlighted, sanitized.

The text comes from the model (and, through it, from any file or web page a
tool read), so it is hostile: the page must never run anything it holds.
Two layers, each enough on its own for what it covers:

- ``markdown-it-py`` renders CommonMark plus tables and strikethrough with
  raw HTML **disabled** (``<script>``, ``<img onerror>`` stay text), images
  off (``![x](url)`` would load a URL; it shows as ``!`` and a link) and
  only absolute ``http``, ``https`` and ``mailto`` links (``javascript:``,
  ``data:``, relative ones stay text). Fenced code with a language Pygments
  knows is highlighted into ``<span class="…">`` tokens.
- ``nh3`` (ammonia) then keeps only an allow-list: the tags markdown makes,
  ``href`` on links (the same schemes; relative ones dropped), ``start`` on
  ordered lists, ammonia's harmless ``title`` and ``lang``, and classes only
  from Pygments' token names and the table alignments. No ``style``, no
  ``on*``, no ``id``; every link gets
  ``rel="noopener noreferrer nofollow"`` and ``target="_blank"``, so it never
  replaces the page that holds the token.

The page's Content-Security-Policy (``server``) is a third layer: even HTML
that slipped through could run no inline script and load nothing from
elsewhere. ``highlight_css`` is the stylesheet for the token classes, made
from Pygments at start-up, so no copy of it can fall out of step.
"""

from __future__ import annotations

import functools
import re

import nh3
from markdown_it import MarkdownIt
from markdown_it.token import Token
from pygments import highlight  # type: ignore[import-untyped,unused-ignore]
from pygments.formatters import HtmlFormatter  # type: ignore[import-untyped,unused-ignore]
from pygments.lexers import get_lexer_by_name  # type: ignore[import-untyped,unused-ignore]
from pygments.token import STANDARD_TYPES  # type: ignore[import-untyped,unused-ignore]
from pygments.util import ClassNotFound  # type: ignore[import-untyped,unused-ignore]

__all__ = ["LINK_SCHEMES", "highlight_css", "render_markdown", "sanitize"]

#: The only links an answer may hold: absolute, to the web or to mail.
LINK_SCHEMES = frozenset({"http", "https", "mailto"})
#: Code longer than this (characters) is shown unhighlighted: Pygments runs on the
#: server's event loop, and a pasted megabyte must not hold every pane up.
HIGHLIGHT_MAX = 50_000
#: Rendered texts kept, so a page opened again (or paged back) is not rendered twice.
CACHE_SIZE = 2_048
#: The Pygments style of the dark page.
STYLE = "github-dark"
#: What the highlight stylesheet's rules are scoped to: code blocks in rendered markdown.
SCOPE = ".markdown pre"

_TOKEN_CLASSES = frozenset(name for name in STANDARD_TYPES.values() if name)
_ALIGN_CLASSES = frozenset({"align-left", "align-center", "align-right"})
_TAGS = frozenset(
    {
        "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "s", "del",
        "code", "pre", "blockquote", "ul", "ol", "li", "table", "thead", "tbody", "tr",
        "th", "td", "a", "span",
    }
)  # fmt: skip
_ALLOWED_CLASSES = {
    "span": set(_TOKEN_CLASSES),
    "th": set(_ALIGN_CLASSES),
    "td": set(_ALIGN_CLASSES),
}
_ALIGN = re.compile(r"^text-align:(left|center|right)$")


def _link_allowed(url: str) -> bool:
    scheme, colon, _ = url.partition(":")
    return bool(colon) and scheme.strip().lower() in LINK_SCHEMES


def _highlighted(code: str, lang: str, _attrs: object) -> str:
    """Pygments' token spans for ``code``; ``""`` lets markdown-it escape it as it is."""
    if not lang or len(code) > HIGHLIGHT_MAX:
        return ""
    try:
        lexer = get_lexer_by_name(lang.split()[0], stripnl=False, ensurenl=False)
    except ClassNotFound:
        return ""
    return str(highlight(code, lexer, HtmlFormatter(nowrap=True)))


def _alignments_as_classes(state: object) -> None:
    """A table cell's ``style="text-align:…"`` (the one style markdown-it writes) as a
    class, since the sanitizer lets no ``style`` through."""
    tokens: list[Token] = getattr(state, "tokens", [])
    for token in tokens:
        if token.type in ("th_open", "td_open"):
            style = token.attrGet("style")
            if isinstance(style, str):
                token.attrs.pop("style", None)
                match = _ALIGN.match(style)
                if match:
                    token.attrSet("class", f"align-{match.group(1)}")


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "highlight": _highlighted})
    md.enable(["table", "strikethrough"])
    md.disable("image")
    md.validateLink = _link_allowed  # type: ignore[method-assign]
    md.core.ruler.push("cairn_align", _alignments_as_classes)
    return md


_MD = _parser()


def _keep_attribute(tag: str, attribute: str, value: str) -> str | None:
    # nh3 drops the schemes it does not know; a relative link (which would lead
    # to this server's own paths) is no answer's business either.
    if attribute == "href" and not _link_allowed(value):
        return None
    return value


def sanitize(html: str) -> str:
    """``html`` with only the allow-list left: what the page inserts as HTML."""
    return nh3.clean(
        html,
        tags=set(_TAGS),
        clean_content_tags={"script", "style"},
        attributes={"a": {"href"}, "ol": {"start"}},
        attribute_filter=_keep_attribute,
        url_schemes=set(LINK_SCHEMES),
        link_rel="noopener noreferrer nofollow",
        set_tag_attribute_values={"a": {"target": "_blank"}},
        allowed_classes=_ALLOWED_CLASSES,
        strip_comments=True,
    )


@functools.lru_cache(maxsize=CACHE_SIZE)
def render_markdown(text: str) -> str:
    """``text`` (markdown) as sanitized HTML (no blank line around it, so an answer of one
    paragraph reads as its words alone)."""
    return sanitize(_MD.render(text)).strip()


def highlight_css() -> str:
    """The rules that colour the highlighted tokens (and the code blocks' background)."""
    formatter = HtmlFormatter(style=STYLE)
    rules = [*formatter.get_background_style_defs(SCOPE), *formatter.get_token_style_defs(SCOPE)]
    return "\n".join(str(rule) for rule in rules) + "\n"
