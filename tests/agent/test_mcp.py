"""MCP servers in sessions (issue 26 item 2), against real servers built with the SDK.

``tests/support/mcp_server.py`` is a real MCP server (the SDK's ``MCPServer``),
started by Cairn as a subprocess over stdio, or by the test over streamable
HTTP on 127.0.0.1; the model is the scripted OpenAI-compatible server. No
part of the SDK is mocked, and nothing here asserts how long anything takes:
every deadline is generous, and readiness is polled.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from cairn.agent.commands import run_command
from cairn.agent.events import Event, Notice, PermissionRequested
from cairn.agent.loop import run_turn
from cairn.agent.mcp.adapter import tool_name
from cairn.agent.mcp.tool_search import MCP_SCHEMA_SHARE, TOOL_SEARCH
from cairn.agent.permissions import PermissionDecision
from cairn.agent.runtime import Runtime, Session
from cairn.agent.settings import Settings, SettingsError, load_settings
from cairn.agent.tools.base import PermissionMode, tool_schema
from cairn.agent.tools.permissions import is_allowed
from cairn.context import FixedContext
from cairn.messages import Message
from cairn.provider import ModelConfig, OpenAIProvider
from support.openai_server import (
    OpenAIServer,
    Reply,
    ToolCallSpec,
)

SERVER = Path(__file__).resolve().parents[1] / "support" / "mcp_server.py"
#: A deadline for waiting on something that should happen at once: ten times
#: anything seen on a loaded two-core machine.
PATIENCE_S = 120.0


def stdio(*args: str, **extra: Any) -> dict[str, Any]:
    """The settings entry of the test server over stdio."""
    return {"command": sys.executable, "args": [str(SERVER), *args], **extra}


def call(tool: str, /, **args: Any) -> Reply:
    return Reply(tool_calls=[ToolCallSpec(tool, json.dumps(args))])


def open_runtime(
    tmp_path: Path,
    server: OpenAIServer,
    settings: dict[str, Any],
    *,
    answers: bool = False,
    mode: PermissionMode = "ask",
    window: int = 32_768,
) -> Runtime:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    model = ModelConfig(model="test-model", base_url=server.base_url, context_window=window)
    return Runtime(
        workspace,
        model,
        OpenAIProvider(model),
        settings=Settings.model_validate(settings),
        home=tmp_path / "home",
        permission_mode=mode,
        answers_permissions=answers,
    )


def recorded(session: Session) -> list[Event]:
    events: list[Event] = []
    session.events.on(events.append)
    return events


def notices(events: list[Event]) -> list[str]:
    return [e.text for e in events if isinstance(e, Notice)]


def tool_results(session: Session) -> list[Message]:
    return [m for m in session.api_messages if m.role == "tool"]


def schema_name(schema: Mapping[str, Any]) -> str:
    return str(schema["function"]["name"])


def sent_tools(body: Mapping[str, Any]) -> list[str]:
    return [schema_name(t) for t in body.get("tools", [])]


def one_line(text: str) -> bool:
    return "\n" not in text and "Traceback" not in text


def close(runtime: Runtime, runner: asyncio.Runner) -> None:
    """Close the runtime (its MCP servers), then the provider's pool on its own loop."""
    runtime.close()
    if isinstance(runtime.provider, OpenAIProvider):
        runner.run(runtime.provider.aclose())


@pytest.fixture
def runner() -> Iterator[asyncio.Runner]:
    """One event loop for the whole test, as a surface has: the provider's
    connection pool belongs to the loop that opened it."""
    with asyncio.Runner() as loop_runner:
        yield loop_runner


# -- tools, schemas, permission ------------------------------------------------


