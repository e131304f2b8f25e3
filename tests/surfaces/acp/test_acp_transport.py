"""Hostile input on ``cairn acp``'s stdin: every line that is not a JSON-RPC message gets
the error it deserves and the agent carries on — a running turn included.

The process is the real ``cairn acp`` on pipes, talking raw NDJSON, as an editor
(or anything else that can write to its stdin) would.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from cairn.surfaces.acp.transport import MAX_LINE_BYTES, message_problem
from openai_server import (  # noqa: F401  (the fixture registers itself by import)
    OpenAIServer,
    Reply,
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


class Agent:
    """A ``cairn acp`` process and the messages it wrote, read as they come."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.received: list[dict[str, Any]] = []

    async def send(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line if line.endswith(b"\n") else line + b"\n")
        await self.process.stdin.drain()

    async def next_reply(self, rid: object = None) -> dict[str, Any]:
        """The next response (to ``rid``, or any with an ``error`` when ``rid`` is None)."""
        assert self.process.stdout is not None
        while True:
            line = await asyncio.wait_for(self.process.stdout.readline(), 60)
            assert line, "cairn acp closed its stdout"
            message: dict[str, Any] = json.loads(line)
            self.received.append(message)
            if "method" in message:
                continue
            if rid is None or message.get("id") == rid:
                return message

    async def request(self, rid: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        message = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        await self.send(json.dumps(message).encode())
        return await self.next_reply(rid)

    async def finish(self) -> tuple[int, bytes]:
        assert self.process.stdin is not None and self.process.stderr is not None
        self.process.stdin.close()
        assert self.process.stdout is not None
        await asyncio.wait_for(self.process.stdout.read(), 60)
        stderr = await self.process.stderr.read()
        return await asyncio.wait_for(self.process.wait(), 30), stderr


async def start(tmp_path: Path, server: OpenAIServer) -> tuple[Agent, Path]:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cairn",
        "acp",
        cwd=workspace,
        env=environment(tmp_path, server),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        limit=64 * 1024 * 1024,
    )
    agent = Agent(process)
    init = await agent.request(0, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    assert "result" in init
    return agent, workspace


#: Each hostile line, and the JSON-RPC error code and id its reply must carry.
HOSTILE: list[tuple[bytes, int, object]] = [
    (b"42", -32600, None),
    (b'"x"', -32600, None),
    (b"null", -32600, None),
    (b"true", -32600, None),
    (b"[]", -32600, None),
    (b"{}", -32600, None),
    (b"not json at all", -32700, None),
    (b'{"jsonrpc": "2.0", "id": 5, "method": ', -32700, None),
    (b"\xff\xfe\x00 invalid utf-8", -32700, None),
    (b"[" * 100_000 + b"]" * 100_000, -32700, None),
    (b'{"jsonrpc": "2.0", "id": 7, "method": 12}', -32600, 7),
    (b'{"jsonrpc": "1.0", "id": 8, "method": "session/list"}', -32600, 8),
    (b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "session/list"}', -32600, None),
    (b'{"jsonrpc": "2.0", "id": 9, "method": "session/list", "params": "x"}', -32600, 9),
    (b'{"jsonrpc": "2.0", "id": 10}', -32600, 10),
]


def test_each_hostile_line_is_answered_with_its_json_rpc_error_and_the_agent_carries_on(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(lambda body: Reply(text="still here"))

    async def scenario() -> tuple[list[dict[str, Any]], dict[str, Any], int, bytes]:
        agent, workspace = await start(tmp_path, openai_server)
        replies = []
        for line, _code, _rid in HOSTILE:
            await agent.send(line)
            replies.append(await agent.next_reply())
        new = await agent.request(1, "session/new", {"cwd": str(workspace), "mcpServers": []})
        sid = new["result"]["sessionId"]
        prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "hello"}]}
        answer = await agent.request(2, "session/prompt", prompt)
        code, stderr = await agent.finish()
        return replies, answer, code, stderr

    replies, answer, code, stderr = asyncio.run(scenario())
    for (line, expected, rid), reply in zip(HOSTILE, replies, strict=True):
        assert reply["jsonrpc"] == "2.0"
        assert reply["error"]["code"] == expected, (line[:60], reply)
        assert reply["id"] == rid, (line[:60], reply)
    assert answer["result"]["stopReason"] == "end_turn"
    assert code == 0
    assert b"Traceback" not in stderr


def test_a_batch_gets_one_error_per_request_it_carries(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    async def scenario() -> list[dict[str, Any]]:
        agent, _ = await start(tmp_path, openai_server)
        batch = [
            {"jsonrpc": "2.0", "id": 21, "method": "session/list", "params": {}},
            {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "x"}},
            {"jsonrpc": "2.0", "id": "twenty-two", "method": "session/list", "params": {}},
        ]
        await agent.send(json.dumps(batch).encode())
        replies = [await agent.next_reply(), await agent.next_reply()]
        # and then a plain request is served as usual
        listed = await agent.request(23, "session/list", {})
        assert "result" in listed
        code, stderr = await agent.finish()
        assert code == 0 and b"Traceback" not in stderr
        return replies

    replies = asyncio.run(scenario())
    assert [r["id"] for r in replies] == [21, "twenty-two"]
    assert {r["error"]["code"] for r in replies} == {-32600}
    assert "batch" in replies[0]["error"]["data"]["details"]


