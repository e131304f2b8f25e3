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