def test_stdio_tools_are_listed_with_their_names_descriptions_and_schemas(
    tmp_path: Path, openai_server: OpenAIServer, runner: asyncio.Runner
) -> None:
    runtime = open_runtime(
        tmp_path,
        openai_server,
        {"mcpServers": {"t": stdio()}, "permissions": {"allow": ["mcp__t__echo"]}},
    )
    try:
        session = runtime.new_session()
        openai_server.script(call("mcp__t__echo", text="hello"), Reply(text="done"))
        result = runner.run(run_turn(session, "say hello through the server"))
        assert result.text == "done"

        schemas = {t["function"]["name"]: t["function"] for t in openai_server.bodies[0]["tools"]}
        for tool in ("echo", "big", "hang", "pid", "picture", "fail", "header"):
            assert f"mcp__t__{tool}" in schemas
        echo = schemas["mcp__t__echo"]
        assert echo["description"] == "Echo the given text back, prefixed with 'echo: '."
        assert echo["parameters"]["properties"]["text"]["type"] == "string"
        assert echo["parameters"]["required"] == ["text"]
        assert TOOL_SEARCH not in schemas  # seven small schemas: well under the share
        (answer,) = tool_results(session)
        assert answer.text == "echo: hello" and not answer.meta.tool_error

        report = runner.run(run_command(runtime, "/mcp", "")).text
        assert report.splitlines()[0] == "t (stdio): connected, 7 tools"
        assert "  mcp__t__echo  Echo the given text back, prefixed with 'echo: '." in report
    finally:
        close(runtime, runner)


@pytest.mark.parametrize(
    ("answers", "decision", "allow", "expected"),
    [
        (False, None, [], "permission refused: mcp__t__echo needs the user's permission"),
        (True, "reject", [], "the user denied mcp__t__echo"),
        (True, "allow_once", [], "echo: hi"),
        (False, None, ["mcp__t__*"], "echo: hi"),
        (False, None, ["mcp__t"], "echo: hi"),
    ],
)
def test_an_mcp_tool_needs_permission_unless_settings_allow_it(
    tmp_path: Path,
    openai_server: OpenAIServer,
    runner: asyncio.Runner,
    answers: bool,
    decision: PermissionDecision | None,
    allow: list[str],
    expected: str,
) -> None:
    runtime = open_runtime(
        tmp_path,
        openai_server,
        {"mcpServers": {"t": stdio()}, "permissions": {"allow": allow}},
        answers=answers,
    )
    try:
        session = runtime.new_session()
        asked: list[PermissionRequested] = []

        def on_event(event: Event) -> None:
            if isinstance(event, PermissionRequested):
                asked.append(event)
                assert decision is not None
                asyncio.get_running_loop().call_soon(session.answer, event.id, decision)

        session.events.on(on_event)
        openai_server.script(call("mcp__t__echo", text="hi"), Reply(text="ok"))
        runner.run(run_turn(session, "echo hi"))
        (answer,) = tool_results(session)
        assert expected in answer.text
        assert answer.meta.tool_error == (expected != "echo: hi")
        # Asked exactly when a surface answers and nothing in the settings allows it.
        assert [a.tool for a in asked] == (["mcp__t__echo"] if decision else [])
    finally:
        close(runtime, runner)


def test_a_big_result_spills_to_a_file_the_agent_can_read_back(
    tmp_path: Path, openai_server: OpenAIServer, runner: asyncio.Runner
) -> None:
    runtime = open_runtime(tmp_path, openai_server, {"mcpServers": {"t": stdio()}}, mode="bypass")
    try:
        session = runtime.new_session()
        openai_server.script(
            call("mcp__t__big", lines=20_000),
            call("mcp__t__picture"),
            Reply(text="read it"),
        )
        runner.run(run_turn(session, "produce a lot"))
        big, picture = tool_results(session)
        path = Path(str(big.meta.extra["full_output_path"]))
        full = path.read_text()
        assert full.count("\n") == 20_000 and full.startswith("line 00000 of the big output")
        assert len(big.text) < len(full) // 10 and str(path) in big.text
        # An image is summarized as one line, the text beside it kept.
        assert picture.text.splitlines() == [
            "a picture follows",
            "[image image/png, 72 bytes: not shown]",
        ]
    finally:
        close(runtime, runner)


# -- failures: one line, and the session goes on --------------------------------