def test_a_line_over_the_cap_is_answered_and_dropped_and_the_agent_carries_on(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    async def scenario() -> tuple[dict[str, Any], dict[str, Any], int]:
        agent, _ = await start(tmp_path, openai_server)
        # A well-formed request, one byte past the cap with its padding.
        head = b'{"jsonrpc": "2.0", "id": 31, "method": "session/list", "params": {"pad": "'
        tail = b'"}}'
        padding = b"a" * (MAX_LINE_BYTES + 1 - len(head) - len(tail))
        await agent.send(head + padding + tail)
        refused = await agent.next_reply()
        listed = await agent.request(32, "session/list", {})
        code, _ = await agent.finish()
        return refused, listed, code

    refused, listed, code = asyncio.run(scenario())
    assert refused["error"]["code"] == -32600
    assert refused["id"] is None
    assert f"{MAX_LINE_BYTES:,}" in refused["error"]["data"]["details"]
    assert "result" in listed
    assert code == 0


def test_hostile_lines_during_a_running_turn_leave_the_turn_alone(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    hold = threading.Event()
    openai_server.respond_with(lambda body: Reply(text="the turn's own answer", hold=hold))

    async def scenario() -> tuple[dict[str, Any], list[dict[str, Any]], int, bytes]:
        agent, workspace = await start(tmp_path, openai_server)
        new = await agent.request(1, "session/new", {"cwd": str(workspace), "mcpServers": []})
        sid = new["result"]["sessionId"]
        prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "hello"}]}
        await agent.send(
            json.dumps(
                {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt}
            ).encode()
        )
        await asyncio.to_thread(openai_server.wait_for_requests, 1)
        errors = []
        for line in (b"null", b"42", b"[1, 2]", b"{", b'"x"'):
            await agent.send(line)
            errors.append(await agent.next_reply())
        hold.set()
        answer = await agent.next_reply(2)
        code, stderr = await agent.finish()
        return answer, errors, code, stderr

    answer, errors, code, stderr = asyncio.run(scenario())
    assert answer["result"]["stopReason"] == "end_turn"
    assert [e["error"]["code"] for e in errors] == [-32600, -32600, -32600, -32700, -32600]
    assert code == 0
    assert b"Traceback" not in stderr


def test_a_storm_of_bad_cancel_notifications_writes_no_traceback(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(lambda body: Reply(text="fine"))

    async def scenario() -> tuple[dict[str, Any], int, bytes]:
        agent, workspace = await start(tmp_path, openai_server)
        bad: list[dict[str, Any]] = [
            {},
            {"sessionId": 12},
            {"sessionId": "no-such-session"},
            {"sessionId": "../../../../etc/passwd"},
            {"sessionId": "x" * 10_000},
        ]
        for n in range(1_000):
            params = bad[n % len(bad)]
            message = {"jsonrpc": "2.0", "method": "session/cancel", "params": params}
            await agent.send(json.dumps(message).encode())
        new = await agent.request(1, "session/new", {"cwd": str(workspace), "mcpServers": []})
        sid = new["result"]["sessionId"]
        prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "hello"}]}
        answer = await agent.request(2, "session/prompt", prompt)
        code, stderr = await agent.finish()
        return answer, code, stderr

    answer, code, stderr = asyncio.run(scenario())
    assert answer["result"]["stopReason"] == "end_turn"
    assert code == 0
    assert b"Traceback" not in stderr
    assert len(stderr.decode().splitlines()) <= 1, stderr.decode()[:2000]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (42, "not a number"),
        ("x", "not a string"),
        (None, "not null"),
        ([], "batches are not supported"),
        ({"id": 1}, "neither a request"),
        ({"method": ""}, "'method'"),
        ({"method": "m", "id": 1.5}, "'id'"),
        ({"method": "m", "id": True}, "'id'"),
        ({"method": "m", "params": 3}, "'params'"),
        ({"jsonrpc": "2", "method": "m"}, "'jsonrpc'"),
    ],
)
def test_message_problem_names_what_is_wrong(value: object, problem: str) -> None:
    found = message_problem(value)
    assert found is not None and problem in found


@pytest.mark.parametrize(
    "value",
    [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
        {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s"}},
        {"jsonrpc": "2.0", "method": "n", "params": None},
        {"jsonrpc": "2.0", "id": "a", "result": {}},
        {"jsonrpc": "2.0", "id": 3, "error": {"code": 1, "message": "m"}},
        {"id": None, "method": "m", "params": []},
    ],
)
def test_message_problem_accepts_every_kind_of_message(value: object) -> None:
    assert message_problem(value) is None


def test_load_or_resume_of_a_malformed_session_id_is_invalid_params(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    bad_ids = ["../../../../etc/passwd", "", "x" * 10_000, "a/b", "with space"]

    async def scenario() -> tuple[list[dict[str, Any]], dict[str, Any], int, bytes]:
        agent, workspace = await start(tmp_path, openai_server)
        replies = []
        rid = 40
        for method in ("session/load", "session/resume"):
            for sid in bad_ids:
                params = {"cwd": str(workspace), "sessionId": sid, "mcpServers": []}
                replies.append(await agent.request(rid, method, params))
                rid += 1
        unknown = {"cwd": str(workspace), "sessionId": "0" * 32, "mcpServers": []}
        missing = await agent.request(rid, "session/load", unknown)
        code, stderr = await agent.finish()
        return replies, missing, code, stderr

    replies, missing, code, stderr = asyncio.run(scenario())
    assert [r["error"]["code"] for r in replies] == [-32602] * 2 * len(bad_ids)
    assert "is not a session id" in replies[0]["error"]["message"]
    assert all(len(r["error"]["message"]) < 200 for r in replies)
    assert missing["error"]["code"] == -32002  # a well-formed id that names no session
    assert code == 0
    assert b"Traceback" not in stderr
