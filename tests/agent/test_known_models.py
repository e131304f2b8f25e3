"""The model registry in a running session (issue 26 item 3, acceptance).

"A known model compacts with no window set": the model is resolved the way
every surface resolves it (``load_cli_model``: settings, environment, flags,
and the registry beneath them), with no window anywhere — no
``CAIRN_CONTEXT_WINDOW``, no ``model.context_window``, no flag — and the
local SSE server's reported usage pushes the session past the compaction
line: a compaction record is written. A model nobody knows the window of
gets one line, the same on every surface (a ``Notice``; ``cairn -p`` prints
it on stderr), once.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from cairn.agent.commands import run_command
from cairn.agent.events import Event, Notice
from cairn.agent.loop import run_turn
from cairn.agent.runtime import Runtime
from cairn.provider import ModelConfig, OpenAIProvider, lookup, window_notice
from cairn.provider.config import NO_WINDOW_NOTICE
from cairn.store import CompactionRecord, read_transcript
from cairn.surfaces.setup import load_cli_model
from support.cli_run import cairn_p
from support.openai_server import (
    OpenAIServer,
    Reply,
    UsageSpec,
)

SUMMARY = "<summary>\n## Objective and constraints\nExplain calc.py.\n</summary>"
#: Every variable a model resolution reads: none may come from the machine running the tests.
MODEL_ENV = (
    "CAIRN_MODEL",
    "OPENAI_BASE_URL",
    "CAIRN_CONTEXT_WINDOW",
    "CAIRN_MAX_OUTPUT_TOKENS",
    "CAIRN_IMAGES",
    "CAIRN_STORE_URL",
)


def is_fork(body: dict[str, Any]) -> bool:
    last = body["messages"][-1]
    return last["role"] == "user" and "TEXT ONLY" in str(last.get("content"))


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in MODEL_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CAIRN_HOME", str(tmp_path / "home"))
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    return ws


def window_notices(events: list[Event]) -> list[str]:
    return [e.text for e in events if isinstance(e, Notice) and "automatic compaction" in e.text]


@pytest.mark.parametrize(
    ("name", "models", "window"),
    [
        # The real registry entry: nothing about the model in any settings file.
        ("gpt-4.1", None, 1_047_576),
        # A model the registry lacks, made known through ``models.<name>`` only.
        ("acme-coder-7b", {"acme-coder-7b": {"context_window": 32_768}}, 32_768),
    ],
)
def test_a_known_model_compacts_with_no_window_set(
    workspace: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    openai_server: OpenAIServer,
    name: str,
    models: dict[str, Any] | None,
    window: int,
) -> None:
    monkeypatch.setenv("CAIRN_MODEL", name)
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    if models is not None:
        (workspace / ".cairn").mkdir()
        (workspace / ".cairn" / "settings.json").write_text(json.dumps({"models": models}))
    settings, model = load_cli_model(workspace)
    assert settings.model is None  # no model entry, hence no model.context_window
    assert model.context_window == window and model.max_output_tokens is None

    # Long answers, so that the rounds a compaction replaces outweigh its summary;
    # the fourth reports a request 85 % of the input budget big: the fifth request is
    # past the compaction line (80 %) before a single token is added.
    runtime = Runtime(
        workspace,
        model,
        OpenAIProvider(model),
        settings=settings,
        home=tmp_path / "home",
        permission_mode="bypass",
    )
    session = runtime.new_session()
    budget = session.pipeline.input_budget
    assert budget is not None
    long = "add() returns a - b: it subtracts where it should add. " * 100
    heavy = UsageSpec(prompt_tokens=int(0.85 * budget), completion_tokens=1_500)
    answers = iter([*(Reply(text=long) for _ in range(3)), Reply(text=long, usage=heavy)])
    openai_server.respond_with(
        lambda body: Reply(text=SUMMARY) if is_fork(body) else next(answers, Reply(text="Done."))
    )
    events: list[Event] = []
    session.events.on(events.append)

    async def converse() -> None:
        for n in range(5):
            await run_turn(session, f"Question {n} about add() in calc.py?")

    asyncio.run(converse())
    runtime.close()

    (record,) = [
        r for r in read_transcript(session.path).records if isinstance(r, CompactionRecord)
    ]
    assert record.trigger == "auto" and record.strategy == "llm"
    assert record.pre_tokens >= int(0.8 * budget)
    assert sum(is_fork(b) for b in openai_server.bodies) == 1
    assert window_notices(events) == []  # the window is known: nothing to say


def test_the_notice_is_published_once_by_the_first_session(tmp_path: Path) -> None:
    model = ModelConfig(model="acme-unknown", base_url="http://127.0.0.1:9/v1")
    runtime = Runtime(tmp_path, model, OpenAIProvider(model), home=tmp_path / "home")
    events: list[Event] = []
    runtime.on_switch(lambda session: session.events.on(events.append))
    asyncio.run(runtime.new_session().start())
    assert window_notices(events) == [NO_WINDOW_NOTICE.format(model="acme-unknown")]
    asyncio.run(run_command(runtime, "clear", ""))  # a new session: said already
    assert len(window_notices(events)) == 1
    runtime.close()

    known = ModelConfig(model="gpt-4.1", context_window=1_047_576)
    runtime = Runtime(tmp_path, known, OpenAIProvider(known), home=tmp_path / "home")
    events.clear()
    runtime.on_switch(lambda session: session.events.on(events.append))
    asyncio.run(runtime.new_session().start())
    assert window_notices(events) == []
    runtime.close()


def test_cairn_p_prints_the_line_for_an_unknown_model_and_none_for_a_known_one(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    openai_server.respond_with(lambda body: Reply(text="Hello."))
    env = {
        "OPENAI_BASE_URL": openai_server.base_url,
        "OPENAI_API_KEY": "test",
        "CAIRN_HOME": str(tmp_path / "home"),
    }
    unknown = cairn_p("-p", "hi", cwd=workspace, env=env | {"CAIRN_MODEL": "acme-unknown"})
    assert unknown.returncode == 0, unknown.stderr
    assert unknown.stdout == "Hello.\n"
    text = window_notice(ModelConfig(model="acme-unknown"))
    assert unknown.stderr.splitlines() == [f"cairn: notice: {text}"]

    assert lookup("gpt-4.1") is not None
    known = cairn_p("-p", "hi", cwd=workspace, env=env | {"CAIRN_MODEL": "gpt-4.1"})
    assert known.returncode == 0, known.stderr
    assert known.stdout == "Hello.\n" and known.stderr == ""
    # A window from the environment silences it for an unknown model too.
    windowed = env | {"CAIRN_MODEL": "acme-unknown", "CAIRN_CONTEXT_WINDOW": "32768"}
    assert cairn_p("-p", "hi", cwd=workspace, env=windowed).stderr == ""
