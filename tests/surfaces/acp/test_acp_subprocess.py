"""``cairn acp`` as an editor runs it: a real subprocess on pipes, against the local
OpenAI server. Its stdout holds JSON-RPC and nothing else; the protocol library's
own client runs a whole session through it."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from acp import spawn_agent_process

from acp_client import CAIRN_CLIENT, SUMMARY, EditorClient, capabilities, is_fork
from openai_server import (  # noqa: F401  (the fixture registers itself by import)
    OpenAIServer,
    Reply,
    ToolCallSpec,
    openai_server_fixture,
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
