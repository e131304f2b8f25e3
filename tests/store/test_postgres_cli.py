"""The PostgreSQL store from the command line: chosen by ``CAIRN_STORE_URL`` or ``store.url``,
sessions moved losslessly with ``cairn sessions export/import``, and ``cairn inspect`` /
``cairn replay`` of a stored session. Real ``cairn`` subprocesses, a real server.
"""

from __future__ import annotations

import json
from pathlib import Path

from cairn.store import read_transcript
from cairn.store.postgres import PostgresStoreFactory
from support.cli_run import cairn_p
from support.openai_server import (
    OpenAIServer,
    Reply,
)
from support.postgres_server import postgres_server_fixture, postgres_url_fixture  # noqa: F401
from support.stored_session import add_tasks_and_artifacts, make_session


def _env(tmp_path: Path, url: str) -> dict[str, str]:
    return {"CAIRN_HOME": str(tmp_path / "home"), "CAIRN_STORE_URL": url}


def test_a_session_moves_jsonl_to_postgresql_and_back_byte_for_byte(
    tmp_path: Path, postgres_url: str
) -> None:
    source = make_session(tmp_path / "elsewhere", tmp_path)
    env = _env(tmp_path, postgres_url)
    imported = cairn_p("sessions", "import", str(source), cwd=tmp_path, env=env)
    assert imported.returncode == 0, imported.stderr
    assert "imported s1 into postgresql://" in imported.stdout

    listed = cairn_p("sessions", "list", cwd=tmp_path, env=env)
    assert listed.stdout.split()[0] == "s1"

    out = tmp_path / "back.jsonl"
    exported = cairn_p("sessions", "export", "s1", str(out), cwd=tmp_path, env=env)
    assert exported.returncode == 0, exported.stderr
    assert out.read_bytes() == source.read_bytes()
    # Nothing went to the JSONL home: the store is the database.
    assert not (tmp_path / "home" / "projects").exists()


