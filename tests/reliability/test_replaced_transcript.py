"""Issue 24, item 2: a transcript replaced or deleted while its session is live.

An editor that saves by rename, ``sed -i`` and ``rm`` all leave the writer's
descriptor on an unlinked file. Cairn appended to it, the UI showed the
answers, and nothing reached a file anyone could find. The store now checks
before every write (and at every sync and at close) that its path still
names the file it writes; when it does not, it writes the whole session —
the old file, which holds every record it wrote, and what follows — to a file
a resume can open, and says so in one line:

- deleted: the file is restored at its path, same session id;
- replaced (someone's edit): that file is left as it is, and the session goes
  on under a new session id in the same folder.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest

from cairn.agent.events import Event, Notice
from cairn.agent.facade import AgentSession
from cairn.agent.runtime import Runtime
from cairn.messages import Message
from cairn.provider import ChatRequest, ModelConfig
from cairn.store import (
    JsonlTranscriptStore,
    MessageRecord,
    SessionRecord,
    TranscriptWriteError,
    read_transcript,
)
from cairn.store.jsonl import files as jsonl_files
from cairn.store.jsonl import writer as jsonl_writer
from cairn.store.records import decode_line
from cairn.testing import Answer, ScriptedProvider
from support.cli_run import cairn_p
from support.openai_server import (
    OpenAIServer,
    Reply,
)

Change = Literal["rename", "sed", "unlink"]
CHANGES: tuple[Change, ...] = ("rename", "sed", "unlink")
MODEL = ModelConfig(model="test-model", context_window=32_768)


def echo(request: ChatRequest) -> Answer:
    """Answers naming the prompt, so each turn's answer is told apart."""
    return Answer(f"answer to {request.messages[-1]['content']}")


@pytest.fixture
def runtime(tmp_path: Path, workspace: Path) -> Iterator[Runtime]:
    rt = Runtime(workspace, MODEL, ScriptedProvider(then=echo), home=tmp_path / "home")
    yield rt
    rt.close()


def change(path: Path, how: Change, content: bytes | None = None) -> None:
    """What an editor's save, ``sed -i`` or ``rm`` does to a file."""
    if how == "rename":
        # An editor's atomic save: the buffer it read earlier, written beside, renamed over.
        temp = path.with_name(f".{path.name}.swp")
        temp.write_bytes(path.read_bytes() if content is None else content)
        temp.replace(path)
    elif how == "sed":
        subprocess.run(["sed", "-i", "s/first/FIRST/", str(path)], check=True, timeout=60)
    else:
        path.unlink()


def notices(agent: AgentSession) -> list[str]:
    seen: list[str] = []

    def keep(event: Event) -> None:
        if isinstance(event, Notice):
            seen.append(event.text)

    agent.on_event(keep)
    return seen


def message_ids(path: Path) -> list[str]:
    return [r.message.id for r in read_transcript(path).records if isinstance(r, MessageRecord)]


def session_files(folder: Path) -> set[Path]:
    return set(folder.glob("*.jsonl"))


@pytest.mark.parametrize("how", CHANGES)
def test_a_transcript_changed_under_a_live_session_loses_nothing_and_resumes(
    runtime: Runtime, tmp_path: Path, workspace: Path, how: Change
) -> None:
    """Regression: records after the change went to the unlinked file, with no warning."""
    agent = AgentSession.new(runtime)
    said = notices(agent)
    path = agent.transcript_path
    asyncio.run(agent.prompt("first question"))
    # An editor reads the file now, and saves it only after the next turn is written.
    editor_buffer = path.read_bytes()
    asyncio.run(agent.prompt("second question"))
    written = path.read_bytes()
    change(path, how, editor_buffer)
    replacement = None if how == "unlink" else path.read_bytes()
    asyncio.run(agent.prompt("third question"))
    acknowledged = [m.id for m in agent.ui_messages()]
    api = list(runtime.current.api_messages)
    runtime.close()

    assert len(said) == 1, said
    line = said[0]
    assert "\n" not in line and str(path) in line
    if how == "unlink":
        assert "was deleted" in line and "restored" in line
        recovered, session_id = path, agent.id
        assert session_files(path.parent) == {path}
    else:
        assert "was replaced by another file" in line
        (recovered,) = session_files(path.parent) - {path}
        session_id = recovered.stem
        assert str(recovered) in line and f"--resume {session_id}" in line
        assert path.read_bytes() == replacement  # someone's edit is left as it is
    # Every record the session wrote, in order, then the third turn.
    lines = recovered.read_bytes().splitlines(keepends=True)
    before = written.splitlines(keepends=True)
    assert lines[1 : len(before)] == before[1:]  # byte for byte, the header aside
    header = decode_line(lines[0])
    assert isinstance(header, SessionRecord) and header.session_id == session_id
    assert message_ids(recovered) == acknowledged
    assert [m.text for m in read_transcript(recovered).ui()][-2:] == [
        "third question",
        "answer to third question",
    ]
    # It resumes with the same context.
    again = Runtime(workspace, MODEL, ScriptedProvider(then=echo), home=tmp_path / "home")
    try:
        resumed = AgentSession.resume(again, session_id)
        assert resumed.transcript_path == recovered
        assert list(again.current.api_messages) == api
        asyncio.run(resumed.prompt("fourth question"))
        assert [m.text for m in resumed.ui_messages()][-1] == "answer to fourth question"
    finally:
        again.close()


