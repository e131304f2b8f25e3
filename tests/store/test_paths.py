"""Where session files live."""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn.store import cairn_home, session_path, workspace_slug
from cairn.store.paths import check_session_id


def test_cairn_home_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CAIRN_HOME", str(tmp_path))
    assert cairn_home() == tmp_path
    monkeypatch.delenv("CAIRN_HOME")
    assert cairn_home() == Path.home() / ".cairn"


def test_session_files_go_under_projects_and_the_workspace_slug(tmp_path: Path) -> None:
    path = session_path(tmp_path / "repo", "abc123", home=tmp_path / "home")
    assert path.parent.parent == tmp_path / "home" / "projects"
    assert path.name == "abc123.jsonl"
    assert path.parent.name == workspace_slug(tmp_path / "repo")


def test_slugs_are_stable_readable_and_do_not_collide(tmp_path: Path) -> None:
    assert workspace_slug("/a/b-c") != workspace_slug("/a-b/c")
    assert workspace_slug(tmp_path) == workspace_slug(str(tmp_path) + "/")
    assert workspace_slug("/home/me/my repo").startswith("home-me-my-repo-")


def test_symlinked_workspaces_share_a_slug(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert workspace_slug(tmp_path / "link") == workspace_slug(real)


@pytest.mark.parametrize("bad", ["", "../escape", "a/b", ".hidden", "x" * 129, "sp ace"])
def test_session_ids_that_could_escape_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid session id"):
        check_session_id(bad)
