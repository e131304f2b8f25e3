"""``StoreFactory.delete``: a session goes for good, with its background tasks' transcripts
and its artifact files, in both stores; a session a writer holds open is refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.messages import user
from cairn.store import (
    JsonlStoreFactory,
    MessageRecord,
    SessionRecord,
    StoreFactory,
    TranscriptLockedError,
)
from cairn.store.paths import normalize_workspace
from cairn.store.postgres import PostgresStoreFactory
from support.postgres_server import (  # noqa: F401  (the fixtures register themselves by import)
    PostgresServer,
    postgres_server_fixture,
    postgres_url_fixture,
)


@pytest.fixture(params=["jsonl", "postgres"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    if request.param == "jsonl":
        yield JsonlStoreFactory(tmp_path / "home")
        return
    url: str = request.getfixturevalue("postgres_url")
    factory = PostgresStoreFactory(url, tmp_path / "home")
    yield factory
    factory.close()


def stored_session(stores: StoreFactory, workspace: Path, session_id: str) -> Path:
    """A session with one message, one background task's transcript and one artifact file."""
    header = SessionRecord(session_id, normalize_workspace(workspace))
    store = stores.create(workspace, header)
    store.append(MessageRecord(user("hello")))
    store.close()
    task = stores.create_subagent(
        workspace, session_id, SessionRecord("task-1", normalize_workspace(workspace))
    )
    task.append(MessageRecord(user("the task's prompt")))
    task.close()
    artifact = stores.artifacts_dir(workspace, session_id) / "outputs" / "big.txt"
    artifact.parent.mkdir(parents=True, exist_ok=True)
    artifact.write_text("a long tool output")
    return artifact


def test_delete_removes_the_session_its_tasks_and_its_artifacts(
    stores: StoreFactory, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    artifact = stored_session(stores, workspace, "doomed")
    stored_session(stores, workspace, "kept")
    assert stores.subagents(workspace, "doomed") == ["task-1"]

    assert stores.delete(workspace, "doomed") is True

    assert [s.session_id for s in stores.sessions(workspace)] == ["kept"]
    assert not stores.exists(workspace, "doomed")
    assert stores.subagents(workspace, "doomed") == []
    assert not artifact.exists()
    assert not stores.artifacts_dir(workspace, "doomed").exists()
    # The other session keeps everything, and a second delete has nothing to do.
    assert stores.subagents(workspace, "kept") == ["task-1"]
    assert stores.delete(workspace, "doomed") is False
    assert stores.delete(workspace, "never-was") is False


def test_delete_refuses_a_session_a_writer_holds_open(stores: StoreFactory, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    stored_session(stores, workspace, "busy")
    writer = stores.open(workspace, "busy")
    try:
        with pytest.raises(TranscriptLockedError):
            stores.delete(workspace, "busy")
        assert stores.exists(workspace, "busy")
        assert stores.subagents(workspace, "busy") == ["task-1"]
    finally:
        writer.close()
    assert stores.delete(workspace, "busy") is True
    assert not stores.exists(workspace, "busy")


def test_delete_is_scoped_to_the_workspace(stores: StoreFactory, tmp_path: Path) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    stored_session(stores, here, "mine")
    assert stores.delete(there, "mine") is False
    assert stores.exists(here, "mine")
