"""The built-in tools on real files and real subprocesses, and the registry around them."""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from cairn.agent.loop import run_turn
from cairn.agent.runtime import Runtime
from cairn.agent.state import SessionState, Todo
from cairn.agent.tools.base import (
    PermissionMode,
    PermissionRequest,
    Tool,
    ToolContext,
    ToolResult,
)
from cairn.agent.tools.bash import Bash, BashOutput
from cairn.agent.tools.files import EditFile, ListFiles, ReadFile, WriteFile
from cairn.agent.tools.globs import glob_regex
from cairn.agent.tools.plan import EnterPlanMode, ExitPlanMode
from cairn.agent.tools.registry import ToolRegistry, default_tools
from cairn.agent.tools.search import Grep
from cairn.agent.tools.todo import TodoWrite
from cairn.agent.tools.workspace import (
    PathOutsideWorkspaceError,
    display_path,
    resolve_in_workspace,
)
from cairn.context.effects import ToolEffect
from cairn.messages import JSONObject, JSONValue, Message, ToolCall, assistant, tool_result
from cairn.provider import ModelConfig, OpenAIProvider
from support.openai_server import (
    OpenAIServer,
    Reply,
    ToolCallSpec,
)

T = TypeVar("T")


def make_ctx(
    ws: Path,
    *,
    mode: PermissionMode = "ask",
    ask: Callable[[PermissionRequest], Awaitable[bool]] | None = None,
) -> ToolContext:
    return ToolContext(
        workspace=ws,
        state=SessionState("s1", ws),
        session_dir=ws.parent / "session",
        permission_mode=mode,
        ask=ask,
        clock=lambda: 42.0,
    )


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro

    return asyncio.run(main())


def call(tool: Tool, ctx: ToolContext, **args: JSONValue) -> ToolResult:
    return run(tool.run(args, ctx))


def execute(registry: ToolRegistry, ctx: ToolContext, name: str, arguments: str) -> Message:
    return run(registry.execute(ToolCall("call_1", name, arguments), ctx))


# ---------------------------------------------------------------------------
# Paths


def test_resolve_in_workspace_confines_paths(ws: Path, outside: Path) -> None:
    (ws / "src").mkdir()
    assert resolve_in_workspace(ws, "src/a.py") == ws.resolve() / "src" / "a.py"
    assert resolve_in_workspace(ws, str(ws / "src")) == ws.resolve() / "src"
    assert resolve_in_workspace(ws, ".") == ws.resolve()
    assert resolve_in_workspace(ws, "src/../b.txt") == ws.resolve() / "b.txt"
    (ws / "link").symlink_to(outside)
    for raw in ("../outside/secret.txt", str(outside / "secret.txt"), "link/secret.txt", ".."):
        with pytest.raises(PathOutsideWorkspaceError) as info:
            resolve_in_workspace(ws, raw)
        assert raw in str(info.value) and str(ws.resolve()) in str(info.value)


def test_display_path(ws: Path, outside: Path) -> None:
    assert display_path(ws, ws / "src" / "a.py") == "src/a.py"
    assert display_path(ws, ws) == "."
    assert display_path(ws, outside / "x") == str(outside / "x")


def test_glob_regex() -> None:
    assert glob_regex("**/*.py").match("a.py")
    assert glob_regex("**/*.py").match("src/pkg/a.py")
    assert not glob_regex("*.py").match("src/a.py")
    assert glob_regex("src/*.{py,pyi}").match("src/a.pyi")
    assert not glob_regex("src/*.{py,pyi}").match("src/a.pyc")
    assert glob_regex("test_?.[!c]*").match("test_1.py")


# ---------------------------------------------------------------------------
# read_file


def test_read_file_numbers_lines_and_records_the_read(ws: Path) -> None:
    (ws / "a.txt").write_text("one\ntwo\nthree\n")
    ctx = make_ctx(ws)
    result = call(ReadFile(), ctx, path="a.txt")
    assert not result.is_error
    assert result.content == "     1\tone\n     2\ttwo\n     3\tthree"
    assert [(r.path, r.read_at, r.session_id) for r in ctx.state.reads] == [
        (ws.resolve() / "a.txt", 42.0, "s1")
    ]


