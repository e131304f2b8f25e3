"""The model registry (issue 26 item 3): lookups, settings on top, precedence, prices, data.

A known model needs no window from the user: ``resolve_model`` takes the
registry's beneath every layer. The settings' ``models`` section corrects or
extends the registry field by field; ``model.context_window``, the
environment and the flags still win over both. The shipped ``models.json``
is checked entry by entry.
"""

from __future__ import annotations

import json
from datetime import date
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest

from cairn.agent.settings import Settings, SettingsError, load_settings
from cairn.messages import Usage
from cairn.provider import (
    ModelConfig,
    ModelEntry,
    ModelInfo,
    ModelOverride,
    Prices,
    TokenCounts,
    env_entry,
    lookup,
    price,
    resolve_model,
    usage_from_wire,
    window_notice,
)
from cairn.provider.config import NO_WINDOW_NOTICE
from cairn.provider.limits import MIN_CONTEXT_WINDOW
from cairn.provider.registry import (
    REGISTRY_FILE,
    RegistryError,
    canonical,
    known_models,
    parse_registry,
)
from cairn.surfaces.print_mode import PrintArgs
from cairn.surfaces.setup import resolve_cli_model

#: The environment variables a model resolution reads; cleared so the machine's don't leak in.
MODEL_ENV = (
    "CAIRN_MODEL",
    "OPENAI_BASE_URL",
    "CAIRN_CONTEXT_WINDOW",
    "CAIRN_MAX_OUTPUT_TOKENS",
    "CAIRN_IMAGES",
)


def known(name: str, overrides: dict[str, ModelOverride] | None = None) -> ModelInfo:
    info = lookup(name, overrides)
    assert info is not None, name
    return info


def raw_registry() -> dict[str, Any]:
    text = files("cairn.provider").joinpath(REGISTRY_FILE).read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in MODEL_ENV:
        monkeypatch.delenv(name, raising=False)


# -- lookups -------------------------------------------------------------------


def test_an_exact_name_gives_every_figure_and_the_date_they_were_read() -> None:
    info = known("gpt-4.1")
    assert info == ModelInfo(
        name="gpt-4.1",
        context_window=1_047_576,
        max_output_tokens=32_768,
        images=True,
        prices=Prices(input=2.0, cached_input=0.5, output=8.0),
        read=date(2026, 12, 5),
    )
    assert known("GPT-4.1") == info  # names are case-insensitive


@pytest.mark.parametrize(
    ("name", "entry"),
    [
        ("openai/gpt-5", "gpt-5"),
        ("anthropic/claude-sonnet-4-5", "claude-sonnet-4-5"),
        ("anthropic/claude-sonnet-4.5", "claude-sonnet-4-5"),  # OpenRouter writes a dot
        ("openrouter/anthropic/claude-opus-4.1", "claude-opus-4-1"),
        ("models/gemini-2.5-flash", "gemini-2.5-flash"),
        ("zai-org/GLM-4.6", "glm-4.6"),
    ],
)
def test_a_provider_prefix_is_tolerated(name: str, entry: str) -> None:
    assert known(name).name == entry


@pytest.mark.parametrize(
    ("name", "entry"),
    [
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("claude-sonnet-4-5@20250929", "claude-sonnet-4-5"),  # Vertex
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5"),  # Bedrock
        ("claude-opus-4-20250514", "claude-opus-4"),
        ("claude-sonnet-4-0", "claude-sonnet-4"),  # an alias
        ("claude-3-7-sonnet-latest", "claude-3-7-sonnet"),
        ("gpt-4.1-2025-04-14", "gpt-4.1"),
        ("o3-2025-04-16", "o3"),
    ],
)
def test_a_snapshot_suffix_is_tolerated(name: str, entry: str) -> None:
    assert known(name).name == entry


def test_a_name_that_ends_like_a_suffix_is_still_its_own_entry() -> None:
    # ``-latest`` is part of these names: the name as given is tried first.
    chat = known("gpt-5-chat-latest")
    assert chat.name == "gpt-5-chat-latest" and chat.context_window == 128_000
    assert known("openai/gpt-5-chat-latest").name == "gpt-5-chat-latest"


