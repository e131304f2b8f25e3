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

from cairn.agent.runtime import Runtime
from cairn.context.budget import input_budget
from cairn.provider import (
    ModelConfig,
    ModelConfigError,
    ModelEntry,
    OpenAIProvider,
    env_entry,
    resolve_model,
)
from support.cli_run import cairn_p
from support.openai_server import (
    OpenAIServer,
    Reply,
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


# ---------------------------------------------------------------------------
# The request deadlines (issue 12, finding 6): the same layers, the same one config


def test_the_deadlines_have_defaults_and_every_layer_sets_them() -> None:
    default = ModelConfig(model="m")
    assert (
        default.connect_timeout,
        default.first_byte_timeout,
        default.idle_timeout,
        default.request_timeout,
    ) == (10.0, 120.0, 60.0, 1800.0)
    settings = ModelEntry(model="m", first_byte_timeout=300, idle_timeout=30)
    env = env_entry({"CAIRN_IDLE_TIMEOUT": "45", "CAIRN_CONNECT_TIMEOUT": "2.5"})
    assert env == ModelEntry(idle_timeout=45.0, connect_timeout=2.5)
    model = resolve_model(settings, env, ModelEntry(request_timeout=900))
    assert model == ModelConfig(
        model="m",
        connect_timeout=2.5,
        first_byte_timeout=300.0,
        idle_timeout=45.0,
        request_timeout=900.0,
    )
    env_only = env_entry({"CAIRN_REQUEST_TIMEOUT": "3_600", "CAIRN_FIRST_BYTE_TIMEOUT": "0.5"})
    assert (env_only.request_timeout, env_only.first_byte_timeout) == (3600.0, 0.5)


@pytest.mark.parametrize("raw", ["0", "-1", "soon", "inf", "nan", "1e999"])
def test_a_bad_deadline_in_the_environment_names_the_variable(raw: str) -> None:
    with pytest.raises(
        ModelConfigError,
        match=f"^CAIRN_IDLE_TIMEOUT must be a positive number of seconds, got '{raw}'$",
    ):
        env_entry({"CAIRN_IDLE_TIMEOUT": raw})


@pytest.mark.parametrize("value", [0, -5, "30", True, [1], float("-inf")])
def test_a_bad_deadline_in_settings_names_the_key(tmp_path: Path, value: Any) -> None:
    from cairn.agent.settings import SettingsError, load_settings

    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    write(home / "settings.json", {"model": {"model": "m", "first_byte_timeout": value}})
    with pytest.raises(SettingsError, match=r"model\.first_byte_timeout: "):
        load_settings(workspace, home)


def test_a_bad_deadline_in_code_names_the_field() -> None:
    with pytest.raises(ModelConfigError, match=r"^request_timeout must be a positive number"):
        ModelConfig(model="m", request_timeout=0)


def test_cairn_p_rejects_a_bad_deadline_in_one_line(tmp_path: Path) -> None:
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    env = {"CAIRN_HOME": str(home), "CAIRN_MODEL": "m", "CAIRN_REQUEST_TIMEOUT": "-3"}
    done = cairn_p("-p", "hello", cwd=workspace, env=env)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "cairn -p: CAIRN_REQUEST_TIMEOUT must be a positive number of seconds, got '-3'"
    )


@pytest.mark.parametrize("layer", ["settings", "env"])
def test_cairn_p_gives_up_on_a_silent_server_at_the_configured_deadline(
    tmp_path: Path, openai_server: OpenAIServer, layer: str
) -> None:
    """Regression: a server that accepted the request and never answered held
    ``cairn -p`` for 3 x 600 s; now the configured first-byte deadline ends it
    with one line naming the endpoint and the setting."""
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    base = openai_server.base_url
    env = {"CAIRN_HOME": str(home)}
    if layer == "settings":
        write(
            home / "settings.json",
            # A window, so that the only line is the error (no "compaction is off" notice).
            {
                "model": {
                    "model": "m",
                    "base_url": base,
                    "first_byte_timeout": 0.5,
                    "context_window": 32_768,
                }
            },
        )
    else:
        env |= {"CAIRN_MODEL": "m", "OPENAI_BASE_URL": base, "CAIRN_FIRST_BYTE_TIMEOUT": "0.5"}
        env["CAIRN_CONTEXT_WINDOW"] = "32768"
    openai_server.respond_with(lambda body: Reply(stall_before_headers=True))
    done = cairn_p("-p", "hello", cwd=workspace, env=env)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"cairn: error: no response from {base} within 0.5 s "
        "(first-byte timeout; set model.first_byte_timeout or CAIRN_FIRST_BYTE_TIMEOUT)"
    )
    assert len(openai_server.requests) == 1
