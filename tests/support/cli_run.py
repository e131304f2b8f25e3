"""Run ``cairn`` as a real subprocess, with only the environment a test gives it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: The guard around one run against a scripted server (a second or two): far above it.
TIMEOUT_S = 120.0


def cairn_p(
    *args: str,
    cwd: Path,
    env: dict[str, str],
    stdin: str | None = None,
    timeout: float = TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    """``python -m cairn ARGS`` in ``cwd``; the caller's CAIRN_* and OPENAI_* are cleared.

    ``timeout`` only guards against a hang: a run against a real model, which a
    busy machine slows down several-fold, passes one of its own.
    """
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("CAIRN_", "OPENAI_"))}
    return subprocess.run(
        [sys.executable, "-m", "cairn", *args],
        cwd=cwd,
        env={**environ, **env},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
