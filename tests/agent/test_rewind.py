"""Rewind and fork through ``AgentSession``: a new branch whose context is exactly the
original's at the chosen point, the files put back from their snapshots, ``bash``
named, the original untouched and listed, on the JSONL store and on PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn import AgentSession, SessionBusyError
from cairn.agent.events import SessionStatus
from cairn.agent.rewind import RewindPointError
from cairn.agent.runtime import BRANCH_KEY, Runtime
from cairn.agent.settings import Settings
from cairn.agent.snapshots import SNAPSHOTS_DIR
from cairn.messages import Message, ToolCall
from cairn.provider import ChatRequest, ModelConfig
from cairn.store import (
    JsonlStoreFactory,
    Record,
    SessionRecord,
    StoreFactory,
    TranscriptWriteError,
    api_view,
    new_session_id,
)
from cairn.store.postgres import PostgresStoreFactory
from cairn.testing import Answer, ScriptedProvider
from support.postgres_server import (  # noqa: F401  (the fixtures register themselves by import)
    postgres_server_fixture,
    postgres_url_fixture,
)

SUMMARY = "<summary>\n## Objective and constraints\nKeep the files.\n</summary>"


def is_fork(request: ChatRequest) -> bool:
    last = request.messages[-1]
    return last["role"] == "user" and "TEXT ONLY" in str(last.get("content"))


class Script:
    """Answers by the prompt being answered: each prompt's own list, in order; forks get
    the summary. So a branch that sends a prompt again gets the same answers."""

    def __init__(self, plans: dict[str, list[Answer]]) -> None:
        self.plans = plans
        self.played: dict[str, int] = {}
        self.provider = ScriptedProvider(then=self.answer)

    def answer(self, request: ChatRequest) -> Answer:
        if is_fork(request):
            return Answer(SUMMARY)
        prompt = next(str(m["content"]) for m in reversed(request.messages) if m["role"] == "user")
        # The answers after the prompt's last user message so far: which step of its plan.
        tail = request.messages[
            max(i for i, m in enumerate(request.messages) if m["role"] == "user") :
        ]
        step = sum(1 for m in tail if m["role"] == "assistant")
        plan = self.plans.get(prompt, [])
        return plan[step] if step < len(plan) else Answer(f"done: {prompt}")


def write(path: str, content: str) -> tuple[str, str]:
    return ("write_file", json.dumps({"path": path, "content": content}))


def edit(path: str, old: str, new: str) -> tuple[str, str]:
    return ("edit_file", json.dumps({"path": path, "old_string": old, "new_string": new}))


def bash(command: str) -> tuple[str, str]:
    return ("bash", json.dumps({"command": command}))


def make_runtime(
    tmp_path: Path, script: Script, stores: StoreFactory | None = None, window: int = 32_768
) -> Runtime:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    return Runtime(
        workspace,
        ModelConfig(model="scripted", context_window=window),
        script.provider,
        settings=Settings(),
        home=tmp_path / "home",
        permission_mode="bypass",
        store_factory=stores,
        instructions=False,
    )


def api(rt: Runtime) -> list[Message]:
    return list(rt.current.api_messages)


def transcript_bytes(rt: Runtime, session_id: str) -> list[Record]:
    return rt.store_factory.read(rt.workspace, session_id).records


# ---------------------------------------------------------------------------
# Files


FILE_PLANS = {
    "one": [Answer(calls=[write("a.txt", "A1")])],
    "two": [
        Answer(calls=[edit("a.txt", "A1", "A2"), edit("keep.txt", "K0", "K1")]),
        Answer(calls=[write("new/b.txt", "B"), bash("echo hi > c.txt")]),
    ],
    "three": [Answer(calls=[write("a.txt", "A3"), write("keep.txt", "K3")])],
}


def file_plans_session(tmp_path: Path) -> tuple[Script, Runtime, AgentSession]:
    """A new session answered by ``FILE_PLANS``, its workspace holding ``keep.txt`` (``K0``)."""
    script = Script(FILE_PLANS)
    rt = make_runtime(tmp_path, script)
    (rt.workspace / "keep.txt").write_text("K0")
    return script, rt, AgentSession.new(rt)


def run_prompts(rt: Runtime, agent: AgentSession, prompts: list[str]) -> dict[str, list[Message]]:
    """Send each prompt; the API context just before each, by prompt."""
    before: dict[str, list[Message]] = {}
    for text in prompts:
        before[text] = api(rt)
        result = asyncio.run(agent.prompt(text))
        assert not result.aborted
    return before


def test_rewinding_restores_written_edited_and_created_files_and_names_bash(
    tmp_path: Path,
) -> None:
    script = Script(FILE_PLANS)
    rt = make_runtime(tmp_path, script)
    ws = rt.workspace
    (ws / "keep.txt").write_text("K0")
    (ws / "keep.txt").chmod(0o640)
    agent = AgentSession.new(rt)
    before = run_prompts(rt, agent, ["one", "two", "three"])
    assert (ws / "a.txt").read_text() == "A3" and (ws / "new/b.txt").read_text() == "B"
    original = agent.id
    stored = transcript_bytes(rt, original)

    points = agent.prompt_points()
    assert [p.text for p in points] == ["one", "two", "three"]
    by_text = {p.text: p for p in points}
    assert set(by_text["two"].changed_files) == {ws / "a.txt", ws / "keep.txt", ws / "new/b.txt"}
    assert by_text["two"].bash_commands == ("echo hi > c.txt",)
    assert by_text["three"].files_changed and by_text["three"].bash_commands == ()

    outcome = agent.rewind(by_text["two"].id, restore_files=True)
    branch = outcome.session
    assert outcome.prompt == "two"
    assert set(outcome.files.restored) == {ws / "a.txt", ws / "keep.txt"}
    assert outcome.files.removed == (ws / "new/b.txt",)
    assert outcome.files.bash_commands == ("echo hi > c.txt",)
    assert outcome.files.not_restorable == ()
    assert (ws / "a.txt").read_text() == "A1"
    assert (ws / "keep.txt").read_text() == "K0" and (
        ws / "keep.txt"
    ).stat().st_mode & 0o777 == 0o640
    assert not (ws / "new/b.txt").exists()
    assert (ws / "c.txt").exists()  # bash's doing: named, not undone

    # The branch is the runtime's current session; its context is the original's before "two".
    assert branch.id != original and rt.current.id == branch.id
    assert api(rt) == before["two"]
    # The original is untouched and listed beside the branch.
    assert transcript_bytes(rt, original) == stored
    listed = [s.id for s in AgentSession.sessions(rt)]
    assert listed[0] == branch.id and original in listed
    assert [p.text for p in branch.prompt_points()] == ["one"]

    # The branch kept the snapshots from before its point: it can go back further.
    again = branch.rewind(branch.prompt_points()[0].id, restore_files=True)
    assert again.files.removed == (ws / "a.txt",) and not (ws / "a.txt").exists()
    assert api(rt) == before["one"] == []
    rt.close()


def test_rewinding_the_conversation_only_leaves_the_files(tmp_path: Path) -> None:
    _, rt, agent = file_plans_session(tmp_path)
    before = run_prompts(rt, agent, ["one", "two", "three"])
    point = agent.prompt_points()[1]
    outcome = agent.rewind(point.id, restore_files=False)
    assert outcome.files.restored == () and outcome.files.removed == ()
    assert (rt.workspace / "a.txt").read_text() == "A3"
    assert api(rt) == before["two"]
    rt.close()


def test_the_branch_sends_the_request_the_original_sent_at_that_point(tmp_path: Path) -> None:
    script, rt, agent = file_plans_session(tmp_path)
    run_prompts(rt, agent, ["one"])
    first_of_two = len(script.provider.requests)
    run_prompts(rt, agent, ["two", "three"])
    sent = script.provider.requests[first_of_two].body()
    outcome = agent.rewind(agent.prompt_points()[1].id, restore_files=True)
    again = len(script.provider.requests)
    asyncio.run(outcome.session.prompt(outcome.prompt))
    assert script.provider.requests[again].body() == sent
    rt.close()


def test_a_file_too_large_to_save_is_named_not_restorable(tmp_path: Path) -> None:
    script = Script({"big": [Answer(calls=[write("big.txt", "small now")])]})
    rt = make_runtime(tmp_path, script)
    (rt.workspace / "big.txt").write_text("x" * 2_000)
    agent = AgentSession.new(rt)
    rt.current.snapshots.max_file_bytes = 1_000
    run_prompts(rt, agent, ["big"])
    outcome = agent.rewind(agent.prompt_points()[0].id, restore_files=True)
    [(path, why)] = outcome.files.not_restorable
    assert path == rt.workspace / "big.txt" and "larger than" in why
    assert (rt.workspace / "big.txt").read_text() == "small now"
    rt.close()


def test_snapshots_live_in_the_session_folder_never_in_the_workspace(tmp_path: Path) -> None:
    _, rt, agent = file_plans_session(tmp_path)
    run_prompts(rt, agent, ["one", "two"])
    folder = rt.current.session_dir / SNAPSHOTS_DIR
    assert (folder / "index.jsonl").is_file() and any((folder / "blobs").iterdir())
    assert not folder.is_relative_to(rt.workspace)
    assert sorted(p.name for p in rt.workspace.iterdir()) == ["a.txt", "c.txt", "keep.txt", "new"]
    rt.close()


# ---------------------------------------------------------------------------
# The compaction state of a branch


LOREM = "lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 40


def chat(text: str) -> list[Answer]:
    """A turn big enough that a compaction makes it smaller: a write, then a long answer."""
    return [Answer(calls=[write(f"{text}.txt", text + LOREM)]), Answer(f"wrote {text}. {LOREM}")]


def test_a_branch_resumes_from_the_last_checkpoint_before_its_point(tmp_path: Path) -> None:
    """Prompts a, b; /compact; c, d. Rewinding to d (after the compaction) keeps it;
    to c (the compaction lies just before it) too; to b (before it) does not."""
    script = Script({t: chat(t) for t in "abcd"})
    rt = make_runtime(tmp_path, script)
    agent = AgentSession.new(rt)
    before = run_prompts(rt, agent, ["a", "b"])
    outcome = asyncio.run(agent.compact())
    assert outcome.ok and outcome.compaction is not None, outcome.text
    before |= run_prompts(rt, agent, ["c", "d"])
    assert rt.current.pipeline.epoch == 1
    original = rt.current
    points = {p.text: p.id for p in agent.prompt_points()}
    assert list(points) == ["a", "b", "c", "d"]  # read from the records, across the compaction

    expected_epochs = {"d": 1, "c": 1, "b": 0, "a": 0}
    branches: dict[str, str] = {}
    for text, epoch in expected_epochs.items():
        source = switch_to(rt, original.id)
        branch = source.rewind(points[text], restore_files=False).session
        assert api(rt) == before[text], text
        assert rt.current.pipeline.epoch == epoch, text
        assert branch.usage.compactions == epoch
        branches[text] = branch.id
    # Reopened from the store, each branch is the same (its checkpoint pointer too).
    for text, branch_id in branches.items():
        switch_to(rt, branch_id)
        assert api(rt) == before[text] and rt.current.pipeline.epoch == expected_epochs[text]
    rt.close()


def switch_to(rt: Runtime, session_id: str) -> AgentSession:
    """Make ``session_id`` current (reopened from the store unless it is already)."""
    if rt.current.id != session_id:
        rt.resume(session_id)
    return AgentSession(rt, rt.current)


def test_an_automatic_compaction_inside_a_turn_stays_after_that_turn_s_prompt(
    tmp_path: Path,
) -> None:
    """A small window: the turns compact by themselves. Every prompt's branch has the
    context the original had just before that prompt, whatever compacted around it."""
    big = LOREM * 3
    plans = {
        f"p{i}": [Answer(calls=[write(f"f{i}.txt", big)]), Answer(f"wrote f{i} " + big)]
        for i in range(8)
    }
    script = Script(plans)
    rt = make_runtime(tmp_path, script, window=12_000)
    agent = AgentSession.new(rt)
    before = run_prompts(rt, agent, list(plans))
    assert rt.current.pipeline.epoch >= 1
    original = rt.current.id
    for point in agent.prompt_points():
        switch_to(rt, original).rewind(point.id)
        assert api(rt) == before[point.text], point.text
    rt.close()


@pytest.mark.parametrize("seed", range(6))
def test_any_sequence_of_turns_and_compactions_branches_exactly(tmp_path: Path, seed: int) -> None:
    """Property-style: random turns, writes and manual compactions; every prompt's branch
    holds the original's context before it, and restoring files gives the files then."""
    rng = random.Random(seed)
    names = ["x.txt", "y.txt", "sub/z.txt"]
    plans: dict[str, list[Answer]] = {}
    steps: list[str] = []
    for i in range(rng.randint(3, 6)):
        text = f"turn {i}"
        calls = []
        for _ in range(rng.randint(0, 3)):
            calls.append(write(rng.choice(names), f"{text} {rng.random()}"))
        plans[text] = [Answer(calls=calls), Answer("ok")] if calls else [Answer("ok")]
        steps.append(text)
        if rng.random() < 0.4:
            steps.append("/compact")
    script = Script(plans)
    rt = make_runtime(tmp_path, script)
    agent = AgentSession.new(rt)
    before: dict[str, list[Message]] = {}
    files: dict[str, dict[str, str | None]] = {}
    for step in steps:
        if step == "/compact":
            asyncio.run(agent.compact())
            continue
        before[step] = api(rt)
        files[step] = read_files(rt.workspace, names)
        asyncio.run(agent.prompt(step))
    original = rt.current.id
    final = read_files(rt.workspace, names)
    points = agent.prompt_points()
    for point in rng.sample(points, len(points)):
        # A rewind undoes the writes after its point, from the files as the session left them.
        write_files(rt.workspace, final)
        switch_to(rt, original).rewind(point.id, restore_files=True)
        assert api(rt) == before[point.text]
        assert read_files(rt.workspace, names) == files[point.text]
    rt.close()


