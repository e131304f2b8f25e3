"""settings.json: user + project merge, and errors that name the file, key and allowed values."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cairn.agent.settings import (
    CommandHook,
    HooksSettings,
    Settings,
    SettingsError,
    load_settings,
    matcher_matches,
)
from cairn.context import CompactionConfig


def write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


def group(command: str, matcher: str | None = None, timeout: float = 60) -> dict[str, Any]:
    entry: dict[str, Any] = {"hooks": [{"type": "command", "command": command, "timeout": timeout}]}
    if matcher is not None:
        entry["matcher"] = matcher
    return entry


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home" / ".cairn"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def user_file(home: Path) -> Path:
    return home / "settings.json"


def project_file(workspace: Path) -> Path:
    return workspace / ".cairn" / "settings.json"


def test_missing_files_give_the_defaults(workspace: Path, home: Path) -> None:
    settings = load_settings(workspace, home)
    assert settings == Settings()
    assert settings.compaction == CompactionConfig()
    assert settings.model is None
    assert settings.hooks.commands("PreCompact", "auto") == ()


def test_user_and_project_merge_project_wins_and_hooks_are_concatenated(
    workspace: Path, home: Path
) -> None:
    write_json(
        user_file(home),
        {
            "hooks": {
                "PreCompact": [group("user-pre")],
                "SessionStart": [group("user-start", "compact")],
            },
            "compaction": {"tokenizer": "cl100k_base", "keep_rounds": 4},
            "model": {
                "base_url": "https://api.openai.com/v1",
                "api_key_env": "OPENAI_API_KEY",
                "model": "gpt-4o",
                "context_window": 128_000,
            },
        },
    )
    write_json(
        project_file(workspace),
        {
            "hooks": {
                "PreCompact": [group("project-pre", "manual")],
                "PostCompact": [group("project-post")],
            },
            "compaction": {"keep_rounds": 1},
            "model": {"base_url": "http://127.0.0.1:8000/v1", "model": "qwen"},
        },
    )
    settings = load_settings(workspace, home)

    # hooks: user groups first, then project groups, per event
    assert [h.command for h in settings.hooks.commands("PreCompact", "manual")] == [
        "user-pre",
        "project-pre",
    ]
    assert [h.command for h in settings.hooks.commands("PreCompact", "auto")] == ["user-pre"]
    assert [h.command for h in settings.hooks.commands("PostCompact", "auto")] == ["project-post"]
    assert [h.command for h in settings.hooks.commands("SessionStart", "compact")] == ["user-start"]
    # compaction: per field, the project wins
    assert settings.compaction.keep_rounds == 1
    assert settings.compaction.tokenizer == "cl100k_base"
    # model: the project's entry replaces the user's whole
    assert settings.model is not None
    assert settings.model.base_url == "http://127.0.0.1:8000/v1"
    assert settings.model.model == "qwen"
    assert settings.model.api_key_env is None
    assert settings.model.context_window is None


def test_only_a_project_file(workspace: Path, home: Path) -> None:
    write_json(project_file(workspace), {"compaction": {"compact_ratio": 1.0}})
    assert load_settings(workspace, home).compaction.compact_ratio == 1.0


def test_home_defaults_to_cairn_home(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    configured = tmp_path / "elsewhere"
    write_json(configured / "settings.json", {"compaction": {"keep_rounds": 7}})
    monkeypatch.setenv("CAIRN_HOME", str(configured))
    assert load_settings(workspace).compaction.keep_rounds == 7


def test_one_file_that_is_both_user_and_project_is_read_once(tmp_path: Path) -> None:
    # cairn run in the home folder: ~/.cairn/settings.json is also <workspace>/.cairn/settings.json
    workspace = tmp_path / "me"
    home = workspace / ".cairn"
    write_json(user_file(home), {"hooks": {"PreCompact": [group("a"), group("b")]}})
    settings = load_settings(workspace, home)
    assert len(settings.hooks.PreCompact) == 2


def test_invalid_json_names_the_file_and_the_line(workspace: Path, home: Path) -> None:
    path = project_file(workspace)
    path.parent.mkdir(parents=True)
    path.write_text('{\n  "compaction": {\n    "keep_rounds": 2,,\n  }\n}\n', encoding="utf-8")
    with pytest.raises(SettingsError) as caught:
        load_settings(workspace, home)
    message = str(caught.value)
    assert str(path) in message
    assert "line 3" in message
    assert caught.value.path == path


def test_a_bad_timeout_names_the_key_path_and_the_allowed_range(
    workspace: Path, home: Path
) -> None:
    path = write_json(user_file(home), {"hooks": {"PreCompact": [group("x", timeout=-1)]}})
    with pytest.raises(SettingsError) as caught:
        load_settings(workspace, home)
    message = str(caught.value)
    assert str(path) in message
    assert "hooks.PreCompact[0].hooks[0].timeout" in message
    assert "greater than 0" in message


def test_a_timeout_given_as_text_is_an_error(workspace: Path, home: Path) -> None:
    raw = {"hooks": {"PostCompact": [{"hooks": [{"command": "x", "timeout": "30"}]}]}}
    write_json(project_file(workspace), raw)
    with pytest.raises(SettingsError, match=r"hooks\.PostCompact\[0\]\.hooks\[0\]\.timeout"):
        load_settings(workspace, home)


def test_an_unknown_event_name_lists_the_allowed_events(workspace: Path, home: Path) -> None:
    path = write_json(project_file(workspace), {"hooks": {"PreCompacting": [group("x")]}})
    with pytest.raises(SettingsError) as caught:
        load_settings(workspace, home)
    message = str(caught.value)
    assert str(path) in message
    assert "hooks.PreCompacting" in message
    for event in ("PreCompact", "PostCompact", "SessionStart"):
        assert event in message


def test_an_unknown_hook_type_and_key_are_named(workspace: Path, home: Path) -> None:
    raw = {"hooks": {"PreCompact": [{"hooks": [{"type": "prompt", "command": "x", "timout": 5}]}]}}
    write_json(project_file(workspace), raw)
    with pytest.raises(SettingsError) as caught:
        load_settings(workspace, home)
    message = str(caught.value)
    assert "hooks.PreCompact[0].hooks[0].type" in message
    assert "'command'" in message
    assert "hooks.PreCompact[0].hooks[0].timout: unknown key; allowed: type, command, timeout" in (
        message
    )


def test_a_matcher_that_can_never_match_is_an_error(workspace: Path, home: Path) -> None:
    write_json(project_file(workspace), {"hooks": {"PreCompact": [group("x", "Auto")]}})
    with pytest.raises(SettingsError) as caught:
        load_settings(workspace, home)
    message = str(caught.value)
    assert "hooks.PreCompact[0].matcher" in message
    assert "manual" in message


def test_an_invalid_regex_matcher_is_an_error(workspace: Path, home: Path) -> None:
    write_json(project_file(workspace), {"hooks": {"SessionStart": [group("x", "(compact")]}})
    with pytest.raises(SettingsError, match=r"hooks\.SessionStart\[0\]\.matcher: not a valid"):
        load_settings(workspace, home)


def test_a_bad_compaction_value_names_the_key_and_range(workspace: Path, home: Path) -> None:
    write_json(user_file(home), {"compaction": {"on_failure": "retry", "keep_rounds": -1}})
    with pytest.raises(SettingsError) as caught:
        load_settings(workspace, home)
    message = str(caught.value)
    assert "compaction.on_failure" in message
    assert "'fallback' or 'skip'" in message
    assert "compaction.keep_rounds" in message
    assert "greater than or equal to 0" in message


def test_an_unknown_top_level_key_lists_the_sections(workspace: Path, home: Path) -> None:
    write_json(project_file(workspace), {"hook": {}})
    with pytest.raises(
        SettingsError,
        match=r"hook: unknown key; allowed: hooks, store, .*compaction, model, models",
    ):
        load_settings(workspace, home)


def test_a_top_level_that_is_not_an_object_is_an_error(workspace: Path, home: Path) -> None:
    write_json(project_file(workspace), [1, 2])
    with pytest.raises(SettingsError, match="top level must be a JSON object"):
        load_settings(workspace, home)


def test_ratios_valid_alone_but_not_together_name_both_files(workspace: Path, home: Path) -> None:
    user = write_json(user_file(home), {"compaction": {"handoff_ratio": 0.75}})
    project = write_json(project_file(workspace), {"compaction": {"compact_ratio": 0.72}})
    with pytest.raises(SettingsError) as caught:
        load_settings(workspace, home)
    message = str(caught.value)
    assert str(user) in message
    assert str(project) in message
    assert "must not exceed compact_ratio" in message


def test_a_bad_model_entry_names_the_key(workspace: Path, home: Path) -> None:
    write_json(project_file(workspace), {"model": {"context_window": 100}})
    with pytest.raises(SettingsError, match=r"model\.context_window.*1024"):
        load_settings(workspace, home)


@pytest.mark.parametrize(
    ("matcher", "value", "expected"),
    [
        (None, "auto", True),
        ("", "manual", True),
        ("*", "reactive", True),
        ("manual", "manual", True),
        ("manual", "auto", False),
        ("auto|reactive", "reactive", True),
        ("auto|reactive", "manual", False),
        ("^(manual|auto)$", "auto", True),
        ("^(manual|auto)$", "reactive", False),
        ("man.*", "manual", True),
    ],
)
def test_matcher_rules(matcher: str | None, value: str, expected: bool) -> None:
    assert matcher_matches(matcher, value) is expected


def test_identical_commands_run_once() -> None:
    hooks = HooksSettings.model_validate(
        {"PreCompact": [group("same"), group("other", "auto"), group("same", "auto")]}
    )
    assert hooks.commands("PreCompact", "auto") == (
        CommandHook(command="same"),
        CommandHook(command="other"),
    )


def test_store_url_comes_from_settings_and_the_environment_wins(
    workspace: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CAIRN_STORE_URL", raising=False)
    monkeypatch.delenv("CAIRN_FSYNC", raising=False)
    write_json(
        project_file(workspace), {"store": {"url": "postgresql://db/team", "fsync": "record"}}
    )
    assert load_settings(workspace, home).store.url == "postgresql://db/team"
    monkeypatch.setenv("CAIRN_STORE_URL", "postgres://other/db")
    store = load_settings(workspace, home).store
    # The environment replaces the URL only: the file's fsync choice stands.
    assert (store.url, store.fsync) == ("postgres://other/db", "record")


def test_a_store_url_that_is_not_postgresql_names_the_key(workspace: Path, home: Path) -> None:
    write_json(user_file(home), {"store": {"url": "sqlite:///x.db"}})
    with pytest.raises(SettingsError) as caught:
        load_settings(workspace, home)
    message = str(caught.value)
    assert "store.url" in message and "must be a PostgreSQL URL" in message
    assert str(user_file(home)) in message


def test_reading_the_settings_does_not_load_the_postgresql_store() -> None:
    """Issue 30: settings showed a database URL through the PostgreSQL store's module,
    loading psycopg's store for every JSONL user; the masking lives with the selection."""
    code = "import sys, cairn.agent.settings; print('cairn.store.postgres' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
