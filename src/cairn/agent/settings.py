"""``settings.json``: hooks, the compaction policy and the model entry (DESIGN §7, §11).

Two files are read, user first, then project; the project wins:

- user: ``$CAIRN_HOME/settings.json`` (``~/.cairn/settings.json``);
- project: ``<workspace>/.cairn/settings.json``.

Merging, key by key at the top level:

- ``hooks``: the matcher groups of each event are concatenated, user groups
  first, so both files' hooks run;
- ``compaction``: merged field by field (each field is an independent knob, so a
  project that sets ``keep_rounds`` keeps the user's ``tokenizer``);
- ``model``: the project's entry replaces the user's whole (an endpoint's URL,
  key variable, model name and window belong together);
- ``models``: merged by model name, and field by field within one (each figure
  of the model registry is an independent fact, ``cairn.provider.registry``);
- ``mcpServers``: merged by server name; the project's entry for a name
  replaces the user's whole (Claude Code's rule: a command and its arguments
  belong together);
- ``permissions.allow``: the two lists are combined (either file may allow a tool);
- anything else: the project's value replaces the user's.

The ``hooks`` section follows Claude Code's format, so existing hook scripts
and the shape users know carry over::

    {"hooks": {"PreCompact": [{"matcher": "manual|auto",
                               "hooks": [{"type": "command",
                                          "command": "./save-notes.sh",
                                          "timeout": 60}]}]}}

``timeout`` is in seconds. A ``matcher`` that is missing, empty or ``*``
matches everything; one made only of letters, digits, ``_`` and ``|`` is an
exact value or a ``|``-separated list of exact values; anything else is a
regular expression searched in the value. PreCompact and PostCompact match the
trigger (``manual``, ``auto``, ``reactive``), SessionStart the source
(``startup``, ``resume``, ``clear``, ``compact``).

Every value is validated; a bad one raises ``SettingsError`` naming the file,
the key path (``hooks.PreCompact[0].hooks[0].timeout``) and what is allowed.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeAlias, cast, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cairn.agent.mcp.config import McpServers
from cairn.agent.tools.permissions import PermissionsSettings
from cairn.agent.validation import describe_validation_error
from cairn.context.config import CompactionConfig
from cairn.context.hooks import SessionStartSource
from cairn.errors import CairnError
from cairn.messages import json_kind
from cairn.provider.config import ModelEntry
from cairn.provider.registry import ModelName, ModelOverride
from cairn.store.paths import cairn_home
from cairn.store.records import Trigger
from cairn.store.selection import mask_url

HookEvent: TypeAlias = Literal["PreCompact", "PostCompact", "SessionStart"]
HOOK_EVENTS: tuple[HookEvent, ...] = get_args(HookEvent)
COMPACT_TRIGGERS: tuple[Trigger, ...] = get_args(Trigger)
SESSION_START_SOURCES: tuple[SessionStartSource, ...] = get_args(SessionStartSource)

SETTINGS_FILE = "settings.json"
PROJECT_DIR = ".cairn"
#: Errors listed in one ``SettingsError`` before "… and N more".
_PLAIN_MATCHER = re.compile(r"[A-Za-z0-9_|]+")


class SettingsError(CairnError, ValueError):
    """A settings file is unreadable, not JSON, or holds a bad value; the message says where."""

    def __init__(self, message: str, path: Path | None = None) -> None:
        super().__init__(message)
        self.path = path


def matcher_matches(matcher: str | None, value: str) -> bool:
    """Claude Code's matcher rules (see the module docstring); case-sensitive."""
    if matcher is None or matcher.strip() in ("", "*"):
        return True
    if _PLAIN_MATCHER.fullmatch(matcher):
        return value in matcher.split("|")
    return re.search(matcher, value) is not None