def write_files(workspace: Path, files: dict[str, str | None]) -> None:
    for name, text in files.items():
        if text is None:
            (workspace / name).unlink(missing_ok=True)
        else:
            (workspace / name).parent.mkdir(exist_ok=True)
            (workspace / name).write_text(text)


def read_files(workspace: Path, names: list[str]) -> dict[str, str | None]:
    return {
        name: (workspace / name).read_text() if (workspace / name).exists() else None
        for name in names
    }


# ---------------------------------------------------------------------------
# Fork, /fork, /rewind and the guard


def test_fork_copies_the_session_as_it_stands(tmp_path: Path) -> None:
    script = Script({t: chat(t) for t in "ab"})
    rt = make_runtime(tmp_path, script)
    agent = AgentSession.new(rt)
    run_prompts(rt, agent, ["a"])
    asyncio.run(agent.compact())
    run_prompts(rt, agent, ["b"])
    context, epoch = api(rt), rt.current.pipeline.epoch
    stored = transcript_bytes(rt, agent.id)
    fork = agent.fork()
    assert fork.id != agent.id and rt.current.id == fork.id
    assert api(rt) == context and rt.current.pipeline.epoch == epoch == 1
    assert transcript_bytes(rt, agent.id) == stored
    assert {agent.id, fork.id} <= {s.id for s in AgentSession.sessions(rt)}
    assert [p.text for p in fork.prompt_points()] == ["a", "b"]
    records = transcript_bytes(rt, fork.id)
    assert records[-1].TYPE == "state" and records[-1].key == BRANCH_KEY  # type: ignore[union-attr]
    # The fork carries the snapshots: rewinding it puts the files back.
    outcome = fork.rewind(fork.prompt_points()[0].id, restore_files=True)
    assert set(outcome.files.removed) == {rt.workspace / "a.txt", rt.workspace / "b.txt"}
    rt.close()


