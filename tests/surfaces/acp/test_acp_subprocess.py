"""``cairn acp`` as an editor runs it: a real subprocess on pipes, against the local
OpenAI server. Its stdout holds JSON-RPC and nothing else; the protocol library's
own client runs a whole session through it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from acp import spawn_agent_process

from support.acp_client import CAIRN_CLIENT, SUMMARY, EditorClient, capabilities, is_fork
from support.openai_server import (
    OpenAIServer,
    Reply,
    ToolCallSpec,
)


def environment(tmp_path: Path, server: OpenAIServer) -> dict[str, str]:
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("CAIRN_", "OPENAI_"))}
    return kept | {
        "CAIRN_MODEL": "test-model",
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "test",
        "CAIRN_CONTEXT_WINDOW": "32768",
        "CAIRN_HOME": str(tmp_path / "home"),
    }


def responder(body: dict[str, Any]) -> Reply:
    if is_fork(body):
        return Reply(text=SUMMARY)
    if body["messages"][-1]["role"] == "user" and "run" in str(body["messages"][-1]["content"]):
        # print() inside the command, echoes, a stray write to fd 1 of the agent: all captured.
        return Reply(
            tool_calls=[ToolCallSpec("bash", json.dumps({"command": "echo out; echo err >&2"}))]
        )
    return Reply(text="An answer about calc.py. " * 40)


def test_stdout_carries_only_json_rpc_through_a_session_with_tools_and_a_compaction(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(responder)
    workspace = tmp_path / "ws"
    workspace.mkdir()

    async def scenario() -> tuple[list[bytes], bytes]:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "cairn",
            "acp",
            "--permission-mode",
            "bypass",
            cwd=workspace,
            env=environment(tmp_path, openai_server),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert process.stdin is not None and process.stdout is not None
        lines: list[bytes] = []

        async def request(rid: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
            assert process.stdin is not None and process.stdout is not None
            message = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
            process.stdin.write(json.dumps(message).encode() + b"\n")
            await process.stdin.drain()
            while True:
                line = await asyncio.wait_for(process.stdout.readline(), 60)
                assert line, "cairn acp closed its stdout"
                lines.append(line)
                received: dict[str, Any] = json.loads(line)
                if received.get("id") == rid and "method" not in received:
                    return received

        init = await request(
            0, "initialize", {"protocolVersion": 1, "clientCapabilities": capabilities()}
        )
        assert init["result"]["agentCapabilities"]["loadSession"] is True
        new = await request(1, "session/new", {"cwd": str(workspace), "mcpServers": []})
        sid = new["result"]["sessionId"]
        for n in range(3):
            text = "run it" if n == 1 else f"question {n}"
            prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
            answer = await request(2 + n, "session/prompt", prompt)
            assert answer["result"]["stopReason"] == "end_turn"
        compact = await request(9, "_cairn/compact", {"sessionId": sid})
        assert compact["result"]["status"] == "completed"
        process.stdin.close()
        rest = await asyncio.wait_for(process.stdout.read(), 60)
        lines += rest.splitlines(keepends=True)
        stderr = await process.stderr.read() if process.stderr else b""
        assert await asyncio.wait_for(process.wait(), 30) == 0
        return lines, stderr

    lines, stderr = asyncio.run(scenario())
    assert len(lines) > 20
    for line in lines:
        message = json.loads(line)  # every line is one JSON-RPC message
        assert message["jsonrpc"] == "2.0", line
    methods = {json.loads(line).get("method") for line in lines}
    assert {"session/update", "_cairn/compactionStateChange"} <= methods
    assert b"Traceback" not in stderr


def test_the_protocol_librarys_client_runs_a_session_end_to_end(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(responder)
    workspace = tmp_path / "ws"
    workspace.mkdir()

    async def scenario() -> EditorClient:
        client = EditorClient()
        async with spawn_agent_process(
            client,  # type: ignore[arg-type]  # no elicitation: Cairn never asks for one
            sys.executable,
            "-m",
            "cairn",
            "acp",
            cwd=workspace,
            env=environment(tmp_path, openai_server),
            observers=[client.observe],
        ) as (conn, _process):
            await conn.initialize(protocol_version=1, client_capabilities=CAIRN_CLIENT)
            sid = (await conn.new_session(cwd=str(workspace))).session_id
            for n in range(3):
                response = await conn.prompt(
                    session_id=sid,
                    prompt=[{"type": "text", "text": f"question {n}"}],  # type: ignore[list-item]
                )
                assert response.stop_reason == "end_turn"
            response = await conn.prompt(
                session_id=sid,
                prompt=[{"type": "text", "text": "/compact keep the questions"}],  # type: ignore[list-item]
            )
            assert response.stop_reason == "end_turn"
            await conn.load_session(cwd=str(workspace), session_id=sid)
        return client

    client = asyncio.run(scenario())
    assert client.agent_text().count("An answer about calc.py.") >= 3
    states = [p["isCompacting"] for m, p in client.extensions if m == "cairn/compactionStateChange"]
    assert states == [True, False]
    # The load replayed the three questions (and nothing sent "/compact" to the model).
    users = [
        u["content"]["text"] for u in client.updates() if u["sessionUpdate"] == "user_message_chunk"
    ]
    assert users == ["question 0", "question 1", "question 2"]
    assert not any(
        "/compact" in str(m.get("content")) for b in openai_server.bodies for m in b["messages"]
    )


# -- today's protocol, raw NDJSON against the real process ------------------------


class RawEditor:
    """An editor written by hand: one JSON object a line on ``cairn acp``'s stdin, every
    stdout line parsed and kept; permission requests answered with ``allow_once``."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.received: list[dict[str, Any]] = []
        self._next = 0

    async def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        await self.process.stdin.drain()

    async def send_line(self, line: bytes) -> None:
        """Any bytes as one line, JSON or not (what a hostile writer sends)."""
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        await self.process.stdin.drain()

    async def next_response(self) -> dict[str, Any]:
        """Read until the next response, whatever its id (an error for a bad line has none)."""
        while True:
            message = await self.read()
            if "method" not in message:
                return message

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def start(self, method: str, params: dict[str, Any]) -> int:
        """Send a request; its id (``answer`` waits for its response)."""
        if method in ("session/new", "session/load", "session/resume"):
            params = {"mcpServers": []} | params  # required by the schema
        self._next += 1
        await self.send({"jsonrpc": "2.0", "id": self._next, "method": method, "params": params})
        return self._next

    async def answer(self, request_id: int) -> dict[str, Any]:
        """Read until the response to ``request_id``; the messages before it are kept."""
        while True:
            message = await self.read()
            if message.get("id") == request_id and "method" not in message:
                return message

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return await self.answer(await self.start(method, params))

    async def read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), 60)
        assert line, "cairn acp closed its stdout"
        message: dict[str, Any] = json.loads(line)
        self.received.append(message)
        if message.get("method") == "session/request_permission":
            outcome = {"outcome": "selected", "optionId": "allow_once"}
            await self.send({"jsonrpc": "2.0", "id": message["id"], "result": {"outcome": outcome}})
        return message

    def updates(self, since: int = 0) -> list[dict[str, Any]]:
        return [
            m["params"]["update"]
            for m in self.received[since:]
            if m.get("method") == "session/update"
        ]

    async def finish(self) -> bytes:
        """Close stdin; the agent's stderr once it has exited (cleanly)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        for line in (await asyncio.wait_for(self.process.stdout.read(), 60)).splitlines():
            self.received.append(json.loads(line))
        stderr = await self.process.stderr.read() if self.process.stderr else b""
        assert await asyncio.wait_for(self.process.wait(), 30) == 0
        return stderr


@contextlib.asynccontextmanager
async def raw_agent(
    tmp_path: Path,
    server: OpenAIServer,
    *args: str,
    client: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> AsyncIterator[RawEditor]:
    """``cairn acp`` spawned in ``tmp_path/ws``, initialized with ``client`` capabilities."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cairn",
        "acp",
        *args,
        cwd=workspace,
        env=environment(tmp_path, server) | (env or {}),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    editor = RawEditor(process)
    try:
        init = await editor.request(
            "initialize", {"protocolVersion": 1, "clientCapabilities": client or {}}
        )
        assert "result" in init, init
        yield editor
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def test_subprocess_resume_close_delete_config_options_and_cancel_request(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    gate = threading.Event()
    openai_server.respond_with(
        lambda body: (
            Reply(text="slow " * 40, hold=gate, hold_after=3)
            if "slowly" in str(body["messages"][-1]["content"])
            else Reply(text="An answer about calc.py.")
        )
    )
    cwd = str(tmp_path / "ws")

    async def scenario() -> bytes:
        async with raw_agent(tmp_path, openai_server, "--permission-mode", "bypass") as editor:
            init = editor.received[0]["result"]
            sessions = init["agentCapabilities"]["sessionCapabilities"]
            assert set(sessions) == {"list", "resume", "close", "delete"}
            new = (await editor.request("session/new", {"cwd": cwd, "mcpServers": []}))["result"]
            sid = new["sessionId"]
            assert [o["id"] for o in new["configOptions"]] == [
                "model",
                "mode",
                "context_window",
                "keep_rounds",
            ]
            prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "hello"}]}
            assert (await editor.request("session/prompt", prompt))["result"]["stopReason"] == (
                "end_turn"
            )
            changed = await editor.request(
                "session/set_config_option",
                {"sessionId": sid, "configId": "context_window", "value": "8192"},
            )
            current = {o["id"]: o["currentValue"] for o in changed["result"]["configOptions"]}
            assert current["context_window"] == "8192"

            # $/cancel_request: an unknown id is ignored; a prompt in flight ends cancelled.
            await editor.notify("$/cancel_request", {"requestId": 4242})
            slow = {"sessionId": sid, "prompt": [{"type": "text", "text": "answer slowly"}]}
            mark = len(editor.received)
            running = await editor.start("session/prompt", slow)
            while not any(
                u["sessionUpdate"] == "agent_message_chunk" for u in editor.updates(mark)
            ):
                await editor.read()
            await editor.notify("$/cancel_request", {"requestId": running})
            assert (await editor.answer(running))["result"]["stopReason"] == "cancelled"
            gate.set()

            assert (await editor.request("session/close", {"sessionId": sid}))["result"] == {}
            mark = len(editor.received)
            resumed = await editor.request("session/resume", {"sessionId": sid, "cwd": cwd})
            assert {o["id"] for o in resumed["result"]["configOptions"]} >= {"model", "mode"}
            kinds = [u["sessionUpdate"] for u in editor.updates(mark)]
            assert kinds == ["available_commands_update", "usage_update"]  # no history

            deleted = await editor.request("session/delete", {"sessionId": sid})
            assert deleted["result"] == {}
            listed = await editor.request("session/list", {"cwd": cwd})
            assert listed["result"]["sessions"] == []
            assert "error" not in await editor.request("session/delete", {"sessionId": sid})
            return await editor.finish()

    try:
        stderr = asyncio.run(scenario())
    finally:
        gate.set()
    assert b"Traceback" not in stderr
    assert not list((tmp_path / "home" / "projects").glob("*/*.jsonl"))


