"""The bounded active-task checkpoint: the user's own words across a compaction.

Both the deterministic fallback and the LLM summarizer put it in the compact
block, after the ledger (``cairn.context.ledger.build_compact_block``). What
it keeps, within a bound (DESIGN §1, "the active-task checkpoint"):

- the first user message (the original objective) and the latest one,
  verbatim;
- the user's constraints — lines that state a rule (``is_constraint_line``) —
  verbatim, from the messages the checkpoint does not show whole, within a
  quarter of the cap;
- older user messages verbatim, newest first, while the cap allows; the rest
  are left out with one line that says how many and that the transcript
  keeps them;
- an oversized message (a paste, an IDE selection, a log: more than a quarter
  of the cap) is saved in full to ``<artifacts_dir>/user-messages/<id>.txt``
  and shown as head + tail + a marker naming the file.

The entries are kept in ``meta.extra["active_task"]`` so the next compaction
carries them over exactly — already bounded, never re-saved — without
parsing its own output. Same input, same block, byte for byte.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated

from pydantic import Field, StrictBool, StrictInt

from cairn.codec import Codec
from cairn.durable import write_durably
from cairn.messages import KIND_COMPACT_SUMMARY, JSONValue, Message
from cairn.tokens import estimate_text_tokens

#: Where a compact block keeps the checkpoint's entries (``meta.extra``).
ACTIVE_TASK_KEY = "active_task"

#: The checkpoint's default share of the input budget (``CompactionConfig.checkpoint_share``).
DEFAULT_CHECKPOINT_SHARE = 0.15
#: Below this cap the markers and tags would leave no room for the user's words.
MIN_CHECKPOINT_TOKENS = 768
#: Half the 50,000-token ceiling of any replacement (DESIGN §5.5, §5.6).
MAX_CHECKPOINT_TOKENS = 25_000
#: A message above ``cap // OVERSIZED_DIVISOR`` tokens is oversized: one such
#: message would crowd out the rest of the checkpoint, and a message that big
#: is material (a paste, a selection, a log) more than an instruction.
OVERSIZED_DIVISOR = 4
#: An oversized message keeps ``cap // EXCERPT_DIVISOR`` tokens of its text:
#: head 75 %, tail 25 % (the start says what it is, the end how it finishes).
EXCERPT_DIVISOR = 8
HEAD_NUM, HEAD_DEN = 3, 4
#: All constraint lines together take at most ``cap // CONSTRAINTS_DIVISOR``,
#: and those of one oversized message at most ``cap // PASTE_CONSTRAINTS_DIVISOR``:
#: a pasted document's "must" lines are its content, already saved in full,
#: and should not crowd out the user's own older messages.
CONSTRAINTS_DIVISOR = 4
PASTE_CONSTRAINTS_DIVISOR = 16
#: A constraint is a line (or, in a long line, a sentence) of at most this many
#: tokens; a longer sentence is cut. Rules are sentences, not pastes.
CONSTRAINT_LINE_TOKENS = 80
#: Where oversized user messages are saved, under the session's folder.
USER_MESSAGES_SUBDIR = "user-messages"

#: English and Chinese words that state a rule. English: whole words, any case
#: (``only`` and ``keep`` included: "only touch src/", "keep the API").
#: Chinese: 必须 (must), 不要 (don't; not 别, part of too many other words),
#: 禁止 (forbidden), 不能/不得/不许/不允许 (may not), 只 (only; not 只是 "merely"),
#: 务必/一定要 (be sure to), 保持/保留 (keep), 避免 (avoid), 勿 (do not).
_CONSTRAINT = re.compile(
    r"\b(?:must|mustn['’]?t|never|always|don['’]?t|do\s+not"
    r"|only|without|keep|avoid|ensure|make\s+sure|should(?:n['’]?t)?|cannot|can['’]?t)\b"
    r"|必须|不要|禁止|不能|不得|不许|不允许|务必|一定要|保持|保留|避免|勿|只(?!是)",
    re.IGNORECASE,
)
#: A sentence ends at ``.!?;`` before a space (not inside ``a.py``) or at a CJK stop.
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|(?<=[。！？；])\s*")
#: A newline this close to a cut (share of the kept text) moves the cut onto it.
_LINE_SLACK_DIVISOR = 10
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_MAX_STEM = 100
#: The widest count the omitted line may show, for sizing it before it is known.
_WIDE_COUNT = 10**9
_OPEN, _CLOSE = "<active-task-checkpoint>", "</active-task-checkpoint>"


# ---------------------------------------------------------------------------
# Checkpoint entries


@dataclass(frozen=True, slots=True)
class CheckpointEntry:
    """One user message of the active task, as the checkpoint holds it."""

    id: str  # the message's id: names its saved file, identifies it across compactions
    number: Annotated[StrictInt, Field(alias="n")]  # its place among the user messages, from 1
    #: The message verbatim, or (``oversized``) head + marker + tail; ``None``:
    #: left out, only its ``constraints`` are kept.
    text: str | None
    oversized: StrictBool = False
    saved: str | None = None  # the file holding the full text of an oversized message
    #: Constraint lines of the full text, verbatim, kept because ``text`` is
    #: not the whole message (a verbatim entry's constraints are in its text).
    constraints: tuple[str, ...] = ()

    @property
    def verbatim(self) -> bool:
        return self.text is not None and not self.oversized

    def to_json(self) -> dict[str, JSONValue]:
        data: dict[str, JSONValue] = _ENTRY_CODEC.dump(self)
        return data

    @staticmethod
    def from_json(raw: JSONValue, number: int) -> CheckpointEntry | None:
        """An entry carried by a compact block; a plain string is the old format."""
        if isinstance(raw, str):
            digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:16]
            return CheckpointEntry(f"carried-{digest}", number, raw)
        try:
            entry = _ENTRY_CODEC.load(raw)
        except _MalformedEntryError:
            return None
        # Only a shown text can be a cut one.
        return replace(entry, oversized=False) if entry.text is None else entry


class _MalformedEntryError(ValueError):
    """A carried entry of the wrong shape: the next compaction rebuilds it from the messages."""


_ENTRY_CODEC: Codec[CheckpointEntry] = Codec(
    CheckpointEntry, error=_MalformedEntryError, what="active-task entry", by_alias=True
)


@dataclass(frozen=True, slots=True)
class ActiveTask:
    """The bounded active-task checkpoint: what the compact block carries of the user's words."""

    entries: tuple[CheckpointEntry, ...] = ()  # chronological
    total: int = 0  # user messages in the task so far, left-out ones included
    dropped_constraints: int = 0  # constraint lines that did not fit this time

    @property
    def left_out(self) -> int:
        """User messages whose text the checkpoint does not show (wholly or as a stub)."""
        return self.total - sum(e.text is not None for e in self.entries)

    @property
    def first(self) -> CheckpointEntry | None:
        return next((e for e in self.entries if e.text is not None), None)

    @property
    def latest(self) -> CheckpointEntry | None:
        return self.entries[-1] if self.entries and self.entries[-1].text is not None else None

    def to_json(self) -> list[JSONValue]:
        return [e.to_json() for e in self.entries]

    def render(self) -> str:
        if not self.entries:
            return ""
        return "\n".join((_OPEN, *_pieces(self), _CLOSE))

    def tokens(self) -> int:
        return estimate_text_tokens(self.render())


