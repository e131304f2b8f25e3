"""SIGKILL durability: a session killed at any moment loads, keeps what it acknowledged, resumes.

Two campaigns, each killing a real child process at random moments
(including inside compactions and tool calls) and, after every kill:

- the transcript loads;
- every record the child acknowledged (its ``add`` had returned) is there;
- the session reopens, its API view is whole — a call the kill left without
  a result is answered "interrupted" durably — and its next request is one
  the local server accepts. The server here rejects, as providers do, a body
  with a tool call not followed by its results or a result without its call.

The library campaign drives ``ContextPipeline`` directly (``kill_child.py``);
the ``cairn -p`` campaign runs the real CLI against the local server with a
scripted model whose tool calls take a while, so kills land inside them, and
resumes each killed session with ``cairn -p --resume``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cairn.context import CompactionConfig, ContextPipeline
from cairn.messages import JSONValue, find_orphans, system
from cairn.provider import ModelConfig, OpenAIProvider
from cairn.provider.request import chat_request
from cairn.store import MessageRecord, read_transcript
from cairn.store.paths import session_path
from reliability.soak import count, record
from support.openai_server import (
    OpenAIServer,
    Reply,
    ToolCallSpec,
)

CHILD = Path(__file__).with_name("kill_child.py")
KILLS_PER_SESSION = 10
SUMMARY = "<summary>\n## Objective and constraints\nKeep going.\n</summary>"


def call_ids(calls: list[JSONValue]) -> set[str]:
    ids: set[str] = set()
    for c in calls:
        assert isinstance(c, dict)
        ids.add(str(c["id"]))
    return ids


def split_rounds(messages: list[JSONValue]) -> list[str]:
    """What a provider rejects in a chat body (HTTP 400): a round split from its results."""
    problems: list[str] = []
    pending: set[str] = set()
    for raw in messages:
        assert isinstance(raw, dict)
        role = raw.get("role")
        if role == "tool":
            call_id = raw.get("tool_call_id")
            if call_id in pending:
                pending.discard(str(call_id))
            else:
                problems.append(f"tool result {call_id} has no call before it")
            continue
        if pending:
            problems.append(f"tool calls {sorted(pending)} are not followed by their results")
        calls = raw.get("tool_calls") if role == "assistant" else None
        pending = call_ids(calls) if isinstance(calls, list) else set()
    if pending:
        problems.append(f"tool calls {sorted(pending)} are not followed by their results")
    return problems


def strict_provider(server: OpenAIServer, answer: Callable[[dict[str, Any]], Reply]) -> None:
    """Answer with ``answer(body)``, unless the body splits a round: then HTTP 400."""

    def respond(body: dict[str, Any]) -> Reply:
        problems = split_rounds(body["messages"])
        if problems:
            return Reply.http_error(400, "; ".join(problems))
        return answer(body)

    server.respond_with(respond)


def child_env() -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("CAIRN_", "OPENAI_"))}
    return {**environ, "PYTHONUNBUFFERED": "1"}


def acked(stdout: str) -> set[str]:
    return {line.split()[1] for line in stdout.splitlines() if line.startswith("ACK ")}


# ---------------------------------------------------------------------------
# Through the library


def test_sigkill_at_any_moment_through_the_library(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    strict_provider(openai_server, lambda body: Reply(text="ok"))
    home = tmp_path / "home"
    rng = random.Random(2026)
    kills = count(10, 800)
    figures = {"kills": 0, "acknowledged": 0, "lost": 0, "unloadable": 0, "rejected": 0}
    model = ModelConfig(model="m", base_url=openai_server.base_url, context_window=8_192)
    for n in range(kills):
        # Each session is killed and resumed KILLS_PER_SESSION times, then a new one
        # starts: repeated resumes are exercised, and files stay small enough to
        # check after every kill.
        session_id = f"killed-{n // KILLS_PER_SESSION}"
        path = session_path(home / "ws", session_id, home)
        child = subprocess.Popen(
            [sys.executable, str(CHILD), str(home), session_id, str(n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "READY"
        time.sleep(rng.uniform(0.0, 0.3))
        child.send_signal(signal.SIGKILL)
        out, err = child.communicate()
        assert "Traceback" not in err, err
        figures["kills"] += 1
        ids = acked(out)
        figures["acknowledged"] += len(ids)
        try:
            transcript = read_transcript(path)
        except Exception:
            figures["unloadable"] += 1
            continue
        stored = {r.message.id for r in transcript.records if isinstance(r, MessageRecord)}
        figures["lost"] += len(ids - stored)
        pipeline = ContextPipeline.open(
            home / "ws", CompactionConfig(), model=model, session_id=session_id, home=home
        )
        try:
            assert not find_orphans(pipeline.messages), n
            request = chat_request(
                model, (system("You are a coding agent."),), (), pipeline.messages
            )
            if asyncio.run(_send(model, request)) != "ok":
                figures["rejected"] += 1
        finally:
            pipeline.close()
        # The repair is durable: reopening finds nothing left to answer.
        again = read_transcript(path)
        reopened = ContextPipeline.open(
            home / "ws", CompactionConfig(), model=model, session_id=session_id, home=home
        )
        try:
            assert len(read_transcript(path).records) == len(again.records)
        finally:
            reopened.close()
    record("kills_library", **figures)
    assert figures["kills"] == kills and figures["acknowledged"] > 0
    assert figures["lost"] == figures["unloadable"] == figures["rejected"] == 0, figures


async def _send(model: ModelConfig, request: Any) -> str:
    async with OpenAIProvider(model) as provider:
        try:
            return (await provider.complete(request, max_retries=0)).text
        except Exception as exc:
            return f"rejected: {exc}"


# ---------------------------------------------------------------------------
# Through cairn -p


def is_fork(body: dict[str, Any]) -> bool:
    last = body["messages"][-1]
    return last["role"] == "user" and "TEXT ONLY" in str(last.get("content"))


def scripted_model(body: dict[str, Any]) -> Reply:
    """Tool calls that take a while (so kills land inside them), reads, and forks answered."""
    if is_fork(body):
        return Reply(text=SUMMARY)
    turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if turns % 7 == 6:
        return Reply(text="Done for now.")
    if turns % 2:
        command = {"command": "sleep 0.3; seq 1 400"}
        return Reply(tool_calls=[ToolCallSpec("bash", json.dumps(command))])
    return Reply(tool_calls=[ToolCallSpec("read_file", json.dumps({"path": "notes.txt"}))])


def test_sigkill_at_any_moment_through_cairn_p(tmp_path: Path, openai_server: OpenAIServer) -> None:
    strict_provider(openai_server, scripted_model)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("".join(f"note {i}: keep going\n" for i in range(300)))
    env = {
        **child_env(),
        "CAIRN_MODEL": "test-model",
        "OPENAI_BASE_URL": openai_server.base_url,
        "OPENAI_API_KEY": "test",
        "CAIRN_HOME": str(tmp_path / "home"),
        "CAIRN_CONTEXT_WINDOW": "16384",
    }

    def command(prompt: str, *flags: str) -> list[str]:
        return [sys.executable, "-m", "cairn", "-p", prompt, "--output-format", "json",
                "--permission-mode", "bypass", *flags]  # fmt: skip

    first = subprocess.run(
        command("start the survey"),
        cwd=workspace, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    session_id = json.loads(first.stdout)["session_id"]
    rng = random.Random(7)
    kills = count(4, 200)
    figures = {"kills": 0, "unloadable": 0, "resume_failed": 0}
    path = tmp_path / "home"
    for _ in range(kills):
        child = subprocess.Popen(
            command("go on", "--resume", session_id),
            cwd=workspace, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        time.sleep(rng.uniform(0.5, 2.5))
        child.send_signal(signal.SIGKILL)
        child.communicate()
        figures["kills"] += 1
        transcript_path = next(path.rglob(f"{session_id}.jsonl"))
        try:
            read_transcript(transcript_path)
        except Exception:
            figures["unloadable"] += 1
            continue
        before = len(openai_server.requests)
        resumed = subprocess.run(
            command("status?", "--max-turns", "1", "--resume", session_id),
            cwd=workspace, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        bodies = [r.body for r in openai_server.requests[before:]]
        # Exit 0, or 1 for stopping at --max-turns 1 with a tool call: never a rejection.
        ok = resumed.returncode in (0, 1) and "Traceback" not in resumed.stderr
        if not ok or not bodies or any(split_rounds(b["messages"]) for b in bodies):
            figures["resume_failed"] += 1
        # A word-bounded 400: session ids are hex and may hold the digits "400".
        assert re.search(r"\b400\b", resumed.stderr) is None, resumed.stderr
    record("kills_cairn_p", **figures)
    assert figures["kills"] == kills
    assert figures["unloadable"] == figures["resume_failed"] == 0, figures
