"""The compaction circuit breaker, keyed by (normalized workspace, session id).

After ``threshold`` consecutive summarizer failures the LLM is not asked
again for that session until a success or a manual ``/compact`` resets it —
so a context the summarizer cannot handle stops costing a call per request,
and one broken session never trips another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeAlias

from cairn.store.paths import normalize_workspace

BreakerKey: TypeAlias = tuple[str, str]


def breaker_key(workspace: str | Path, session_id: str) -> BreakerKey:
    return normalize_workspace(workspace), session_id


@dataclass
class CompactionBreaker:
    threshold: int = 3
    _failures: dict[BreakerKey, int] = field(default_factory=dict)

    def failures(self, key: BreakerKey) -> int:
        return self._failures.get(key, 0)

    def is_open(self, key: BreakerKey) -> bool:
        return self.failures(key) >= self.threshold

    def record_failure(self, key: BreakerKey) -> int:
        self._failures[key] = self.failures(key) + 1
        return self._failures[key]

    def record_success(self, key: BreakerKey) -> None:
        self._failures.pop(key, None)

    reset = record_success