def test_a_branch_reads_the_outputs_its_copied_messages_saved_in_earlier_sessions(
    tmp_path: Path,
) -> None:
    """A long output is saved in the original session's folder and its message names
    that path: the branch (and a branch of it) must still read it, never write there."""
    long_output = "seq 1 40000"
    script = Script({"a": [Answer(calls=[bash(long_output)]), Answer("counted")], "b": []})
    rt = make_runtime(tmp_path, script, window=16_384)
    agent = AgentSession.new(rt)
    run_prompts(rt, agent, ["a", "b"])
    saved = (
        next(m.text for m in api(rt) if m.role == "tool" and "is saved at" in m.text)
        .split("is saved at ")[1]
        .split(". Read it")[0]
    )
    assert Path(saved).is_relative_to(rt.current.session_dir)
    first = agent.rewind(agent.prompt_points()[1].id)
    second = first.session.fork()

    def read(path: str) -> Message:
        call = ToolCall("r1", "read_file", json.dumps({"path": path, "limit": 3}))
        return asyncio.run(rt.current.tools.execute(call, rt.current.tool_context()))

    shown = read(saved)
    assert not shown.meta.tool_error and "40000" not in shown.text and "1" in shown.text
    assert rt.current.id == second.id and len(rt.current.lineage) == 2
    # Another session's folder stays closed: only the branch's own ancestors.
    outside = tmp_path / "home" / "elsewhere.txt"
    outside.write_text("not yours")
    assert read(str(outside)).meta.tool_error
    rt.close()


