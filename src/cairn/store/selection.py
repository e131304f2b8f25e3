"""Which transcript store sessions live in: JSONL files under the Cairn home, or PostgreSQL."""

from __future__ import annotations

from pathlib import Path

from cairn.store.base import StoreFactory
from cairn.store.jsonl import JsonlStoreFactory


def open_store_factory(
    url: str | None, home: Path | None = None, *, fsync_every_record: bool = False
) -> StoreFactory:
    """The factory for ``url`` (a PostgreSQL URL), or JSONL files under ``home`` without one.

    The PostgreSQL store is imported only when asked for: it needs the
    ``cairn[postgres]`` extra, which a JSONL user never installs.
    """
    if url is None:
        return JsonlStoreFactory(home, fsync_every_record=fsync_every_record)
    from cairn.store.postgres import PostgresStoreFactory

    return PostgresStoreFactory(url, home, fsync_every_record=fsync_every_record)
