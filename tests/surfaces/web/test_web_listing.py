"""The sidebar's listing (``cairn.surfaces.web.listing.SessionList``): read off the loop,
describing only the sessions that changed since the last read, never showing a stale one."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from cairn.messages import JSONValue, user
from cairn.provider import ModelConfig, OpenAIProvider
from cairn.store import JsonlStoreFactory, MessageRecord, SessionRecord
from cairn.surfaces.web import WebSetup
from cairn.surfaces.web import listing as listing_module
from cairn.surfaces.web.listing import SessionList


def setup_in(tmp_path: Path) -> WebSetup:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    # Never asked: listing reads only the store.
    model = ModelConfig(model="test-model", base_url="http://127.0.0.1:9/v1", context_window=32_768)
    return WebSetup(model, OpenAIProvider(model), workspace, home=tmp_path / "home")


def counts(listed: list[JSONValue]) -> dict[str, Any]:
    return {str(s["id"]): s["messages"] for s in listed if isinstance(s, dict)}


def test_a_listing_describes_only_what_changed_and_shows_every_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup = setup_in(tmp_path)
    stores = JsonlStoreFactory(setup.home)
    for n in range(3):
        with stores.create(setup.workspace, SessionRecord(f"s{n}", str(setup.workspace))) as s:
            s.append(MessageRecord(user(f"question {n}")))
    described: list[str] = []
    describe = JsonlStoreFactory.describe

    def counted(self: JsonlStoreFactory, workspace: Path, session_id: str) -> Any:
        described.append(session_id)
        return describe(self, workspace, session_id)

    monkeypatch.setattr(JsonlStoreFactory, "describe", counted)
    monkeypatch.setattr(listing_module, "SETTLED_S", 0.0)  # every digest may be kept
    sessions = SessionList(setup.runtime)

    async def read() -> list[JSONValue]:
        return await sessions.listing()

    assert counts(asyncio.run(read())) == {"s0": 1, "s1": 1, "s2": 1}
    assert sorted(described) == ["s0", "s1", "s2"]
    described.clear()
    assert counts(asyncio.run(read())) == {"s0": 1, "s1": 1, "s2": 1}
    assert described == []  # nothing changed: nothing read

    # Another process writes s1 (its time moves on); this server changes s2 (forget).
    with stores.open(setup.workspace, "s1") as s:
        s.append(MessageRecord(user("another question")))
    path = stores.path(setup.workspace, "s1")
    stamp = path.stat().st_mtime + 5
    os.utime(path, (stamp, stamp))
    sessions.forget("s2")
    assert counts(asyncio.run(read())) == {"s0": 1, "s1": 2, "s2": 1}
    assert sorted(described) == ["s1", "s2"]
    described.clear()

    # A removed session drops out.
    path.unlink()
    assert counts(asyncio.run(read())) == {"s0": 1, "s2": 1}


def test_asks_while_a_listing_is_read_share_the_next_read(tmp_path: Path) -> None:
    """Many asks at once cost at most two reads, and each gets a read that started after
    it asked."""
    setup = setup_in(tmp_path)
    reads = 0
    sessions = SessionList(setup.runtime)
    read = sessions._read

    def counted() -> list[JSONValue]:
        nonlocal reads
        reads += 1
        return read()

    sessions._read = counted  # type: ignore[method-assign]

    async def many() -> list[list[JSONValue]]:
        return await asyncio.gather(*(sessions.listing() for _ in range(500)))

    answers = asyncio.run(many())
    assert len(answers) == 500 and all(a == [] for a in answers)
    assert reads <= 2