class CommandHook(BaseModel):
    """One hook: a shell command run with the event's JSON on stdin."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["command"] = "command"
    command: str = Field(min_length=1)
    #: Seconds before the hook's process group is killed.
    timeout: float = Field(default=60.0, gt=0, allow_inf_nan=False, strict=True)

    @field_validator("command")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value


class MatcherGroup(BaseModel):
    """Hooks that run when ``matcher`` matches the event's value."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: The values this event can be matched against; a matcher that matches
    #: none of them is a mistake (a typo, a wrong case), reported at load time.
    VALUES: ClassVar[tuple[str, ...]] = ()

    matcher: str | None = None
    hooks: tuple[CommandHook, ...]

    @field_validator("matcher")
    @classmethod
    def _matches_something(cls, matcher: str | None) -> str | None:
        if matcher is None or matcher.strip() in ("", "*"):
            return matcher
        if not _PLAIN_MATCHER.fullmatch(matcher):
            try:
                re.compile(matcher)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression ({exc})") from None
        if cls.VALUES and not any(matcher_matches(matcher, v) for v in cls.VALUES):
            raise ValueError(
                f"{matcher!r} matches none of {', '.join(cls.VALUES)} "
                "(use '*' or leave it empty to match all; matching is case-sensitive)"
            )
        return matcher

    def matches(self, value: str) -> bool:
        return matcher_matches(self.matcher, value)


class CompactMatcherGroup(MatcherGroup):
    """A PreCompact / PostCompact group; the matcher is tested against the trigger."""

    VALUES: ClassVar[tuple[str, ...]] = COMPACT_TRIGGERS


class SessionStartMatcherGroup(MatcherGroup):
    """A SessionStart group; the matcher is tested against the source."""

    VALUES: ClassVar[tuple[str, ...]] = SESSION_START_SOURCES


class HooksSettings(BaseModel):
    """Event name → matcher groups, in the order they run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    PreCompact: tuple[CompactMatcherGroup, ...] = ()
    PostCompact: tuple[CompactMatcherGroup, ...] = ()
    SessionStart: tuple[SessionStartMatcherGroup, ...] = ()

    def groups(self, event: HookEvent) -> tuple[MatcherGroup, ...]:
        if event == "PreCompact":
            return self.PreCompact
        if event == "PostCompact":
            return self.PostCompact
        return self.SessionStart

    def commands(self, event: HookEvent, value: str) -> tuple[CommandHook, ...]:
        """The hooks of ``event`` whose group matches ``value``, in order.

        Identical commands are run once (the first occurrence is kept), as in
        Claude Code: the same hook in the user and the project file is one hook.
        """
        seen: set[str] = set()
        selected: list[CommandHook] = []
        for group in self.groups(event):
            if not group.matches(value):
                continue
            for hook in group.hooks:
                if hook.command not in seen:
                    seen.add(hook.command)
                    selected.append(hook)
        return tuple(selected)


Fsync: TypeAlias = Literal["turn", "record"]
#: Overrides ``store.fsync`` of both settings files.
FSYNC_ENV = "CAIRN_FSYNC"
#: Overrides ``store.url`` of both settings files.
STORE_URL_ENV = "CAIRN_STORE_URL"
#: The URL schemes of a PostgreSQL connection string (libpq's).
STORE_URL_SCHEMES = ("postgresql://", "postgres://")


class StoreSettings(BaseModel):
    """Where transcripts live and how they reach the disk (README, *Durability*)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: ``turn``: records are written at once (a killed process loses nothing
    #: acknowledged) and fsynced at each turn end and each compaction (a power
    #: cut can lose the current turn); ``record``: every record is fsynced
    #: before it counts as written (a power cut loses nothing acknowledged).
    fsync: Fsync = "turn"
    #: A PostgreSQL URL (``postgresql://…``): sessions live in that database
    #: (``cairn[postgres]``) instead of JSONL files under the Cairn home.
    url: str | None = None

    @field_validator("url")
    @classmethod
    def _postgres_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(STORE_URL_SCHEMES):
            raise ValueError("must be a PostgreSQL URL (postgresql://user@host/database)")
        return value


class Settings(BaseModel):
    """The whole of ``settings.json``; every section is optional."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hooks: HooksSettings = Field(default_factory=HooksSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    #: MCP servers by name, Claude Code's shape (``cairn.agent.mcp.config``).
    mcpServers: McpServers = Field(default_factory=dict)  # noqa: N815  (Claude Code's key)
    #: Tools that run without asking (``cairn.agent.tools.permissions``).
    permissions: PermissionsSettings = Field(default_factory=PermissionsSettings)
    compaction: CompactionConfig = Field(default_factory=CompactionConfig)
    #: The settings layer of the one model configuration (``cairn.provider.ModelEntry``).
    model: ModelEntry | None = None
    #: Corrections and additions to the model registry, by model name or pattern.
    models: dict[ModelName, ModelOverride] = Field(default_factory=dict)


def user_settings_path(home: Path | None = None) -> Path:
    return (home if home is not None else cairn_home()) / SETTINGS_FILE


def project_settings_path(workspace: Path) -> Path:
    return workspace / PROJECT_DIR / SETTINGS_FILE


def load_settings(workspace: Path, home: Path | None = None) -> Settings:
    """User settings, then project settings (project wins), then ``CAIRN_FSYNC`` and
    ``CAIRN_STORE_URL``."""
    return _with_environment(_load_files(workspace, home))


def _with_environment(settings: Settings) -> Settings:
    store = settings.store
    fsync = os.environ.get(FSYNC_ENV, "")
    if fsync:
        if fsync not in get_args(Fsync):
            raise SettingsError(f"{FSYNC_ENV} must be 'turn' or 'record', got {fsync!r}")
        store = store.model_copy(update={"fsync": cast(Fsync, fsync)})
    url = os.environ.get(STORE_URL_ENV, "")
    if url:
        if not url.startswith(STORE_URL_SCHEMES):
            raise SettingsError(
                f"{STORE_URL_ENV} must be a PostgreSQL URL (postgresql://user@host/database), "
                f"got {mask_url(url)!r}"
            )
        store = store.model_copy(update={"url": url})
    if store is settings.store:
        return settings
    return settings.model_copy(update={"store": store})


def _load_files(workspace: Path, home: Path | None) -> Settings:
    user_path = user_settings_path(home)
    project_path = project_settings_path(workspace)
    user_raw = read_settings_file(user_path)
    # Running in the home folder's parent makes both paths one file: read it once,
    # or every hook in it would run twice.
    project_raw = None if _same_file(user_path, project_path) else read_settings_file(project_path)
    if user_raw is None or project_raw is None:
        raw = user_raw if project_raw is None else project_raw
        return Settings() if raw is None else Settings.model_validate(raw)
    merged = merge_raw_settings(user_raw, project_raw)
    try:
        return Settings.model_validate(merged)
    except ValidationError as exc:
        # Each file was valid alone; only a cross-field rule (handoff_ratio <=
        # compact_ratio) can fail once they are combined.
        where = f"{project_path} combined with {user_path}"
        raise SettingsError(describe_validation_error(where, exc, Settings), project_path) from None


def read_settings_file(path: Path) -> dict[str, Any] | None:
    """One settings file as validated raw JSON, or ``None`` when it does not exist."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"cannot read settings file {path}: {exc}", path) from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SettingsError(
            f"invalid JSON in {path} at line {exc.lineno}, column {exc.colno}: {exc.msg}", path
        ) from None
    if not isinstance(raw, dict):
        raise SettingsError(
            f"invalid settings in {path}: the top level must be a JSON object, "
            f"not {json_kind(raw)}",
            path,
        )
    try:
        Settings.model_validate(raw)
    except ValidationError as exc:
        raise SettingsError(describe_validation_error(str(path), exc, Settings), path) from None
    return raw