def test_the_fork_and_rewind_commands(tmp_path: Path) -> None:
    _, rt, agent = file_plans_session(tmp_path)
    run_prompts(rt, agent, ["one", "two"])
    original = agent.id
    forked = asyncio.run(agent.command("/fork"))
    assert forked.ok and rt.current.id != original and original in forked.text
    listed = asyncio.run(agent.command("/rewind"))
    assert "1. one" in listed.text and "2. two" in listed.text and listed.prompt is None
    rewound = asyncio.run(agent.command("/rewind 2 files"))
    assert rewound.ok and rewound.prompt == "two", rewound.text
    assert "echo hi > c.txt" in rewound.text
    assert (rt.workspace / "a.txt").read_text() == "A1"
    bad = asyncio.run(agent.command("/rewind 9"))
    assert not bad.ok
    rt.close()


def test_rewind_and_fork_respect_the_session_guard(tmp_path: Path) -> None:
    script = Script({})
    rt = make_runtime(tmp_path, script)
    agent = AgentSession.new(rt)
    run_prompts(rt, agent, ["hello"])
    point = agent.prompt_points()[0]
    statuses: tuple[SessionStatus, ...] = ("streaming", "tools", "compacting")
    for status in statuses:
        rt.current.status = status
        with pytest.raises(SessionBusyError):
            agent.fork()
        with pytest.raises(SessionBusyError):
            agent.rewind(point.id)
    rt.current.status = "idle"
    with pytest.raises(RewindPointError):
        agent.rewind("msg_nope")
    assert [s.id for s in AgentSession.sessions(rt)] == [agent.id]
    rt.close()


