"""A session's config options (``configOptions``): what an editor shows as the session's
settings and changes with ``session/set_config_option``.

Four selects, each read from and written to the session's ``Runtime`` (the
mode through its ``AgentSession``), so a change takes effect on the live
session (the pipeline's input budget follows the window at once) and on the
sessions ``/clear`` opens after it:

- ``model``: the one configured model (Cairn knows no other to offer);
- ``mode``: the session's mode (``ask``, ``accept-edits``, ``bypass``,
  ``plan``), the same setting ``session/set_mode`` changes;
- ``context_window``: the window the compaction thresholds are measured
  against — the configured one and the usual sizes around it;
- ``keep_rounds``: the latest API rounds a compaction keeps word for word.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from acp.exceptions import RequestError
from acp.schema import SessionConfigOptionSelect, SessionConfigSelectOption

from cairn.agent import SESSION_MODES, AgentSession, Runtime
from cairn.provider.config import MIN_CONTEXT_WINDOW

INVALID_PARAMS: Final = -32602

MODE_NAMES: Final[dict[str, tuple[str, str]]] = {
    "ask": ("Ask", "Ask before every edit and command"),
    "accept-edits": ("Accept edits", "Edit files in the workspace; ask before commands"),
    "bypass": ("Bypass permissions", "Run everything without asking"),
    "plan": ("Plan", "Explore read-only and write a plan; no edits or commands"),
}
assert tuple(MODE_NAMES) == SESSION_MODES

#: The windows offered beside the configured one (common model sizes).
WINDOWS: Final = (8_192, 16_384, 32_768, 65_536, 131_072, 200_000, 262_144, 1_000_000)
#: The ``keep_rounds`` values offered (``CompactionConfig`` allows up to 64; these are
#: the ones a person picks from a menu).
KEEP_ROUNDS: Final = tuple(range(6))
#: The value of ``context_window`` when the configured window is unknown.
UNKNOWN: Final = "unknown"

OPTION_IDS: Final = ("model", "mode", "context_window", "keep_rounds")


def _window_name(window: int) -> str:
    if window % 1_000_000 == 0:
        return f"{window // 1_000_000}M tokens"
    if window % 1_024 == 0:
        return f"{window // 1_024}k tokens"
    return f"{window:,} tokens"


def _select(
    option_id: str,
    name: str,
    description: str,
    current: str,
    choices: list[tuple[str, str]],
    category: str | None = None,
) -> SessionConfigOptionSelect:
    return SessionConfigOptionSelect(
        type="select",
        id=option_id,
        name=name,
        description=description,
        category=category,  # type: ignore[arg-type]  # one of the schema's literals
        current_value=current,
        options=[SessionConfigSelectOption(value=value, name=label) for value, label in choices],
    )


def config_options(runtime: Runtime, mode: str) -> list[SessionConfigOptionSelect]:
    """Every option with its current value (``mode``: the session's, ``AgentSession.mode``)."""
    model = runtime.model
    window = model.context_window
    windows = sorted({*WINDOWS, *([window] if window else [])})
    window_choices = [(str(w), _window_name(w)) for w in windows]
    if window is None:
        window_choices.insert(0, (UNKNOWN, "Unknown (no automatic compaction)"))
    keep = runtime.settings.compaction.keep_rounds
    keeps = sorted({*KEEP_ROUNDS, keep})
    return [
        _select(
            "model",
            "Model",
            "The configured model (settings, CAIRN_MODEL or --model)",
            model.model,
            [(model.model, model.model)],
            "model",
        ),
        _select(
            "mode",
            "Permission mode",
            "What runs without asking",
            mode,
            [(each, MODE_NAMES[each][0]) for each in SESSION_MODES],
            "mode",
        ),
        _select(
            "context_window",
            "Context window",
            "The window compaction is measured against (the input budget follows it)",
            str(window) if window else UNKNOWN,
            window_choices,
        ),
        _select(
            "keep_rounds",
            "Rounds kept by compaction",
            "The latest request rounds a compaction keeps word for word",
            str(keep),
            [(str(k), str(k)) for k in keeps],
        ),
    ]


def set_option(agent: AgentSession, runtime: Runtime, option_id: str, value: str | bool) -> None:
    """Apply one option to the session; ``RequestError`` (invalid params) if it is not one."""
    offered = {o.id: o for o in config_options(runtime, agent.mode)}
    option = offered.get(option_id)
    if option is None:
        known = ", ".join(OPTION_IDS)
        raise RequestError(INVALID_PARAMS, f"unknown config option {option_id!r}; one of {known}")
    values = [
        choice.value for choice in option.options if isinstance(choice, SessionConfigSelectOption)
    ]
    if not isinstance(value, str) or value not in values:
        raise RequestError(
            INVALID_PARAMS,
            f"{option_id} cannot be {value!r}; one of {', '.join(values)}",
        )
    if option_id == "mode":
        agent.set_mode(value)  # type: ignore[arg-type]  # checked against the modes
    elif option_id == "context_window":
        if value != UNKNOWN:
            window = int(value)
            assert window >= MIN_CONTEXT_WINDOW
            runtime.reconfigure(model=replace(runtime.model, context_window=window))
    elif option_id == "keep_rounds":
        compaction = runtime.settings.compaction.model_copy(update={"keep_rounds": int(value)})
        runtime.reconfigure(compaction=compaction)
    # ``model``: the one configured model is the only value, so nothing changes.
