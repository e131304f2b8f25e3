"""``model.api``: which wire API a model is spoken to in, and what each API defaults to (issue 27).

Selected by ``model.api`` in ``settings.json``, ``CAIRN_API`` in the
environment or ``--api`` on the command line (each wins over the one
before), else by the model registry for a model it knows that is named
without an endpoint of one's own. Per API: the key's variable
(``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``), the endpoint variable the SDK
reads (``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL``), and for Anthropic,
which requires ``max_tokens``, a default cap that is also the reserve.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cairn.agent.settings import Settings
from cairn.context.budget import input_budget, output_reserve
from cairn.messages import Usage
from cairn.provider import ModelConfig, ModelConfigError, ModelEntry, resolve_with_env
from cairn.provider.anthropic_client import sdk_base_url
from cairn.provider.registry import TokenCounts, lookup, price
from cairn.surfaces.print_mode import PrintArgs
from cairn.surfaces.setup import resolve_cli_model
from cairn.wire_apis import ANTHROPIC_DEFAULT_MAX_TOKENS
from support.cli_run import cairn_p


def resolve(
    settings: ModelEntry | None = None,
    flags: ModelEntry | None = None,
    /,
    **environ: str,
) -> ModelConfig:
    model = resolve_with_env(settings, flags, environ=environ)
    assert model is not None
    return model


def test_each_layer_selects_the_api_and_the_later_one_wins() -> None:
    settings = ModelEntry(model="m", api="responses")
    assert resolve(settings).api == "responses"
    assert resolve(settings, CAIRN_API="anthropic").api == "anthropic"
    assert resolve(settings, ModelEntry(api="chat"), CAIRN_API="anthropic").api == "chat"
    assert resolve(ModelEntry(model="m")).api == "chat"  # nobody says: chat completions


def test_a_bad_api_is_one_line_naming_the_variable() -> None:
    with pytest.raises(
        ModelConfigError, match="CAIRN_API must be one of chat, responses, anthropic"
    ):
        resolve(ModelEntry(model="m"), CAIRN_API="gemini")
    with pytest.raises(ModelConfigError, match="api must be one of"):
        ModelConfig(model="m", api="grpc")  # type: ignore[arg-type]


def test_the_registry_gives_known_models_their_native_api() -> None:
    claude = resolve(ModelEntry(model="claude-sonnet-4-5"))
    assert claude.api == "anthropic"
    assert claude.api_key_env == "ANTHROPIC_API_KEY"
    assert resolve(ModelEntry(model="gpt-5-codex")).api == "responses"
    assert resolve(ModelEntry(model="gpt-4.1")).api == "chat"
    info = lookup("claude-sonnet-4-5-20250929")
    assert info is not None and info.api == "anthropic"


def test_an_endpoint_of_ones_own_keeps_chat_completions() -> None:
    """A gateway (LiteLLM, OpenRouter, a local server) serves Claude as chat completions."""
    assert resolve(ModelEntry(model="claude-sonnet-4-5", base_url="http://gw/v1")).api == "chat"
    env = resolve(ModelEntry(model="claude-sonnet-4-5"), OPENAI_BASE_URL="http://gw/v1")
    assert (env.api, env.base_url, env.api_key_env) == ("chat", "http://gw/v1", "OPENAI_API_KEY")
    # Said explicitly, the API wins over the endpoint.
    explicit = ModelEntry(model="claude-sonnet-4-5", base_url="http://gw", api="anthropic")
    assert resolve(explicit).api == "anthropic"


def test_each_api_reads_its_own_sdks_endpoint_variable() -> None:
    both = {"OPENAI_BASE_URL": "http://openai.example/v1", "ANTHROPIC_BASE_URL": "http://a.example"}
    anthropic = resolve(ModelEntry(model="m", api="anthropic"), **both)
    assert anthropic.base_url == "http://a.example"
    responses = resolve(ModelEntry(model="m", api="responses"), **both)
    assert responses.base_url == "http://openai.example/v1"
    # A base URL in the settings is overridden by the API's own variable, as for chat.
    settings = ModelEntry(model="m", api="anthropic", base_url="http://settings")
    assert resolve(settings, ANTHROPIC_BASE_URL="http://env").base_url == "http://env"
    assert resolve(settings, OPENAI_BASE_URL="http://other").base_url == "http://settings"


@pytest.mark.parametrize(
    ("configured", "given"),
    [
        ("https://api.anthropic.com", "https://api.anthropic.com"),
        ("https://api.anthropic.com/v1", "https://api.anthropic.com"),
        ("http://proxy.local/anthropic/v1/", "http://proxy.local/anthropic"),
        ("http://proxy.local/v1beta", "http://proxy.local/v1beta"),
        (None, None),
    ],
)
def test_an_openai_style_v1_suffix_is_not_doubled_by_the_anthropic_sdk(
    configured: str | None, given: str | None
) -> None:
    """The SDK appends ``/v1/messages`` itself; ``…/v1`` would reach ``/v1/v1/messages``."""
    assert sdk_base_url(configured) == given


def test_anthropic_always_sends_a_cap_and_reserves_it() -> None:
    """Unset, the cap is the reserve the pipeline keeps free anyway: a request within the
    input budget plus its max_tokens always fits the window."""
    for window in (8_192, 32_000, 200_000):
        config = resolve(ModelEntry(model="my-model", api="anthropic", context_window=window))
        assert config.max_output_tokens == output_reserve(window)
        assert config.request_params()["max_tokens"] == output_reserve(window)
        budget = input_budget(window, config.max_output_tokens)
        assert budget + config.max_output_tokens == window
    no_window = ModelConfig(model="m", api="anthropic")
    assert no_window.max_output_tokens == ANTHROPIC_DEFAULT_MAX_TOKENS
    old = resolve(ModelEntry(model="claude-3-5-haiku", api="anthropic"))
    assert old.max_output_tokens == 8192  # the model's own limit (20,000 would be refused)
    given = resolve(ModelEntry(model="claude-sonnet-4-5", max_output_tokens=2_000))
    assert given.max_output_tokens == 2_000
    assert resolve(ModelEntry(model="m", api="responses")).max_output_tokens is None


def test_the_api_flag_reaches_the_command_line(tmp_path: Path) -> None:
    settings = Settings.model_validate({"model": {"model": "m", "api": "anthropic"}})
    model = resolve_cli_model(settings, PrintArgs(prompt=None, api="responses"))
    assert model is not None and model.api == "responses"
    cairn_dir = tmp_path / ".cairn"
    cairn_dir.mkdir()
    (cairn_dir / "settings.json").write_text(json.dumps({"model": {"model": "m", "api": "x"}}))
    done = cairn_p("-p", "hi", cwd=tmp_path, env={"CAIRN_HOME": str(tmp_path / "home")})
    assert done.returncode == 2
    assert "model.api: Input should be 'chat', 'responses' or 'anthropic'" in done.stderr
    assert "Traceback" not in done.stderr


def test_cache_fields_are_billed_once_each() -> None:
    """Anthropic's usage as Cairn maps it: the prompt holds reads and writes, counted once."""
    usage = Usage(
        prompt_tokens=10_000,
        completion_tokens=500,
        total_tokens=10_500,
        cached_tokens=8_000,
        cache_read_input_tokens=8_000,
        cache_creation_input_tokens=1_500,
    )
    counts = TokenCounts.from_usage(usage)
    assert counts == TokenCounts(input=2_000, cached_input=8_000, output=500, cache_write=1_500)
    info = lookup("claude-sonnet-4-5")
    assert info is not None
    # 500 uncached at $3, 1,500 written at $3.75, 8,000 read at $0.30, 500 out at $15 (per M).
    expected = (500 * 3.0 + 1_500 * 3.75 + 8_000 * 0.3 + 500 * 15.0) / 1_000_000
    assert price(counts, info) == pytest.approx(expected)
