"""Projection of the next request's size from the provider's last usage (DESIGN §5.1).

The provider already counted everything up to and including its last
response, so the projection is that baseline plus an estimate of what was
appended after it, plus any growth of the fixed context (system prompt and
tool schemas). Counting only the appended messages keeps the cost of a
projection independent of the history's length. Whenever the baseline cannot
be trusted — no usage yet, the history rewritten, a different message where
the baseline's response should be — the projection falls back to a full
local estimate rather than guess.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Literal, TypeAlias

import orjson

from cairn.context.budget import Phase, input_budget, phase_for
from cairn.context.config import CompactionConfig
from cairn.messages import JSONObject, Message, message_to_wire
from cairn.provider.config import ModelConfig
from cairn.tokens import estimate_message_tokens, estimate_tokens

Source: TypeAlias = Literal["anchored", "estimate", "unknown"]
Counter: TypeAlias = Callable[[Message], int]


def schema_tokens(schemas: Sequence[JSONObject]) -> int:
    """Tool schemas as estimated: the prose rate over their JSON (``FixedContext.tokens``)."""
    return estimate_tokens(orjson.dumps(list(schemas)).decode()) if schemas else 0


@dataclass(frozen=True)
class FixedContext:
    """What every request carries besides the conversation: system prompt and tool schemas.

    Build a new one when either changes; its token estimate is computed once.
    """

    system: tuple[Message, ...] = ()
    tools: tuple[JSONObject, ...] = ()

    @cached_property
    def tokens(self) -> int:
        """The estimate used until a response calibrates it (``cairn.context.calibration``).

        Tool schemas count at the prose rate, not the ½-per-character JSON rate
        of tool arguments and JSON results: they are mostly English
        descriptions, and the JSON rate counted them at 2.2–2.3× their true
        size (Cairn's own, OpenHands', Claude Code's), enough to refuse a first
        request that fits. At the prose rate they still come out 7–15 % over.
        """
        system = sum(estimate_message_tokens(m) for m in self.system)
        return system + schema_tokens(self.tools)

    @cached_property
    def fingerprint(self) -> str:
        """Identifies this fixed context as sent: a calibration holds until it changes."""
        wire = [message_to_wire(m) for m in self.system]
        data = orjson.dumps([wire, list(self.tools)], option=orjson.OPT_SORT_KEYS)
        return hashlib.sha256(data).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class TokenSnapshot:
    """The one reading of the context size that handoff and compaction both act on."""

    tokens: int | None
    source: Source
    input_budget: int | None
    phase: Phase
    #: The part of ``tokens`` that is a local estimate, not the provider's count:
    #: what was appended since the response (anchored), or every message.
    estimated: int = 0

    @property
    def ratio(self) -> float | None:
        if self.tokens is None or not self.input_budget:
            return None
        return self.tokens / self.input_budget


@dataclass(frozen=True, slots=True)
class Baseline:
    tokens: int
    anchor_id: str
    anchor_index: int
    #: ``None`` when the fixed context of that request was not reported.
    fixed_tokens: int | None
    revision: int


@dataclass
class ContextTokenTracker:
    config: CompactionConfig
    #: The one source of the window and the output reserve.
    model: ModelConfig
    count: Counter = estimate_message_tokens
    baseline: Baseline | None = field(default=None, init=False)
    #: How many tokens the provider counts per estimated message token in this
    #: session (``cairn.context.calibration.learned_density``): 1.0 is the
    #: seeds' formula, the uncalibrated start.
    density: float = field(default=1.0, init=False)

    @property
    def input_budget(self) -> int | None:
        window = self.model.context_window
        return input_budget(window, self.model.max_output_tokens) if window else None

    def observe(
        self,
        messages: Sequence[Message],
        fixed_tokens: int | None,
        revision: int,
        index: int | None = None,
    ) -> None:
        """Anchor on ``messages[index]`` (default: the last): a response that carries usage."""
        if not messages:
            return
        index = len(messages) - 1 if index is None else index
        anchor = messages[index]
        usage = anchor.meta.usage
        if anchor.role != "assistant" or usage is None:
            return
        # Only total/prompt/completion: cache fields are already inside them.
        self.baseline = Baseline(
            tokens=usage.context_tokens,
            anchor_id=anchor.id,
            anchor_index=index,
            fixed_tokens=fixed_tokens,
            revision=revision,
        )

    def invalidate(self) -> None:
        """Forget the baseline (after a compaction, ``/clear`` or any rewrite)."""
        self.baseline = None

    def project(
        self,
        messages: Sequence[Message],
        fixed_tokens: int,
        revision: int,
        *,
        tokens_from: Callable[[int], int] | None = None,
    ) -> TokenSnapshot:
        """The next request's size. ``tokens_from(i)`` is Σ count(m) over ``messages[i:]``.

        The pipeline passes its index's cached counts; without it the
        messages are counted here.
        """
        if self.model.context_window is None:
            return TokenSnapshot(None, "unknown", None, "unknown")
        counted = tokens_from or partial(_tokens_from, messages, self.count)
        base = self.baseline
        if (
            base is not None
            and base.revision == revision
            and base.anchor_index < len(messages)
            and messages[base.anchor_index].id == base.anchor_id
        ):
            appended = self.scaled(counted(base.anchor_index + 1))
            growth = 0 if base.fixed_tokens is None else max(0, fixed_tokens - base.fixed_tokens)
            return self.snapshot(base.tokens + appended + growth, "anchored", appended + growth)
        estimated = self.scaled(counted(0))
        return self.snapshot(fixed_tokens + estimated, "estimate", estimated)

    def scaled(self, estimate: int) -> int:
        """A message estimate at this session's density (rounded up)."""
        return estimate if self.density == 1.0 else math.ceil(estimate * self.density)

    def snapshot(self, tokens: int, source: Source, estimated: int = 0) -> TokenSnapshot:
        budget = self.input_budget
        if budget is None:
            return TokenSnapshot(tokens, "unknown", None, "unknown", estimated)
        phase = phase_for(tokens, budget, self.config.handoff_ratio, self.config.compact_ratio)
        return TokenSnapshot(tokens, source, budget, phase, estimated)


def _tokens_from(messages: Sequence[Message], count: Counter, start: int) -> int:
    return sum(count(m) for m in (messages[start:] if start else messages))