def tree(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def test_tasks_and_artifacts_move_with_their_session_and_back(
    tmp_path: Path, postgres_url: str
) -> None:
    source = make_session(tmp_path / "elsewhere", tmp_path)
    artifacts = add_tasks_and_artifacts(tmp_path / "elsewhere", tmp_path)
    # Out of the JSONL store: the file, and beside it the session's folder.
    out = tmp_path / "out" / "s1.jsonl"
    jsonl_env = {"CAIRN_HOME": str(tmp_path / "elsewhere")}
    exported = cairn_p("sessions", "export", "s1", str(out), cwd=tmp_path, env=jsonl_env)
    assert exported.returncode == 0, exported.stderr
    assert f"with 2 background-task transcripts and 3 files, in {out.with_suffix('')}" in (
        exported.stdout
    )
    assert tree(out.with_suffix("")) == tree(source.with_suffix(""))
    assert sorted(tree(out.with_suffix(""))) == sorted(
        [*artifacts, "subagents/task_1.jsonl", "subagents/task_2.jsonl"]
    )

    # Into PostgreSQL: the tasks' transcripts as rows, the files in its local folder.
    env = _env(tmp_path, postgres_url)
    imported = cairn_p("sessions", "import", str(out), cwd=tmp_path, env=env)
    assert imported.returncode == 0, imported.stderr
    assert "with 2 background-task transcripts and 3 files, from" in imported.stdout
    with PostgresStoreFactory(postgres_url, tmp_path / "home") as stores:
        assert stores.subagents(tmp_path, "s1") == ["task_1", "task_2"]
        for task in ("task_1", "task_2"):
            stored = stores.read_subagent(tmp_path, "s1", task).records
            assert (
                stored
                == read_transcript(out.with_suffix("") / "subagents" / f"{task}.jsonl").records
            )
        folder = stores.artifacts_dir(tmp_path, "s1")
    assert sorted(tree(folder)) == artifacts

    # And back out of PostgreSQL: the same bytes, file and folder.
    back = tmp_path / "back.jsonl"
    again = cairn_p("sessions", "export", "s1", str(back), cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr
    assert back.read_bytes() == source.read_bytes()
    assert tree(back.with_suffix("")) == tree(source.with_suffix(""))


def test_an_import_that_would_overwrite_a_file_imports_nothing(
    tmp_path: Path, postgres_url: str
) -> None:
    source = make_session(tmp_path / "elsewhere", tmp_path)
    add_tasks_and_artifacts(tmp_path / "elsewhere", tmp_path)
    env = _env(tmp_path, postgres_url)
    with PostgresStoreFactory(postgres_url, tmp_path / "home") as stores:
        clash = stores.artifacts_dir(tmp_path, "s1") / "user-messages" / "m1.txt"
    clash.parent.mkdir(parents=True)
    clash.write_text("something else\n")
    refused = cairn_p("sessions", "import", str(source), cwd=tmp_path, env=env)
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        f"cairn sessions import: {clash} already exists with other contents; nothing imported"
    )
    assert clash.read_text() == "something else\n"
    with PostgresStoreFactory(postgres_url) as stores:
        assert stores.sessions(tmp_path) == [] and stores.subagents(tmp_path, "s1") == []
    # An identical file already there is no clash.
    clash.write_text("a long paste, saved in full\n")
    done = cairn_p("sessions", "import", str(source), cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr


def test_inspect_and_replay_read_a_stored_session(tmp_path: Path, postgres_url: str) -> None:
    source = make_session(tmp_path / "elsewhere", tmp_path)
    env = _env(tmp_path, postgres_url)
    assert cairn_p("sessions", "import", str(source), cwd=tmp_path, env=env).returncode == 0

    inspected = cairn_p("inspect", "s1", "--json", cwd=tmp_path, env=env)
    assert inspected.returncode == 0, inspected.stderr
    summary = json.loads(inspected.stdout)
    assert summary["store"].startswith("postgresql://")
    on_file = json.loads(cairn_p("inspect", str(source), "--json", cwd=tmp_path, env=env).stdout)
    for key in ("records", "record_types", "ui_messages", "api_messages", "checkpoints"):
        assert summary[key] == on_file[key], key

    replayed = cairn_p("replay", "s1", "--window", "8192", "--json", cwd=tmp_path, env=env)
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout)["format"] == "cairn"


def test_cairn_p_keeps_its_sessions_in_the_database_the_url_names(
    tmp_path: Path, postgres_url: str, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(lambda body: Reply(text=f"answer {len(body['messages'])}"))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {
        **_env(tmp_path, postgres_url),
        "CAIRN_MODEL": "test-model",
        "OPENAI_BASE_URL": openai_server.base_url,
    }
    first = cairn_p("-p", "hello", "--output-format", "json", cwd=workspace, env=env)
    assert first.returncode == 0, first.stderr
    session_id = json.loads(first.stdout)["session_id"]
    again = cairn_p(
        "-p", "and again", "--resume", session_id, "--output-format", "json", cwd=workspace, env=env
    )
    assert again.returncode == 0, again.stderr

    with PostgresStoreFactory(postgres_url) as stores:
        transcript = stores.read_session(session_id)
    texts = [m.text for m in transcript.ui()]
    assert texts[:2] == ["hello", "answer 2"] and "and again" in texts
    assert not (tmp_path / "home" / "projects").exists()


def test_store_url_in_settings_selects_the_database(tmp_path: Path, postgres_url: str) -> None:
    source = make_session(tmp_path / "elsewhere", tmp_path)
    settings = tmp_path / "home" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"store": {"url": postgres_url}}))
    env = {"CAIRN_HOME": str(tmp_path / "home")}
    assert cairn_p("sessions", "import", str(source), cwd=tmp_path, env=env).returncode == 0
    with PostgresStoreFactory(postgres_url) as stores:
        assert read_transcript(source).records == stores.read_session("s1").records


def test_an_unreachable_database_is_one_line(tmp_path: Path) -> None:
    url = f"postgresql://bob:secret@/nowhere?host={tmp_path}/no-socket"
    done = cairn_p("sessions", "list", cwd=tmp_path, env=_env(tmp_path, url))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cairn sessions list: ")
    assert "secret" not in done.stderr