def _pieces(task: ActiveTask) -> list[str]:
    """The checkpoint's elements in order; the omitted line sits where the first gap is."""
    shown = {e.number for e in task.entries if e.text is not None}
    gap = next((n for n in range(1, task.total + 1) if n not in shown), None)
    pieces: list[str] = []
    pending = task.left_out > 0 or task.dropped_constraints > 0
    for entry in task.entries:
        if pending and gap is not None and entry.number > gap:
            pieces.append(_omitted_line(task.left_out, task.dropped_constraints))
            pending = False
        pieces.extend(_entry_pieces(entry, entry.constraints))
    if pending:
        pieces.append(_omitted_line(task.left_out, task.dropped_constraints))
    return pieces


def _entry_pieces(entry: CheckpointEntry, constraints: Sequence[str]) -> list[str]:
    pieces = []
    if entry.text is not None:
        pieces.append(f'<user-message index="{entry.number}">\n{entry.text}\n</user-message>')
    if constraints:
        pieces.append(_constraints_piece(entry.number, constraints))
    return pieces


def _constraints_piece(number: int, lines: Sequence[str]) -> str:
    body = "\n".join(lines)
    return f'<user-constraints index="{number}">\n{body}\n</user-constraints>'


def _omitted_line(messages: int, lines: int) -> str:
    parts = [f"{messages} earlier user message(s) left out here"] if messages else []
    if lines:
        parts.append(f"{lines} constraint line(s) that did not fit")
    return f"[{', and '.join(parts)}; the full session transcript keeps them.]"