def test_a_server_killed_mid_call_is_one_line_and_the_session_goes_on(
    tmp_path: Path, openai_server: OpenAIServer, runner: asyncio.Runner
) -> None:
    pid_file = tmp_path / "server.pid"
    runtime = open_runtime(
        tmp_path,
        openai_server,
        {"mcpServers": {"t": stdio("--pid-file", str(pid_file))}},
        mode="bypass",
    )
    try:
        session = runtime.new_session()
        events = recorded(session)
        openai_server.script(call("mcp__t__hang"), Reply(text="went on without it"))

        async def kill_mid_call() -> str:
            turn = asyncio.ensure_future(run_turn(session, "wait on the server"))
            deadline = time.monotonic() + PATIENCE_S
            while not pid_file.exists() or not pid_file.read_text():
                assert time.monotonic() < deadline and not turn.done()
                await asyncio.sleep(0.05)
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
            return (await turn).text

        assert runner.run(kill_mid_call()) == "went on without it"
        (answer,) = tool_results(session)
        assert answer.meta.tool_error and one_line(answer.text)
        assert answer.text.startswith("mcp__t__hang: MCP server 't' died")
        said = [n for n in notices(events) if "'t'" in n]
        assert len(said) == 1 and one_line(said[0]) and "goes on without it" in said[0]

        # Its tools now answer at once with one line; the session still works.
        openai_server.script(call("mcp__t__echo", text="again"), Reply(text="still here"))
        assert runner.run(run_turn(session, "try again")).text == "still here"
        refused = tool_results(session)[-1]
        assert refused.meta.tool_error and one_line(refused.text)
        assert "MCP server 't' failed: died" in refused.text
        report = runner.run(run_command(runtime, "/mcp", "")).text
        assert report.startswith("t (stdio): failed: died")
    finally:
        close(runtime, runner)


def test_a_cancel_stops_the_call_and_keeps_the_server(
    tmp_path: Path, openai_server: OpenAIServer, runner: asyncio.Runner
) -> None:
    pid_file = tmp_path / "server.pid"
    runtime = open_runtime(
        tmp_path,
        openai_server,
        {"mcpServers": {"t": stdio("--pid-file", str(pid_file))}},
        mode="bypass",
    )
    try:
        session = runtime.new_session()
        openai_server.script(call("mcp__t__hang"))

        async def cancel_mid_call() -> bool:
            turn = asyncio.ensure_future(run_turn(session, "wait on the server"))
            deadline = time.monotonic() + PATIENCE_S
            while not pid_file.exists():
                assert time.monotonic() < deadline and not turn.done()
                await asyncio.sleep(0.05)
            session.abort()
            return (await turn).aborted

        assert runner.run(cancel_mid_call())
        (answer,) = tool_results(session)
        assert answer.text == "mcp__t__hang: interrupted by the user"
        # The server was not at fault: it still answers.
        openai_server.script(call("mcp__t__echo", text="still there"), Reply(text="yes"))
        assert runner.run(run_turn(session, "are you there?")).text == "yes"
        assert tool_results(session)[-1].text == "echo: still there"
    finally:
        close(runtime, runner)


def test_a_call_past_its_deadline_stops_the_hung_server(
    tmp_path: Path, openai_server: OpenAIServer, runner: asyncio.Runner
) -> None:
    runtime = open_runtime(
        tmp_path, openai_server, {"mcpServers": {"t": stdio(timeout=1)}}, mode="bypass"
    )
    try:
        session = runtime.new_session()
        events = recorded(session)
        openai_server.script(call("mcp__t__hang", seconds=600), Reply(text="moved on"))
        assert runner.run(run_turn(session, "wait")).text == "moved on"
        (answer,) = tool_results(session)
        assert answer.meta.tool_error and one_line(answer.text)
        assert "hung: no answer to mcp__t__hang within 1 s (timeout)" in answer.text
        assert len([n for n in notices(events) if "hung" in n]) == 1
    finally:
        close(runtime, runner)


