"""Which transcript store sessions live in: JSONL files under the Cairn home, or PostgreSQL,
and how a store's URL is shown (its password masked)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from cairn.store.base import StoreFactory
from cairn.store.jsonl.factory import JsonlStoreFactory


def open_store_factory(
    url: str | None, home: Path | None = None, *, fsync_every_record: bool = False
) -> StoreFactory:
    """The factory for ``url`` (a PostgreSQL URL), or JSONL files under ``home`` without one.

    The PostgreSQL store is imported only when asked for: it needs the
    ``cairn[postgres]`` extra, which a JSONL user never installs.
    """
    if url is None:
        return JsonlStoreFactory(home, fsync_every_record=fsync_every_record)
    from cairn.store.postgres.factory import PostgresStoreFactory

    return PostgresStoreFactory(url, home, fsync_every_record=fsync_every_record)


def mask_url(url: str) -> str:
    """``url`` fit to show: its password replaced by ``***``, on one line."""
    masked = re.sub(r"(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]*)", r"\1***", url)
    if "://" in masked:
        try:
            parts = urlsplit(masked)
        except ValueError:
            parts = None
        if parts is not None:
            userinfo, at, hosts = parts.netloc.rpartition("@")
            if at and ":" in userinfo:
                user = userinfo.split(":", 1)[0]
                masked = urlunsplit(parts._replace(netloc=f"{user}:***@{hosts}"))
    return " ".join(masked.split())
