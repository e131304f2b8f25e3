"""Issue 24, item 4: a store failure in the middle of a turn is one line, not a traceback.

A full disk during an append or a ``/compact`` checkpoint, an ``fsync`` that
fails with EIO, a PostgreSQL server killed mid-write: nothing acknowledged
was lost and resume worked, but ``cairn -p`` printed a 40–58-line traceback.
The agent loop now ends the turn with one ``error`` event (code ``store``,
or ``checkpoint`` for a compaction checkpoint) and ``StoreFailedError``;
``/compact`` raises it too; ``cairn -p`` prints that one line on stderr and
exits 3 (``EXIT_STORE``), distinct from a failed task (1) and a usage error (2).

The disk is filled for real: a small tmpfs as ``CAIRN_HOME`` when running as
root (CI), and ``RLIMIT_FSIZE`` (a write past the limit fails with EFBIG)
always — so every case runs unprivileged too.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

import pytest

from cairn.agent.events import ErrorEvent, Event
from cairn.agent.facade import AgentSession
from cairn.agent.loop import StoreFailedError
from cairn.agent.runtime import Runtime
from cairn.provider import ChatRequest, ModelConfig
from cairn.store import MessageRecord, read_transcript
from cairn.store.paths import session_path
from cairn.store.postgres import PostgresStoreFactory
from cairn.surfaces.setup import EXIT_STORE
from cairn.testing import Answer, ScriptedProvider
from support.openai_server import (
    OpenAIServer,
    Reply,
)
from support.postgres_server import new_server

MODEL = ModelConfig(model="test-model", context_window=None)
#: Runs ``cairn`` after making its disk small (``RLIMIT_FSIZE``) or its fsync fail (EIO).
BOOT = """
import errno, os, resource, signal, sys
limit = os.environ.pop("TEST_FSIZE", "")
if limit:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not death by signal
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(limit), int(limit)))
if os.environ.pop("TEST_FSYNC_EIO", ""):
    def fsync(fd):
        raise OSError(errno.EIO, os.strerror(errno.EIO))
    os.fsync = fsync
from cairn.cli import main
sys.exit(main(sys.argv[1:]))
"""
#: An answer a few pages long: a turn's records outgrow whatever a page has left.
LONG = "all work and no play makes jack a dull boy " * 150


def cairn(
    *args: str, cwd: Path, env: dict[str, str], extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("CAIRN_", "OPENAI_"))}
    return subprocess.run(
        [sys.executable, "-c", BOOT, *args],
        cwd=cwd,
        env={**environ, **env, **(extra or {})},
        capture_output=True,
        text=True,
        timeout=180,
    )


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a run that failed on the store."""
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert done.returncode == EXIT_STORE, (done.returncode, done.stderr)
    return lines[0]


def env_for(server: OpenAIServer, home: Path) -> dict[str, str]:
    return {
        "CAIRN_MODEL": "test-model",
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "test",
        "CAIRN_HOME": str(home),
        # A window: the one line is the failure's (no "automatic compaction is off").
        "CAIRN_CONTEXT_WINDOW": "128000",
    }


def build_session(server: OpenAIServer, workspace: Path, env: dict[str, str]) -> str:
    """Four long turns: enough rounds for /compact, and checkpoints of several pages."""
    session_id = ""
    for n in range(4):
        server.script(Reply(text=f"answer {n}: {LONG}"))
        resume = ("--resume", session_id) if session_id else ()
        done = cairn(
            "-p", f"question {n}", "--output-format", "json", *resume, cwd=workspace, env=env
        )
        assert done.returncode == 0, done.stderr
        session_id = json.loads(done.stdout)["session_id"]
    return session_id


def message_ids(path: Path) -> list[str]:
    return [r.message.id for r in read_transcript(path).records if isinstance(r, MessageRecord)]


# ---------------------------------------------------------------------------
# (a) a full disk, mid-append and mid-/compact checkpoint


Disk = Literal["tmpfs", "fsize"]