def test_servers_that_fail_to_start_are_one_notice_each(
    tmp_path: Path, openai_server: OpenAIServer, runner: asyncio.Runner
) -> None:
    servers = {
        "missing": {"command": "cairn-no-such-mcp-server"},
        "exits": {
            "command": sys.executable,
            "args": ["-c", "import sys; sys.exit('bad configuration: no token')"],
        },
        "silent": {
            "command": sys.executable,
            "args": ["-c", "import time; time.sleep(600)"],
            "startup_timeout": 1,
        },
        "unset": {"url": "http://127.0.0.1:9/mcp", "headers": {"A": "${CAIRN_TEST_UNSET_VAR}"}},
        "t": stdio(),
    }
    runtime = open_runtime(tmp_path, openai_server, {"mcpServers": servers}, mode="bypass")
    try:
        session = runtime.new_session()
        events = recorded(session)
        openai_server.script(call("mcp__t__echo", text="fine"), Reply(text="done"))
        assert runner.run(run_turn(session, "go")).text == "done"
        assert tool_results(session)[0].text == "echo: fine"
        said = notices(events)
        for name in ("missing", "exits", "silent", "unset"):
            (line,) = [n for n in said if f"MCP server {name!r} failed to start" in n]
            assert one_line(line)
        assert not any("'t'" in n for n in said)
        report = runner.run(run_command(runtime, "/mcp", "")).text.splitlines()
        assert report[0] == (
            "missing (stdio): failed: cannot run 'cairn-no-such-mcp-server': command not found"
        )
        assert report[1].startswith("exits (stdio): failed: the server closed the connection")
        assert "bad configuration: no token" in report[1]  # the last line of its stderr
        assert report[2] == "silent (stdio): failed: no answer within 1 s (startup_timeout)"
        assert report[3] == (
            "unset (http): failed: environment variable CAIRN_TEST_UNSET_VAR is not set "
            "(mcpServers.unset.headers.A)"
        )
        assert report[4] == "t (stdio): connected, 7 tools"
    finally:
        close(runtime, runner)


def test_close_stops_the_server_process(
    tmp_path: Path, openai_server: OpenAIServer, runner: asyncio.Runner
) -> None:
    runtime = open_runtime(tmp_path, openai_server, {"mcpServers": {"t": stdio()}}, mode="bypass")
    session = runtime.new_session()
    openai_server.script(call("mcp__t__pid"), Reply(text="ok"))
    runner.run(run_turn(session, "pid?"))
    pid = int(tool_results(session)[0].text)
    os.kill(pid, 0)  # running
    close(runtime, runner)
    assert [s.state for s in runtime.mcp.statuses()] == ["stopped"]
    deadline = time.monotonic() + PATIENCE_S
    while _alive(pid):
        assert time.monotonic() < deadline, "the MCP server outlived Runtime.close"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie no one reaped yet is dead too.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


