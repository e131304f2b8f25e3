"""``docs/benchmarks.md`` is written by several benchmarks: each owns one marked section.

A section is the text between ``<!-- begin NAME -->`` and ``<!-- end NAME -->``;
a benchmark replaces its own and leaves the others as they are, so rerunning
one never erases another's figures.
"""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def update_section(name: str, text: str, path: Path = DOC) -> None:
    """Put ``text`` in section ``name`` of ``path`` (appended the first time)."""
    begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
    block = f"{begin}\n{text.strip()}\n{end}\n"
    current = path.read_text(encoding="utf-8") if path.exists() else ""
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end) + r"\n?", re.DOTALL)
    if pattern.search(current):
        updated = pattern.sub(lambda _: block, current, count=1)
    elif name == "replay" and current and "<!-- begin " not in current:
        updated = block  # the file from before sections: all of it was the replay's
    else:
        updated = current + ("\n" if current and not current.endswith("\n\n") else "") + block
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(updated, encoding="utf-8")
