"""The pipeline's settings: the compaction policy.

The model's window and output cap are not here: they belong to the one
model configuration (``cairn.provider.ModelConfig``), from which the
pipeline derives its input budget.

Validated with pydantic so that a bad value is an error naming the key and
the allowed range, whether it comes from code or from ``settings.json``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

OnFailure = Literal["fallback", "skip"]


class CompactionConfig(BaseModel):
    """Everything ``check_and_compact`` needs to decide; defaults follow DESIGN §5 and §11."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    handoff_ratio: float = Field(default=0.70, gt=0.0, le=1.0)
    compact_ratio: float = Field(default=0.80, gt=0.0, le=1.0)
    #: Complete API rounds an LLM compaction keeps verbatim after the summary.
    keep_rounds: int = Field(default=2, ge=0, le=64)
    on_failure: OnFailure = "fallback"
    micro_compact_idle_s: float = Field(default=60.0, ge=0.0)
    breaker_threshold: int = Field(default=3, ge=1, le=100)
    #: Share of the input budget the active-task checkpoint's older user
    #: messages may take (the latest message and the constraints always stay).
    checkpoint_share: float = Field(default=0.15, gt=0.0, le=0.5)
    #: ``estimate`` or an exact tokenizer name (see ``cairn.tokens.TOKENIZER_NAMES``).
    tokenizer: str = "estimate"
    #: Prepare the summary in the background once the model has answered the
    #: handoff, so that the compaction line commits it without a wait (DESIGN §5.5a).
    precompute: bool = True
    #: Where in the band the background summary starts, as a share of the input
    #: budget (from ``handoff_ratio`` up to ``compact_ratio``); ``None``: as soon
    #: as the handoff is answered.
    precompute_ratio: float | None = Field(default=None, gt=0.0, le=1.0)

    @model_validator(mode="after")
    def _ratios_in_order(self) -> CompactionConfig:
        if self.handoff_ratio > self.compact_ratio:
            raise ValueError(
                f"handoff_ratio ({self.handoff_ratio}) must not exceed "
                f"compact_ratio ({self.compact_ratio})"
            )
        start = self.precompute_ratio
        if start is not None and not self.handoff_ratio <= start < self.compact_ratio:
            raise ValueError(
                f"precompute_ratio ({start}) must lie in the band, from handoff_ratio "
                f"({self.handoff_ratio}) up to compact_ratio ({self.compact_ratio})"
            )
        return self
