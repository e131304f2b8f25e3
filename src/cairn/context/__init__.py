"""The context pipeline: keep every request inside the window, durably.

Build a ``ContextPipeline`` from a ``CompactionConfig``, feed it messages
(``add``, ``add_tool_results``), and ``await check_and_compact(fixed)``
before every request.
"""

from cairn.context.breaker import CompactionBreaker, breaker_key
from cairn.context.budget import Phase, input_budget, output_reserve, phase_for
from cairn.context.config import CompactionConfig, OnFailure
from cairn.context.effects import ToolEffect, ToolEffects
from cairn.context.fallback import FallbackPlan, fallback_target, plan_fallback
from cairn.context.pipeline import (
    CheckpointWriteError,
    CheckResult,
    CompactionCancelledError,
    CompactionFailedError,
    CompactionOutcome,
    ContextPipeline,
    NothingToCompactError,
)
from cairn.context.summarizer import (
    FallbackSummarizer,
    Summarizer,
    SummarizerError,
    Summary,
    SummaryRequest,
)
from cairn.context.tracker import ContextTokenTracker, FixedContext, TokenSnapshot

__all__ = [
    "CheckResult",
    "CheckpointWriteError",
    "CompactionBreaker",
    "CompactionCancelledError",
    "CompactionConfig",
    "CompactionFailedError",
    "CompactionOutcome",
    "ContextPipeline",
    "ContextTokenTracker",
    "FallbackPlan",
    "FallbackSummarizer",
    "FixedContext",
    "NothingToCompactError",
    "OnFailure",
    "Phase",
    "Summarizer",
    "SummarizerError",
    "Summary",
    "SummaryRequest",
    "TokenSnapshot",
    "ToolEffect",
    "ToolEffects",
    "breaker_key",
    "fallback_target",
    "input_budget",
    "output_reserve",
    "phase_for",
    "plan_fallback",
]