@pytest.mark.parametrize(
    ("name", "pattern", "window"),
    [
        ("SmolLM2-135M-Instruct-Q8_0.gguf", "*smollm2*", 8_192),
        ("/models/Qwen2.5-Coder-7B-Instruct-Q4_K_M.gguf", "*qwen2.5*", 32_768),
        ("qwen2_5-coder-7b-instruct", "*qwen2.5*", 32_768),  # ``_`` read as ``.``
        ("qwen2.5-coder:7b", "*qwen2.5*", 32_768),  # Ollama's tag
        ("llama3.1:8b", "*llama3.[123]*", 131_072),
        ("Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf", "*llama-3.[123]*", 131_072),
        ("Qwen/Qwen3-Coder-480B-A35B-Instruct", "*qwen3-coder*", 262_144),  # before *qwen3*
        ("qwen3-8b", "*qwen3*", 32_768),
        ("gpt-5.9", "gpt-5*", 272_000),
        ("gpt-5.9-chat-latest", "gpt-5*chat*", 128_000),
        ("deepseek-v3.2", "*deepseek-v3*", 131_072),
    ],
)
def test_patterns_match_local_and_family_names(name: str, pattern: str, window: int) -> None:
    info = known(name)
    assert (info.name, info.context_window) == (pattern, window)
    # A pattern covers models served by many hosts at many prices: it names none.
    assert info.prices == Prices()


def test_an_exact_name_wins_over_a_pattern_that_also_matches() -> None:
    assert known("qwen3-coder-plus").name == "qwen3-coder-plus"  # not *qwen3-coder*
    assert known("gpt-5-codex").prices.input == 1.25  # not gpt-5* (no prices)


@pytest.mark.parametrize("name", ["m", "test-model", "qwen", "my-private-model", "deepseek"])
def test_an_unknown_model_is_none(name: str) -> None:
    assert lookup(name) is None


# -- settings override and extend --------------------------------------------------


def test_a_model_defined_only_in_settings() -> None:
    overrides = {"acme-coder": ModelOverride(context_window=65_536, input_price=0.5)}
    assert known("acme-coder", overrides) == ModelInfo(
        name="acme-coder",
        context_window=65_536,
        max_output_tokens=None,
        images=False,
        prices=Prices(input=0.5),
        read=None,  # the registry did not read these figures: the user gave them
    )
    # Matched like the registry's names: any case, a host prefix, a snapshot suffix.
    assert known("ACME/Acme-Coder-20260101", overrides).context_window == 65_536


def test_an_override_of_one_field_keeps_the_others() -> None:
    info = known("openai/gpt-4.1", {"gpt-4.1": ModelOverride(input_price=1.0)})
    registry = known("gpt-4.1")
    assert info.prices == Prices(input=1.0, cached_input=0.5, output=8.0)
    assert info.context_window == registry.context_window == 1_047_576
    assert info.max_output_tokens == 32_768 and info.images is True
    assert info.read == registry.read
    turned_off = known("gpt-4.1", {"gpt-4.1": ModelOverride(images=False, context_window=64_000)})
    assert turned_off.images is False and turned_off.context_window == 64_000
    assert turned_off.prices == registry.prices


def test_a_settings_pattern_covers_local_files() -> None:
    overrides = {"*acme*": ModelOverride(context_window=16_384, images=True)}
    info = known("/srv/models/Acme-7B-Q4_K_M.gguf", overrides)
    assert (info.name, info.context_window, info.images) == ("*acme*", 16_384, True)
    # A settings name is matched before a settings pattern.
    both = {"*acme*": ModelOverride(context_window=16_384), "acme-7b": ModelOverride(input_price=1)}
    assert known("acme-7b", both).prices.input == 1.0


def test_settings_files_merge_models_by_name_and_field(tmp_path: Path) -> None:
    home, workspace = tmp_path / "home", tmp_path / "ws"
    (workspace / ".cairn").mkdir(parents=True)
    home.mkdir()
    user = {
        "models": {
            "gpt-4.1": {"input_price": 1.5, "output_price": 6.0},
            "acme-coder": {"context_window": 32_768},
        }
    }
    project = {"models": {"gpt-4.1": {"output_price": 7.0}, "local-*": {"context_window": 4_096}}}
    (home / "settings.json").write_text(json.dumps(user))
    (workspace / ".cairn" / "settings.json").write_text(json.dumps(project))
    models = load_settings(workspace, home).models
    assert models == {
        "gpt-4.1": ModelOverride(input_price=1.5, output_price=7.0),  # the project's field wins
        "acme-coder": ModelOverride(context_window=32_768),
        "local-*": ModelOverride(context_window=4_096),
    }
    assert known("gpt-4.1", models).prices == Prices(input=1.5, cached_input=0.5, output=7.0)