def test_read_file_line_ranges(ws: Path) -> None:
    (ws / "n.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    ctx = make_ctx(ws)
    result = call(ReadFile(), ctx, path="n.txt", offset=4, limit=3)
    lines = result.content.splitlines()
    assert lines[:3] == ["     4\tline 4", "     5\tline 5", "     6\tline 6"]
    assert "lines 4-6 of 10" in result.content and "offset=7" in result.content
    tail = call(ReadFile(), ctx, path="n.txt", offset="9")
    assert tail.content == "     9\tline 9\n    10\tline 10"
    past = call(ReadFile(), ctx, path="n.txt", offset=50)
    assert not past.is_error and "has 10 lines" in past.content
    bad = call(ReadFile(), ctx, path="n.txt", limit=0)
    assert bad.is_error and "limit" in bad.content


def test_read_file_cuts_long_lines_and_handles_empty_files(ws: Path) -> None:
    (ws / "long.txt").write_text("x" * 2500 + "\n")
    (ws / "empty.txt").write_text("")
    ctx = make_ctx(ws)
    long = call(ReadFile(), ctx, path="long.txt").content
    assert long.startswith("     1\t" + "x" * 2000 + " …") and "2500" in long
    assert call(ReadFile(), ctx, path="empty.txt").content == "(the file is empty)"


def test_read_file_refuses_directories_binaries_and_missing_files(ws: Path) -> None:
    (ws / "dir").mkdir()
    (ws / "blob.bin").write_bytes(b"\x89PNG\0\0\x01")
    ctx = make_ctx(ws)
    for path, words in (
        ("dir", "is a directory"),
        ("blob.bin", "binary file"),
        ("nope.txt", "does not exist"),
    ):
        result = call(ReadFile(), ctx, path=path)
        assert result.is_error and words in result.content
    missing = call(ReadFile(), ctx)
    assert missing.is_error and "'path'" in missing.content
    assert ctx.state.reads == []


# ---------------------------------------------------------------------------
# write_file / edit_file


def test_write_file_creates_parents_and_overwrites_atomically(ws: Path) -> None:
    ctx = make_ctx(ws)
    created = call(WriteFile(), ctx, path="deep/er/new.txt", content="hello\nworld\n")
    assert not created.is_error and "Created deep/er/new.txt" in created.content
    target = ws / "deep" / "er" / "new.txt"
    assert target.read_text() == "hello\nworld\n"
    target.chmod(0o750)
    again = call(WriteFile(), ctx, path="deep/er/new.txt", content="bye")
    assert "Overwrote" in again.content
    assert target.read_text() == "bye"
    assert stat.S_IMODE(target.stat().st_mode) == 0o750
    assert sorted(p.name for p in target.parent.iterdir()) == ["new.txt"]  # no temp left
    assert call(WriteFile(), ctx, path="deep", content="x").is_error


def test_edit_file_replaces_exactly_one_occurrence(ws: Path) -> None:
    target = ws / "m.py"
    target.write_text("a = 1\nb = 2\nc = 3\n")
    ctx = make_ctx(ws)
    result = call(EditFile(), ctx, path="m.py", old_string="b = 2", new_string="b = 20")
    assert not result.is_error and "replaced 1 occurrence" in result.content
    assert "     2\tb = 20" in result.content
    assert target.read_text() == "a = 1\nb = 20\nc = 3\n"


def test_edit_file_uniqueness(ws: Path) -> None:
    target = ws / "m.py"
    target.write_text("x = 1\nx = 1\n")
    ctx = make_ctx(ws)
    none = call(EditFile(), ctx, path="m.py", old_string="y = 1", new_string="y = 2")
    assert none.is_error and "0 occurrences" in none.content
    two = call(EditFile(), ctx, path="m.py", old_string="x = 1", new_string="x = 2")
    assert two.is_error and "2 times" in two.content
    assert target.read_text() == "x = 1\nx = 1\n"
    same = call(EditFile(), ctx, path="m.py", old_string="x = 1", new_string="x = 1")
    assert same.is_error and "same" in same.content
    every = call(
        EditFile(), ctx, path="m.py", old_string="x = 1", new_string="x = 2", replace_all=True
    )
    assert not every.is_error and "2 occurrences" in every.content
    assert target.read_text() == "x = 2\nx = 2\n"


def test_edit_file_matches_lf_text_in_a_crlf_file(ws: Path) -> None:
    target = ws / "w.txt"
    target.write_bytes(b"one\r\ntwo\r\nthree\r\n")
    result = call(EditFile(), make_ctx(ws), path="w.txt", old_string="one\ntwo", new_string="1\n2")
    assert not result.is_error
    assert target.read_bytes() == b"1\r\n2\r\nthree\r\n"


# ---------------------------------------------------------------------------
# Confinement


def test_file_tools_refuse_paths_outside_the_workspace(ws: Path, outside: Path) -> None:
    (ws / "dirlink").symlink_to(outside)
    (ws / "filelink").symlink_to(outside / "secret.txt")
    ctx = make_ctx(ws)
    escapes = ["../outside/secret.txt", str(outside / "secret.txt"), "filelink"]
    for raw in escapes:
        for tool, extra in (
            (ReadFile(), {}),
            (EditFile(), {"old_string": "top", "new_string": "bottom"}),
            (WriteFile(), {"content": "pwned"}),
        ):
            result = call(tool, ctx, path=raw, **extra)
            assert result.is_error and "outside the workspace" in result.content, (tool, raw)
    for raw in ("../outside/new.txt", str(outside / "new.txt"), "dirlink/new.txt"):
        assert call(WriteFile(), ctx, path=raw, content="x").is_error
    for raw in ("..", "dirlink", str(outside)):
        assert call(ListFiles(), ctx, path=raw).is_error
        assert call(Grep(), ctx, pattern="secret", path=raw).is_error
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "top secret\n"
    assert ctx.state.reads == []
    # Walking the workspace never reads through a link that points outside.
    assert "top secret" not in call(Grep(), ctx, pattern="secret").content


def test_read_only_tools_read_a_saved_tool_result_in_a_real_session(
    tmp_path: Path, outside: Path
) -> None:
    """The tool-result preview names a file in the session folder: read_file opens it."""
    workspace = tmp_path / "project"
    workspace.mkdir()
    model = ModelConfig(model="m", base_url="http://127.0.0.1:9/v1", context_window=8_192)
    runtime = Runtime(
        workspace, model, OpenAIProvider(model), home=tmp_path / "home", permission_mode="bypass"
    )
    session = runtime.new_session()
    try:
        log = "".join(f"build step {i:05d}: compiled module_{i}.c\n" for i in range(1_500))
        call_ = ToolCall("call_log", "bash", '{"command": "make"}')
        session.pipeline.add(assistant("Building.", [call_]))
        [shortened] = session.pipeline.add_tool_results([tool_result(call_.id, log)])
        marker = re.search(r"is saved at (\S+)\. Read it with read_file", shortened.text)
        assert marker is not None, shortened.text[:500]
        saved = marker.group(1)
        assert Path(saved).is_relative_to(session.session_dir.resolve())
        ctx = session.tool_context()
        registry = session.tools

        def run_tool(name: str, **args: object) -> Message:
            return execute(registry, ctx, name, json.dumps(args))

        read = run_tool("read_file", path=saved)
        assert not read.meta.tool_error, read.text
        assert [line.split("\t", 1)[1] for line in read.text.splitlines()] == log.splitlines()
        found = run_tool("grep", pattern="module_1499\\.c", path=saved)
        assert "build step 01499" in found.text
        listed = run_tool("list_files", path=str(Path(saved).parent))
        assert Path(saved).name in listed.text
        # Writing there stays refused, even with every permission granted.
        for name, extra in (
            ("write_file", {"content": "tampered"}),
            ("edit_file", {"old_string": "build", "new_string": "x"}),
        ):
            refused = run_tool(name, path=saved, **extra)
            assert refused.meta.tool_error and "outside the workspace" in refused.text
        assert Path(saved).read_text() == log
        # Escapes from the session folder are refused like any other.
        session.session_dir.joinpath("out").symlink_to(outside)
        for raw in (
            str(session.session_dir / ".." / f"{session.id}.jsonl"),
            str(session.session_dir / "tool-results" / ".." / ".." / "x"),
            str(session.session_dir / "out" / "secret.txt"),
        ):
            for name in ("read_file", "grep", "list_files"):
                args: dict[str, object] = {"path": raw}
                if name == "grep":
                    args["pattern"] = "."
                escaped = run_tool(name, **args)
                assert escaped.meta.tool_error and "session's folder" in escaped.text, (name, raw)
        # A link inside the session folder to outside is not followed by a walk either.
        walked = run_tool("grep", pattern="top secret", path=str(session.session_dir))
        assert walked.text.startswith("No matches") and "secret.txt" not in walked.text
    finally:
        session.close()


# ---------------------------------------------------------------------------
# list_files / grep


def _tree(ws: Path) -> None:
    for name in ("src/pkg/a.py", "src/b.py", "src/c.txt", "README.md", "tests/test_a.py"):
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / name).write_text(f"# {name}\ndef hello():\n    return 'Hello'\n")
    for skipped in (".git", ".venv", "node_modules", "src/__pycache__"):
        (ws / skipped).mkdir(parents=True)
        (ws / skipped / "hidden.py").write_text("def hello(): pass\n")