def merge_raw_settings(user: Mapping[str, Any], project: Mapping[str, Any]) -> dict[str, Any]:
    """Combine two validated raw settings objects; see the module docstring for the rules."""
    merged = {**user, **project}
    if "hooks" in user and "hooks" in project:
        hooks: dict[str, list[Any]] = {ev: list(groups) for ev, groups in user["hooks"].items()}
        for event, groups in project["hooks"].items():
            hooks[event] = [*hooks.get(event, []), *groups]
        merged["hooks"] = hooks
    if "compaction" in user and "compaction" in project:
        merged["compaction"] = {**user["compaction"], **project["compaction"]}
    if "mcpServers" in user and "mcpServers" in project:
        merged["mcpServers"] = {**user["mcpServers"], **project["mcpServers"]}
    if "permissions" in user and "permissions" in project:
        allow = [*user["permissions"].get("allow", []), *project["permissions"].get("allow", [])]
        merged["permissions"] = {
            **user["permissions"],
            **project["permissions"],
            "allow": list(dict.fromkeys(allow)),
        }
    if "models" in user and "models" in project:
        models: dict[str, dict[str, Any]] = {k: dict(v) for k, v in user["models"].items()}
        for name, entry in project["models"].items():
            models[name] = {**models.get(name, {}), **entry}
        merged["models"] = models
    return merged


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False
