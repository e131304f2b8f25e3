"""The tool-result budget: cap what one result, and one round of results, may add (DESIGN §5.4).

Before a tool result enters the conversation it is measured against two
character budgets that scale with the model's window: one per result and one
for all the results answering a single assistant message. An oversized result
is saved in full to ``<artifacts_dir>/tool-results/<call id>.txt`` and replaced
by a head + tail preview that names the file and says how to read the rest.

Nothing is lost: the full text is written to a temporary file, ``fsync``ed,
renamed into place and its directory ``fsync``ed *before* a shortened message
is built. When saving fails, ``ToolBudgetError`` is raised and no shortened
message is returned; the caller decides what to do with the full results.

Budgets are in characters, not tokens, so measuring stays a ``len``. A CJK
character costs up to one token where ASCII costs about a quarter, so a CJK
result at the budget may cost up to 4× the tokens the budget was scaled for;
that is accepted, since the budgets are a small share of the window.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from cairn.durable import write_durably
from cairn.errors import CairnError
from cairn.messages import JSONValue, Message
from cairn.tokens import TextKind, estimate_tokens

#: The estimate's ratio for prose: a budget in tokens becomes ``× 4`` characters.
CHARS_PER_TOKEN = 4
#: Per-result budget: 5 % of the window, in tokens, clamped (percent, min, max).
RESULT_PERCENT, RESULT_MIN_TOKENS, RESULT_MAX_TOKENS = 5, 1_000, 25_000
#: Per-round budget: 15 % of the window, in tokens, clamped.
ROUND_PERCENT, ROUND_MIN_TOKENS, ROUND_MAX_TOKENS = 15, 3_000, 75_000
#: The window assumed when the model's is unknown.
DEFAULT_WINDOW = 128_000

#: The smallest budget accepted: below it the marker line (about 250
#: characters plus the path) would leave no room for an excerpt.
MIN_BUDGET_CHARS = 1_000
#: The round pass never shrinks a preview below its marker plus this much
#: excerpt: a preview that shows nothing of the output is of little use.
MIN_EXCERPT_CHARS = 200
#: Subdirectory of the session's artifacts folder that holds the full outputs.
RESULTS_SUBDIR = "tool-results"

#: Longest sanitized call id used in a file name (names are limited to 255 bytes).
_MAX_STEM = 100
#: Room assumed for a ``-N`` uniqueness suffix when sizing a preview before its
#: file name is chosen; the excerpt slack absorbs anything longer.
_SUFFIX_ALLOWANCE = 6
#: Share of a cut within which a newline is looked for (the brief's ~10 %).
_LINE_SLACK_DIVISOR = 10
#: The newlines around the marker line.
_SEPARATORS = 2

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class ToolBudgetError(CairnError, OSError):
    """A full tool result could not be saved, so it was not shortened.

    An ``OSError`` so that callers handling I/O failures catch it with the rest;
    ``errno`` is the underlying error's and ``filename`` the path that failed.
    """


@dataclass(frozen=True, slots=True)
class ToolBudget:
    """Character budgets for tool results."""

    result_chars: int  # per tool result
    round_chars: int  # all results answering one assistant message together

    def __post_init__(self) -> None:
        for name in ("result_chars", "round_chars"):
            value = getattr(self, name)
            if value < MIN_BUDGET_CHARS:
                raise ValueError(f"{name} must be at least {MIN_BUDGET_CHARS}, got {value}")


def tool_budget_for(window: int | None) -> ToolBudget:
    """Scale with the window: result = clamp(window × 0.05 tokens, 1_000, 25_000) × 4 chars;
    round = clamp(window × 0.15 tokens, 3_000, 75_000) × 4 chars. Unknown window (None): use a
    128k window's figures."""
    if window is None:
        window = DEFAULT_WINDOW
    if window < 1:
        raise ValueError(f"the context window must be positive, got {window}")
    # Integer percentages: the figures are exact, with no float rounding at the edges.
    result = _clamp(window * RESULT_PERCENT // 100, RESULT_MIN_TOKENS, RESULT_MAX_TOKENS)
    round_ = _clamp(window * ROUND_PERCENT // 100, ROUND_MIN_TOKENS, ROUND_MAX_TOKENS)
    return ToolBudget(result * CHARS_PER_TOKEN, round_ * CHARS_PER_TOKEN)


def _clamp(value: int, low: int, high: int) -> int:
    return min(max(value, low), high)


def apply_tool_budget(
    results: Sequence[Message], budget: ToolBudget, artifacts_dir: Path
) -> list[Message]:
    """Return the results (same order, same ids, same tool_call_id, name and meta) with every
    oversized one replaced by a preview; unchanged messages are returned as the same objects.

    Only ``tool`` messages with string content are budgeted. Content made of
    parts (images) is left alone but its text still counts toward the round;
    so does a result already shortened (``full_output_path`` in its extra),
    which is never shortened twice. Other roles pass through and do not count.

    The round pass shrinks the largest results first: every result above one
    common cap comes down to it (the largest cap that fits), so equal results
    are treated alike and the outcome depends only on the input. It cannot
    go below a marker plus ``MIN_EXCERPT_CHARS`` per result, so a round of very
    many results may still exceed ``round_chars``; the per-result budget is
    never exceeded.

    Raises ``ToolBudgetError`` when a full output cannot be saved; files saved
    for earlier results of the same call stay on disk.
    """
    limits = _plan(results, budget, artifacts_dir)
    if not limits:
        return list(results)
    directory = _results_dir(artifacts_dir)
    out = list(results)
    # Save every full output first: a failure then leaves no message shortened.
    saved: dict[int, Path] = {}
    for index in sorted(limits):
        message = results[index]
        path = _unique_path(directory, _stem(message))
        text = message.text
        # Check the marker fits before writing, so an impossible preview leaves no file.
        _room(text, limits[index], path)
        _save(path, text.encode("utf-8", "surrogatepass"))
        saved[index] = path
    for index, path in saved.items():
        message = results[index]
        text = message.text
        extra: dict[str, JSONValue] = {
            **message.meta.extra,
            "full_output_path": str(path),
            "full_output_chars": len(text),
        }
        out[index] = replace(
            message,
            content=_preview(text, limits[index], path),
            meta=replace(message.meta, extra=extra),
        )
    return out


def _plan(results: Sequence[Message], budget: ToolBudget, artifacts_dir: Path) -> dict[int, int]:
    """Map the index of every result to shorten to its preview's character limit."""
    directory = _results_dir(artifacts_dir)
    fixed = 0  # characters the round pass cannot reduce
    sizes: dict[int, int] = {}  # budgetable result → size after the per-result pass
    floors: dict[int, int] = {}  # budgetable result → smallest useful preview
    for index, message in enumerate(results):
        if message.role != "tool":
            continue
        text = message.text
        if not isinstance(message.content, str) or "full_output_path" in message.meta.extra:
            fixed += len(text)
            continue
        sizes[index] = min(len(text), budget.result_chars)
        # Sized with the file name before its uniqueness suffix, plus an allowance for one.
        path_chars = len(str(directory / f"{_stem(message)}.txt")) + _SUFFIX_ALLOWANCE
        floor = _marker_chars(text, path_chars) + _SEPARATORS + MIN_EXCERPT_CHARS
        floors[index] = min(floor, budget.result_chars)
    limits = {i: size for i, size in sizes.items() if size < len(results[i].text)}
    if fixed + sum(sizes.values()) <= budget.round_chars:
        return limits

    def shrunk(index: int, cap: int) -> int:
        size = sizes[index]
        return size if size <= cap else max(cap, min(floors[index], size))

    def total(cap: int) -> int:
        return fixed + sum(shrunk(i, cap) for i in sizes)

    # The largest cap that fits; ``total`` grows with the cap, so bisect. When
    # even a cap of 0 does not fit, every result goes down to its floor.
    low, high = 0, max(sizes.values(), default=0)
    while low < high:
        mid = (low + high + 1) // 2
        if total(mid) <= budget.round_chars:
            low = mid
        else:
            high = mid - 1
    for index in sizes:
        limit = shrunk(index, low)
        if limit < len(results[index].text):
            limits[index] = limit
    return limits


# ---------------------------------------------------------------------------
# The preview


def _preview(text: str, limit: int, path: Path) -> str:
    """Head (about ⅔) + marker line + tail (about ⅓) of ``text``, at most ``limit`` characters.

    Cuts move to a line boundary when a newline lies within about 10 % of the
    cut, so neither part ends or starts mid-line; they only ever move inward,
    so the budget holds.
    """
    assert limit < len(text), "only a text longer than its limit is previewed"
    room = _room(text, limit, path)
    size = len(text)
    head_room = room * 2 // 3
    tail_room = room - head_room
    head_end = _head_cut(text, head_room)
    tail_start = _tail_cut(text, size - tail_room)
    head, tail = text[:head_end], text[tail_start:]
    parts = [head]
    if head and not head.endswith("\n"):
        parts.append("\n")
    parts.append(_marker(size - len(head) - len(tail), text, str(path)))
    if tail:
        parts.extend(("\n", tail))
    return "".join(parts)


def _room(text: str, limit: int, path: Path) -> int:
    """Characters left for head and tail once the marker and its newlines are counted."""
    # Sized with the omitted count at its largest (the whole text), so the real
    # marker, whose count is smaller, can only be shorter.
    room = limit - _marker_chars(text, len(str(path))) - _SEPARATORS
    if room < 0:
        raise ToolBudgetError(
            errno.ENAMETOOLONG,
            f"a preview of {limit} characters cannot quote where the full tool result is saved",
            str(path),
        )
    return room


def _marker(omitted: int, text: str, path: str) -> str:
    tokens = estimate_tokens(text, _kind(text))
    return (
        f"[… {omitted} characters omitted; the full output ({len(text)} characters, "
        f"~{tokens} tokens) is saved at {path}. Read it with read_file, using "
        "offset/limit to page through it …]"
    )


def _marker_chars(text: str, path_chars: int) -> int:
    return len(_marker(len(text), text, "")) + path_chars


def _kind(text: str) -> TextKind:
    # Same rule as ``estimate_message_tokens``: a tool result that is a JSON document.
    return "json" if text.lstrip()[:1] in ("{", "[") else "text"


def _head_cut(text: str, end: int) -> int:
    """Where the head ends: ``end``, or just after a newline up to 10 % before it."""
    if end == 0 or text[end - 1] == "\n" or text[end] == "\n":
        return end  # already a line boundary
    newline = text.rfind("\n", end - end // _LINE_SLACK_DIVISOR, end)
    return newline + 1 if newline >= 0 else end


def _tail_cut(text: str, start: int) -> int:
    """Where the tail starts: ``start``, or just after a newline up to 10 % after it."""
    size = len(text)
    if start >= size or text[start - 1] == "\n":
        return start  # already a line start (``start`` > 0: the head comes first)
    newline = text.find("\n", start, start + (size - start) // _LINE_SLACK_DIVISOR)
    return newline + 1 if newline >= 0 else start


# ---------------------------------------------------------------------------
# Saving


def _results_dir(artifacts_dir: Path) -> Path:
    # Absolute, because the marker must tell the model a path that works from anywhere.
    return (artifacts_dir / RESULTS_SUBDIR).absolute()


def _stem(message: Message) -> str:
    """A file-name stem from the call id: only ``[A-Za-z0-9._-]``, never hidden or an option."""
    raw = message.tool_call_id or message.id
    stem = _UNSAFE.sub("_", raw)[:_MAX_STEM].lstrip(".-")
    return stem or "result"


def _unique_path(directory: Path, stem: str) -> Path:
    """``<stem>.txt``, or ``<stem>-2.txt`` and so on when that name is in use.

    Each file is written before the next name is chosen, so results of one
    call that share an id get distinct names; one writer per session (DESIGN
    §6) means no one else creates names here between this check and the rename.
    """
    number = 1
    while True:
        name = f"{stem}.txt" if number == 1 else f"{stem}-{number}.txt"
        candidate = directory / name
        if not (candidate.exists() or candidate.is_symlink()):
            return candidate
        number += 1


def _save(path: Path, data: bytes) -> None:
    """``write_durably``, its failure a ``ToolBudgetError`` naming ``path``."""
    try:
        write_durably(path, data)
    except OSError as exc:
        raise _save_error(path, exc) from exc


def _save_error(path: Path, exc: OSError) -> ToolBudgetError:
    reason = exc.strerror or str(exc)
    return ToolBudgetError(
        exc.errno or errno.EIO, f"could not save the full tool result ({reason})", str(path)
    )
