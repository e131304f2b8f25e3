"""The pasted-block rule every surface folds by."""

from __future__ import annotations

from cairn.agent.paste import PASTE_CHARS, PASTE_LINES, is_large_paste, paste_label


def test_a_paste_over_twenty_lines_or_two_thousand_characters_is_folded() -> None:
    assert not is_large_paste("\n".join(["x"] * PASTE_LINES))
    assert is_large_paste("\n".join(["x"] * (PASTE_LINES + 1)))
    assert not is_large_paste("y" * PASTE_CHARS)
    assert is_large_paste("y" * (PASTE_CHARS + 1))
    assert not is_large_paste("")


def test_the_label_counts_lines_with_separators_or_characters_for_few_long_lines() -> None:
    assert paste_label(1, "\n".join(["a"] * 2000)) == "[Pasted text #1 · 2,000 lines]"
    assert paste_label(2, "b" * 4500) == "[Pasted text #2 · 4,500 characters]"
