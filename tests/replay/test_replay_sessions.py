"""Replay invariants on every real session shipped with the repository."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cairn.messages import find_orphans
from cairn.replay.engine import ReplayOptions, compaction_records, replay_sessions
from cairn.replay.importers import import_sessions
from cairn.store import ApiView, MessageRecord, read_transcript

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted(
    p
    for folder in (REPO / "tests" / "fixtures" / "sessions", REPO / "examples" / "sessions")
    for p in folder.rglob("*")
    if p.suffix in (".json", ".jsonl", ".traj")
)


def test_sessions_are_shipped() -> None:
    assert len(SHIPPED) >= 7


@pytest.mark.parametrize("window", [8_192, 16_384, 32_768])
@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_cairn_replays_every_shipped_session_inside_the_window(
    path: Path, window: int, tmp_path: Path
) -> None:
    imported = import_sessions(path)
    reports = asyncio.run(replay_sessions(imported.sessions, ReplayOptions(window), tmp_path))
    assert len(reports) == len(imported.sessions)
    for report in reports:
        if report.failure is not None and report.refused_tokens is None:
            # A fixed context that cannot fit stops a replay before it starts, and says so.
            assert report.failure.startswith("window too small"), report.failure
            assert report.fixed_tokens >= report.input_budget
            assert report.requests == ()
            continue
        if report.failure is not None:
            # The pipeline may refuse a request only when it really is too large.
            assert report.refused_tokens is not None
            assert report.refused_tokens > report.input_budget, report.failure
        assert report.overflows == 0, f"{report.name}: {report.overflows} requests overflowed"
        transcript = Path(report.transcript or "")
        # The table's compactions are exactly the checkpoints written.
        assert len(compaction_records(transcript)) == report.compactions
        # No request ever carried a tool call without its results, or the reverse.
        view = ApiView()
        for record in read_transcript(transcript).records:
            if isinstance(record, MessageRecord) and record.message.role == "assistant":
                assert not find_orphans(view.messages)
            view.apply(record)
