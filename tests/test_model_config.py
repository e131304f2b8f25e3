"""One model configuration: the single source of the window and the output reserve.

Regression for issue 9 item 1: the session copied only the window into the
pipeline, so with ``CAIRN_MAX_OUTPUT_TOKENS=16000`` requests of 16.3k input
tokens went out with ``max_tokens=16000`` into a 32k window. Every layer —
user and project settings, the environment, the command line — reaches the
one ``ModelConfig``, later layers winning, and the pipeline's input budget is
derived from it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cairn.agent.session import Runtime
from cairn.context.budget import input_budget
from cairn.provider import (
    ModelConfig,
    ModelConfigError,
    ModelEntry,
    OpenAIProvider,
    env_entry,
    resolve_model,
)
from cli_run import cairn_p
from openai_server import (  # noqa: F401  (the fixture registers itself by import)
    OpenAIServer,
    Reply,
    openai_server_fixture,
)


def test_later_layers_win_field_by_field() -> None:
    settings = ModelEntry(model="qwen", base_url="http://a", context_window=20_000)
    env = ModelEntry(context_window=28_000, max_output_tokens=3_000)
    flags = ModelEntry(max_output_tokens=4_000)
    model = resolve_model(settings, env, flags)
    assert model == ModelConfig(
        model="qwen", base_url="http://a", context_window=28_000, max_output_tokens=4_000
    )
    assert resolve_model(ModelEntry(context_window=9_000)) is None  # nobody named a model
    assert resolve_model(None, ModelEntry(model="m")) == ModelConfig(model="m")


def test_the_environment_counts_without_cairn_model() -> None:
    """Regression: CAIRN_CONTEXT_WINDOW was ignored unless CAIRN_MODEL was set too."""
    entry = env_entry({"CAIRN_CONTEXT_WINDOW": "32_768", "CAIRN_MAX_OUTPUT_TOKENS": "16000"})
    assert entry == ModelEntry(context_window=32_768, max_output_tokens=16_000)
    model = resolve_model(ModelEntry(model="from-settings"), entry)
    assert model is not None and model.context_window == 32_768
    with pytest.raises(ModelConfigError, match="CAIRN_CONTEXT_WINDOW must be an integer ≥ 1,024"):
        env_entry({"CAIRN_CONTEXT_WINDOW": "512"})


def test_the_pipeline_budget_comes_from_the_model(tmp_path: Path) -> None:
    """32k window, 16,000-token responses: 16,768 tokens of input, never the 24,576 default."""
    model = ModelConfig(model="m", context_window=32_768, max_output_tokens=16_000)
    runtime = Runtime(tmp_path, model, OpenAIProvider(model), home=tmp_path / "home")
    session = runtime.new_session()
    try:
        assert session.pipeline.project(session.fixed_context()).input_budget == 16_768
        assert input_budget(20_000, 3_000) == 17_000  # the compaction line is 13,600, not 9.4k
    finally:
        runtime.close()


# ---------------------------------------------------------------------------
# cairn -p, end to end against a real SSE server on 127.0.0.1


def write(path: Path, value: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))


def status_of(out: str) -> dict[str, str]:
    return {
        line.split(maxsplit=1)[0]: line.split(maxsplit=1)[1]
        for line in out.splitlines()
        if " " in line.strip()
    }


@pytest.mark.parametrize(
    ("layers", "window", "reserve"),
    [
        ("user", "20,000", "1,000"),
        ("user+project", "24,000", "2,000"),
        ("user+project+env", "28,000", "3,000"),
        ("user+project+env+flags", "32,768", "4,000"),
    ],
)
def test_cairn_p_settings_env_and_flags_reach_the_window_and_the_reserve(
    tmp_path: Path, openai_server: OpenAIServer, layers: str, window: str, reserve: str
) -> None:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    base = openai_server.base_url
    write(
        home / "settings.json",
        {"model": {"model": "m", "base_url": base, "context_window": 20_000,
                   "max_output_tokens": 1_000}},
    )  # fmt: skip
    if "project" in layers:
        write(
            workspace / ".cairn" / "settings.json",
            {"model": {"model": "m", "base_url": base, "context_window": 24_000,
                       "max_output_tokens": 2_000}},
        )  # fmt: skip
    env = {"CAIRN_HOME": str(home)}
    if "env" in layers:
        env |= {"CAIRN_CONTEXT_WINDOW": "28000", "CAIRN_MAX_OUTPUT_TOKENS": "3000"}
    flags = (
        ["--context-window", "32768", "--max-output-tokens", "4000"] if "flags" in layers else []
    )

    status = cairn_p("-p", "/status", *flags, cwd=workspace, env=env)
    assert status.returncode == 0, status.stderr
    shown = status_of(status.stdout)
    assert shown["window"] == window and shown["reserve"] == reserve
    budget = int(window.replace(",", "")) - int(reserve.replace(",", ""))
    assert shown["tokens"].split(" of ")[1].startswith(f"{budget:,}")

    openai_server.respond_with(lambda body: Reply(text="done"))
    done = cairn_p("-p", "hello", *flags, cwd=workspace, env=env)
    assert done.returncode == 0, done.stderr
    assert openai_server.bodies[-1]["max_tokens"] == int(reserve.replace(",", ""))


def test_cairn_p_never_sends_a_request_over_the_budget_the_reserve_leaves(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """32k window and 16,000 output tokens: the input budget is 16,768, whatever is pasted."""
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    openai_server.respond_with(lambda body: Reply(text="Read it."))
    env = {
        "CAIRN_HOME": str(home),
        "CAIRN_MODEL": "m",
        "OPENAI_BASE_URL": openai_server.base_url,
        "CAIRN_CONTEXT_WINDOW": "32768",
        "CAIRN_MAX_OUTPUT_TOKENS": "16000",
    }
    session_id = ""
    for n in range(3):
        spec = f"Section {n}: the exporter must keep every row. " * 500  # ~6k tokens each
        args = ["-p", f"Review this spec part:\n{spec}"]
        if session_id:
            args += ["--resume", session_id]
        done = cairn_p(*args, "--output-format", "json", cwd=workspace, env=env)
        assert done.returncode == 0, done.stderr
        session_id = json.loads(done.stdout)["session_id"]
    # Three turns, and the compaction fork(s) the third needed: all within the budget.
    assert len(openai_server.bodies) >= 3
    for body in openai_server.bodies:
        assert body["max_tokens"] == 16_000
        # What the server counts and reports as prompt_tokens: the provider's truth here.
        assert len(json.dumps([body["messages"], body.get("tools", [])])) // 4 <= 16_768
