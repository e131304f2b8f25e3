"""The file and bash tools with a host (an editor over ACP) doing their I/O, and without one.

The hosts here are small fakes of the protocols in ``host_io``: an "editor"
holding unsaved buffers in a dict, a terminal that really runs the command
in a subprocess, and hosts that fail. Everything Cairn does around them —
confinement, permissions, formatting, cutting — is the real code.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from dataclasses import replace
from pathlib import Path

import pytest

import cairn.agent.tools.bash as bash_module
from agent.test_tools import call, make_ctx, run
from cairn.agent.runtime import Runtime
from cairn.agent.tools.base import ToolContext, ToolResult
from cairn.agent.tools.bash import OUTPUT_HEAD_BYTES, OUTPUT_TAIL_BYTES, Bash, BashOutput
from cairn.agent.tools.files import EditFile, ReadFile, WriteFile
from cairn.agent.tools.host_io import (
    HostFiles,
    HostIOError,
    HostTerminal,
    TerminalEnd,
    TerminalOutcome,
)
from cairn.messages import ToolCall
from cairn.provider import ModelConfig, OpenAIProvider

# ---------------------------------------------------------------------------
# Fake hosts


class Editor:
    """An editor's buffers: what it has open (unsaved edits included), else the disk."""

    def __init__(self, buffers: dict[Path, str] | None = None) -> None:
        self.buffers = dict(buffers or {})
        self.calls: list[tuple[str, Path]] = []

    async def read_text(self, path: Path) -> str:
        self.calls.append(("read", path))
        if path in self.buffers:
            return self.buffers[path]
        return path.read_text(encoding="utf-8")

    async def write_text(self, path: Path, content: str) -> None:
        # Into the buffer only: the person saves it (or not).
        self.calls.append(("write", path))
        self.buffers[path] = content


class RefusingEditor:
    async def read_text(self, path: Path) -> str:
        raise HostIOError("the editor refused:\n  no access")

    async def write_text(self, path: Path, content: str) -> None:
        raise HostIOError("the buffer is read-only")


