"""Hostile input on ``cairn acp``'s stdin: every line that is not a JSON-RPC message gets
the error it deserves and the agent carries on — a running turn included.

The process is the real ``cairn acp`` on pipes, talking raw NDJSON, as an editor
(or anything else that can write to its stdin) would.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from cairn.surfaces.acp.transport import MAX_LINE_BYTES, message_problem
from support.openai_server import (
    OpenAIServer,
    Reply,
)
from surfaces.acp.test_acp_subprocess import RawEditor, raw_agent

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


def session_params(tmp_path: Path) -> dict[str, Any]:
    return {"cwd": str(tmp_path / "ws")}


async def ask(editor: RawEditor, session_id: str, text: str) -> dict[str, Any]:
    prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
    return await editor.request("session/prompt", prompt)


def test_each_hostile_line_is_answered_with_its_json_rpc_error_and_the_agent_carries_on(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(lambda body: Reply(text="still here"))

    async def scenario() -> tuple[list[dict[str, Any]], dict[str, Any], bytes]:
        async with raw_agent(tmp_path, openai_server) as editor:
            replies = []
            for line, _code, _rid in HOSTILE:
                await editor.send_line(line)
                replies.append(await editor.next_response())
            sid = (await editor.request("session/new", session_params(tmp_path)))["result"][
                "sessionId"
            ]
            answer = await ask(editor, sid, "hello")
            return replies, answer, await editor.finish()

    replies, answer, stderr = asyncio.run(scenario())
    for (line, expected, rid), reply in zip(HOSTILE, replies, strict=True):
        assert reply["jsonrpc"] == "2.0"
        assert reply["error"]["code"] == expected, (line[:60], reply)
        assert reply["id"] == rid, (line[:60], reply)
    assert answer["result"]["stopReason"] == "end_turn"
    assert b"Traceback" not in stderr


def test_a_batch_gets_one_error_per_request_it_carries(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    async def scenario() -> tuple[list[dict[str, Any]], dict[str, Any], bytes]:
        async with raw_agent(tmp_path, openai_server) as editor:
            batch = [
                {"jsonrpc": "2.0", "id": 21, "method": "session/list", "params": {}},
                {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "x"}},
                {"jsonrpc": "2.0", "id": "twenty-two", "method": "session/list", "params": {}},
            ]
            await editor.send_line(json.dumps(batch).encode())
            replies = [await editor.next_response(), await editor.next_response()]
            listed = await editor.request("session/list", {})  # then served as usual
            return replies, listed, await editor.finish()

    replies, listed, stderr = asyncio.run(scenario())
    assert [r["id"] for r in replies] == [21, "twenty-two"]
    assert {r["error"]["code"] for r in replies} == {-32600}
    assert "batch" in replies[0]["error"]["data"]["details"]
    assert "result" in listed
    assert b"Traceback" not in stderr


def test_a_line_over_the_cap_is_answered_and_dropped_and_the_agent_carries_on(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        async with raw_agent(tmp_path, openai_server) as editor:
            # A well-formed request, one byte past the cap with its padding and newline.
            head = b'{"jsonrpc": "2.0", "id": 31, "method": "session/list", "params": {"p": "'
            tail = b'"}}'
            padding = b"a" * (MAX_LINE_BYTES - len(head) - len(tail))
            await editor.send_line(head + padding + tail)
            refused = await editor.next_response()
            listed = await editor.request("session/list", {})
            await editor.finish()
            return refused, listed

    refused, listed = asyncio.run(scenario())
    assert refused["error"]["code"] == -32600
    assert refused["id"] is None
    assert f"{MAX_LINE_BYTES:,}" in refused["error"]["data"]["details"]
    assert "result" in listed


def test_hostile_lines_during_a_running_turn_leave_the_turn_alone(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    hold = threading.Event()
    openai_server.respond_with(lambda body: Reply(text="the turn's own answer", hold=hold))

    async def scenario() -> tuple[dict[str, Any], list[dict[str, Any]], bytes]:
        async with raw_agent(tmp_path, openai_server) as editor:
            sid = (await editor.request("session/new", session_params(tmp_path)))["result"][
                "sessionId"
            ]
            prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "hello"}]}
            turn = await editor.start("session/prompt", prompt)
            await asyncio.to_thread(openai_server.wait_for_requests, 1)
            errors = []
            for line in (b"null", b"42", b"[1, 2]", b"{", b'"x"'):
                await editor.send_line(line)
                errors.append(await editor.next_response())
            hold.set()
            answer = await editor.answer(turn)
            return answer, errors, await editor.finish()

    answer, errors, stderr = asyncio.run(scenario())
    assert answer["result"]["stopReason"] == "end_turn"
    assert [e["error"]["code"] for e in errors] == [-32600, -32600, -32600, -32700, -32600]
    assert b"Traceback" not in stderr


def test_a_storm_of_bad_cancel_notifications_writes_no_traceback(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(lambda body: Reply(text="fine"))
    bad: list[dict[str, Any]] = [
        {},
        {"sessionId": 12},
        {"sessionId": "no-such-session"},
        {"sessionId": "../../../../etc/passwd"},
        {"sessionId": "x" * 10_000},
    ]

    async def scenario() -> tuple[dict[str, Any], bytes]:
        async with raw_agent(tmp_path, openai_server) as editor:
            for n in range(1_000):
                await editor.notify("session/cancel", bad[n % len(bad)])
            sid = (await editor.request("session/new", session_params(tmp_path)))["result"][
                "sessionId"
            ]
            answer = await ask(editor, sid, "hello")
            return answer, await editor.finish()

    answer, stderr = asyncio.run(scenario())
    assert answer["result"]["stopReason"] == "end_turn"
    assert b"Traceback" not in stderr
    assert len(stderr.decode().splitlines()) <= 1, stderr.decode()[:2000]


def test_load_or_resume_of_a_malformed_session_id_is_invalid_params(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    bad_ids = ["../../../../etc/passwd", "", "x" * 10_000, "a/b", "with space"]

    async def scenario() -> tuple[list[dict[str, Any]], dict[str, Any], bytes]:
        async with raw_agent(tmp_path, openai_server) as editor:
            replies = [
                await editor.request(method, session_params(tmp_path) | {"sessionId": sid})
                for method in ("session/load", "session/resume")
                for sid in bad_ids
            ]
            unknown = session_params(tmp_path) | {"sessionId": "0" * 32}
            missing = await editor.request("session/load", unknown)
            return replies, missing, await editor.finish()

    replies, missing, stderr = asyncio.run(scenario())
    assert [r["error"]["code"] for r in replies] == [-32602] * 2 * len(bad_ids)
    assert "is not a session id" in replies[0]["error"]["message"]
    assert all(len(r["error"]["message"]) < 200 for r in replies)
    assert missing["error"]["code"] == -32002  # a well-formed id that names no session
    assert b"Traceback" not in stderr


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
