"""The summarizer strategy: how a compaction turns a context into its replacement.

``check_and_compact`` only knows this protocol. The deterministic fallback
is one implementation (and the safety net behind every other); the LLM fork
summarizer is another.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from cairn.context.effects import ToolEffects
from cairn.context.fallback import plan_fallback
from cairn.context.tracker import FixedContext
from cairn.errors import ContextError
from cairn.messages import Message
from cairn.store.records import Strategy, Trigger
from cairn.tokens import estimate_message_tokens

#: A replacement is at most this share of the context it replaces: one that
#: gives back less than a tenth only brings the next compaction closer, and a
#: reactive one would be refused again. The kept tail and the restored files
#: yield first.
RESULT_SHARE = 0.9


class SummarizerError(ContextError):
    """The summarizer produced no usable replacement; counts toward the breaker.

    ``elisions`` names what the failed fork requests left out of the main
    request, so that a fallback's record still names them.
    """

    code = "summarizer_failed"

    def __init__(self, message: str, elisions: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.elisions = elisions


@dataclass(frozen=True)
class SummaryRequest:
    """Everything a summarizer may use. ``messages`` excludes hidden handoff messages."""

    messages: tuple[Message, ...]
    fixed: FixedContext
    window: int
    input_budget: int
    trigger: Trigger
    tool_effects: ToolEffects = field(default_factory=dict)
    instructions: str | None = None
    count: Callable[[Message], int] = estimate_message_tokens
    #: Complete API rounds an LLM summary keeps verbatim after the compact block.
    keep_rounds: int = 2
    #: Called with the accumulated streamed text (the UI's compaction tail).
    on_text: Callable[[str], None] | None = None
    #: Called, before a fork goes out, with what it leaves out of the main request:
    #: a caller that may drop the attempt mid-flight still knows what was sent.
    on_elided: Callable[[tuple[str, ...]], None] | None = None
    #: The whole input budget of one request (``input_budget`` above is the
    #: conversation's share of it); ``None``: the window is unknown.
    request_budget: int | None = None
    #: The fixed context's size as the provider counts it (calibrated), else the estimate.
    fixed_tokens: int = 0
    #: Cap, in tokens, for the older user messages of the active-task checkpoint
    #: (``checkpoint_share`` of the input budget); ``None``: 15 % of ``input_budget``.
    checkpoint_tokens: int | None = None
    #: The session's folder: oversized user messages are saved here in full.
    artifacts_dir: Path | None = None
    #: The context exactly as the last main request sent it, then what was
    #: appended since — handoff included, no edit of this check applied: the
    #: compaction fork's history, so its prefix is the cached one. Empty:
    #: ``messages``.
    sent: tuple[Message, ...] = ()
    #: The size of a request carrying ``sent`` (fixed context included) as the
    #: pipeline projects it — the provider's count of the last main request plus
    #: the estimate of what came since — and that estimated part, on which the
    #: margin applies. ``None``: not projected (the fork is then estimated whole).
    projected: int | None = None
    projected_estimated: int = 0


@dataclass(frozen=True)
class Summary:
    """A replacement context: the compact block first, then whatever it keeps."""

    replacement: tuple[Message, ...]
    summary: str
    strategy: Strategy
    files: tuple[str, ...] = ()
    #: What the fork left out of the main request to fit (``CompactionRecord.fork_elisions``).
    elisions: tuple[str, ...] = ()


class Summarizer(Protocol):
    async def summarize(self, request: SummaryRequest) -> Summary:
        """Return the replacement, or raise ``SummarizerError``."""
        ...


class FallbackSummarizer:
    """The model-free planner behind the ``Summarizer`` protocol."""

    async def summarize(self, request: SummaryRequest) -> Summary:
        return fallback_summary(request.messages, request)


def fallback_summary(
    messages: Sequence[Message], request: SummaryRequest, elisions: tuple[str, ...] = ()
) -> Summary:
    """The model-free replacement; ``elisions``: what failed forks before it left out."""
    plan = plan_fallback(
        messages,
        window=request.window,
        input_budget=request.input_budget,
        tool_effects=request.tool_effects,
        count=request.count,
        checkpoint_tokens=request.checkpoint_tokens,
        artifacts_dir=request.artifacts_dir,
        fixed_tokens=request.fixed_tokens,
    )
    return Summary(plan.replacement, plan.summary, "fallback", plan.files, elisions)