async def test_subprocess_load_sends_all_its_updates_first_and_the_meter_after_the_compaction(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(responder)
    cwd = str(tmp_path / "ws")

    async with raw_agent(tmp_path, openai_server) as editor:
        sid = (await editor.request("session/new", {"cwd": cwd}))["result"]["sessionId"]
        for n in range(3):
            prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": f"question {n}"}]}
            await editor.request("session/prompt", prompt)
        compact = await editor.request("_cairn/compact", {"sessionId": sid})
        post = compact["result"]["postTokens"]
        await editor.finish()
    async with raw_agent(tmp_path, openai_server) as editor:
        load = await editor.request("session/load", {"sessionId": sid, "cwd": cwd})
        assert "result" in load
        kinds = [u["sessionUpdate"] for u in editor.updates()]
        assert "user_message_chunk" in kinds and "tool_call" in kinds
        assert kinds[-2:] == ["available_commands_update", "usage_update"]
        assert editor.updates()[-1]["used"] == post
        await editor.finish()
        # Nothing of the load after its answer.
        answered = editor.received.index(load)
        assert not [m for m in editor.received[answered + 1 :] if "method" in m]


def test_subprocess_cairn_notifications_only_for_a_client_that_asks(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(responder)
    cwd = str(tmp_path / "ws")

    async def compaction_methods(client: dict[str, Any]) -> tuple[set[str], dict[str, Any]]:
        async with raw_agent(tmp_path, openai_server, client=client) as editor:
            sid = (await editor.request("session/new", {"cwd": cwd}))["result"]["sessionId"]
            for n in range(3):
                prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": f"question {n}"}]}
                await editor.request("session/prompt", prompt)
            compact = await editor.request("_cairn/compact", {"sessionId": sid})
            assert compact["result"]["status"] == "completed", compact
            await editor.finish()
            methods = {m["method"] for m in editor.received if "method" in m}
            return methods, editor.received[0]["result"]["_meta"]["cairn"]

    plain, advertised = asyncio.run(compaction_methods({}))
    assert not {m for m in plain if m.startswith("_")}
    assert list(advertised["requests"]) == ["_cairn/compact"]
    asked, _ = asyncio.run(compaction_methods({"_meta": {"cairn": {"compaction": True}}}))
    # summaryPrepared comes only with a summary prepared in the band, which three short
    # questions never reach; every other one came.
    assert set(advertised["notifications"]) - {"_cairn/summaryPrepared"} <= asked
    assert "_cairn/summaryPrepared" not in asked


def test_subprocess_a_call_awaiting_permission_is_pending_then_in_progress(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.script(
        Reply(
            tool_calls=[ToolCallSpec("write_file", json.dumps({"path": "a.txt", "content": "A"}))]
        ),
        Reply(text="Wrote a.txt."),
    )
    cwd = str(tmp_path / "ws")

    async def scenario() -> list[str]:
        async with raw_agent(tmp_path, openai_server, "--permission-mode", "ask") as editor:
            sid = (await editor.request("session/new", {"cwd": cwd}))["result"]["sessionId"]
            prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "write a.txt"}]}
            answer = await editor.request("session/prompt", prompt)
            assert answer["result"]["stopReason"] == "end_turn"
            await editor.finish()
        steps = []
        for message in editor.received:
            if message.get("method") == "session/request_permission":
                assert message["params"]["toolCall"]["status"] == "pending"
                steps.append("asked")
            elif message.get("method") == "session/update":
                update = message["params"]["update"]
                if update["sessionUpdate"] in ("tool_call", "tool_call_update") and (
                    "status" in update
                ):
                    steps.append(update["status"])
        return steps

    assert asyncio.run(scenario()) == ["pending", "asked", "in_progress", "completed"]
    assert (tmp_path / "ws" / "a.txt").read_text() == "A"


PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9aw"
    "AAAABJRU5ErkJggg=="
)


def test_subprocess_images_reach_a_model_that_takes_them_and_never_the_compaction_fork(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(responder)
    cwd = str(tmp_path / "ws")
    image = {"type": "image", "data": PNG, "mimeType": "image/png"}

    async def session(env: dict[str, str]) -> str:
        async with raw_agent(tmp_path, openai_server, env=env) as editor:
            prompt_caps = editor.received[0]["result"]["agentCapabilities"]["promptCapabilities"]
            assert prompt_caps["image"] is True
            sid = (await editor.request("session/new", {"cwd": cwd}))["result"]["sessionId"]
            look = {"sessionId": sid, "prompt": [{"type": "text", "text": "look"}, image]}
            await editor.request("session/prompt", look)
            for n in range(2):
                more = {"sessionId": sid, "prompt": [{"type": "text", "text": f"question {n}"}]}
                await editor.request("session/prompt", more)
            compact = await editor.request("_cairn/compact", {"sessionId": sid})
            assert compact["result"]["status"] == "completed"
            await editor.finish()
        return "".join(
            u["content"]["text"]
            for u in editor.updates()
            if u["sessionUpdate"] == "agent_message_chunk"
        )

    said = asyncio.run(session({"CAIRN_IMAGES": "1"}))
    assert "without image input" not in said
    sent, fork = openai_server.bodies[0], next(b for b in openai_server.bodies if is_fork(b))
    assert {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}} in (
        sent["messages"][-1]["content"]
    )
    assert PNG not in json.dumps(fork) and "image omitted" in json.dumps(fork)

    mark = len(openai_server.bodies)
    said = asyncio.run(session({"CAIRN_IMAGES": "0"}))
    assert said.count("without image input") == 1
    assert not any(PNG in json.dumps(b) for b in openai_server.bodies[mark:])