def _cost(piece: str) -> int:
    # With its separator: the sum over pieces bounds the joined text from above.
    return estimate_text_tokens(piece + "\n")


# ---------------------------------------------------------------------------
# Pure rules


def checkpoint_cap(requested: int | None, input_budget: int) -> int:
    """The checkpoint's cap in estimated tokens.

    ``requested`` (the pipeline's ``checkpoint_share`` × input budget), else
    ``DEFAULT_CHECKPOINT_SHARE`` of ``input_budget``; clamped to
    [``MIN_CHECKPOINT_TOKENS``, ``MAX_CHECKPOINT_TOKENS``].
    """
    cap = requested if requested is not None else int(input_budget * DEFAULT_CHECKPOINT_SHARE)
    return min(MAX_CHECKPOINT_TOKENS, max(MIN_CHECKPOINT_TOKENS, cap))


def is_constraint_line(line: str) -> bool:
    """Whether ``line`` states a rule: must / must not / never / always / don't /
    do not / only / without / keep / avoid / ensure / should / cannot …, or
    必须 / 不要 / 禁止 / 不能 / 不得 / 只 / 务必 / 保持 / 避免 / 勿 …"""
    return _CONSTRAINT.search(line) is not None


def constraint_lines(text: str) -> list[str]:
    """The rules ``text`` states, verbatim, in order, each at most ``CONSTRAINT_LINE_TOKENS``.

    A line is a unit; a line too long to be one rule is split into its
    sentences, and only a sentence still too long is cut (with ``…``).
    Duplicates are kept once.
    """
    found: list[str] = []
    for raw in text.split("\n"):
        line = raw.strip()
        if not line or not is_constraint_line(line):
            continue
        if estimate_text_tokens(line) <= CONSTRAINT_LINE_TOKENS:
            found.append(line)
            continue
        for sentence in _SENTENCE_END.split(line):
            sentence = sentence.strip()
            if sentence and is_constraint_line(sentence):
                found.append(_fit_sentence(sentence))
    return list(dict.fromkeys(found))


def _fit_sentence(sentence: str) -> str:
    if estimate_text_tokens(sentence) <= CONSTRAINT_LINE_TOKENS:
        return sentence
    return sentence[: _head_chars(sentence, CONSTRAINT_LINE_TOKENS - 1)].rstrip() + "…"


def is_oversized(text: str, cap: int) -> bool:
    """Whether a message takes more than a quarter of the checkpoint's cap."""
    return estimate_text_tokens(text) > cap // OVERSIZED_DIVISOR


