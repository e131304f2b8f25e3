"""Counts for the reliability campaign, and where its figures go.

``make test`` runs each campaign with small counts (a minute or two in all);
``make soak`` sets ``CAIRN_SOAK=1`` for the full counts and
``CAIRN_SOAK_RESULTS`` to a JSON file that every campaign adds its figures
to (``benchmarks/results/reliability.json``).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import orjson

SOAK = os.environ.get("CAIRN_SOAK") == "1"


def count(quick: int, soak: int) -> int:
    """How many attempts (kills, inputs, races) a campaign makes in this run."""
    return soak if SOAK else quick


def record(campaign: str, **figures: int | float | str) -> None:
    """Add one campaign's figures to the results file, if this run keeps them.

    Campaigns may run in several processes: the file is updated under a lock.
    """
    target = os.environ.get("CAIRN_SOAK_RESULTS")
    if not target:
        return
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.with_suffix(".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = orjson.loads(path.read_bytes()) if path.exists() else {"campaigns": {}}
        data["campaigns"][campaign] = figures
        path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
