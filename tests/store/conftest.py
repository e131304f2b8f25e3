"""The store tests' fixtures: a real JSONL transcript written through the public API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.store import JsonlTranscriptStore, SessionRecord


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "projects" / "ws" / "session.jsonl"


@pytest.fixture
def store(store_path: Path) -> Iterator[JsonlTranscriptStore]:
    s = JsonlTranscriptStore.create(store_path, SessionRecord(session_id="s1", workspace="/ws"))
    yield s
    s.close()
