"""Fixtures every test folder may take: a workspace folder, a folder outside it, and
``openai_server`` (a real SSE server on 127.0.0.1, ``support/openai_server.py``).

The fixtures of one folder only are in that folder's own ``conftest.py``. A module
that imports ``every_api_server_fixture`` overrides ``openai_server`` with one run
per wire API.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.openai_server import openai_server_fixture  # noqa: F401  (registers ``openai_server``)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text("top secret\n")
    return folder