def saved_message_path(artifacts_dir: Path, message_id: str) -> Path:
    """``<artifacts_dir>/user-messages/<id>.txt``: deterministic, a safe file name.

    An id that needs sanitizing gets a hash of the raw id appended, so two
    ids never share a file.
    """
    stem = _UNSAFE.sub("_", message_id)[:_MAX_STEM].lstrip(".-") or "message"
    if stem != message_id:
        stem += "-" + hashlib.sha256(message_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    # Absolute, because the marker must name a path that works from anywhere.
    return (artifacts_dir / USER_MESSAGES_SUBDIR / f"{stem}.txt").absolute()


def stub_text(text: str, cap: int, saved: Path | None) -> str:
    """Head + marker + tail of an oversized message, ``cap // EXCERPT_DIVISOR`` tokens of text."""
    excerpt = cap // EXCERPT_DIVISOR
    head_tokens = excerpt * HEAD_NUM // HEAD_DEN
    head_end = _snap_head(text, _head_chars(text, head_tokens))
    tail_start = len(text) - _tail_chars(text, excerpt - head_tokens)
    tail_start = _snap_tail(text, max(head_end, tail_start))
    head, tail = text[:head_end], text[tail_start:]
    omitted = len(text) - len(head) - len(tail)
    tokens = estimate_text_tokens(text)
    if saved is not None:
        where = (
            f"the full message ({len(text):,} characters, ~{tokens:,} tokens) is saved at "
            f"{saved}; read it with read_file, using offset/limit to page through it"
        )
    else:
        where = (
            f"the full message ({len(text):,} characters, ~{tokens:,} tokens) is in the "
            "session transcript"
        )
    marker = f"[… {omitted:,} characters left out here; {where} …]"
    return "\n".join(part for part in (head.rstrip("\n"), marker, tail.lstrip("\n")) if part)


def _head_chars(text: str, tokens: int) -> int:
    """The longest prefix of ``text`` within ``tokens`` estimated tokens (binary search)."""
    low, high = 0, len(text)
    while low < high:
        mid = (low + high + 1) // 2
        if estimate_text_tokens(text[:mid]) <= tokens:
            low = mid
        else:
            high = mid - 1
    return low


def _tail_chars(text: str, tokens: int) -> int:
    low, high = 0, len(text)
    while low < high:
        mid = (low + high + 1) // 2
        if estimate_text_tokens(text[len(text) - mid :]) <= tokens:
            low = mid
        else:
            high = mid - 1
    return low


def _snap_head(text: str, end: int) -> int:
    """Move the head's end back onto a line end within 10 % of it (only ever shorter)."""
    newline = text.rfind("\n", end - end // _LINE_SLACK_DIVISOR, end)
    return newline + 1 if newline >= 0 and end < len(text) else end


def _snap_tail(text: str, start: int) -> int:
    """Move the tail's start forward onto a line start within 10 % of it (only ever shorter)."""
    if start <= 0 or start >= len(text) or text[start - 1] == "\n":
        return start
    newline = text.find("\n", start, start + (len(text) - start) // _LINE_SLACK_DIVISOR)
    return newline + 1 if newline >= 0 else start


# ---------------------------------------------------------------------------
# Building the checkpoint


def active_task_of(
    messages: Sequence[Message],
    *,
    cap_tokens: int | None,
    input_budget: int,
    artifacts_dir: Path | None = None,
) -> ActiveTask:
    """The bounded active-task checkpoint of ``messages`` (an API view).

    Its candidates are the entries a previous compact block carried, then
    every user message the user wrote since (host-written messages excluded;
    a message already carried — the same id, e.g. in a kept tail — is not
    added again). Rendered, it takes at most ``checkpoint_cap(cap_tokens,
    input_budget)`` estimated tokens, unless its mandatory part — the first
    and latest messages (each bounded by the oversize rule), the framing and
    the constraints' reserve — is bigger on its own.

    Oversized messages whose stub is shown are saved under ``artifacts_dir``
    (once: an existing file is never rewritten). When saving fails, or
    without ``artifacts_dir``, the stub says the transcript keeps the text.
    """
    cap = checkpoint_cap(cap_tokens, input_budget)
    candidates, total = _candidates(messages)
    full: dict[str, str] = {}  # oversized message id → its full text, until it is saved
    bounded = [_bounded(e, cap, artifacts_dir, full) for e in candidates]
    task = _select(bounded, total, cap)
    return replace(task, entries=tuple(_save(e, cap, full.get(e.id)) for e in task.entries))


def _candidates(messages: Iterable[Message]) -> tuple[list[CheckpointEntry], int]:
    entries: list[CheckpointEntry] = []
    seen: set[str] = set()
    total = 0
    for message in messages:
        if message.meta.kind == KIND_COMPACT_SUMMARY:
            carried = message.meta.extra.get(ACTIVE_TASK_KEY)
            if not isinstance(carried, list):
                continue
            for raw in carried:
                entry = CheckpointEntry.from_json(raw, total + 1)
                if entry is None or entry.id in seen:
                    continue
                # Numbers only grow: a malformed carry cannot reorder the task.
                entry = replace(entry, number=max(entry.number, total + 1))
                entries.append(entry)
                seen.add(entry.id)
                total = entry.number
        elif message.role == "user" and not message.meta.synthetic and message.text.strip():
            if message.id in seen:
                continue
            total += 1
            entries.append(CheckpointEntry(message.id, total, message.text))
            seen.add(message.id)
    return entries, total


def _bounded(
    entry: CheckpointEntry, cap: int, artifacts_dir: Path | None, full: dict[str, str]
) -> CheckpointEntry:
    """A whole message too big for the checkpoint becomes its stub; its full text goes to ``full``.

    A carried stub is already bounded and is left as it is.
    """
    text = entry.text
    if not entry.verbatim or text is None or not is_oversized(text, cap):
        return entry
    saved = saved_message_path(artifacts_dir, entry.id) if artifacts_dir is not None else None
    full[entry.id] = text
    return CheckpointEntry(
        entry.id,
        entry.number,
        stub_text(text, cap, saved),
        oversized=True,
        saved=str(saved) if saved is not None else None,
        constraints=tuple(constraint_lines(text)),
    )


def _own_constraints(entry: CheckpointEntry) -> tuple[str, ...]:
    """The rules stated in the message: from its text when whole, else as carried."""
    if entry.verbatim and entry.text is not None:
        return tuple(constraint_lines(entry.text))
    return entry.constraints


def _select(entries: Sequence[CheckpointEntry], total: int, cap: int) -> ActiveTask:
    """First and latest always; a reserve for constraints; older messages newest first."""
    if not entries:
        return ActiveTask((), total)
    first, latest = entries[0], entries[-1]

    def text_cost(entry: CheckpointEntry) -> int:
        return sum(_cost(p) for p in _entry_pieces(entry, ()))

    framing = _cost(_OPEN) + _cost(_CLOSE) + _cost(_omitted_line(_WIDE_COUNT, _WIDE_COUNT))
    kept: set[str] = {first.id, latest.id}
    room = cap - framing - sum(text_cost(e) for e in {first.id: first, latest.id: latest}.values())
    # Sized as if every other message were left out: the most constraints there can be.
    budget = cap // CONSTRAINTS_DIVISOR
    everyone = [(e, _own_constraints(e)) for e in entries if not (e.verbatim and e.id in kept)]
    per_paste = cap // PASTE_CONSTRAINTS_DIVISOR
    reserve = _pick_constraints(everyone, budget, per_paste, lambda _: False)[2]
    room -= reserve

    # Older messages, newest first, as one run back in time, so the one
    # omitted line stands for one stretch of the conversation.
    for entry in reversed(entries[1:-1]):
        cost = text_cost(entry)
        if entry.text is None or cost > room:
            break
        kept.add(entry.id)
        room -= cost

    visible = [e.text for e in entries if e.id in kept and e.text is not None]
    sources = [(e, _own_constraints(e)) for e in entries if not (e.verbatim and e.id in kept)]
    # Within the reserve, so the run sized above still fits.
    chosen, dropped, _ = _pick_constraints(
        sources, min(budget, reserve), per_paste, lambda line: any(line in t for t in visible)
    )
    out: list[CheckpointEntry] = []
    for entry in entries:
        lines = chosen.get(entry.id, ())
        if entry.id in kept:
            out.append(replace(entry, constraints=() if entry.verbatim else lines))
        elif lines:
            out.append(replace(entry, text=None, oversized=False, saved=None, constraints=lines))
    return ActiveTask(tuple(out), total, dropped)


def _pick_constraints(
    sources: Sequence[tuple[CheckpointEntry, Sequence[str]]],
    budget: int,
    per_paste: int,
    present: Callable[[str], bool],
) -> tuple[dict[str, tuple[str, ...]], int, int]:
    """Constraint lines within ``budget`` tokens: ``(by entry id, lines dropped, tokens used)``.

    Typed messages before oversized ones (a rule the user wrote outranks a
    line of a pasted document), then newest first; one oversized message
    gives at most ``per_paste`` tokens; a line already shown (``present``) or
    already picked is not repeated.
    """
    order = sorted(sources, key=lambda s: (s[0].oversized, -s[0].number))
    picked_lines: set[str] = set()
    chosen: dict[str, tuple[str, ...]] = {}
    used = dropped = 0
    for entry, lines in order:
        picked: list[str] = []
        framing = _cost(_constraints_piece(entry.number, [""]))
        limit = min(budget, used + per_paste) if entry.oversized else budget
        for line in lines:
            if line in picked_lines or present(line):
                continue
            cost = _cost(line) + (0 if picked else framing)
            if used + cost > limit:
                dropped += 1
                continue
            picked.append(line)
            picked_lines.add(line)
            used += cost
        if picked:
            chosen[entry.id] = tuple(picked)
    return chosen, dropped, used


def _save(entry: CheckpointEntry, cap: int, full: str | None) -> CheckpointEntry:
    """Write a freshly cut message's full text to its file, once."""
    if full is None or entry.text is None or entry.saved is None:
        return entry
    path = Path(entry.saved)
    if path.is_file():
        return entry  # saved by an earlier compaction: the name is the message's own
    try:
        write_durably(path, full.encode("utf-8", "surrogatepass"))
    except OSError:
        # The transcript still has it: say so rather than name a missing file.
        # That stub is shorter than the one with the path, so the bound holds.
        return replace(entry, text=stub_text(full, cap, None), saved=None)
    return entry