@pytest.mark.parametrize("how", CHANGES)
def test_a_change_after_the_last_write_is_caught_at_close(tmp_path: Path, how: Change) -> None:
    """Records written after an editor read the file are saved when the store closes."""
    path = tmp_path / "s1.jsonl"
    warned: list[str] = []
    store = JsonlTranscriptStore.create(path, SessionRecord("s1", "/ws"))
    store.on_warning(warned.append)
    first = MessageRecord(Message(role="user", content="first question"))
    store.append(first)
    buffer = path.read_bytes()
    second = MessageRecord(Message(role="user", content="second question"))
    store.append(second)
    change(path, how, buffer)
    store.close()
    assert len(warned) == 1 and warned == store.warnings
    recovered = path if how == "unlink" else store.path
    assert recovered.name == f"{store.session_id}.jsonl"
    ids = [r.message.id for r in read_transcript(recovered).records if isinstance(r, MessageRecord)]
    assert ids == [first.message.id, second.message.id]
    with JsonlTranscriptStore.open(recovered) as reopened:
        assert reopened.api_view.messages == [first.message, second.message]


def test_an_unchanged_file_is_never_recovered(tmp_path: Path) -> None:
    path = tmp_path / "s1.jsonl"
    with JsonlTranscriptStore.create(path, SessionRecord("s1", "/ws")) as store:
        for n in range(5):
            store.append(MessageRecord(Message(role="user", content=f"q{n}")))
            store.sync()
        assert store.warnings == [] and store.path == path
    assert session_files(tmp_path) == {path}


def test_a_session_that_cannot_be_saved_elsewhere_fails_the_write_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing goes to the unlinked file while the recovery cannot be written."""
    path = tmp_path / "s1.jsonl"
    store = JsonlTranscriptStore.create(path, SessionRecord("s1", "/ws"))
    kept = MessageRecord(Message(role="user", content="kept"))
    store.append(kept)
    path.unlink()

    def disk_full(path: Path, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as patch:
        # Both places the store creates a file whole: the restore and the renamed copy.
        patch.setattr(jsonl_files, "create_whole", disk_full)
        patch.setattr(jsonl_writer, "create_whole", disk_full)
        lost = MessageRecord(Message(role="user", content="not written anywhere"))
        with pytest.raises(TranscriptWriteError) as caught:
            store.append(lost)
    text = str(caught.value)
    assert "\n" not in text and str(path) in text and "was deleted" in text
    assert "No space left on device" in text
    assert store.api_view.messages == [kept.message]
    # Once it can be, the next write recovers everything acknowledged.
    store.append(MessageRecord(Message(role="user", content="later")))
    store.close()
    assert [m.text for m in read_transcript(path).ui()] == ["kept", "later"]


@pytest.mark.parametrize("how", CHANGES)
def test_cairn_p_says_where_the_session_went_and_it_resumes(
    tmp_path: Path, workspace: Path, openai_server: OpenAIServer, how: Change
) -> None:
    """A real ``cairn -p`` whose transcript is changed while it waits for the model."""
    home = tmp_path / "home"
    env = {
        "CAIRN_MODEL": "test-model",
        "OPENAI_BASE_URL": openai_server.base_url,
        "OPENAI_API_KEY": "test",
        "CAIRN_HOME": str(home),
        # A window: the one notice is where the session went (not "compaction is off").
        "CAIRN_CONTEXT_WINDOW": "128000",
    }
    held = threading.Event()
    reply = Reply(text="the first answer", hold=held)
    openai_server.script(reply)
    done: list[subprocess.CompletedProcess[str]] = []
    worker = threading.Thread(
        target=lambda: done.append(
            cairn_p("-p", "first question", "--output-format", "json", cwd=workspace, env=env)
        )
    )
    worker.start()
    try:
        assert reply.started.wait(timeout=120), "cairn -p never asked the model"
        (path,) = home.glob("projects/*/*.jsonl")
        old_id = path.stem
        change(path, how)
    finally:
        held.set()
        worker.join(timeout=180)
    (run,) = done
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cairn: notice: "), run.stderr
    session_id = json.loads(run.stdout)["session_id"]
    if how == "unlink":
        assert session_id == old_id and "restored" in lines[0]
    else:
        assert session_id != old_id and f"--resume {session_id}" in lines[0]
    recovered = path.with_name(f"{session_id}.jsonl")
    assert [m.text for m in read_transcript(recovered).ui()] == [
        "first question",
        "the first answer",
    ]
    openai_server.script(Reply(text="the second answer"))
    again = cairn_p("-p", "second question", "--resume", session_id, cwd=workspace, env=env)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "the second answer"
    sent = [m["content"] for m in openai_server.requests[-1].body["messages"][1:]]
    assert sent == ["first question", "the first answer", "second question"]