@contextlib.contextmanager
def small_tmpfs(folder: Path) -> Iterator[Path]:
    folder.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0755", "tmpfs", str(folder)],
        check=True,
        timeout=60,
    )
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True, timeout=60)


def fill(folder: Path) -> Path:
    """Write a file until the file system is full; it holds all but the last pages' slack."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (1 << 16, 1 << 12, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return filler


@pytest.mark.parametrize("disk", ["tmpfs", "fsize"])
def test_a_full_disk_mid_turn_and_mid_compact_is_one_line_and_loses_nothing(
    tmp_path: Path, workspace: Path, openai_server: OpenAIServer, disk: Disk
) -> None:
    """Regression: cairn -p printed a traceback of 40–58 lines."""
    if disk == "tmpfs" and os.geteuid() != 0:
        # Mounting needs root (CI runs as root); the same failure, unprivileged.
        disk = "fsize"
    with contextlib.ExitStack() as stack:
        home = tmp_path / "home"
        if disk == "tmpfs":
            stack.enter_context(small_tmpfs(home))
        env = env_for(openai_server, home)
        session_id = build_session(openai_server, workspace, env)
        path = session_path(workspace.resolve(), session_id, home)
        acknowledged = message_ids(path)
        before = path.read_bytes()

        def full() -> dict[str, str]:
            if disk == "tmpfs":
                return {}
            return {"TEST_FSIZE": str(path.stat().st_size + 512)}

        filler = fill(home) if disk == "tmpfs" else None
        reason = "No space left on device" if disk == "tmpfs" else "File too large"

        # Mid-append: the long answer does not fit.
        openai_server.script(Reply(text=f"a long answer: {LONG}"))
        turn = cairn(
            "-p", "question 4", "--resume", session_id, cwd=workspace, env=env, extra=full()
        )
        line = one_line(turn)
        assert line.startswith("cairn: error: the session could not be saved: ")
        assert str(path) in line and reason in line
        assert line.endswith(f"resume with cairn --resume {session_id}")
        after_turn = path.read_bytes()
        assert after_turn.startswith(before)
        transcript = read_transcript(path)
        assert transcript.warnings == []  # no part of a record was left behind
        assert message_ids(path)[: len(acknowledged)] == acknowledged

        # Mid-/compact: the checkpoint (the kept rounds are copied into it) does not fit.
        openai_server.script(Reply(text="## Summary\nfour questions were answered"))
        compact = cairn(
            "-p", "/compact", "--resume", session_id, cwd=workspace, env=env, extra=full()
        )
        line = one_line(compact)
        assert line.startswith("cairn -p: the context could not be saved: compaction checkpoint")
        assert reason in line and "the context is unchanged" in line
        assert line.endswith(f"resume with cairn --resume {session_id}")
        assert path.read_bytes() == after_turn

        # Room again: the session resumes with everything acknowledged.
        if filler is not None:
            filler.unlink()
        expected = read_transcript(path).api().messages
        openai_server.script(Reply(text="resumed"))
        again = cairn("-p", "go on", "--resume", session_id, cwd=workspace, env=env)
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip() == "resumed"
        sent = openai_server.requests[-1].body["messages"][1:]
        assert [m["content"] for m in sent[:-1]] == [m.text for m in expected]
        assert sent[-1]["content"] == "go on"
        assert message_ids(path)[: len(acknowledged)] == acknowledged


# ---------------------------------------------------------------------------
# (b) an fsync that fails with EIO


def echo(request: ChatRequest) -> Answer:
    """Long answers to questions, a short summary to a compaction's request."""
    last = str(request.messages[-1]["content"])
    if last.startswith("question"):
        return Answer(f"answer to {last}: {LONG}")
    return Answer("## Summary\nfour questions were answered")


@pytest.fixture
def runtime(tmp_path: Path, workspace: Path) -> Iterator[Runtime]:
    rt = Runtime(workspace, MODEL, ScriptedProvider(then=echo), home=tmp_path / "home")
    yield rt
    rt.close()


