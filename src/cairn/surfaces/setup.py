"""What every surface does before it runs: the flags they share, the model, the runtime.

``cairn -p``, the terminal app, ``cairn acp`` and ``cairn web`` take the same
model, permission and instructions flags (``SurfaceArgs``) and resolve the
model the same way (``load_cli_model``: settings, then the environment, then
the flags), so every surface agrees on every setting. A setup failure is one
line on stderr and an exit code (``fail``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from cairn.agent import PermissionMode, Runtime, Settings, SettingsError, load_settings
from cairn.errors import FormatError
from cairn.provider import ChatProvider, ModelConfig, ModelConfigError, ModelEntry, resolve_with_env
from cairn.provider.config import MIN_CONTEXT_WINDOW
from cairn.wire_apis import WireAPI

EXIT_FAILED = 1
EXIT_USAGE = 2
#: The transcript could not be written (disk full, I/O error, database lost): what was
#: saved before is kept, and the one line on stderr says how to resume.
EXIT_STORE = 3

#: What ``cairn`` says when neither settings, the environment nor a flag names a model.
NO_MODEL = (
    "no model configured: set CAIRN_MODEL (and OPENAI_BASE_URL, OPENAI_API_KEY), "
    'or a "model" entry in settings.json'
)


class SetupError(FormatError):
    """The settings or the flags give no usable model: one line for stderr."""


@dataclass(frozen=True, kw_only=True)
class ModelFlags:
    """``--model``, ``--context-window``, ``--max-output-tokens`` and ``--api``."""

    model: str | None = None
    context_window: int | None = None
    max_output_tokens: int | None = None
    #: ``--api``: the wire API (``cairn.wire_apis``).
    api: WireAPI | None = None


@dataclass(frozen=True, kw_only=True)
class SurfaceArgs(ModelFlags):
    """The flags every surface takes; each surface's arguments add their own."""

    permission_mode: PermissionMode = "accept-edits"
    #: Read AGENTS.md / CLAUDE.md (``--no-instructions``: false).
    instructions: bool = True
    workspace: Path = Path()


def load_cli_model(
    workspace: Path, flags: ModelFlags = ModelFlags()
) -> tuple[Settings, ModelConfig]:
    """The settings of ``workspace`` and the model, resolved the same way by every command."""
    try:
        settings = load_settings(workspace)
        resolved = resolve_cli_model(settings, flags)
    except (SettingsError, ModelConfigError) as exc:
        raise SetupError(str(exc)) from exc
    if resolved is None:
        raise SetupError(NO_MODEL)
    return settings, resolved


def resolve_cli_model(settings: Settings, flags: ModelFlags) -> ModelConfig | None:
    """Settings (user, then project), then the environment, then the flags: the last wins.

    Beneath them, the model registry with the settings' ``models`` gives a known
    model's window and image support (``resolve_model``).
    """
    for flag, value, low in (
        ("--context-window", flags.context_window, MIN_CONTEXT_WINDOW),
        ("--max-output-tokens", flags.max_output_tokens, 1),
    ):
        if value is not None and value < low:
            raise ModelConfigError(f"{flag} must be an integer ≥ {low:,}, got {value}")
    entry = ModelEntry(
        model=flags.model or None,
        context_window=flags.context_window,
        max_output_tokens=flags.max_output_tokens,
        api=flags.api,
    )
    return resolve_with_env(settings.model, entry, models=settings.models)


def open_runtime(
    args: SurfaceArgs, model: ModelConfig, provider: ChatProvider, settings: Settings
) -> Runtime:
    """The runtime of a surface that answers permission questions (``AgentSession.answer``)."""
    return Runtime(
        args.workspace,
        model,
        provider,
        settings=settings,
        permission_mode=args.permission_mode,
        answers_permissions=True,
        instructions=args.instructions,
    )


def one_line(text: str) -> str:
    """``text`` on one line: trailing blanks trimmed, line breaks shown as ``\\n``."""
    return "\\n".join(line.rstrip() for line in text.strip().splitlines())


def fail(message: str, code: int) -> int:
    """Say why on stderr; the exit code."""
    print(message, file=sys.stderr)
    return code
