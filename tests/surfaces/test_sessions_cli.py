"""``cairn sessions list/export/import``, and ``inspect``/``replay`` of a session id, on JSONL.

The same commands against PostgreSQL are in ``tests/store/test_postgres_cli.py``.
Every command runs as a real ``cairn`` subprocess.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cairn.store import JsonlStoreFactory, read_transcript
from support.cli_run import cairn_p
from support.stored_session import add_tasks_and_artifacts, make_session


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"CAIRN_HOME": str(tmp_path / "home")}


def test_export_writes_the_session_byte_for_byte(tmp_path: Path, env: dict[str, str]) -> None:
    source = make_session(tmp_path / "home", tmp_path)
    out = tmp_path / "out" / "copy.jsonl"
    done = cairn_p("sessions", "export", "s1", str(out), cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert "exported s1" in done.stdout and "8 records" in done.stdout
    assert out.read_bytes() == source.read_bytes()


def test_import_then_export_is_lossless(tmp_path: Path, env: dict[str, str]) -> None:
    source = make_session(tmp_path / "elsewhere", tmp_path)
    done = cairn_p("sessions", "import", str(source), cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    imported = JsonlStoreFactory(tmp_path / "home").path(tmp_path, "s1")
    assert imported.read_bytes() == source.read_bytes()
    # The imported session resumes from its checkpoint like the original.
    again = read_transcript(imported)
    assert again.api().messages == read_transcript(source).api().messages


def test_import_refuses_a_session_the_store_holds(tmp_path: Path, env: dict[str, str]) -> None:
    source = make_session(tmp_path / "home", tmp_path)
    before = source.read_bytes()
    done = cairn_p("sessions", "import", str(source), cwd=tmp_path, env=env)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "cairn sessions import: session s1 is already in the store; nothing imported"
    )
    assert source.read_bytes() == before


def test_export_refuses_to_overwrite_a_file(tmp_path: Path, env: dict[str, str]) -> None:
    make_session(tmp_path / "home", tmp_path)
    out = tmp_path / "taken.jsonl"
    out.write_text("mine\n")
    done = cairn_p("sessions", "export", "s1", str(out), cwd=tmp_path, env=env)
    assert done.returncode == 2
    assert "already exists" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert out.read_text() == "mine\n"


def test_export_refuses_an_existing_folder_and_writes_neither(
    tmp_path: Path, env: dict[str, str]
) -> None:
    make_session(tmp_path / "home", tmp_path)
    add_tasks_and_artifacts(tmp_path / "home", tmp_path)
    out = tmp_path / "copy.jsonl"
    (tmp_path / "copy").mkdir()
    done = cairn_p("sessions", "export", "s1", str(out), cwd=tmp_path, env=env)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"cairn sessions export: cannot write {tmp_path / 'copy'}: it already exists"
    )
    assert not out.exists() and list((tmp_path / "copy").iterdir()) == []
    # Nothing left half-built beside it either.
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".copy")]


def test_tasks_and_artifacts_move_between_jsonl_homes(tmp_path: Path, env: dict[str, str]) -> None:
    source = make_session(tmp_path / "elsewhere", tmp_path)
    add_tasks_and_artifacts(tmp_path / "elsewhere", tmp_path)
    done = cairn_p("sessions", "import", str(source), cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    imported = JsonlStoreFactory(tmp_path / "home").path(tmp_path, "s1")
    assert imported.read_bytes() == source.read_bytes()
    before = {
        p.relative_to(source.with_suffix("")): p.read_bytes()
        for p in source.with_suffix("").rglob("*")
        if p.is_file()
    }
    after = {
        p.relative_to(imported.with_suffix("")): p.read_bytes()
        for p in imported.with_suffix("").rglob("*")
        if p.is_file()
    }
    assert after == before and len(after) == 5


def test_import_refuses_a_task_transcript_that_is_not_one(
    tmp_path: Path, env: dict[str, str]
) -> None:
    source = make_session(tmp_path / "elsewhere", tmp_path)
    add_tasks_and_artifacts(tmp_path / "elsewhere", tmp_path)
    wrong = source.with_suffix("") / "subagents" / "task_3.jsonl"
    wrong.write_bytes((source.with_suffix("") / "subagents" / "task_1.jsonl").read_bytes())
    done = cairn_p("sessions", "import", str(source), cwd=tmp_path, env=env)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"cairn sessions import: {wrong} is not the transcript of background task task_3 "
        "(no session header naming it): nothing imported"
    )
    assert not (tmp_path / "home").exists()


def test_an_unknown_session_is_one_line(tmp_path: Path, env: dict[str, str]) -> None:
    done = cairn_p("sessions", "export", "nope", str(tmp_path / "x.jsonl"), cwd=tmp_path, env=env)
    assert done.returncode == 2
    assert done.stderr.strip() == "cairn sessions export: no session 'nope' in the store"


def test_list_shows_the_workspace_sessions(tmp_path: Path, env: dict[str, str]) -> None:
    make_session(tmp_path / "home", tmp_path, "s1")
    make_session(tmp_path / "home", tmp_path, "s2")
    broken = JsonlStoreFactory(tmp_path / "home").path(tmp_path, "s3")
    broken.write_text("not a transcript\n")
    done = cairn_p("sessions", "list", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    lines = {line.split()[0]: line.split("Z  ", 1)[1] for line in done.stdout.splitlines()}
    # What the pickers show: the message count (the compact block not counted) and
    # the first prompt; a session that cannot be read says why, on its line.
    assert lines == {
        "s1": "5 messages  find the bug in parser.py",
        "s2": "5 messages  find the bug in parser.py",
        "s3": f"cannot be read: {broken} is not a Cairn transcript (no valid record found)",
    }


def test_inspect_takes_a_session_id(tmp_path: Path, env: dict[str, str]) -> None:
    make_session(tmp_path / "home", tmp_path)
    done = cairn_p("inspect", "s1", "--json", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["session_id"] == "s1"
    assert (summary["path"], summary["store"]) == (None, "the JSONL store (CAIRN_HOME)")
    assert summary["records"] == 8
    assert summary["checkpoints"] == {"valid": 1, "invalid": 0}


def test_inspect_of_an_unknown_id_names_the_store(tmp_path: Path, env: dict[str, str]) -> None:
    done = cairn_p("inspect", "nope", cwd=tmp_path, env=env)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "cairn inspect: nope: no such file, and no session 'nope' in the JSONL store (CAIRN_HOME)"
    )


def test_replay_takes_a_session_id(tmp_path: Path, env: dict[str, str]) -> None:
    make_session(tmp_path / "home", tmp_path)
    done = cairn_p("replay", "s1", "--window", "8192", "--json", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["format"] == "cairn"


def test_a_store_url_that_is_not_postgres_is_refused(tmp_path: Path, env: dict[str, str]) -> None:
    bad = {**env, "CAIRN_STORE_URL": "mysql://bob:secret@db/cairn"}
    done = cairn_p("sessions", "list", cwd=tmp_path, env=bad)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "cairn sessions list: CAIRN_STORE_URL must be a PostgreSQL URL "
        "(postgresql://user@host/database), got 'mysql://bob:***@db/cairn'"
    )
