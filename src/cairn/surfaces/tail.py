"""The one-line hints every surface shows while text streams (seed 004, DESIGN §8).

Under the message list, while a compaction runs, a surface shows
``✻ Compacting`` and, once the fork streams text, the last 30 characters of
it: unchanged when it is 30 characters or fewer, otherwise ``…`` and the last
30, with newlines shown as ``\\n`` so the hint stays on one line. The main
response's spinner uses the same tail. The terminal, the editor and the
browser all take it from here, so they agree to the character.
"""

from __future__ import annotations

__all__ = ["COMPACTING", "TAIL_CHARS", "compaction_hint", "stream_tail"]

#: Characters of streamed text a hint shows.
TAIL_CHARS = 30
COMPACTING = "✻ Compacting"


def stream_tail(text: str, limit: int = TAIL_CHARS) -> str:
    """The last ``limit`` characters of ``text``, ``…``-prefixed when cut, newlines as ``\\n``.

    The cut is made on the text itself, before newlines are spelled out, so a
    newline counts as one character, as the user typed or the model wrote it.
    """
    shown = text if len(text) <= limit else "…" + text[-limit:]
    return shown.replace("\r\n", "\n").replace("\n", "\\n")


def compaction_hint(streamed: str) -> str:
    """``✻ Compacting``, then the tail of the fork's text once it has streamed any."""
    return f"{COMPACTING} {stream_tail(streamed)}" if streamed else COMPACTING
