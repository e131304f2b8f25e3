"""``cairn sessions``: list a store's sessions, and move one between a JSONL file and a store.

The store is the one the settings choose (``--store URL``, then
``CAIRN_STORE_URL``, then ``store.url`` in ``settings.json``; without any,
the JSONL files under the Cairn home). ``cairn inspect`` and ``cairn replay``
take a session id of that store where they take a file (``stored_file``).
Every failure is one line on stderr and exit code 2; nothing stored is
changed by a failed command.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from cairn.agent import SettingsError, load_settings
from cairn.errors import CairnError
from cairn.store import NotATranscriptError, StoreError, StoreFactory
from cairn.store.jsonl.files import write_transcript
from cairn.store.paths import normalize_workspace
from cairn.store.selection import mask_url, open_store_factory
from cairn.store.transfer import (
    Moved,
    companion_dir,
    export_session,
    import_session,
    read_stored,
)
from cairn.surfaces.terminal.view import messages_text, one_line, prompt_text

#: Exit code of a command that could not be carried out (as for a usage error).
EXIT_FAILED = 2


def configured_store_url(explicit: str | None, workspace: Path) -> str | None:
    """``--store URL``, else ``CAIRN_STORE_URL``, else the settings' ``store.url``."""
    if explicit:
        return explicit
    return load_settings(workspace).store.url


@contextlib.contextmanager
def opened_stores(explicit: str | None, workspace: Path) -> Iterator[StoreFactory]:
    stores = open_store_factory(configured_store_url(explicit, workspace))
    try:
        yield stores
    finally:
        stores.close()


def describe_store(explicit: str | None, workspace: Path) -> str:
    url = configured_store_url(explicit, workspace)
    return mask_url(url) if url else "the JSONL store (CAIRN_HOME)"


@contextlib.contextmanager
def stored_file(
    target: str, store_url: str | None, workspace: Path
) -> Iterator[tuple[Path, str | None]]:
    """``target`` as a transcript file, and the store it came from (``None``: a file).

    ``target`` is a path, or else a session id of the store: that session is
    written to a temporary JSONL file (removed after), so every reader of
    files reads it the same way.
    """
    path = Path(target)
    if path.exists() or "/" in target or target.endswith(".jsonl"):
        yield path, None
        return
    with opened_stores(store_url, workspace) as stores, tempfile.TemporaryDirectory() as tmp:
        try:
            transcript = read_stored(stores, target)
        except NotATranscriptError:
            raise NotATranscriptError(
                f"{target}: no such file, and no session {target!r} in "
                f"{describe_store(store_url, workspace)}"
            ) from None
        copy = Path(tmp) / f"{target}.jsonl"
        write_transcript(copy, transcript.records)
        yield copy, describe_store(store_url, workspace)


def run_list(store_url: str | None, workspace: Path, out: IO[str] | None = None) -> int:
    out = out or sys.stdout
    folder = Path(normalize_workspace(workspace))
    lines = []
    try:
        with opened_stores(store_url, workspace) as stores:
            found = stores.sessions(folder)
            for stored in found:
                when = datetime.fromtimestamp(stored.last_activity, UTC)
                try:
                    # As the pickers do: without reading the session whole.
                    digest = stores.describe(folder, stored.session_id)
                except StoreError as exc:
                    what = f"cannot be read: {one_line(str(exc), 1000)}"
                else:
                    what = f"{messages_text(digest.messages)}  {prompt_text(digest.first_prompt)}"
                lines.append(f"{stored.session_id}  {when:%Y-%m-%d %H:%M:%S}Z  {what}\n")
    except (CairnError, OSError) as exc:
        return _fail("sessions list", exc)
    out.writelines(lines)
    if not found:
        out.write(f"no sessions for {workspace} in {describe_store(store_url, workspace)}\n")
    out.flush()
    return 0


def run_export(
    session_id: str, path: Path, store_url: str | None, workspace: Path, out: IO[str] | None = None
) -> int:
    try:
        with opened_stores(store_url, workspace) as stores:
            moved = export_session(stores, session_id, path)
    except (CairnError, OSError) as exc:
        return _fail("sessions export", exc)
    return _report(
        f"exported {moved.session_id} to {path}", moved, out, f"in {companion_dir(path)}"
    )


def run_import(
    path: Path, store_url: str | None, workspace: Path, out: IO[str] | None = None
) -> int:
    try:
        with opened_stores(store_url, workspace) as stores:
            moved = import_session(stores, path)
    except (CairnError, OSError) as exc:
        return _fail("sessions import", exc)
    where = describe_store(store_url, workspace)
    return _report(
        f"imported {moved.session_id} into {where}", moved, out, f"from {companion_dir(path)}"
    )


def _report(done: str, moved: Moved, out: IO[str] | None, folder: str) -> int:
    out = out or sys.stdout
    out.write(f"{done} ({moved.records:,} records; workspace {moved.workspace})\n")
    if moved.tasks or moved.files:
        tasks = f"{moved.tasks} background-task transcript{'s' * (moved.tasks != 1)}"
        files = f"{moved.files} file{'s' * (moved.files != 1)}"
        out.write(f"with {tasks} and {files}, {folder}\n")
    for warning in moved.warnings:
        out.write(f"warning: {warning}\n")
    out.flush()
    return 0


def _fail(command: str, exc: BaseException) -> int:
    if isinstance(exc, SettingsError | CairnError):
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}"
    print(f"cairn {command}: {' '.join(text.splitlines())}", file=sys.stderr)
    return EXIT_FAILED


def with_stored_file(
    command: str,
    target: str,
    store_url: str | None,
    run: Callable[[Path, str | None], int],
    workspace: Path | None = None,
) -> int:
    """``run(path, origin)`` for ``target`` as a file (``stored_file``); a failed lookup exits 2."""
    stack = contextlib.ExitStack()
    try:
        path, origin = stack.enter_context(stored_file(target, store_url, workspace or Path.cwd()))
    except (CairnError, OSError) as exc:
        return _fail(command, exc)
    with stack:
        return run(path, origin)