def test_a_branch_that_cannot_be_written_leaves_no_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, rt, agent = file_plans_session(tmp_path)
    run_prompts(rt, agent, ["one", "two"])
    stored = transcript_bytes(rt, agent.id)

    def refuse(workspace: Path, records: Any) -> None:
        raise TranscriptWriteError("disk full")

    monkeypatch.setattr(rt.store_factory, "create_from_records", refuse)
    with pytest.raises(TranscriptWriteError):
        agent.rewind(agent.prompt_points()[1].id, restore_files=True)
    assert rt.current.id == agent.id and [s.id for s in AgentSession.sessions(rt)] == [agent.id]
    assert transcript_bytes(rt, agent.id) == stored
    assert (rt.workspace / "a.txt").read_text() == "A2"  # nothing restored either
    folders = [p for p in rt.current.session_dir.parent.iterdir() if p.is_dir()]
    assert folders == [rt.current.session_dir]
    rt.close()


# ---------------------------------------------------------------------------
# Both stores


@pytest.fixture
def postgres_stores(postgres_url: str) -> Iterator[PostgresStoreFactory]:
    factory = PostgresStoreFactory(postgres_url)
    yield factory
    factory.close()


def test_rewind_on_the_postgres_store(
    tmp_path: Path, postgres_stores: PostgresStoreFactory
) -> None:
    script = Script({t: chat(t) for t in "abc"})
    rt = make_runtime(tmp_path, script, stores=postgres_stores)
    agent = AgentSession.new(rt)
    before = run_prompts(rt, agent, ["a", "b"])
    asyncio.run(agent.compact())
    before |= run_prompts(rt, agent, ["c"])
    original = agent.id
    stored = transcript_bytes(rt, original)
    points = {p.text: p.id for p in agent.prompt_points()}
    branch = agent.rewind(points["c"], restore_files=True).session
    assert api(rt) == before["c"] and rt.current.pipeline.epoch == 1
    assert not (rt.workspace / "c.txt").exists()
    switch_to(rt, original)
    switch_to(rt, branch.id)  # reopened from its pointer: the same context
    assert api(rt) == before["c"] and rt.current.pipeline.epoch == 1
    assert transcript_bytes(rt, original) == stored
    assert {original, branch.id} <= {s.id for s in AgentSession.sessions(rt)}
    fork = AgentSession(rt, rt.current).fork()
    assert api(rt) == before["c"] and fork.id != branch.id
    rt.close()