def test_list_files(ws: Path) -> None:
    _tree(ws)
    ctx = make_ctx(ws)
    top = call(ListFiles(), ctx)
    assert top.content.splitlines() == ["README.md", "src/", "tests/"]
    py = call(ListFiles(), ctx, pattern="**/*.py")
    assert py.content.splitlines() == ["src/b.py", "src/pkg/a.py", "tests/test_a.py"]
    inside = call(ListFiles(), ctx, path="src", pattern="*.py")
    assert inside.content.splitlines() == ["src/b.py"]
    assert call(ListFiles(), ctx, path="src").content.splitlines() == [
        "src/b.py",
        "src/c.txt",
        "src/pkg/",
    ]
    none = call(ListFiles(), ctx, pattern="*.rs")
    assert not none.is_error and "No entries" in none.content
    assert call(ListFiles(), ctx, path="missing").is_error


def test_list_files_is_capped(ws: Path) -> None:
    for i in range(1005):
        (ws / f"f{i:04}.txt").touch()
    result = call(ListFiles(), make_ctx(ws))
    lines = result.content.splitlines()
    assert lines[0] == "f0000.txt" and lines[999] == "f0999.txt"
    assert "first 1000 of 1005 entries" in lines[-1]


def test_grep(ws: Path) -> None:
    _tree(ws)
    (ws / "src" / "blob.bin").write_bytes(b"def hello\0")
    ctx = make_ctx(ws)
    result = call(Grep(), ctx, pattern=r"def \w+\(")
    assert result.content.splitlines() == [
        "README.md:2: def hello():",
        "src/b.py:2: def hello():",
        "src/c.txt:2: def hello():",
        "src/pkg/a.py:2: def hello():",
        "tests/test_a.py:2: def hello():",
    ]
    py = call(Grep(), ctx, pattern="hello", path="src", glob="*.py", ignore_case=True)
    assert py.content.splitlines() == [
        "src/b.py:2: def hello():",
        "src/b.py:3:     return 'Hello'",
        "src/pkg/a.py:2: def hello():",
        "src/pkg/a.py:3:     return 'Hello'",
    ]
    one = call(Grep(), ctx, pattern="Hello", path="src/b.py")
    assert one.content == "src/b.py:3:     return 'Hello'"
    assert "No matches" in call(Grep(), ctx, pattern="nothing here").content
    bad = call(Grep(), ctx, pattern="def (")
    assert bad.is_error and "invalid regular expression" in bad.content


