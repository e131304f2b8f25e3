"""The token budget: output reserve, input budget and the three phases (DESIGN §5.2)."""

from __future__ import annotations

import math
from typing import Literal, TypeAlias

from cairn.provider.limits import MAX_RESERVE as MAX_RESERVE
from cairn.provider.limits import MIN_RESERVE as MIN_RESERVE
from cairn.provider.limits import output_reserve as output_reserve

Phase: TypeAlias = Literal["below_handoff", "handoff_band", "compaction_due", "unknown"]


def input_budget(window: int, max_output_tokens: int | None = None) -> int:
    """What a request may hold: the window minus the output reserve."""
    return window - output_reserve(window, max_output_tokens)


def phase_for(tokens: int, budget: int, handoff_ratio: float, compact_ratio: float) -> Phase:
    """``below_handoff`` under the handoff line, ``compaction_due`` at or over the compact line."""
    if tokens >= compact_ratio * budget:
        return "compaction_due"
    if tokens >= handoff_ratio * budget:
        return "handoff_band"
    return "below_handoff"


def compaction_due(tokens: int, control_tokens: int, budget: int, compact_ratio: float) -> bool:
    """Whether the context reached the compaction line, the host's reminders not counted.

    The handoff reminder asks the model for its frontier before the
    compaction it announces, which drops it. Counted, its own weight would
    make that compaction due early: in an 8k window it is a fifth of the
    handoff band. Whether a request fits the budget still counts every token.
    """
    return tokens - control_tokens >= compact_ratio * budget


def handoff_line(budget: int, handoff_ratio: float) -> int:
    """The largest token count still below the handoff band."""
    return max(math.ceil(handoff_ratio * budget) - 1, 0)


#: After a compaction that could not bring the context under the compaction
#: line, the context must grow by this share of the input budget before
#: another compaction is worth its cost: compacting the same content again
#: would land in the same place.
REGROWTH_RATIO = 0.10


def compaction_would_help(tokens: int, floor: int | None, budget: int) -> bool:
    """Whether compacting at ``tokens`` can do better than the last compaction did.

    ``floor`` is the size the last compaction reached when that was still at
    or over the compaction line (``None`` when it got under it).
    """
    return floor is None or tokens >= floor + REGROWTH_RATIO * budget


#: The margin on the locally estimated part of a projection when deciding
#: whether a request may be sent at all — main requests and forks alike.
#: The estimate (with its dense surcharge and the session's density) still
#: under-counts some text: against cl100k, qwen3 and deepseek-v4 it came out
#: at up to 1.34× for Chinese specs with Markdown and 1.3–1.46× for Python
#: source files of the shared corpus; numbers in prose reach 2×, which the
#: density learns after one response.
ESTIMATE_MARGIN = 0.35


def cautious(tokens: int, estimated: int) -> int:
    """A projection of ``tokens`` with the margin on its ``estimated`` part."""
    return tokens + math.ceil(ESTIMATE_MARGIN * estimated)


def may_send(tokens: int, estimated: int, budget: int) -> bool:
    """Whether a request projected at ``tokens`` may be sent (DESIGN §5.9 step 4).

    ``estimated`` is the part the provider has not counted yet: with the
    margin on it, the request must fit the input budget. Main requests and
    compaction forks alike: nothing known to be over the budget goes out.
    """
    return cautious(tokens, estimated) <= budget


CompactionHold: TypeAlias = Literal["awaiting_response", "no_regrowth"]


def compaction_hold(
    tokens: int, budget: int, *, compacted_since_response: bool, floor: int | None
) -> CompactionHold | None:
    """Why a due compaction must wait now, or ``None`` when it may run.

    ``awaiting_response``: one already ran since the provider last answered,
    and compacting the same context again would loop. ``no_regrowth``: the
    last one could not get under the line (``floor``) and the context has not
    grown enough since for another to do better.
    """
    if compacted_since_response:
        return "awaiting_response"
    if not compaction_would_help(tokens, floor, budget):
        return "no_regrowth"
    return None


def may_compact_now(
    tokens: int, budget: int, *, compacted_since_response: bool, floor: int | None
) -> bool:
    """Whether a due automatic compaction may run now (no anti-loop guard holds it)."""
    hold = compaction_hold(
        tokens, budget, compacted_since_response=compacted_since_response, floor=floor
    )
    return hold is None


def reactive_allowed(*, output_started: bool, reactive_used: bool) -> bool:
    """Whether a context-limit refusal may be answered by compacting and replaying
    (DESIGN §5.8): only before any output, and once per provider boundary."""
    return not output_started and not reactive_used