class ProcessTerminal:
    """A host terminal that really runs the command, killing it at the timeout or on abort."""

    def __init__(self, *, keep_last: int | None = None) -> None:
        #: Like an ACP client's output byte limit: only the end of the output is kept.
        self.keep_last = keep_last
        self.calls: list[tuple[str, Path, float]] = []

    async def run(
        self, command: str, *, cwd: Path, timeout: float, abort: asyncio.Event
    ) -> TerminalOutcome:
        self.calls.append((command, cwd, timeout))
        process = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            command,
            cwd=cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        assert process.stdout is not None
        reading = asyncio.ensure_future(process.stdout.read())
        exited = asyncio.ensure_future(process.wait())
        aborted = asyncio.ensure_future(_poll(abort))
        ended: TerminalEnd = "exited"
        try:
            done, _ = await asyncio.wait(
                {exited, aborted}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if exited not in done:
                ended = "interrupted" if aborted in done else "timed out"
        finally:
            aborted.cancel()
            if process.returncode is None:
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
        output = (await reading).decode()
        truncated = False
        if self.keep_last is not None and len(output) > self.keep_last:
            output, truncated = output[-self.keep_last :], True
        code = process.returncode
        assert code is not None
        if ended != "exited":
            return TerminalOutcome(output, None, ended=ended, truncated=truncated)
        if code < 0:
            return TerminalOutcome(output, None, signal=signal.Signals(-code).name)
        return TerminalOutcome(output, code, truncated=truncated)


async def _poll(abort: asyncio.Event) -> None:
    # Polled, not awaited: the tests' contexts outlive one event loop.
    while not abort.is_set():
        await asyncio.sleep(0.01)


class BrokenTerminal:
    async def run(
        self, command: str, *, cwd: Path, timeout: float, abort: asyncio.Event
    ) -> TerminalOutcome:
        raise HostIOError("no terminal is available")


class SilentTerminal:
    """A host that never answers (it ignores the timeout); it notices being cancelled."""

    def __init__(self) -> None:
        self.cancelled = False

    async def run(
        self, command: str, *, cwd: Path, timeout: float, abort: asyncio.Event
    ) -> TerminalOutcome:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        raise AssertionError("never answers")


def with_host(
    ws: Path, *, files: HostFiles | None = None, terminal: HostTerminal | None = None
) -> ToolContext:
    return replace(make_ctx(ws), files=files, terminal=terminal)


# ---------------------------------------------------------------------------
# read_file


def test_read_file_shows_the_editor_buffer_not_the_disk(ws: Path) -> None:
    target = ws / "a.py"
    target.write_text("on disk\n")
    editor = Editor({ws.resolve() / "a.py": "unsaved\nedit\n"})
    ctx = with_host(ws, files=editor)
    result = call(ReadFile(), ctx, path="a.py")
    assert not result.is_error
    assert result.content == "     1\tunsaved\n     2\tedit"
    assert editor.calls == [("read", ws.resolve() / "a.py")]
    assert [(r.path, r.read_at) for r in ctx.state.reads] == [(ws.resolve() / "a.py", 42.0)]


@pytest.mark.parametrize(
    "text",
    [
        "".join(f"line {i}\n" for i in range(1, 11)),
        "one\r\ntwo\rthree\nno end",
        "x" * 2500 + "\n",
        "",
        "".join(f"{i:04d} " + "y" * 995 + "\n" for i in range(150)),  # past MAX_READ_CHARS
    ],
)
def test_read_file_formats_host_text_exactly_as_disk_text(ws: Path, text: str) -> None:
    """Offset, limit, long lines, line ends, the size cut: host and disk read the same."""
    (ws / "n.txt").write_bytes(text.encode())
    local = make_ctx(ws)
    hosted = with_host(ws, files=Editor({ws.resolve() / "n.txt": text}))
    for args in ({}, {"offset": 4, "limit": 3}, {"offset": 9}, {"offset": 50}, {"limit": 1}):
        expected = call(ReadFile(), local, path="n.txt", **args)
        assert call(ReadFile(), hosted, path="n.txt", **args) == expected, args
    ranged = call(ReadFile(), hosted, path="n.txt", offset=4, limit=3).content
    if text.startswith("line 1\n"):
        assert ranged.splitlines()[:3] == ["     4\tline 4", "     5\tline 5", "     6\tline 6"]
        assert "lines 4-6 of 10" in ranged and "offset=7" in ranged


# ---------------------------------------------------------------------------
# write_file / edit_file


def test_write_file_goes_to_the_editor_and_leaves_the_disk_alone(ws: Path) -> None:
    (ws / "a.txt").write_text("old\n")
    editor = Editor()
    ctx = with_host(ws, files=editor)
    over = call(WriteFile(), ctx, path="a.txt", content="new\n")
    assert over == ToolResult("Overwrote a.txt (1 lines, 4 bytes)")
    created = call(WriteFile(), ctx, path="deep/b.txt", content="b\nb\n")
    assert created == ToolResult("Created deep/b.txt (2 lines, 4 bytes)")
    root = ws.resolve()
    assert editor.buffers == {root / "a.txt": "new\n", root / "deep" / "b.txt": "b\nb\n"}
    assert (ws / "a.txt").read_text() == "old\n"
    assert not (ws / "deep" / "b.txt").exists()
    refused = call(WriteFile(), ctx, path="deep", content="x")
    assert refused.is_error and "is a directory" in refused.content
    assert [kind for kind, _ in editor.calls] == ["write", "write"]


def test_edit_file_reads_and_writes_the_editor_buffer(ws: Path) -> None:
    (ws / "m.py").write_text("a = 1\n")
    path = ws.resolve() / "m.py"
    editor = Editor({path: "a = 1\nb = 2\nc = 3\n"})
    ctx = with_host(ws, files=editor)
    result = call(EditFile(), ctx, path="m.py", old_string="b = 2", new_string="b = 20")
    assert not result.is_error and "replaced 1 occurrence" in result.content
    assert "     2\tb = 20" in result.content
    assert editor.buffers[path] == "a = 1\nb = 20\nc = 3\n"
    assert editor.calls == [("read", path), ("write", path)]
    assert (ws / "m.py").read_text() == "a = 1\n"
    missing = call(EditFile(), ctx, path="m.py", old_string="zzz", new_string="y")
    assert missing.is_error and "0 occurrences" in missing.content


def test_edit_file_matches_lf_text_in_a_crlf_buffer(ws: Path) -> None:
    (ws / "w.txt").write_text("whatever\n")
    path = ws.resolve() / "w.txt"
    editor = Editor({path: "one\r\ntwo\r\nthree\r\n"})
    ctx = with_host(ws, files=editor)
    result = call(EditFile(), ctx, path="w.txt", old_string="one\ntwo", new_string="1\n2")
    assert not result.is_error
    assert editor.buffers[path] == "1\r\n2\r\nthree\r\n"


# ---------------------------------------------------------------------------
# Confinement and failures


def test_confinement_refuses_before_the_host_is_asked(ws: Path, outside: Path) -> None:
    (ws / "filelink").symlink_to(outside / "secret.txt")
    (ws / "dir").mkdir()
    (ws / "blob.bin").write_bytes(b"\x89PNG\0\0\x01")
    editor = Editor({outside / "secret.txt": "buffered secret"})
    ctx = with_host(ws, files=editor)
    for raw in ("../outside/secret.txt", str(outside / "secret.txt"), "filelink"):
        for tool, extra in (
            (ReadFile(), {}),
            (EditFile(), {"old_string": "top", "new_string": "bottom"}),
            (WriteFile(), {"content": "pwned"}),
        ):
            result = call(tool, ctx, path=raw, **extra)
            assert result.is_error and "outside the workspace" in result.content, (tool, raw)
    # Today's errors for what is not a readable text file on the disk, too.
    for raw, words in (("dir", "is a directory"), ("blob.bin", "binary"), ("no.txt", "not exist")):
        for tool, extra in (
            (ReadFile(), {}),
            (EditFile(), {"old_string": "a", "new_string": "b"}),
        ):
            result = call(tool, ctx, path=raw, **extra)
            assert result.is_error and words in result.content, (tool, raw)
    assert editor.calls == []
    assert ctx.state.reads == []
    assert (outside / "secret.txt").read_text() == "top secret\n"


def test_a_failing_host_is_an_error_result(ws: Path) -> None:
    (ws / "a.py").write_text("x = 1\n")
    ctx = with_host(ws, files=RefusingEditor())
    read = call(ReadFile(), ctx, path="a.py")
    assert read == ToolResult("cannot read a.py: the editor refused: no access", is_error=True)
    edit = call(EditFile(), ctx, path="a.py", old_string="x", new_string="y")
    assert edit == ToolResult("cannot read a.py: the editor refused: no access", is_error=True)
    write = call(WriteFile(), ctx, path="a.py", content="y")
    assert write == ToolResult("cannot write a.py: the buffer is read-only", is_error=True)
    assert ctx.state.reads == []
    assert (ws / "a.py").read_text() == "x = 1\n"


def test_an_edit_the_host_cannot_write_back_is_an_error_result(ws: Path) -> None:
    class ReadOnlyEditor(Editor):
        async def write_text(self, path: Path, content: str) -> None:
            raise PermissionError(13, "Permission denied")

    (ws / "a.py").write_text("x = 1\n")
    result = call(
        EditFile(),
        with_host(ws, files=ReadOnlyEditor()),
        path="a.py",
        old_string="x",
        new_string="y",
    )
    assert result == ToolResult("cannot write a.py: Permission denied", is_error=True)


# ---------------------------------------------------------------------------
# bash


def test_bash_runs_in_the_host_terminal_with_the_same_result(ws: Path) -> None:
    terminal = ProcessTerminal()
    hosted = with_host(ws, terminal=terminal)
    local = make_ctx(ws)
    for command in ("echo out; echo err >&2; pwd", "echo nope; exit 3", "true"):
        expected = call(Bash(), local, command=command)
        assert call(Bash(), hosted, command=command) == expected, command
    assert call(Bash(), hosted, command="echo out; pwd").content == f"out\n{ws}\nexit code 0"
    failed = call(Bash(), hosted, command="echo nope; exit 3")
    assert failed == ToolResult("nope\nexit code 3", is_error=True)
    assert call(Bash(), hosted, command="true").content == "(no output)\nexit code 0"
    assert terminal.calls[0] == ("echo out; echo err >&2; pwd", ws, 120.0)
    killed = call(Bash(), hosted, command="echo bye; kill -9 $$")
    assert killed == ToolResult("bye\nkilled by signal SIGKILL", is_error=True)


def test_bash_host_timeout_and_interruption_read_as_locally(ws: Path) -> None:
    hosted = with_host(ws, terminal=ProcessTerminal())
    timed_out = call(Bash(), hosted, command="echo start; sleep 30", timeout=0.5)
    assert timed_out == ToolResult(
        "start\ncommand timed out after 0.5 s and was killed", is_error=True
    )

    async def interrupt() -> ToolResult:
        ctx = with_host(ws, terminal=ProcessTerminal())

        async def abort_once_started() -> None:
            while not (ws / "started").exists():
                await asyncio.sleep(0.01)
            ctx.abort.set()

        trigger = asyncio.create_task(abort_once_started())
        result = await Bash().run({"command": "echo go; touch started; sleep 30"}, ctx)
        await trigger
        return result

    assert run(interrupt()) == ToolResult("go\ninterrupted: the command was killed", is_error=True)
    aborted = with_host(ws, terminal=ProcessTerminal())
    aborted.abort.set()
    not_started = call(Bash(), aborted, command="echo hi")
    assert not_started.is_error and "not started" in not_started.content


def test_bash_host_output_is_cut_like_local_output(ws: Path) -> None:
    size = 100_000
    command = f"head -c {size} /dev/zero | tr '\\0' x; echo; echo end"
    local = call(Bash(), make_ctx(ws), command=command)
    hosted = call(Bash(), with_host(ws, terminal=ProcessTerminal()), command=command)
    assert hosted == local
    dropped = size + 5 - OUTPUT_HEAD_BYTES - OUTPUT_TAIL_BYTES
    assert f"[… {dropped} bytes of output omitted …]" in hosted.content
    assert hosted.content.endswith("x\nend\nexit code 0")
    assert len(hosted.content) < OUTPUT_HEAD_BYTES + OUTPUT_TAIL_BYTES + 200
    # What the host itself cut is said.
    short = call(Bash(), with_host(ws, terminal=ProcessTerminal(keep_last=4)), command="seq 100")
    assert short == ToolResult(
        "100\nexit code 0\n(the host's terminal kept only part of the output)"
    )


def test_a_failing_host_terminal_is_an_error_result(ws: Path) -> None:
    result = call(Bash(), with_host(ws, terminal=BrokenTerminal()), command="echo hi")
    assert result == ToolResult(
        "could not run the command in the host's terminal: no terminal is available",
        is_error=True,
    )


def test_a_host_terminal_that_never_answers_is_cancelled(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only the wait past the timeout is shortened; the code path is the real one.
    monkeypatch.setattr(bash_module, "_HOST_GRACE_S", 0.2)
    terminal = SilentTerminal()
    result = call(Bash(), with_host(ws, terminal=terminal), command="echo hi", timeout=0.1)
    assert result == ToolResult(
        "(no output)\ncommand timed out after 0.1 s and was killed", is_error=True
    )
    assert terminal.cancelled


def test_background_commands_stay_local(ws: Path) -> None:
    terminal = ProcessTerminal()
    ctx = with_host(ws, terminal=terminal)

    async def scenario() -> ToolResult:
        started = await Bash().run({"command": "echo here", "run_in_background": True}, ctx)
        assert not started.is_error, started.content
        for _ in range(500):
            if ctx.state.tasks["bash_1"].status != "running":
                break
            await asyncio.sleep(0.01)
        return await BashOutput().run({"task_id": "bash_1"}, ctx)

    assert run(scenario()).content == "status: completed (exit 0)\nhere"
    assert (ctx.session_dir / "tasks" / "bash_1.log").read_text() == "here\n"
    assert terminal.calls == []


# ---------------------------------------------------------------------------
# The runtime hands its host to every tool


def test_the_runtime_gives_the_host_to_its_sessions_tools(tmp_path: Path) -> None:
    workspace = tmp_path / "project"
    workspace.mkdir()
    (workspace / "a.txt").write_text("disk\n")
    editor = Editor({workspace.resolve() / "a.txt": "buffer\n"})
    terminal = ProcessTerminal()
    model = ModelConfig(model="m", base_url="http://127.0.0.1:9/v1", context_window=8_192)
    runtime = Runtime(
        workspace,
        model,
        OpenAIProvider(model),
        home=tmp_path / "home",
        host_files=editor,
        host_terminal=terminal,
    )
    session = runtime.new_session()
    try:
        ctx = session.tool_context()
        assert ctx.files is editor and ctx.terminal is terminal

        def execute(name: str, **args: object) -> tuple[str, bool]:
            message = run(session.tools.execute(ToolCall("c1", name, json.dumps(args)), ctx))
            return message.text, message.meta.tool_error

        assert execute("read_file", path="a.txt") == ("     1\tbuffer", False)
        # Permissions are checked first, as always: nobody can be asked here, so
        # neither the write nor the command reaches the host.
        for text, failed in (
            execute("write_file", path="a.txt", content="x"),
            execute("bash", command="echo hi"),
        ):
            assert failed and text.startswith("permission refused"), text
        assert editor.calls == [("read", workspace.resolve() / "a.txt")]
        assert terminal.calls == []
    finally:
        session.close()


def test_without_a_host_the_tools_work_locally(ws: Path) -> None:
    ctx = make_ctx(ws)
    assert ctx.files is None and ctx.terminal is None
    assert call(WriteFile(), ctx, path="a.txt", content="one\n").content.startswith("Created")
    assert call(ReadFile(), ctx, path="a.txt").content == "     1\tone"
    assert call(Bash(), ctx, command="cat a.txt").content == "one\nexit code 0"
