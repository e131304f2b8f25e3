"""The YAML front matter of a skill file: its scalar fields and the body after it.

A small, strict subset of YAML — the part ``SKILL.md`` files use (plain,
quoted, folded and literal scalars, comments) — so that a skill's ``name``
and ``description`` read exactly as the author wrote them, without a YAML
dependency and without surprises (``>-`` is never shown raw).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class FrontMatter:
    """The scalar fields of a skill's YAML front matter, and the body after it."""

    fields: dict[str, str]
    body: str


def split_front_matter(text: str) -> FrontMatter:
    """Parse a ``---``-delimited YAML front matter block at the top of ``text``.

    Only top-level scalars are kept — plain, single- or double-quoted, and
    block scalars (``|``, ``>``, with ``-``/``+`` chomping) — so a
    ``description: >-`` yields its folded text, never the ``>-`` itself.
    Lists and nested mappings are skipped. Without a closing ``---`` (or
    ``...``) there is no front matter and the whole text is the body.
    """
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    if not lines or lines[0].rstrip() != "---":
        return FrontMatter({}, text)
    for end in range(1, len(lines)):
        if lines[end].rstrip() in ("---", "..."):
            break
    else:
        return FrontMatter({}, text)
    body = "\n".join(lines[end + 1 :])
    return FrontMatter(_parse_mapping(lines[1:end]), body.lstrip("\n"))


_KEY_LINE = re.compile(r"^([^\s#:][^:]*?)\s*:(?:[ \t]+(.*))?$")
_BLOCK_HEADER = re.compile(r"^([|>])(?:([1-9])([+-]?)|([+-])([1-9]?)|)[ \t]*(?:#.*)?$")


def _parse_mapping(lines: list[str]) -> dict[str, str]:
    fields: dict[str, str] = {}
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#") or line[0] in " \t":
            continue
        match = _KEY_LINE.match(line.rstrip())
        if match is None:
            continue
        start = i
        while i < n and (not lines[i].strip() or lines[i][0] in " \t"):
            i += 1
        key = match.group(1).strip().strip("\"'")
        value = _scalar((match.group(2) or "").strip(), lines[start:i])
        if value is not None:
            fields[key] = value
    return fields


def _scalar(rest: str, block: list[str]) -> str | None:
    header = _BLOCK_HEADER.match(rest)
    if header:
        indent = header.group(2) or header.group(5)
        chomp = header.group(3) or header.group(4) or ""
        return _block_scalar(header.group(1), int(indent) if indent else 0, chomp, block)
    if rest[:1] in ('"', "'"):
        return _quoted_scalar(rest, block)
    if rest[:1] in ("[", "{", "&", "*", "!"):
        return None  # flow collections, anchors, tags: not a plain string
    first = next((line.strip() for line in block if line.strip()), "")
    if not rest and (first.startswith("- ") or first == "-" or _KEY_LINE.match(first)):
        return None  # a list or a nested mapping
    rest = _strip_comment(rest)
    lines = [rest, *(_strip_comment(line.strip()) for line in block)]
    return _fold_flow_lines(lines).strip()


def _strip_comment(text: str) -> str:
    if text.startswith("#"):
        return ""
    position = text.find(" #")
    return text[:position].rstrip() if position >= 0 else text


def _fold_flow_lines(lines: list[str]) -> str:
    """Plain and quoted multi-line scalars: a line break is a space, a blank line a newline."""
    out = ""
    blanks = 0
    started = False
    for line in lines:
        if not line:
            blanks += 1
            continue
        if started:
            out += "\n" * blanks if blanks else " "
        out += line
        started = True
        blanks = 0
    return out


def _quoted_scalar(rest: str, block: list[str]) -> str:
    quote = rest[0]
    raw = "\n".join([rest[1:], *block])
    closing = _closing_quote(raw, quote)
    inner = raw if closing < 0 else raw[:closing]
    lines = inner.split("\n")
    stripped = [lines[0].rstrip()] + [line.strip() for line in lines[1:]]
    folded = _fold_flow_lines(stripped) if len(stripped) > 1 else inner
    if quote == "'":
        return folded.replace("''", "'")
    return _unescape_double(folded)


def _closing_quote(raw: str, quote: str) -> int:
    i = 0
    while i < len(raw):
        char = raw[i]
        if quote == '"' and char == "\\":
            i += 2
            continue
        if char == quote:
            if quote == "'" and raw[i + 1 : i + 2] == "'":
                i += 2
                continue
            return i
        i += 1
    return -1


_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "0": "\0",
    '"': '"',
    "\\": "\\",
    "/": "/",
    " ": " ",
    "e": "\x1b",
    "a": "\a",
    "b": "\b",
}


def _unescape_double(text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        token = match.group(1)
        if token[0] in "xuU":
            return chr(int(token[1:], 16))
        return _ESCAPES.get(token, token)

    return re.sub(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)", replace, text)


def _block_scalar(style: str, indent: int, chomp: str, block: list[str]) -> str:
    if not indent:
        indent = next((len(x) - len(x.lstrip(" ")) for x in block if x.strip()), 0)
    content = [
        (line[indent:] if not line[:indent].strip() else line.lstrip()) if line.strip() else ""
        for line in block
    ]
    trailing = 0
    while content and not content[-1]:
        content.pop()
        trailing += 1
    text = "\n".join(content) if style == "|" else _fold_block(content)
    if not text:
        return ""
    if chomp == "-":
        return text
    if chomp == "+":
        return text + "\n" * (trailing + 1)
    return text + "\n"


def _fold_block(lines: list[str]) -> str:
    """YAML folding: breaks between ordinary lines become spaces, blank lines newlines.

    Lines indented beyond the block (and the breaks around them) are kept.
    """
    out = ""
    previous: str | None = None
    blanks = 0
    for line in lines:
        if not line:
            blanks += 1
            continue
        if previous is None:
            out += "\n" * blanks
        else:
            more_indented = line[0] in " \t" or previous[0] in " \t"
            out += "\n" * (blanks + 1) if more_indented else ("\n" * blanks or " ")
        out += line
        previous = line
        blanks = 0
    return out
