"""The root of every exception Cairn raises on purpose.

``except CairnError`` catches them all (a bad setting, a store that cannot
open, a provider error, a request that cannot fit, a compaction that failed),
and never a bug: a ``TypeError`` from Cairn's own code is not a ``CairnError``.
Each error keeps its standard base too (``ValueError``, ``RuntimeError``, …),
so code that caught those keeps working.
"""

from __future__ import annotations

__all__ = ["CairnError"]


class CairnError(Exception):
    """Something Cairn reports to its user; the message says what and, where it can, what to do."""
