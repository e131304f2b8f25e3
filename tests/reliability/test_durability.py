"""The durability setting: an fsync per record for users who want power-cut safety.

By default records are written at once (a SIGKILL loses nothing acknowledged,
see ``test_kills.py``) and fsynced at each turn end and compaction;
``store.fsync = "record"`` (or ``CAIRN_FSYNC=record``) fsyncs every record
before ``append`` returns.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.agent.settings import SettingsError, load_settings
from cairn.messages import user
from cairn.store import JsonlTranscriptStore, MessageRecord, SessionRecord
from support.cli_run import cairn_p


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The descriptors ``os.fsync`` is called on (the real fsync still runs)."""
    calls: list[int] = []
    real = os.fsync

    def spy(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    yield calls


def test_every_record_is_fsynced_before_append_returns_when_asked(
    tmp_path: Path, fsyncs: list[int]
) -> None:
    path = tmp_path / "s.jsonl"
    with JsonlTranscriptStore.create(path, SessionRecord("s", "/ws")) as default:
        fsyncs.clear()
        for n in range(3):
            default.append(MessageRecord(user(f"m{n}")))
        assert fsyncs == []  # written at once, fsynced at the turn end
    with JsonlTranscriptStore.open(path, fsync_every_record=True) as strict:
        fsyncs.clear()
        for n in range(3):
            strict.append(MessageRecord(user(f"m{n}")))
            assert len(fsyncs) == n + 1


def test_the_setting_and_the_environment_choose_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    (workspace / ".cairn").mkdir(parents=True)
    monkeypatch.delenv("CAIRN_FSYNC", raising=False)
    assert load_settings(workspace, home).store.fsync == "turn"
    (workspace / ".cairn" / "settings.json").write_text(json.dumps({"store": {"fsync": "record"}}))
    assert load_settings(workspace, home).store.fsync == "record"
    monkeypatch.setenv("CAIRN_FSYNC", "turn")
    assert load_settings(workspace, home).store.fsync == "turn"
    monkeypatch.setenv("CAIRN_FSYNC", "always")
    with pytest.raises(SettingsError, match="CAIRN_FSYNC must be 'turn' or 'record'"):
        load_settings(workspace, home)
    (workspace / ".cairn" / "settings.json").write_text(json.dumps({"store": {"fsync": 1}}))
    monkeypatch.delenv("CAIRN_FSYNC")
    with pytest.raises(SettingsError, match=r"store\.fsync"):
        load_settings(workspace, home)


def test_cairn_p_names_a_bad_fsync_value_in_one_line(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {"CAIRN_MODEL": "m", "CAIRN_HOME": str(tmp_path / "home"), "CAIRN_FSYNC": "sometimes"}
    done = cairn_p("-p", "hi", cwd=workspace, env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "cairn -p: CAIRN_FSYNC must be 'turn' or 'record', got 'sometimes'"
    ]