@pytest.mark.parametrize(
    ("models", "key", "says"),
    [
        ({"gpt-4.1": {"context_window": 512}}, "models.gpt-4.1.context_window", "1024"),
        ({"x": {"input_price": -1}}, "models.x.input_price", "greater than or equal to 0"),
        ({"x": {"output_price": "2"}}, "models.x.output_price", "valid number"),
        ({"x": {"images": "yes"}}, "models.x.images", "valid boolean"),
        ({"x": {"window": 8_192}}, "models.x.window", "unknown key; allowed: context_window"),
        ({" ": {}}, "models", "must not be blank"),
        ({"x": 8_192}, "models.x", "JSON object"),
    ],
)
def test_a_bad_models_value_names_the_file_and_the_key(
    tmp_path: Path, models: dict[str, Any], key: str, says: str
) -> None:
    (tmp_path / ".cairn").mkdir()
    path = tmp_path / ".cairn" / "settings.json"
    path.write_text(json.dumps({"models": models}))
    with pytest.raises(SettingsError) as caught:
        load_settings(tmp_path, tmp_path / "home")
    message = str(caught.value)
    assert str(path) in message and key in message and says in message, message


# -- precedence in the one model configuration --------------------------------------


def test_a_known_model_resolves_to_its_window_with_no_setting() -> None:
    model = resolve_model(ModelEntry(model="gpt-4.1"))
    assert model is not None
    assert model.context_window == 1_047_576 and model.images is True
    # The output limit is information, never sent: max_tokens stays the user's to set.
    assert model.max_output_tokens is None and "max_tokens" not in model.request_params()
    assert window_notice(model) is None
    unknown = resolve_model(ModelEntry(model="my-model"))
    assert unknown == ModelConfig(model="my-model")


def test_settings_env_and_flags_beat_the_registry(clean_env: None) -> None:
    registry = ModelEntry(model="gpt-4.1")
    settings_window = ModelEntry(model="gpt-4.1", context_window=32_768, images=False)
    model = resolve_model(settings_window)
    assert model is not None and (model.context_window, model.images) == (32_768, False)
    env = env_entry({"CAIRN_CONTEXT_WINDOW": "50000"})
    model = resolve_model(registry, env)
    assert model is not None and model.context_window == 50_000
    # The settings' ``models`` correct the registry, beneath ``model.context_window``.
    corrected = {"gpt-4.1": ModelOverride(context_window=64_000)}
    model = resolve_model(registry, models=corrected)
    assert model is not None and model.context_window == 64_000
    model = resolve_model(settings_window, models=corrected)
    assert model is not None and model.context_window == 32_768
    # The function every surface resolves through: settings, environment, flags.
    settings = Settings(model=ModelEntry(model="gpt-4.1"), models=corrected)
    model = resolve_cli_model(settings, PrintArgs(prompt=None))
    assert model is not None and model.context_window == 64_000
    model = resolve_cli_model(settings, PrintArgs(prompt=None, context_window=40_000))
    assert model is not None and model.context_window == 40_000
    model = resolve_cli_model(Settings(), PrintArgs(prompt=None, model="acme"))
    assert model is not None and model.context_window is None


def test_a_model_only_the_settings_know_gets_its_window_everywhere(clean_env: None) -> None:
    settings = Settings(
        model=ModelEntry(model="acme-coder"),
        models={"acme-coder": ModelOverride(context_window=24_576, images=True)},
    )
    model = resolve_cli_model(settings, PrintArgs(prompt=None))
    assert model is not None and (model.context_window, model.images) == (24_576, True)


# -- the notice for a model without a window ------------------------------------------


def test_a_model_without_a_window_gets_one_line_saying_how_to_set_it() -> None:
    text = window_notice(ModelConfig(model="acme"))
    assert text == NO_WINDOW_NOTICE.format(model="acme")
    assert text is not None and "\n" not in text
    assert "automatic compaction is off" in text
    assert "CAIRN_CONTEXT_WINDOW" in text and "model.context_window" in text
    assert window_notice(ModelConfig(model="acme", context_window=8_192)) is None


# -- prices ---------------------------------------------------------------------------


def test_price_sums_input_cached_input_and_output() -> None:
    gpt = known("gpt-4.1")
    assert price(TokenCounts(input=1_000_000), gpt) == pytest.approx(2.0)
    counts = TokenCounts(input=10_000, cached_input=90_000, output=2_000)
    # 10k × $2 + 90k × $0.50 + 2k × $8, per million
    assert price(counts, gpt) == pytest.approx(0.081)
    assert price(TokenCounts(), gpt) == 0.0


def test_price_is_none_when_a_used_kind_has_no_price() -> None:
    local = known("smollm2")
    assert price(TokenCounts(input=100), local) is None
    pro = known("o3-pro")  # no cache discount listed
    assert price(TokenCounts(input=1_000_000, output=1_000_000), pro) == pytest.approx(100.0)
    assert price(TokenCounts(cached_input=1), pro) is None
    # A price given in the settings makes it priceable.
    priced = known("smollm2", {"*smollm2*": ModelOverride(input_price=0.0, output_price=0.0)})
    assert price(TokenCounts(input=100, output=5), priced) == 0.0


