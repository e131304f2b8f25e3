"""The agent tests' fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """A folder for the hook scripts the tests write."""
    directory = tmp_path / "bin"
    directory.mkdir()
    return directory
