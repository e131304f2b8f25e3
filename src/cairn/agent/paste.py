"""Pasted blocks: when a prompt's text is a paste to fold, and its label.

One rule for every surface: a paste over ``PASTE_LINES`` lines or
``PASTE_CHARS`` characters shows as ``[Pasted text #1 · 2,000 lines]`` in the
prompt box, is sent whole, and a user message that long is shown folded in
the message list (its first lines and the label), so that a resumed session
folds it the same way.
"""

from __future__ import annotations

__all__ = ["FOLDED_HEAD_LINES", "PASTE_CHARS", "PASTE_LINES", "is_large_paste", "paste_label"]

#: A paste longer than this many lines is folded.
PASTE_LINES = 20
#: … or longer than this many characters (one long line counts too).
PASTE_CHARS = 2_000
#: The lines a folded message still shows above its label.
FOLDED_HEAD_LINES = 3


def _lines(text: str) -> int:
    return text.count("\n") + 1 if text else 0


def is_large_paste(text: str) -> bool:
    """True when ``text`` is long enough to be folded (a line count or a character count)."""
    return _lines(text) > PASTE_LINES or len(text) > PASTE_CHARS


def paste_label(number: int, text: str) -> str:
    """``[Pasted text #1 · 2,000 lines]`` (or ``· 4,500 characters`` for few long lines)."""
    lines = _lines(text)
    size = f"{lines:,} lines" if lines > PASTE_LINES else f"{len(text):,} characters"
    return f"[Pasted text #{number} · {size}]"