def test_token_counts_from_the_providers_usage() -> None:
    openai = TokenCounts.from_usage(Usage(1_000, 50, 1_050, cached_tokens=800))
    assert openai == TokenCounts(input=200, cached_input=800, output=50)
    deepseek = TokenCounts.from_usage(
        usage_from_wire(
            {"prompt_tokens": 300, "completion_tokens": 3, "prompt_cache_hit_tokens": 256}
        )
    )
    assert deepseek == TokenCounts(input=44, cached_input=256, output=3)
    passed_through = TokenCounts.from_usage(Usage(500, 5, 505, cache_read_input_tokens=400))
    assert passed_through == TokenCounts(input=100, cached_input=400, output=5)
    assert openai + deepseek == TokenCounts(input=244, cached_input=1_056, output=53)


# -- the data file ----------------------------------------------------------------------


def test_every_entry_has_a_window_a_max_output_and_a_date() -> None:
    data = raw_registry()
    file_read = date.fromisoformat(data["read"])
    assert data["source"].strip()
    assert len(data["models"]) >= 40
    for entry in data["models"]:
        label = entry.get("name") or entry.get("pattern")
        assert ("name" in entry) != ("pattern" in entry), entry
        assert entry["context_window"] >= MIN_CONTEXT_WINDOW, label
        assert 1 <= entry["max_output_tokens"] <= entry["context_window"], label
        assert isinstance(entry["images"], bool), label
        read = date.fromisoformat(entry["read"]) if "read" in entry else file_read
        assert date(2025, 1, 1) <= read <= date.today(), label
        for key in ("input_price", "cached_input_price", "output_price"):
            value = entry.get(key)
            assert value is None or (isinstance(value, int | float) and value >= 0), (label, key)
        if entry.get("cached_input_price") is not None and entry.get("input_price") is not None:
            assert entry["cached_input_price"] <= entry["input_price"], label
    assert len(known_models()) == len(data["models"])  # the loader takes every entry


def test_no_name_is_listed_twice() -> None:
    seen: list[str] = []
    for entry in raw_registry()["models"]:
        seen += (
            [entry["name"], *entry.get("aliases", [])] if "name" in entry else [entry["pattern"]]
        )
    canon = [canonical(n) for n in seen]
    assert len(canon) == len(set(canon)), sorted({n for n in canon if canon.count(n) > 1})


def test_every_name_finds_its_own_entry() -> None:
    """No entry is shadowed by another's name, alias or stripped suffix."""
    for entry in raw_registry()["models"]:
        if "name" in entry:
            for name in (entry["name"], *entry.get("aliases", [])):
                assert known(name).name == entry["name"], name


def test_the_families_people_run_are_there() -> None:
    for name in (
        *("gpt-4.1", "gpt-4.1-mini", "gpt-5", "gpt-5-mini", "o3", "o4-mini"),
        *("claude-opus-4-1", "claude-sonnet-4-5", "claude-haiku-4-5"),
        *("gemini-2.5-pro", "gemini-2.5-flash", "deepseek-chat", "deepseek-reasoner"),
        *("qwen3-coder-plus", "kimi-k2-0905-preview", "glm-4.5", "glm-4.6"),
    ):
        info = known(name)
        assert info.name == name and info.context_window is not None
    assert known("smollm2-135m-instruct-q8_0.gguf").name == "*smollm2*"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"name": "a", "context_window": 8192, "max_output_tokens": 10, "images": false}', ""),
        (
            '{"name": "a", "pattern": "a*", "context_window": 8192, "max_output_tokens": 10, '
            '"images": false}',
            "exactly one of name and pattern",
        ),
        (
            '{"name": "a", "context_window": 100, "max_output_tokens": 10, "images": false}',
            "context_window",
        ),
        (
            '{"name": "a", "context_window": 8192, "max_output_tokens": 9000, "images": false}',
            "exceeds context_window",
        ),
        (
            '{"name": "a*", "context_window": 8192, "max_output_tokens": 10, "images": false}',
            "use pattern",
        ),
    ],
)
def test_the_loader_refuses_a_bad_entry(text: str, says: str) -> None:
    wrapped = f'{{"read": "2026-12-05", "source": "test", "models": [{text}]}}'
    if not says:
        (info,) = parse_registry(wrapped)
        assert info.name == "a" and info.read == date(2026, 12, 5)
        return
    with pytest.raises(RegistryError, match=says):
        parse_registry(wrapped)


def test_the_loader_refuses_a_name_listed_twice() -> None:
    entry = '"context_window": 8192, "max_output_tokens": 10, "images": false'
    text = (
        '{"read": "2026-12-05", "source": "test", "models": ['
        f'{{"name": "glm-4.5", {entry}}}, {{"name": "b", "aliases": ["GLM_4.5"], {entry}}}]}}'
    )
    with pytest.raises(RegistryError, match="listed twice"):
        parse_registry(text)
