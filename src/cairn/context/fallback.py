"""The deterministic compaction fallback: a model-free replacement planner (DESIGN §5.6).

When the LLM summary fails, or the breaker keeps the model out of it, the
session must still go on below the handoff line. This module plans the
replacement context from the history alone: a compact block (a continuation
ledger filled by fixed rules, plus the bounded active-task checkpoint), then
whole API rounds from the newest end, of which only the oldest kept one — the
boundary round — may be cut. Same input, same ledger, byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from cairn.context.checkpoint import (
    MIN_CHECKPOINT_TOKENS,
    ActiveTask,
    active_task_of,
    checkpoint_cap,
)
from cairn.context.effects import ToolEffects, call_path, effect_of, written_files
from cairn.context.ledger import (
    LEDGER_HEADINGS,
    build_compact_block,
    exact_records,
    files_section,
    place_exact_records,
    previous_sections,
    render_ledger,
    todo_section,
    without_exact_records,
)
from cairn.messages import (
    KIND_COMPACT_SUMMARY,
    KIND_HANDOFF,
    ImagePart,
    Message,
    TextPart,
    ToolCall,
    group_rounds,
)
from cairn.tokens import estimate_message_tokens, estimate_text_tokens

FALLBACK_MAX_TOKENS = 50_000
FALLBACK_MIN_TOKENS = 5_000
IMAGE_PLACEHOLDER = "[image omitted from the compacted context]"

#: A boundary round is cut only if at least this many tokens of its text fit
#: besides its un-truncatable part; a few characters and a marker help nobody.
BOUNDARY_MIN_TEXT_TOKENS = 64

#: Head share of a cut text: the start says what a message is about, the end
#: how it finished (a test summary, an error); both matter, the start more.
HEAD_SHARE_NUM, HEAD_SHARE_DEN = 3, 4

#: The cut is re-measured with the real counter; rounding and the marker can
#: overshoot, so the text budget shrinks by the overshoot and it tries again.
_CUT_ATTEMPTS = 8

#: Ledger caps in characters at full detail (also enforced in estimated
#: tokens, ¼ of these, so CJK text cannot make the ledger four times bigger).
#: Together they keep the ledger's detail under ~2,000 tokens whatever the
#: history. What the host promised to keep has budgets of its own and is never
#: cut: the files written (``ledger.FILES_SECTION_TOKENS``), the todo list
#: (``ledger.TODO_SECTION_TOKENS``) and the exact records (``MAX_EXACT_RECORD_CHARS``).
OBJECTIVE_CHARS = 600
DECISION_CHARS = 200
DECISIONS_KEPT = 5
FILES_SECTION_CHARS = 1_600
EVIDENCE_CHARS = 1_200
COMMAND_CHARS = 200
TODO_CHARS = 800
ERROR_CHARS = 200
ERRORS_KEPT = 3
NEXT_CHARS = 300

#: What a section may carry over from the previous compact block's ledger.
_CARRY_CHARS: Mapping[str, int] = {
    "Objective and constraints": OBJECTIVE_CHARS,
    "Decisions and rationale": DECISION_CHARS * DECISIONS_KEPT,
    "Workspace mutations": FILES_SECTION_CHARS,
    "Verification evidence": EVIDENCE_CHARS + COMMAND_CHARS,
    "Active tasks and background work": TODO_CHARS,
    "Open risks or blockers": ERROR_CHARS * ERRORS_KEPT,
    "Exact next action": 2 * NEXT_CHARS,
}

#: Below this target the ledger shrinks in proportion (down to a quarter), so
#: that in small windows the mandatory block does not eat the whole target.
_FULL_DETAIL_TARGET = 8_000
_MIN_DETAIL = 0.25


def fallback_target(
    source_tokens: int, window: int, input_budget: int, fixed_tokens: int = 0
) -> int:
    """min(50_000, max(5_000, 0.8 × source), 0.5 × window, room), floored.

    ``input_budget`` is the conversation's share of a request's budget (the
    fixed context takes the rest), ``fixed_tokens`` that fixed context. The
    ``room`` term brings the whole next request — fixed context included —
    back to half the input budget, so a finished compaction lands well below
    the handoff line and buys as much room as it takes, even in small windows
    where the system prompt and tools take a third of the budget; when the
    fixed context takes most of it, the replacement still gets a quarter of
    what it leaves. With no fixed context, ``room`` is half the share.
    """
    room = max((input_budget - fixed_tokens) // 2, input_budget // 4)
    # Integer arithmetic: floor(min(...)) == min(floors), and no float noise.
    return max(
        0,
        min(
            FALLBACK_MAX_TOKENS,
            max(FALLBACK_MIN_TOKENS, source_tokens * 4 // 5),
            window // 2,
            room,
        ),
    )


@dataclass(frozen=True, slots=True)
class FallbackPlan:
    replacement: tuple[Message, ...]  # compact block first, then the kept tail
    summary: str  # the ledger text (what a UI shows in the compact block)
    target: int  # the token target actually used (after any raise)
    source_tokens: int  # tokens of the input messages
    post_tokens: int  # tokens of `replacement`, counted with `count`
    raised: bool  # the target was raised to fit the mandatory block
    files: tuple[str, ...]  # files written by writing tools (effects.written_files)
    truncated_round: bool  # whether a boundary round was cut


def plan_fallback(
    messages: Sequence[Message],
    *,
    window: int,
    input_budget: int,
    tool_effects: ToolEffects,
    count: Callable[[Message], int] = estimate_message_tokens,
    checkpoint_tokens: int | None = None,
    artifacts_dir: Path | None = None,
    fixed_tokens: int = 0,
) -> FallbackPlan:
    """Plan the replacement context for ``messages`` (the API view) without a model.

    ``post_tokens ≤ target`` always holds; ``target`` exceeds
    ``fallback_target(...)`` only when the compact block alone is bigger
    (``raised``), because the checkpoint's mandatory part is never dropped.

    ``checkpoint_tokens`` caps the active-task checkpoint (``None``: 15 % of
    ``input_budget``), and never more than half the target, so the ledger and
    the tail keep room. Oversized user messages are saved under
    ``artifacts_dir`` (see ``ledger.active_task_of``).
    """
    counts = [count(m) for m in messages]
    source_tokens = sum(counts)
    # Handoff reminders are control messages for the pre-compaction model and
    # system messages travel outside the history; neither belongs in it.
    kept_indexes = [
        i for i, m in enumerate(messages) if m.meta.kind != KIND_HANDOFF and m.role != "system"
    ]
    history = [messages[i] for i in kept_indexes]
    history_counts = [counts[i] for i in kept_indexes]

    target = fallback_target(source_tokens, window, input_budget, fixed_tokens)
    cap = min(
        checkpoint_cap(checkpoint_tokens, input_budget),
        max(MIN_CHECKPOINT_TOKENS, target // 2),
    )
    active_task = active_task_of(
        history, cap_tokens=cap, input_budget=input_budget, artifacts_dir=artifacts_dir
    )
    files = written_files(history, tool_effects)
    ledger = _build_ledger(history, tool_effects, active_task, files, _detail(target))
    block = build_compact_block(ledger, active_task)
    block_tokens = count(block)
    raised = block_tokens > target
    if raised:
        target = block_tokens

    tail, tail_tokens, truncated = _select_tail(
        history, history_counts, target - block_tokens, active_task, count
    )
    return FallbackPlan(
        replacement=(block, *tail),
        summary=ledger,
        target=target,
        source_tokens=source_tokens,
        post_tokens=block_tokens + tail_tokens,
        raised=raised,
        files=tuple(files),
        truncated_round=truncated,
    )


# ---------------------------------------------------------------------------
# The kept tail


def _select_tail(
    history: Sequence[Message],
    counts: Sequence[int],
    budget: int,
    active_task: ActiveTask,
    count: Callable[[Message], int],
) -> tuple[list[Message], int, bool]:
    """Whole rounds from the newest end within ``budget``; at most one cut round."""
    deduped = _repeated_last_user(history, active_task)
    kept: list[list[Message]] = []  # newest round first
    remaining = budget
    truncated = False
    for r in reversed(group_rounds(history)):
        # A broken round cannot be sent and is not ours to repair; the last
        # user message is already in the checkpoint, verbatim.
        if not r.complete or r.start == deduped:
            continue
        originals = history[r.start : r.end]
        # Host-written messages (an old block, a restoration) are superseded
        # by the new block; skipping their whole round splits nothing.
        if any(_never_kept(m) for m in originals):
            continue
        sanitized = [_sanitize(m) for m in originals]
        # An untouched message is the same object, so its count is reused.
        costs = [
            counts[i] if s is o else count(s)
            for i, o, s in zip(range(r.start, r.end), originals, sanitized, strict=True)
        ]
        cost = sum(costs)
        if cost <= remaining:
            kept.append(sanitized)
            remaining -= cost
            continue
        cut = _cut_round(originals, sanitized, costs, remaining, count)
        if cut is not None:
            kept.append(cut[0])
            remaining -= cut[1]
            truncated = True
        break
    tail = [m for round_messages in reversed(kept) for m in round_messages]
    return tail, budget - remaining, truncated


def _repeated_last_user(history: Sequence[Message], active_task: ActiveTask) -> int | None:
    """Index of the last user message if the checkpoint already holds all of it verbatim.

    Not when the checkpoint shows only a stub of it (oversized), nor when it
    has images (the checkpoint holds text only). A user message is always a
    round of its own, so leaving it out splits nothing.
    """
    latest = active_task.latest
    for i in range(len(history) - 1, -1, -1):
        m = history[i]
        if m.role == "user" and not _never_kept(m):
            held = latest is not None and latest.verbatim and latest.id == m.id
            return i if held and not m.images else None
    return None


def _never_kept(message: Message) -> bool:
    return (
        message.meta.synthetic
        or message.meta.kind in (KIND_COMPACT_SUMMARY, KIND_HANDOFF)
        or message.role == "system"
    )


def _sanitize(message: Message) -> Message:
    """Reasoning dropped, images replaced by a placeholder part; else the same object."""
    content = message.content
    has_images = isinstance(content, tuple) and any(isinstance(p, ImagePart) for p in content)
    if message.reasoning is None and not has_images:
        return message
    if isinstance(content, tuple) and has_images:
        content = tuple(
            TextPart(IMAGE_PLACEHOLDER) if isinstance(p, ImagePart) else p for p in content
        )
    return replace(message, content=content, reasoning=None)


def _with_text(message: Message, images: int, text: str) -> Message:
    """``message`` with its text replaced; image placeholders follow the text."""
    if isinstance(message.content, tuple):
        parts = ((TextPart(text),) if text else ()) + (TextPart(IMAGE_PLACEHOLDER),) * images
        return replace(message, content=parts)
    return replace(message, content=text)


def _head_tail(text: str, keep: int) -> str:
    """``text`` cut to ``keep`` characters: head 75 %, marker, tail 25 %."""
    keep = max(0, min(keep, len(text)))
    head = keep * HEAD_SHARE_NUM // HEAD_SHARE_DEN
    tail = keep - head
    omitted = len(text) - keep
    return f"{text[:head]}\n[… {omitted:,} characters omitted …]\n{text[len(text) - tail :]}"


def _water_level(sizes: Sequence[int], budget: int) -> int:
    """The largest cap ``L`` with ``sum(min(s, L)) ≤ budget``: short texts stay whole."""
    ordered = sorted(sizes)
    prefix = 0
    for k, size in enumerate(ordered):
        left = len(ordered) - k
        if prefix + size * left > budget:
            return max(0, (budget - prefix) // left)
        prefix += size
    return ordered[-1] if ordered else 0


def _cut_round(
    originals: Sequence[Message],
    sanitized: Sequence[Message],
    costs: Sequence[int],
    remaining: int,
    count: Callable[[Message], int],
) -> tuple[list[Message], int] | None:
    """The boundary round with every message kept and long texts cut, or None.

    Tool-call arguments, per-message framing and image placeholders are its
    un-truncatable part; only message text is cut, the longest texts first.
    """
    texts = [o.text for o in originals]
    images = [len(o.images) for o in originals]
    floors = [
        cost if not text else count(_with_text(s, n, ""))
        for s, text, n, cost in zip(sanitized, texts, images, costs, strict=True)
    ]
    text_tokens = [max(0, cost - floor) for cost, floor in zip(costs, floors, strict=True)]
    text_budget = remaining - sum(floors)
    if text_budget < BOUNDARY_MIN_TEXT_TOKENS:
        return None
    for _ in range(_CUT_ATTEMPTS):
        level = _water_level(text_tokens, text_budget)
        out: list[Message] = []
        total = 0
        for s, text, n, cost, size in zip(
            sanitized, texts, images, costs, text_tokens, strict=True
        ):
            if size <= level:
                out.append(s)
                total += cost
                continue
            # Characters per token differ by script, so scale by this text's own ratio.
            cut = _with_text(s, n, _head_tail(text, len(text) * level // size))
            out.append(cut)
            total += count(cut)
        if total <= remaining:
            return out, total
        text_budget -= total - remaining + 1
        if text_budget < 0:
            break
    return None


# ---------------------------------------------------------------------------
# The deterministic ledger


def _detail(target: int) -> float:
    return min(1.0, max(_MIN_DETAIL, target / _FULL_DETAIL_TARGET))


def _build_ledger(
    history: Sequence[Message],
    effects: ToolEffects,
    active_task: ActiveTask,
    files: Sequence[str],
    detail: float,
) -> str:
    def cap(chars: int) -> int:
        return max(16, int(chars * detail))

    calls: dict[str, ToolCall] = {c.id: c for m in history for c in m.tool_calls}
    previous = previous_sections(history)
    sections: dict[str, str] = {
        "Objective and constraints": _objective(active_task, cap(OBJECTIVE_CHARS)),
        "Decisions and rationale": _decisions(history, cap(DECISION_CHARS)),
        "Workspace mutations": files_section(previous.get("Workspace mutations", ""), files),
        "Verification evidence": _evidence(
            history, calls, effects, cap(COMMAND_CHARS), cap(EVIDENCE_CHARS)
        ),
        "Active tasks and background work": todo_section(history),
        "Open risks or blockers": _risks(history, calls, cap(ERROR_CHARS)),
        "Exact next action": _next_action(history, active_task, cap(NEXT_CHARS)),
    }
    # What the new history says nothing about, the previous compaction may
    # still know (recursive compaction): carry it over, capped, and say so.
    for heading in LEDGER_HEADINGS:
        carried = without_exact_records(previous.get(heading, "")).strip()
        if not sections[heading] and carried:
            # The todo list is whole or absent; every other section is detail.
            whole = heading == "Active tasks and background work"
            body = carried if whole else _clip_head(carried, cap(_CARRY_CHARS[heading]))
            sections[heading] = f"(from the previous compaction)\n{body}"
    # The same host rule as the LLM path: exact records verbatim, under their headings.
    return place_exact_records(render_ledger(sections), exact_records(history))


def _objective(active_task: ActiveTask, chars: int) -> str:
    first = active_task.first
    if first is None or first.text is None:
        return ""
    body = _clip_head(first.text, chars).strip()
    later = active_task.total - first.number
    if later:
        body += (
            f"\n(+ {later} later user message(s); the active-task checkpoint holds the "
            "latest one and the user's constraints verbatim)"
        )
    return body


def _decisions(history: Sequence[Message], chars: int) -> str:
    texts: list[str] = []
    for m in reversed(history):
        if m.role == "assistant" and m.text.strip():
            texts.append(_one_line(m.text, chars))
            if len(texts) == DECISIONS_KEPT:
                break
    return "\n".join(f"- {t}" for t in reversed(texts))


def _is_command(call: ToolCall, effects: ToolEffects) -> bool:
    """A tool that acts without naming a file (bash, a test runner): its output is evidence.

    Judged from the declared effect and the arguments, never the tool's name:
    read-only tools only look, and a writing tool that names a file is an edit.
    """
    return (
        effect_of(call.name, effects) == "write"
        and "todo" not in call.name.lower()
        and call_path(call.arguments) is None
    )


def _evidence(
    history: Sequence[Message],
    calls: Mapping[str, ToolCall],
    effects: ToolEffects,
    command_chars: int,
    output_chars: int,
) -> str:
    for m in reversed(history):
        call = calls.get(m.tool_call_id or "") if m.role == "tool" else None
        if call is not None and _is_command(call, effects):
            status = "failed" if m.meta.tool_error else "ok"
            header = f"`{call.name}` {_one_line(call.arguments, command_chars)} ({status})"
            return f"{header}\n{_clip_tail(m.text, output_chars).strip()}"
    return ""


def _risks(history: Sequence[Message], calls: Mapping[str, ToolCall], chars: int) -> str:
    errors: list[str] = []
    for m in reversed(history):
        if m.role == "tool" and m.meta.tool_error:
            call = calls.get(m.tool_call_id or "")
            name = m.name or (call.name if call is not None else "tool")
            errors.append(f"- `{name}` failed: {_one_line(m.text, chars)}")
            if len(errors) == ERRORS_KEPT:
                break
    return "\n".join(reversed(errors))


def _next_action(history: Sequence[Message], active_task: ActiveTask, chars: int) -> str:
    lines: list[str] = []
    latest = active_task.latest
    if latest is not None and latest.text is not None:
        lines.append(f"Last user request: {_one_line(latest.text, chars)}")
    last = next((m for m in reversed(history) if m.role == "assistant" and m.text.strip()), None)
    if last is not None:
        lines.append(f"Last assistant message: {_one_line(last.text, chars)}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Clipping: by characters and by estimated tokens (a quarter of the characters)


def _clip_head(text: str, chars: int) -> str:
    tokens = max(1, chars // 4)
    head = text[:chars]
    while estimate_text_tokens(head) > tokens:
        head = head[: len(head) * tokens // estimate_text_tokens(head)]
    return text if len(head) == len(text) else head.rstrip() + "…"


def _clip_tail(text: str, chars: int) -> str:
    tokens = max(1, chars // 4)
    tail = text[len(text) - chars :] if len(text) > chars else text
    while estimate_text_tokens(tail) > tokens:
        keep = len(tail) * tokens // estimate_text_tokens(tail)
        tail = tail[len(tail) - keep :] if keep else ""
    return text if len(tail) == len(text) else "…" + tail.lstrip()


def _one_line(text: str, chars: int) -> str:
    # Collapse whitespace on a bounded prefix only: a history may hold megabytes.
    prefix = text[: chars * 4]
    line = " ".join(prefix.split())
    clipped = _clip_head(line, chars)
    if clipped == line and len(prefix) < len(text):
        return line + "…"  # whitespace made room, yet the text goes on
    return clipped