@pytest.mark.parametrize("kind", ["jsonl", "postgres"])
def test_a_store_creates_a_session_from_records_whole(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    stores: StoreFactory = (
        request.getfixturevalue("postgres_stores")
        if kind == "postgres"
        else JsonlStoreFactory(tmp_path)
    )
    script = Script({t: chat(t) for t in "ab"})
    rt = make_runtime(tmp_path, script, stores=stores)
    agent = AgentSession.new(rt)
    run_prompts(rt, agent, ["a"])
    asyncio.run(agent.compact())
    run_prompts(rt, agent, ["b"])
    records = transcript_bytes(rt, agent.id)
    copy_id = new_session_id()
    copy = [SessionRecord(copy_id, str(rt.workspace)), *records[1:]]
    stores.create_from_records(rt.workspace, copy)
    assert stores.read(rt.workspace, copy_id).records == copy
    with pytest.raises(TranscriptWriteError):
        stores.create_from_records(rt.workspace, copy)  # never over an existing session
    opened = stores.open(rt.workspace, copy_id)
    assert opened.api_view.messages == api_view(records).messages
    assert opened.api_view.valid_checkpoints == 1
    opened.close()
    rt.close()


# ---------------------------------------------------------------------------
# Snapshots


def test_a_write_whose_prior_content_cannot_be_saved_does_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = Script({"one": [Answer(calls=[write("keep.txt", "changed")])]})
    rt = make_runtime(tmp_path, script)
    (rt.workspace / "keep.txt").write_text("K0")
    agent = AgentSession.new(rt)

    def full(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(rt.current.snapshots, "before_write", full)
    run_prompts(rt, agent, ["one"])
    assert (rt.workspace / "keep.txt").read_text() == "K0"  # a rewind could not have undone it
    result = next(m for m in rt.current.api_messages if m.role == "tool")
    assert "No space left on device" in result.text
    rt.close()


def test_a_write_through_a_symlink_restores_its_target_and_a_torn_index_line_is_skipped(
    tmp_path: Path,
) -> None:
    script = Script(
        {"one": [Answer(calls=[write("link.txt", "now a file")])], "two": [Answer("ok")]}
    )
    rt = make_runtime(tmp_path, script)
    (rt.workspace / "target.txt").write_text("T")
    (rt.workspace / "link.txt").symlink_to("target.txt")
    agent = AgentSession.new(rt)
    run_prompts(rt, agent, ["one"])
    index = rt.current.snapshots.index_path
    with index.open("ab") as handle:
        handle.write(b'{"path": "/torn", "kin')  # a crash mid-line
    run_prompts(rt, agent, ["two"])
    assert len(rt.current.snapshots.entries()) == 1
    outcome = agent.rewind(agent.prompt_points()[0].id, restore_files=True)
    # The write went through the link to its target, which is what was saved and restored.
    assert outcome.files.restored == (rt.workspace / "target.txt",)
    assert (rt.workspace / "link.txt").is_symlink()
    assert (rt.workspace / "link.txt").read_text() == "T"
    rt.close()