def errors(agent: AgentSession) -> list[ErrorEvent]:
    seen: list[ErrorEvent] = []

    def keep(event: Event) -> None:
        if isinstance(event, ErrorEvent):
            seen.append(event)

    agent.on_event(keep)
    return seen


def failing_fsync(monkeypatch: pytest.MonkeyPatch, after: int) -> Callable[[], int]:
    """Make the ``after``-th fsync from now on (and every later one) fail with EIO."""
    calls = 0
    real = os.fsync

    def fsync(fd: int) -> None:
        nonlocal calls
        calls += 1
        if calls >= after:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)  # the store calls os.fsync at each use
    return lambda: calls


def test_an_fsync_that_fails_at_the_end_of_a_turn_is_one_error_and_the_session_resumes(
    runtime: Runtime, tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = AgentSession.new(runtime)
    said = errors(agent)
    asyncio.run(agent.prompt("question 1"))
    with monkeypatch.context() as patch:
        failing_fsync(patch, after=1)  # the turn's sync
        with pytest.raises(StoreFailedError) as caught:
            asyncio.run(agent.prompt("question 2"))
    assert caught.value.code == "store"
    assert len(said) == 1 and said[0].code == "store" and said[0].message == str(caught.value)
    message = str(caught.value)
    assert "\n" not in message and "fsync failed (Input/output error)" in message
    assert f"resume with cairn --resume {agent.id}" in message
    assert agent.status == "idle"
    # The records were written before the fsync: nothing acknowledged is lost.
    api = list(runtime.current.api_messages)
    assert [m.text for m in api][-2:] == ["question 2", f"answer to question 2: {LONG}"]
    runtime.close()
    again = Runtime(workspace, MODEL, ScriptedProvider(then=echo), home=tmp_path / "home")
    try:
        AgentSession.resume(again, agent.id)
        assert list(again.current.api_messages) == api
    finally:
        again.close()


def test_an_fsync_that_fails_on_each_record_fails_the_turn_at_its_first_record(
    tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``store.fsync: record`` a failed fsync rolls the record back: memory and file agree."""
    monkeypatch.setenv("CAIRN_FSYNC", "record")
    from cairn.agent.settings import load_settings

    settings = load_settings(workspace, home=tmp_path / "home")
    rt = Runtime(
        workspace, MODEL, ScriptedProvider(then=echo), settings=settings, home=tmp_path / "home"
    )
    try:
        agent = AgentSession.new(rt)
        said = errors(agent)
        asyncio.run(agent.prompt("question 1"))
        path = agent.transcript_path
        before = path.read_bytes()
        api = list(rt.current.api_messages)
        with monkeypatch.context() as patch:
            failing_fsync(patch, after=1)
            with pytest.raises(StoreFailedError):
                asyncio.run(agent.prompt("question 2"))
        assert len(said) == 1 and "Input/output error" in said[0].message
        assert path.read_bytes() == before
        assert list(rt.current.api_messages) == api
        # The disk is fine again: the session goes on.
        asyncio.run(agent.prompt("question 3"))
        assert [m.text for m in rt.current.api_messages][-2:] == [
            "question 3",
            f"answer to question 3: {LONG}",
        ]
    finally:
        rt.close()


def test_an_fsync_that_fails_during_a_compaction_checkpoint_leaves_memory_unchanged(
    runtime: Runtime, tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = AgentSession.new(runtime)
    for n in range(4):
        asyncio.run(agent.prompt(f"question {n}"))
    path = agent.transcript_path
    before = path.read_bytes()
    api = list(runtime.current.api_messages)
    epoch = runtime.current.pipeline.epoch
    with monkeypatch.context() as patch:
        calls = failing_fsync(patch, after=1)  # the checkpoint's own fsync
        with pytest.raises(StoreFailedError) as caught:
            asyncio.run(agent.compact())
        assert calls() == 1
    assert caught.value.code == "checkpoint"
    message = str(caught.value)
    assert "\n" not in message and "Input/output error" in message
    assert "the context is unchanged" in message
    assert list(runtime.current.api_messages) == api
    assert runtime.current.pipeline.epoch == epoch
    assert path.read_bytes() == before
    outcome = asyncio.run(agent.compact())  # the disk is fine again
    assert outcome.compaction is not None
    runtime.close()
    again = Runtime(workspace, MODEL, ScriptedProvider(then=echo), home=tmp_path / "home")
    try:
        AgentSession.resume(again, agent.id)
        assert again.current.pipeline.epoch == epoch + 1
    finally:
        again.close()


def test_cairn_p_with_a_failing_fsync_is_one_line_and_exit_code_3(
    tmp_path: Path, workspace: Path, openai_server: OpenAIServer
) -> None:
    home = tmp_path / "home"
    env = env_for(openai_server, home)
    session_id = build_session(openai_server, workspace, env)
    path = session_path(workspace.resolve(), session_id, home)
    before = path.read_bytes()
    eio = {"TEST_FSYNC_EIO": "1"}
    openai_server.script(Reply(text="an answer never made durable"))
    turn = cairn("-p", "question 4", "--resume", session_id, cwd=workspace, env=env, extra=eio)
    line = one_line(turn)
    assert line.startswith("cairn: error: the session could not be saved: ")
    assert "fsync failed (Input/output error)" in line and session_id in line
    assert turn.stdout == ""
    after_turn = path.read_bytes()
    assert after_turn.startswith(before)
    openai_server.script(Reply(text="## Summary\nfour questions were answered"))
    compact = cairn("-p", "/compact", "--resume", session_id, cwd=workspace, env=env, extra=eio)
    line = one_line(compact)
    assert "compaction checkpoint not saved" in line and "Input/output error" in line
    assert path.read_bytes() == after_turn
    openai_server.script(Reply(text="resumed"))
    again = cairn("-p", "go on", "--resume", session_id, cwd=workspace, env=env)
    assert again.returncode == 0 and again.stdout.strip() == "resumed", again.stderr


# ---------------------------------------------------------------------------
# (c) a PostgreSQL server killed mid-write


def test_cairn_p_on_postgres_whose_server_dies_mid_turn_is_one_line(
    tmp_path: Path, workspace: Path, openai_server: OpenAIServer
) -> None:
    with new_server() as server:
        url = server.create_database("killed")
        env = {**env_for(openai_server, tmp_path / "home"), "CAIRN_STORE_URL": url}
        session_id = build_session(openai_server, workspace, env)
        factory = PostgresStoreFactory(url, tmp_path / "home")
        try:
            acknowledged = [r.id for r in factory.read(workspace.resolve(), session_id).records]
        finally:
            factory.close()
        held = threading.Event()
        reply = Reply(text="an answer the server never stores", hold=held)
        openai_server.script(reply)
        done: list[subprocess.CompletedProcess[str]] = []
        worker = threading.Thread(
            target=lambda: done.append(
                cairn("-p", "question 4", "--resume", session_id, cwd=workspace, env=env)
            )
        )
        worker.start()
        try:
            assert reply.started.wait(timeout=120), "cairn -p never asked the model"
            server.kill()  # its user message is stored; its answer will not be
        finally:
            held.set()
            worker.join(timeout=240)
        (turn,) = done
        line = one_line(turn)
        assert line.startswith("cairn: error: the session could not be saved: ")
        assert f"/{session_id}: could not write record (" in line and "postgresql/" in line
        assert line.endswith(f"resume with cairn --resume {session_id}")

        server.start()  # crash recovery
        factory = PostgresStoreFactory(url, tmp_path / "home")
        try:
            stored = [r.id for r in factory.read(workspace.resolve(), session_id).records]
        finally:
            factory.close()
        assert stored[: len(acknowledged)] == acknowledged
        openai_server.script(Reply(text="resumed"))
        again = cairn("-p", "go on", "--resume", session_id, cwd=workspace, env=env)
        assert again.returncode == 0 and again.stdout.strip() == "resumed", again.stderr
