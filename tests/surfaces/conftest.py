"""The surfaces tests' fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """The folder ``cairn`` runs in (a project of its own, beside its home)."""
    folder = tmp_path / "project"
    folder.mkdir()
    return folder