def test_grep_is_capped(ws: Path) -> None:
    (ws / "many.txt").write_text("match\n" * 600)
    result = call(Grep(), make_ctx(ws), pattern="match")
    lines = result.content.splitlines()
    assert lines[499] == "many.txt:500: match"
    assert "first 500 matches" in lines[-1]


# ---------------------------------------------------------------------------
# bash


def _alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie."""
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return status.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_until_gone(pid: int) -> bool:
    async def poll() -> bool:
        for _ in range(100):
            if not _alive(pid):
                return True
            await asyncio.sleep(0.05)
        return False

    return run(poll())


def test_bash_output_and_exit_codes(ws: Path) -> None:
    ctx = make_ctx(ws)
    ok = call(Bash(), ctx, command="echo out; echo err >&2; pwd")
    assert not ok.is_error
    assert ok.content == f"out\nerr\n{ws}\nexit code 0"
    failed = call(Bash(), ctx, command="echo nope; exit 3")
    assert failed.is_error and failed.content == "nope\nexit code 3"
    assert call(Bash(), ctx, command="true").content == "(no output)\nexit code 0"
    assert call(Bash(), ctx, command="  ").is_error
    assert call(Bash(), ctx, command="true", timeout=601).is_error


def test_bash_timeout_kills_the_process_group(ws: Path) -> None:
    ctx = make_ctx(ws)
    result = call(
        Bash(), ctx, command="echo start; sleep 30 & echo $! > sleep.pid; wait", timeout=1
    )
    assert result.is_error and "timed out" in result.content and "start" in result.content
    assert _wait_until_gone(int((ws / "sleep.pid").read_text()))


def test_bash_abort_kills_the_command(ws: Path) -> None:
    async def scenario() -> ToolResult:
        ctx = make_ctx(ws)

        async def abort_once_started() -> None:
            pid_file = ws / "sleep.pid"
            while not (pid_file.exists() and pid_file.read_text().endswith("\n")):
                await asyncio.sleep(0.01)
            ctx.abort.set()

        trigger = asyncio.create_task(abort_once_started())
        result = await Bash().run({"command": "sleep 30 & echo $! > sleep.pid; wait"}, ctx)
        await trigger
        return result

    result = run(scenario())
    assert result.is_error and "interrupted" in result.content
    assert _wait_until_gone(int((ws / "sleep.pid").read_text()))


def test_bash_returns_when_the_command_exits_despite_leftovers(ws: Path) -> None:
    ctx = make_ctx(ws)
    result = call(Bash(), ctx, command="sleep 30 & echo $! > sleep.pid; echo done", timeout=20)
    pid = int((ws / "sleep.pid").read_text())
    try:
        assert not result.is_error and result.content.startswith("done\nexit code 0")
    finally:
        os.kill(pid, 9)


def test_bash_background_task_and_bash_output(ws: Path) -> None:
    ctx = make_ctx(ws)
    statuses: list[str] = []

    async def scenario() -> tuple[ToolResult, ToolResult, ToolResult]:
        bash = Bash()
        started = await bash.run(
            {
                "command": "echo hello; while [ ! -e go ]; do sleep 0.01; done; echo bye",
                "run_in_background": True,
            },
            ctx,
        )
        statuses.append(ctx.state.tasks["bash_1"].status)
        early = await BashOutput().run({"task_id": "bash_1"}, ctx)
        (ws / "go").touch()
        for _ in range(500):
            if ctx.state.tasks["bash_1"].status != "running":
                break
            await asyncio.sleep(0.01)
        statuses.append(ctx.state.tasks["bash_1"].status)
        await bash.run({"command": "exit 4", "run_in_background": True}, ctx)
        for _ in range(500):
            if ctx.state.tasks["bash_2"].status != "running":
                break
            await asyncio.sleep(0.01)
        final = await BashOutput().run({"task_id": "bash_1"}, ctx)
        return started, early, final

    started, early, final = run(scenario())
    assert not started.is_error and "bash_1" in started.content
    assert statuses == ["running", "completed (exit 0)"]
    assert ctx.state.tasks["bash_1"].description == (
        "bash: echo hello; while [ ! -e go ]; do sleep 0.01; done; echo bye"
    )
    assert ctx.state.tasks["bash_2"].status == "failed (exit 4)"
    assert early.content.startswith("status: running\n")
    assert final.content == "status: completed (exit 0)\nhello\nbye"
    assert (ctx.session_dir / "tasks" / "bash_1.log").read_text() == "hello\nbye\n"
    unknown = call(BashOutput(), ctx, task_id="bash_9")
    assert unknown.is_error and "bash_1" in unknown.content


# ---------------------------------------------------------------------------
# todo_write


def test_todo_write(ws: Path) -> None:
    ctx = make_ctx(ws)
    todos: list[JSONValue] = [
        {"content": "read the code", "status": "completed"},
        {"content": "write the fix", "status": "in_progress", "activeForm": "writing"},
        {"content": "run the tests", "status": "pending"},
    ]
    result = call(TodoWrite(), ctx, todos=todos)
    assert result.content.splitlines() == [
        "Todo list (1/3 completed):",
        "[x] read the code",
        "[>] write the fix",
        "[ ] run the tests",
    ]
    assert ctx.state.todos[1] == Todo("write the fix", "in_progress")
    bad = call(TodoWrite(), ctx, todos=[{"content": "x", "status": "done"}])
    assert bad.is_error and "todos[0].status" in bad.content
    assert len(ctx.state.todos) == 3
    assert call(TodoWrite(), ctx, todos="nope").is_error


# ---------------------------------------------------------------------------
# Plan mode


def test_plan_mode_refuses_writes_except_the_plan_file(ws: Path) -> None:
    registry = ToolRegistry(default_tools())
    ctx = make_ctx(ws)  # ask mode with nobody to ask: the plan file needs no permission
    entered = execute(registry, ctx, "enter_plan_mode", "{}")
    plan_file = ctx.session_dir / "plan.md"
    assert not entered.meta.tool_error and str(plan_file) in entered.text
    assert ctx.state.plan is not None and ctx.state.plan.plan_file == plan_file

    for name, args in (
        ("write_file", {"path": "x.py", "content": "x"}),
        ("bash", {"command": "touch y"}),
        ("edit_file", {"path": "x.py", "old_string": "a", "new_string": "b"}),
    ):
        refused = execute(registry, ctx, name, json.dumps(args))
        assert refused.meta.tool_error and "plan mode" in refused.text
    assert not (ws / "x.py").exists() and not (ws / "y").exists()

    (ws / "notes.txt").write_text("notes\n")
    assert not execute(registry, ctx, "read_file", '{"path": "notes.txt"}').meta.tool_error
    written = execute(
        registry, ctx, "write_file", json.dumps({"path": str(plan_file), "content": "draft\n"})
    )
    assert not written.meta.tool_error, written.text
    edited = execute(
        registry,
        ctx,
        "edit_file",
        json.dumps({"path": str(plan_file), "old_string": "draft", "new_string": "step 1"}),
    )
    assert not edited.meta.tool_error, edited.text
    assert plan_file.read_text() == "step 1\n"

    exited = execute(registry, ctx, "exit_plan_mode", json.dumps({"plan": "# Plan\n1. do it\n"}))
    assert not exited.meta.tool_error and "# Plan\n1. do it" in exited.text
    assert plan_file.read_text() == "# Plan\n1. do it\n"
    assert ctx.state.plan is None
    # Out of plan mode the plan file is outside the workspace again: it may
    # be read (it is in the session's folder), no longer written.
    rewrite = json.dumps({"path": str(plan_file), "content": "changed\n"})
    assert execute(registry, ctx, "write_file", rewrite).meta.tool_error
    assert plan_file.read_text() == "# Plan\n1. do it\n"
    assert not execute(
        registry, ctx, "read_file", json.dumps({"path": str(plan_file)})
    ).meta.tool_error
    assert call(ExitPlanMode(), ctx, plan="again").is_error


def test_exit_plan_mode_uses_the_plan_file_when_no_plan_is_given(ws: Path) -> None:
    ctx = make_ctx(ws)
    call(EnterPlanMode(), ctx)
    assert call(ExitPlanMode(), ctx).is_error  # nothing written yet
    (ctx.session_dir).mkdir(parents=True, exist_ok=True)
    (ctx.session_dir / "plan.md").write_text("the plan\n")
    result = call(ExitPlanMode(), ctx)
    assert not result.is_error and result.content.endswith("the plan")


# ---------------------------------------------------------------------------
# Registry


class _Boom:
    name = "boom"
    description = "always fails"
    effect: ToolEffect = "read_only"

    @property
    def parameters(self) -> JSONObject:
        return {"type": "object", "properties": {}}

    async def run(self, args: JSONObject, ctx: ToolContext) -> ToolResult:
        raise RuntimeError("kaput")


def test_registry_lists_schemas_effects_and_names() -> None:
    registry = ToolRegistry(default_tools())
    assert registry.names() == [
        "read_file",
        "write_file",
        "edit_file",
        "list_files",
        "grep",
        "bash",
        "bash_output",
        "todo_write",
        "enter_plan_mode",
        "exit_plan_mode",
    ]
    effects = registry.effects()
    assert {n for n, e in effects.items() if e == "write"} == {"write_file", "edit_file", "bash"}
    schemas = registry.schemas()
    assert schemas[0]["type"] == "function"
    assert [s["function"]["name"] for s in schemas] == registry.names()  # type: ignore[call-overload,index]
    with pytest.raises(ValueError, match="already registered"):
        registry.register(ReadFile())


def test_registry_reports_unknown_tools_bad_arguments_and_exceptions(ws: Path) -> None:
    registry = ToolRegistry([*default_tools(), _Boom()])
    ctx = make_ctx(ws, mode="bypass")
    unknown = execute(registry, ctx, "fly", "{}")
    assert unknown.role == "tool" and unknown.tool_call_id == "call_1" and unknown.name == "fly"
    assert unknown.meta.tool_error and "'fly'" in unknown.text and "read_file" in unknown.text
    bad = execute(registry, ctx, "read_file", '{"path": ')
    assert bad.meta.tool_error and "not valid JSON" in bad.text
    listed = execute(registry, ctx, "read_file", '["a.txt"]')
    assert listed.meta.tool_error and "JSON object" in listed.text
    boom = execute(registry, ctx, "boom", "")
    assert boom.meta.tool_error and "RuntimeError: kaput" in boom.text
    wrong_type = execute(registry, ctx, "read_file", '{"path": 3}')
    assert wrong_type.meta.tool_error and "'path' must be a string" in wrong_type.text


def test_registry_permissions(ws: Path) -> None:
    registry = ToolRegistry(default_tools())
    asked: list[PermissionRequest] = []

    def asker(answer: bool) -> Callable[[PermissionRequest], Awaitable[bool]]:
        async def ask(request: PermissionRequest) -> bool:
            asked.append(request)
            return answer

        return ask

    write = json.dumps({"path": "f.txt", "content": "hi\n"})
    bash = json.dumps({"command": "touch b.txt"})

    denied = execute(registry, make_ctx(ws, ask=asker(False)), "write_file", write)
    assert denied.meta.tool_error and "the user denied write_file" in denied.text
    assert not (ws / "f.txt").exists()
    assert asked == [
        PermissionRequest(
            "write_file",
            "write f.txt (1 lines)",
            json.dumps(json.loads(write), separators=(",", ":")),
        )
    ]

    granted = execute(registry, make_ctx(ws, ask=asker(True)), "write_file", write)
    assert not granted.meta.tool_error and (ws / "f.txt").read_text() == "hi\n"

    nobody = execute(registry, make_ctx(ws), "bash", bash)
    assert nobody.meta.tool_error and "permission could not be requested" in nobody.text
    assert not (ws / "b.txt").exists()

    asked.clear()
    read_only = execute(registry, make_ctx(ws, ask=asker(False)), "read_file", '{"path": "f.txt"}')
    assert not read_only.meta.tool_error and asked == []

    edits = make_ctx(ws, mode="accept-edits", ask=asker(False))
    assert not execute(registry, edits, "write_file", write).meta.tool_error
    assert asked == []
    refused_bash = execute(registry, edits, "bash", bash)
    assert refused_bash.meta.tool_error
    assert asked == [PermissionRequest("bash", "touch b.txt", '{"command":"touch b.txt"}')]

    asked.clear()
    bypass = make_ctx(ws, mode="bypass", ask=asker(False))
    assert not execute(registry, bypass, "bash", bash).meta.tool_error
    assert asked == [] and (ws / "b.txt").exists()


# ---------------------------------------------------------------------------
# Confinement by descriptor: symlinks and swaps (issue 12, finding 7)


def test_links_inside_the_workspace_are_followed_and_links_out_are_refused(
    ws: Path, outside: Path
) -> None:
    """The rule: a link is followed only while it leads inside; one leading out is named."""
    (ws / "src").mkdir()
    (ws / "src" / "real.txt").write_text("inside\n")
    (ws / "alias.txt").symlink_to("src/real.txt")
    (ws / "docs").symlink_to(ws / "src")  # absolute, inside
    (ws / "up").symlink_to("../outside")
    (ws / "hop1").symlink_to("hop2")
    (ws / "hop2").symlink_to("up/secret.txt")
    (ws / "loop").symlink_to("loop")
    ctx = make_ctx(ws)

    read = call(ReadFile(), ctx, path="alias.txt")
    assert read.content == "     1\tinside" and ctx.state.reads[-1].path == ws / "src" / "real.txt"
    assert call(ReadFile(), ctx, path="docs/real.txt").content == "     1\tinside"
    assert call(ListFiles(), ctx, path="docs").content == "src/real.txt"
    edited = call(EditFile(), ctx, path="alias.txt", old_string="inside", new_string="edited")
    assert not edited.is_error and (ws / "src" / "real.txt").read_text() == "edited\n"
    assert not call(WriteFile(), ctx, path="docs/new.txt", content="n").is_error
    assert (ws / "src" / "new.txt").read_text() == "n" and (ws / "alias.txt").is_symlink()

    for raw in ("up/secret.txt", "hop1"):
        for tool, extra in (
            (ReadFile(), {}),
            (EditFile(), {"old_string": "top", "new_string": "x"}),
            (WriteFile(), {"content": "pwned"}),
        ):
            result = call(tool, ctx, path=raw, **extra)
            assert result.is_error and "outside the workspace" in result.content, (tool, raw)
            assert "up is a symbolic link to ../outside" in result.content
    looped = call(ReadFile(), ctx, path="loop")
    assert looped.is_error and "symbolic links" in looped.content
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "top secret\n"


#: The file-system calls a swap is injected after, one schedule per call.
_SWAP_HOOKS = ("lstat", "stat", "open", "readlink", "scandir", "mkdir", "rename", "listdir")

_SWAP_CALLS: dict[str, JSONObject] = {
    "read_file": {"path": "sub/secret.txt"},
    "write_file": {"path": "sub/new/x.txt", "content": "pwned"},
    "edit_file": {"path": "sub/secret.txt", "old_string": "top", "new_string": "pwned"},
    "list_files": {"path": "sub"},
    "glob": {"path": ".", "pattern": "**/*.txt"},
    "grep": {"pattern": "secret", "path": "sub"},
}


@pytest.mark.parametrize("tool", sorted(_SWAP_CALLS))
def test_a_folder_swapped_for_a_link_at_any_step_leads_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tool: str
) -> None:
    """Every schedule, one step at a time: ``sub`` becomes a link out after the n-th call.

    For n = 1, 2, … the folder ``sub`` is swapped for a symlink to the
    outside folder right after the tool's n-th call to one of
    ``_SWAP_HOOKS``, until a run makes fewer than n calls. A confinement
    that checks a path and then opens it by name has a step between the two;
    a walk by descriptor has none.
    """
    originals = {name: getattr(os, name) for name in _SWAP_HOOKS}
    symlink, rename = os.symlink, os.rename
    schedules = 0
    escapes: list[str] = []
    for step in range(1, 500):
        scene = tmp_path / str(step)
        ws, outside = scene / "ws", scene / "outside"
        (ws / "sub").mkdir(parents=True)
        (ws / "sub" / "secret.txt").write_text("harmless\n")  # the outside has one too
        outside.mkdir()
        (outside / "secret.txt").write_text("top secret\n")
        (outside / "outside-only.txt").write_text("top secret\n")
        calls = 0

        def hooked(name: str) -> Callable[..., object]:
            def run_then_maybe_swap(*args: object, **kwargs: object) -> object:
                nonlocal calls
                result = originals[name](*args, **kwargs)
                calls += 1
                if calls == step:  # noqa: B023 - read while this schedule runs
                    rename(ws / "sub", ws / ".sub-real")  # noqa: B023 - this schedule's
                    symlink(outside, ws / "sub")  # noqa: B023
                return result

            return run_then_maybe_swap

        ctx = make_ctx(ws, mode="bypass")
        tool_object = ListFiles() if tool == "glob" else _tool_named(tool)
        for name in _SWAP_HOOKS:
            monkeypatch.setattr(os, name, hooked(name))
        try:
            result = call(tool_object, ctx, **_SWAP_CALLS[tool])
        finally:
            monkeypatch.undo()
        if calls < step:
            break  # the swap never came: every step has been tried
        schedules += 1
        leaked = "top secret" in result.content or "outside-only" in result.content
        touched = sorted(p.name for p in outside.iterdir()) != ["outside-only.txt", "secret.txt"]
        if leaked or touched or (outside / "secret.txt").read_text() != "top secret\n":
            escapes.append(f"step {step}: {result.content[:300]}")
    assert schedules > 5  # the tool made that many file-system calls, each a schedule
    assert escapes == []


def _tool_named(name: str) -> Tool:
    return {tool.name: tool for tool in default_tools()}[name]


def test_a_plan_file_that_is_a_symlink_is_neither_read_nor_written_through(
    ws: Path, outside: Path
) -> None:
    registry = ToolRegistry(default_tools())
    ctx = make_ctx(ws)
    execute(registry, ctx, "enter_plan_mode", "{}")
    plan_file = ctx.session_dir / "plan.md"
    plan_file.parent.mkdir(parents=True)
    plan_file.symlink_to(outside / "secret.txt")

    presented = execute(registry, ctx, "exit_plan_mode", "{}")
    assert presented.meta.tool_error and "top secret" not in presented.text
    assert "symbolic link" in presented.text and str(plan_file) in presented.text
    read = execute(registry, ctx, "read_file", json.dumps({"path": str(plan_file)}))
    assert read.meta.tool_error and "top secret" not in read.text
    for name, args in (
        ("write_file", {"path": str(plan_file), "content": "pwned\n"}),
        ("edit_file", {"path": str(plan_file), "old_string": "top", "new_string": "pwned"}),
        ("exit_plan_mode", {"plan": "pwned\n"}),
    ):
        refused = execute(registry, ctx, name, json.dumps(args))
        assert refused.meta.tool_error and "symbolic link" in refused.text, (name, refused.text)
    assert (outside / "secret.txt").read_text() == "top secret\n"
    assert plan_file.is_symlink() and ctx.state.plan is not None


def test_write_file_creates_in_the_verified_folder_and_leaves_no_temp(ws: Path) -> None:
    (ws / "deep").mkdir()
    ctx = make_ctx(ws)
    assert not call(WriteFile(), ctx, path="deep/a.txt", content="one").is_error
    assert not call(WriteFile(), ctx, path="deep/../deep/./a.txt", content="two").is_error
    assert [p.name for p in (ws / "deep").iterdir()] == ["a.txt"]
    assert (ws / "deep" / "a.txt").read_text() == "two"
    assert call(WriteFile(), ctx, path=".", content="x").is_error
    nul = call(ReadFile(), ctx, path="a\0b")
    assert nul.is_error and "NUL" in nul.content


def test_read_only_tools_read_inside_the_session_folder_through_a_real_turn(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """End to end: the preview of a budgeted bash result names a file; read_file opens it.

    The model (scripted, over HTTP) runs a command with a long output, takes
    the path the preview prints and reads part of that file with read_file.
    The Cairn home is reached through a symlink, as ``/tmp`` is on some
    systems, so the printed path is not the resolved one.
    """
    workspace = tmp_path / "project"
    workspace.mkdir()
    (tmp_path / "real-home").mkdir()
    (tmp_path / "home").symlink_to(tmp_path / "real-home")
    printed: list[str] = []

    def model(body: dict[str, object]) -> Reply:
        messages = body["messages"]
        assert isinstance(messages, list)
        last = messages[-1]
        if last["role"] == "user":
            command = "seq 1 3000 | sed 's/^/build step /'"
            return Reply(tool_calls=[ToolCallSpec("bash", json.dumps({"command": command}))])
        found = re.search(r"is saved at (\S+)\. Read it with read_file", str(last["content"]))
        if found is not None and not printed:
            printed.append(found.group(1))
            args = {"path": found.group(1), "offset": 2, "limit": 3}
            return Reply(tool_calls=[ToolCallSpec("read_file", json.dumps(args))])
        return Reply(text="Done.")

    openai_server.respond_with(model)
    config = ModelConfig(model="m", base_url=openai_server.base_url, context_window=8_192)
    runtime = Runtime(
        workspace, config, OpenAIProvider(config), home=tmp_path / "home", permission_mode="bypass"
    )
    session = runtime.new_session()
    try:
        result = run(run_turn(session, "Build it and show me the log."))
        assert result.text == "Done."
        [saved] = printed
        assert Path(saved).is_relative_to(tmp_path / "home")  # as named, not resolved
        [read] = [m for m in session.api_messages if m.role == "tool" and m.name == "read_file"]
        assert not read.meta.tool_error, read.text
        head = ["build step 2", "build step 3", "build step 4"]
        assert Path(saved).read_text().splitlines()[1:4] == head
        assert read.text.splitlines()[:3] == [f"{n:>6}\t{line}" for n, line in enumerate(head, 2)]
    finally:
        session.close()
