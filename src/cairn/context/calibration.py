"""Calibration of the fixed context from the provider's own count (DESIGN §4).

The seeds' estimate counts JSON at ½ token per character, which over-counts
tool schemas by 60–110 %. Every request carries the same system prompt and
tool schemas, so the provider's ``prompt_tokens`` minus the estimate of the
messages it answered is a measurement of their true size. The measurement
taken with the fewest message tokens is the sharpest (the estimate's error
on the messages lands in it), so that one is kept, per fixed context, and
persisted with the session so that a resume projects as well as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, TypeAlias

from pydantic import Field, StrictInt

from cairn.codec import Codec
from cairn.messages import JSONValue

_Count: TypeAlias = Annotated[StrictInt, Field(ge=0)]

#: The key of the ``state`` record that persists the calibration.
CALIBRATION_KEY = "fixed_context"


@dataclass(frozen=True, slots=True)
class FixedCalibration:
    """The provider's size of one fixed context, and how it was measured."""

    #: ``FixedContext.fingerprint`` of the fixed context it was measured on.
    fingerprint: str
    #: The seeds' estimate of that fixed context.
    estimate: _Count
    #: Its size as the provider counted it.
    tokens: _Count
    #: Estimated tokens of the messages in the measured request (smaller is sharper).
    message_tokens: _Count

    def to_json(self) -> JSONValue:
        data: JSONValue = _CODEC.dump(self)
        return data

    @classmethod
    def from_json(cls, value: JSONValue) -> FixedCalibration | None:
        """The calibration a ``state`` record holds, or ``None`` when it is malformed."""
        try:
            return _CODEC.load(value)
        except _MalformedError:
            return None


class _MalformedError(ValueError):
    """A persisted calibration of the wrong shape: it is measured again instead."""


_CODEC: Codec[FixedCalibration] = Codec(
    FixedCalibration, error=_MalformedError, what="fixed-context calibration"
)


def measure(
    prompt_tokens: int, message_tokens: int, fingerprint: str, estimate: int
) -> FixedCalibration | None:
    """What one response says about the fixed context, or ``None`` if it says nothing.

    ``message_tokens`` is the estimate of the messages the request carried; a
    provider that reports no prompt tokens measures nothing.
    """
    if prompt_tokens <= 0:
        return None
    return FixedCalibration(
        fingerprint, estimate, max(0, prompt_tokens - message_tokens), message_tokens
    )


def sharper(current: FixedCalibration | None, new: FixedCalibration) -> FixedCalibration:
    """Keep the measurement taken on fewer message tokens; a new fixed context replaces all."""
    if current is None or current.fingerprint != new.fingerprint:
        return new
    return new if new.message_tokens <= current.message_tokens else current


def calibrated_tokens(fingerprint: str, estimate: int, calibration: FixedCalibration | None) -> int:
    """The fixed context's size to project with.

    The measured size when it was measured on this very fixed context. When
    the fixed context changed since (a skill added to the prompt, a tool
    more), the old measurement still says how far the estimate over-counts:
    the change is counted by the estimate and the known discount kept (never
    below zero).
    """
    if calibration is None:
        return estimate
    if calibration.fingerprint == fingerprint:
        return calibration.tokens
    return max(0, estimate - (calibration.estimate - calibration.tokens))


# ---------------------------------------------------------------------------
# The density of the messages: what the estimate of appended messages misses

#: The key of the ``state`` record that persists the density.
DENSITY_KEY = "message_density"
#: The density never goes below the seeds' formula (the uncalibrated start)
#: nor above what any tokenizer makes of text (one token per character is
#: ~4× the formula's ¼).
MIN_DENSITY, MAX_DENSITY = 1.0, 4.0
#: A sample needs this many estimated tokens: below it the chat template's
#: few tokens per message would read as density.
MIN_SAMPLE_TOKENS = 256
#: A change smaller than this share is noise (the chat template, rounding):
#: the density stays, and no record is written for it.
DENSITY_STEP = 0.02


def learned_density(current: float, projected: int, measured: int) -> float:
    """The density after one response, from what its request's estimated part cost.

    ``projected`` is the estimated part of the request's projection (already
    multiplied by ``current``), ``measured`` what the provider's prompt tokens
    say it cost. A rise is taken at once — the next request must not go out
    on a count known to be low — and a fall halves the distance per response,
    so one prose answer after a page of hashes does not forget them, while a
    session that went back to prose stops compacting early after a few.
    """
    if projected < MIN_SAMPLE_TOKENS:
        return current
    sample = current * measured / projected
    new = sample if sample >= current else current - (current - sample) / 2
    new = round(min(max(new, MIN_DENSITY), MAX_DENSITY), 3)
    return current if abs(new - current) < DENSITY_STEP * current else new


def density_from_json(value: JSONValue) -> float | None:
    """The density a ``state`` record holds, or ``None`` when it is malformed."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    density = float(value)
    return density if MIN_DENSITY <= density <= MAX_DENSITY else None
