"""Moving a session with what belongs to it (``cairn.store.transfer``), in process.

The commands themselves run as real subprocesses in ``tests/surfaces/test_sessions_cli.py``
(JSONL) and ``tests/store/test_postgres_cli.py`` (PostgreSQL).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn.store import JsonlStoreFactory, TranscriptWriteError
from cairn.store.transfer import companion_dir, export_session, import_session
from support.stored_session import add_tasks_and_artifacts, make_session


def test_the_companion_folder_is_the_file_without_its_suffix() -> None:
    assert companion_dir(Path("/x/s1.jsonl")) == Path("/x/s1")
    assert companion_dir(Path("/x/s1")) == Path("/x/s1.d")


def test_a_session_without_tasks_or_artifacts_exports_a_file_alone(tmp_path: Path) -> None:
    make_session(tmp_path / "home", tmp_path)
    moved = export_session(JsonlStoreFactory(tmp_path / "home"), "s1", tmp_path / "out.jsonl")
    assert (moved.tasks, moved.files) == (0, 0)
    assert (tmp_path / "out.jsonl").is_file() and not (tmp_path / "out").exists()


def test_an_export_that_cannot_place_its_folder_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_session(tmp_path / "home", tmp_path)
    add_tasks_and_artifacts(tmp_path / "home", tmp_path)
    out = tmp_path / "out" / "s1.jsonl"

    def refuse(self: Path, target: Path) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "rename", refuse)
    with pytest.raises(TranscriptWriteError, match=r"out/s1: No space left on device"):
        export_session(JsonlStoreFactory(tmp_path / "home"), "s1", out)
    assert list(out.parent.iterdir()) == []


def test_moved_counts_what_went_with_the_session(tmp_path: Path) -> None:
    make_session(tmp_path / "home", tmp_path)
    add_tasks_and_artifacts(tmp_path / "home", tmp_path)
    out = tmp_path / "s1.jsonl"
    exported = export_session(JsonlStoreFactory(tmp_path / "home"), "s1", out)
    imported = import_session(JsonlStoreFactory(tmp_path / "other"), out)
    assert (exported.tasks, exported.files) == (imported.tasks, imported.files) == (2, 3)
    assert exported.records == imported.records == 8


def test_a_file_under_subagents_that_no_task_id_names_travels_as_an_artifact(
    tmp_path: Path,
) -> None:
    make_session(tmp_path / "home", tmp_path)
    add_tasks_and_artifacts(tmp_path / "home", tmp_path)
    stores = JsonlStoreFactory(tmp_path / "home")
    stray = stores.artifacts_dir(tmp_path, "s1") / "subagents" / "notes for me.jsonl"
    stray.write_text("my own notes\n")
    assert stores.subagents(tmp_path, "s1") == ["task_1", "task_2"]
    out = tmp_path / "s1.jsonl"
    exported = export_session(stores, "s1", out)
    assert (exported.tasks, exported.files) == (2, 4)
    other = JsonlStoreFactory(tmp_path / "other")
    imported = import_session(other, out)
    assert (imported.tasks, imported.files) == (2, 4)
    copied = other.artifacts_dir(tmp_path, "s1") / "subagents" / "notes for me.jsonl"
    assert copied.read_text() == "my own notes\n"
    assert other.subagents(tmp_path, "s1") == ["task_1", "task_2"]
