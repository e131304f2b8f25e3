"""Seed 004 CLI story 压缩过程中的 CLI 流式尾部提示: the hint's tail, at every edge."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cairn.surfaces.tail import COMPACTING, TAIL_CHARS, compaction_hint, stream_tail


def test_the_tail_at_0_29_30_and_31_characters() -> None:
    assert stream_tail("") == ""
    assert stream_tail("a" * 29) == "a" * 29
    assert stream_tail("b" * 30) == "b" * 30
    assert stream_tail("c" + "d" * 30) == "…" + "d" * 30


def test_newlines_are_shown_as_backslash_n_and_count_as_one_character() -> None:
    assert stream_tail("line one\nline two") == "line one\\nline two"
    text = "x" * 10 + "\n" + "y" * 19  # 30 characters: not cut
    assert stream_tail(text) == "x" * 10 + "\\n" + "y" * 19
    assert stream_tail("z" + text) == "…" + "x" * 10 + "\\n" + "y" * 19
    assert stream_tail("a\r\nb") == "a\\nb"


def test_the_hint_is_compacting_alone_until_text_streams() -> None:
    assert compaction_hint("") == COMPACTING == "✻ Compacting"
    assert compaction_hint("Summary: the user") == "✻ Compacting Summary: the user"
    long = "The user asked to fix the rounding bug in invoice totals."
    assert compaction_hint(long) == "✻ Compacting …" + long[-30:]


@given(st.text())
def test_the_tail_is_one_line_and_ends_like_the_text(text: str) -> None:
    tail = stream_tail(text)
    assert "\n" not in tail
    kept = tail.removeprefix("…").replace("\\n", "\n")
    assert text.replace("\r\n", "\n").endswith(kept)
    assert tail.startswith("…") == (len(text) > TAIL_CHARS)