# -- streamable HTTP --------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def http_mcp_server(tmp_path: Path) -> Iterator[str]:
    """The test server over streamable HTTP on 127.0.0.1: its endpoint URL, once it listens."""
    port = _free_port()
    log = (tmp_path / "http-server.log").open("w")
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "--http", str(port)], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + PATIENCE_S
        while True:
            assert process.poll() is None, (tmp_path / "http-server.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the HTTP MCP server never listened"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(PATIENCE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def test_a_streamable_http_server_with_headers(
    tmp_path: Path,
    openai_server: OpenAIServer,
    runner: asyncio.Runner,
    http_mcp_server: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CAIRN_TEST_MCP_TOKEN", "secret-42")
    server = {
        "type": "http",
        "url": http_mcp_server,
        "headers": {"X-Test-Token": "${CAIRN_TEST_MCP_TOKEN}"},
    }
    runtime = open_runtime(
        tmp_path,
        openai_server,
        {"mcpServers": {"web": server}, "permissions": {"allow": ["mcp__web__*"]}},
    )
    try:
        session = runtime.new_session()
        openai_server.script(
            call("mcp__web__echo", text="over http"),
            call("mcp__web__header", name="x-test-token"),
            Reply(text="done"),
        )
        assert runner.run(run_turn(session, "use the web server")).text == "done"
        assert [m.text for m in tool_results(session)] == ["echo: over http", "secret-42"]
        assert "mcp__web__echo" in sent_tools(openai_server.bodies[0])
        report = runner.run(run_command(runtime, "/mcp", "")).text
        assert report.startswith("web (http): connected, 7 tools")
    finally:
        close(runtime, runner)


# -- lean by design: tool_search ------------------------------------------------


def test_sixty_tools_cost_less_than_the_share_through_tool_search(
    tmp_path: Path, openai_server: OpenAIServer, runner: asyncio.Runner
) -> None:
    plain = open_runtime(tmp_path, openai_server, {})
    baseline = plain.new_session()
    runner.run(baseline.start())
    without_mcp = baseline.fixed_context().tokens
    close(plain, runner)

    settings = {
        "mcpServers": {"many": stdio("--tools", "60")},
        "permissions": {"allow": ["mcp__many__*"]},
    }
    runtime = open_runtime(tmp_path, openai_server, settings)
    try:
        session = runtime.new_session()
        runner.run(session.start())
        budget = session.pipeline.input_budget
        assert budget is not None
        share = MCP_SCHEMA_SHARE * budget
        mcp = [t for t in session.tools.tools if t.name.startswith("mcp__many__")]
        assert len(mcp) == 67  # the 60 generated tools and the server's own 7
        # Sent whole, the schemas would take more than the share of the fixed context ...
        fixed = session.fixed_context()
        builtin = tuple(s for s in fixed.tools if schema_name(s) != TOOL_SEARCH)
        whole = FixedContext(fixed.system, builtin + tuple(tool_schema(t) for t in mcp))
        assert whole.tokens - without_mcp > share
        # ... behind tool_search they cost less than it.
        assert fixed.tokens - without_mcp < share
        assert TOOL_SEARCH in sent_names(session)
        assert not any(n.startswith("mcp__") for n in sent_names(session))

        openai_server.script(
            call("mcp__many__tool_07", query="unpaid"),  # not loaded yet: refused with a hint
            call(TOOL_SEARCH, query="invoices"),
            call(TOOL_SEARCH, load=["mcp__many__tool_07"]),
            call("mcp__many__tool_07", query="unpaid"),
            Reply(text="found them"),
        )
        assert runner.run(run_turn(session, "find unpaid invoices")).text == "found them"
        early, found, loaded, answer = (m.text for m in tool_results(session))
        assert "mcp__many__tool_07 is not loaded: load it with tool_search" in early
        matches = found.splitlines()
        assert matches[0].startswith("mcp__many__tool_07 — Search the invoices of project")
        assert {m.split(" — ")[0] for m in matches[:6]} == {
            f"mcp__many__tool_{n:02d}" for n in (7, 17, 27, 37, 47, 57)
        }
        assert loaded.startswith("loaded mcp__many__tool_07")
        assert answer == "tool_07: 20 results for 'unpaid' (open, owner None)"

        # The fixed context changed once, by exactly the loaded schema.
        bodies = openai_server.bodies
        tool_sets = [tuple(sent_tools(b)) for b in bodies]
        assert len(set(tool_sets)) == 2
        assert tool_sets[3] == (*tool_sets[0], "mcp__many__tool_07")
        assert session.state.loaded_tools == ["mcp__many__tool_07"]
        session_id = session.id
    finally:
        close(runtime, runner)

    # A resumed session sends the loaded tool again, and only it.
    resumed_runtime = open_runtime(tmp_path, openai_server, settings)
    try:
        resumed = resumed_runtime.resume(session_id)
        runner.run(resumed.start())
        names = sent_names(resumed)
        assert "mcp__many__tool_07" in names and "mcp__many__tool_08" not in names
        assert resumed.tools.is_loaded("mcp__many__tool_07")
    finally:
        close(resumed_runtime, runner)


def sent_names(session: Session) -> list[str]:
    return sent_tools({"tools": list(session.fixed_context().tools)})


# -- settings and names -------------------------------------------------------------


def _write(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_mcp_servers_merge_by_name_and_the_project_wins(tmp_path: Path) -> None:
    home, workspace = tmp_path / "home", tmp_path / "ws"
    _write(
        home / "settings.json",
        {
            "mcpServers": {"a": {"command": "user-a"}, "b": {"url": "https://b.example/mcp"}},
            "permissions": {"allow": ["mcp__a__*"]},
        },
    )
    _write(
        workspace / ".cairn" / "settings.json",
        {
            "mcpServers": {"a": {"command": "project-a", "args": ["x"]}, "c": {"command": "c"}},
            "permissions": {"allow": ["mcp__c__run", "mcp__a__*"]},
        },
    )
    settings = load_settings(workspace, home)
    assert list(settings.mcpServers) == ["a", "b", "c"]
    assert settings.mcpServers["a"].command == "project-a"
    assert settings.mcpServers["a"].args == ("x",)
    assert settings.mcpServers["b"].transport == "http"
    assert settings.permissions.allow == ("mcp__a__*", "mcp__c__run")


@pytest.mark.parametrize(
    ("entry", "key", "message"),
    [
        ({"command": "x", "url": "http://a/mcp"}, "mcpServers.s", "either 'command'"),
        ({"args": ["x"]}, "mcpServers.s", "either 'command'"),
        ({"url": "ftp://a"}, "mcpServers.s", "url must start with http:// or https://"),
        ({"type": "sse", "url": "http://a/mcp"}, "mcpServers.s.type", "'stdio' or 'http'"),
        ({"type": "stdio", "url": "http://a/mcp"}, "mcpServers.s", "type 'stdio' needs"),
        ({"command": "x", "timeout": 0}, "mcpServers.s.timeout", "greater than 0"),
        ({"command": "x", "timeout": "60"}, "mcpServers.s.timeout", "valid number"),
        ({"command": "x", "cwd": "/"}, "mcpServers.s.cwd", "unknown key"),
    ],
)
def test_a_bad_server_entry_names_the_file_and_the_key(
    tmp_path: Path, entry: dict[str, Any], key: str, message: str
) -> None:
    path = tmp_path / "ws" / ".cairn" / "settings.json"
    _write(path, {"mcpServers": {"s": entry}})
    with pytest.raises(SettingsError) as caught:
        load_settings(tmp_path / "ws", tmp_path / "home")
    text = str(caught.value)
    assert str(path) in text
    (line,) = [ln.strip() for ln in text.splitlines()[1:]]
    assert line.startswith(f"{key}:") and message in line, line


def test_a_bad_server_name_or_pattern_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ws" / ".cairn" / "settings.json"
    _write(path, {"mcpServers": {"my server": {"command": "x"}}})
    with pytest.raises(SettingsError, match="may hold only letters, digits"):
        load_settings(tmp_path / "ws", tmp_path / "home")
    _write(path, {"permissions": {"allow": [" bash"]}})
    with pytest.raises(SettingsError, match=r"permissions\.allow\[0\]"):
        load_settings(tmp_path / "ws", tmp_path / "home")


def test_allow_patterns() -> None:
    assert is_allowed("mcp__gh__create_issue", ["mcp__gh__create_issue"])
    assert is_allowed("mcp__gh__create_issue", ["mcp__gh__*"])
    assert is_allowed("mcp__gh__create_issue", ["mcp__gh"])
    assert not is_allowed("mcp__gh2__create_issue", ["mcp__gh"])
    assert not is_allowed("mcp__gh__create_issue", ["mcp__g"])
    assert is_allowed("bash", ["bash"]) and not is_allowed("bash", ["Bash"])
    assert not is_allowed("mcp__gh__create_issue", [])


def test_tool_names_are_safe_for_the_api() -> None:
    assert tool_name("gh", "create_issue") == "mcp__gh__create_issue"
    assert tool_name("gh", "issues.create v2") == "mcp__gh__issues_create_v2"
    long = tool_name("server", "x" * 100)
    assert len(long) == 64 and long.startswith("mcp__server__xxx")
    assert long != tool_name("server", "x" * 101)
