"""The editor as the tools' host: with the ``fs`` capability the file tools read and
write the editor's buffers through ``fs/*``; with ``terminal``, ``bash`` runs in an
editor terminal through ``terminal/*``; without them, everything stays local."""

from __future__ import annotations

import json
from pathlib import Path

from support.acp_client import capabilities, connected, make_setup
from support.openai_server import (
    OpenAIServer,
    Reply,
    ToolCallSpec,
)


def call(name: str, **arguments: object) -> Reply:
    return Reply(tool_calls=[ToolCallSpec(name, json.dumps(arguments))])


def tool_results(server: OpenAIServer) -> list[str]:
    return [str(m["content"]) for m in server.bodies[-1]["messages"] if m["role"] == "tool"]


async def test_with_fs_the_file_tools_read_and_write_the_editors_buffers(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    openai_server.script(
        call("read_file", path="calc.py"),
        call("edit_file", path="calc.py", old_string="a - b", new_string="a + b"),
        call("write_file", path="notes.md", content="fixed add()\n"),
        Reply(text="Fixed."),
    )

    caps = capabilities(fs=True)
    setup = make_setup(tmp_path, openai_server)
    async with connected(setup, workspace, client_capabilities=caps) as editor:
        # The editor has unsaved changes the disk does not.
        editor.client.buffers[str(workspace / "calc.py")] = (
            "def add(a, b):\n    # unsaved comment\n    return a - b\n"
        )
        sid = await editor.new()
        assert await editor.ask(sid, "fix add") == "end_turn"
        assert editor.client.file_calls == [
            ("read", str(workspace / "calc.py")),
            ("read", str(workspace / "calc.py")),
            ("write", str(workspace / "calc.py")),
            ("write", str(workspace / "notes.md")),
        ]
        assert editor.client.buffers[str(workspace / "calc.py")] == (
            "def add(a, b):\n    # unsaved comment\n    return a + b\n"
        )
        assert editor.client.buffers[str(workspace / "notes.md")] == "fixed add()\n"

    results = tool_results(openai_server)
    assert "# unsaved comment" in results[0]  # the model saw the buffer, not the disk
    # The disk is the editor's to save: untouched.
    assert (workspace / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"
    assert not (workspace / "notes.md").exists()


async def test_with_fs_a_path_outside_the_workspace_is_refused_before_the_editor_is_asked(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "secret.txt").write_text("no")
    openai_server.script(call("read_file", path="../secret.txt"), Reply(text="Could not."))

    caps = capabilities(fs=True)
    setup = make_setup(tmp_path, openai_server)
    async with connected(setup, workspace, client_capabilities=caps) as editor:
        sid = await editor.new()
        await editor.ask(sid, "read the secret")
        assert editor.client.file_calls == []

    assert "outside" in tool_results(openai_server)[0]


async def test_with_terminal_bash_runs_in_an_editor_terminal_shown_in_the_tool_call(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    workspace = tmp_path / "ws"
    openai_server.script(
        call("bash", command="echo from the editor; exit 3"),
        Reply(text="It exited 3."),
    )

    caps = capabilities(terminal=True)
    setup = make_setup(tmp_path, openai_server)
    async with connected(setup, workspace, client_capabilities=caps) as editor:
        sid = await editor.new()
        await editor.ask(sid, "run it")
        assert editor.client.terminal_commands == [("bash", ["-c", "echo from the editor; exit 3"])]
        updates = editor.client.updates(sid)
        start = next(u for u in updates if u["sessionUpdate"] == "tool_call")
        assert start["kind"] == "execute"
        embedded = [
            u
            for u in updates
            if u["sessionUpdate"] == "tool_call_update"
            and u.get("content")
            and u["content"][0]["type"] == "terminal"
        ]
        assert embedded and embedded[0]["toolCallId"] == start["toolCallId"]
        assert embedded[0]["content"][0]["terminalId"] == "term-1"
        done = [u for u in updates if u["sessionUpdate"] == "tool_call_update"][-1]
        assert done["status"] == "failed"  # exit 3

    result = tool_results(openai_server)[0]
    assert "from the editor" in result and "exit code 3" in result


async def test_without_the_capabilities_the_tools_stay_local(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    workspace = tmp_path / "ws"
    openai_server.script(
        call("write_file", path="a.txt", content="local\n"),
        call("bash", command="cat a.txt"),
        Reply(text="Done."),
    )

    async with connected(make_setup(tmp_path, openai_server), workspace) as editor:
        sid = await editor.new()
        await editor.ask(sid, "write and show")
        assert editor.client.file_calls == [] and editor.client.terminal_commands == []

    assert (workspace / "a.txt").read_text() == "local\n"
    assert "local" in tool_results(openai_server)[1]
