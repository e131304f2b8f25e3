"""The agent runtime: settings, hooks, sessions, tools and the loop (DESIGN §7).

This layer sits above ``cairn.context``: it implements the protocols the
pipeline asks for (``CompactionHooks``, …) with real processes and files.

What a surface needs is exported here, and surfaces import it from here: the
facade every surface drives (``AgentSession``, ``cairn.agent.facade``) with
what it returns, the runtime that hosts the sessions (``Runtime``,
``cairn.agent.runtime``), the events, the commands, the settings entry
points, the permission answers and the host I/O a surface may provide.

The runtime imports the OpenAI SDK; these names load on first use (PEP 562),
so reading the settings (``cairn.agent.settings``) stays quick.
"""

# The standard modules go under private names: every public name here is Cairn's.
import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from cairn.agent.commands import (
        COMMANDS,
        HELP,
        CommandOutcome,
        parse_command,
    )
    from cairn.agent.events import (
        SESSION_MODES,
        CompactBlockAdded,
        CompactionContentUpdate,
        CompactionStateChange,
        ErrorEvent,
        Event,
        MessageAdded,
        MessageUpdated,
        ModeChange,
        Notice,
        PermissionRequested,
        QueueChange,
        QueuedPrompt,
        SessionMode,
        SessionStatus,
        StatusChange,
        SummaryPrepared,
        ToolFinished,
        ToolStarted,
        UsageUpdate,
        event_to_wire,
        message_to_wire,
    )
    from cairn.agent.facade import (
        AgentSession,
        MeterReading,
        RewindOutcome,
        SendOutcome,
        SessionBusyError,
        SessionUsage,
    )
    from cairn.agent.loop import (
        StoreFailedError,
        TurnError,
        TurnResult,
        store_failure,
    )
    from cairn.agent.paste import (
        FOLDED_HEAD_LINES,
        PASTE_CHARS,
        PASTE_LINES,
        is_large_paste,
        paste_label,
    )
    from cairn.agent.rewind import (
        PromptPoint,
        RestoredFiles,
        RewindPointError,
    )
    from cairn.agent.runtime import (
        PERMISSION_DECISIONS,
        PERMISSION_OPTIONS,
        PermissionDecision,
        Runtime,
        Session,
        SessionInfo,
    )
    from cairn.agent.settings import (
        Settings,
        SettingsError,
        load_settings,
    )
    from cairn.agent.shell import (
        ShellOutcome,
    )
    from cairn.agent.tools.base import (
        PermissionMode,
    )
    from cairn.agent.tools.host_io import (
        HostIOError,
        TerminalEnd,
        TerminalOutcome,
    )

#: The names loaded on first use, and the module each comes from.
_LAZY: _typing.Final[dict[str, str]] = {
    "COMMANDS": "cairn.agent.commands",
    "HELP": "cairn.agent.commands",
    "CommandOutcome": "cairn.agent.commands",
    "parse_command": "cairn.agent.commands",
    "SESSION_MODES": "cairn.agent.events",
    "CompactBlockAdded": "cairn.agent.events",
    "CompactionContentUpdate": "cairn.agent.events",
    "CompactionStateChange": "cairn.agent.events",
    "ErrorEvent": "cairn.agent.events",
    "Event": "cairn.agent.events",
    "MessageAdded": "cairn.agent.events",
    "MessageUpdated": "cairn.agent.events",
    "ModeChange": "cairn.agent.events",
    "Notice": "cairn.agent.events",
    "PermissionRequested": "cairn.agent.events",
    "QueueChange": "cairn.agent.events",
    "QueuedPrompt": "cairn.agent.events",
    "SessionMode": "cairn.agent.events",
    "SessionStatus": "cairn.agent.events",
    "StatusChange": "cairn.agent.events",
    "SummaryPrepared": "cairn.agent.events",
    "ToolFinished": "cairn.agent.events",
    "ToolStarted": "cairn.agent.events",
    "UsageUpdate": "cairn.agent.events",
    "event_to_wire": "cairn.agent.events",
    "message_to_wire": "cairn.agent.events",
    "AgentSession": "cairn.agent.facade",
    "MeterReading": "cairn.agent.facade",
    "RewindOutcome": "cairn.agent.facade",
    "SendOutcome": "cairn.agent.facade",
    "SessionBusyError": "cairn.agent.facade",
    "SessionUsage": "cairn.agent.facade",
    "StoreFailedError": "cairn.agent.loop",
    "TurnError": "cairn.agent.loop",
    "TurnResult": "cairn.agent.loop",
    "store_failure": "cairn.agent.loop",
    "FOLDED_HEAD_LINES": "cairn.agent.paste",
    "PASTE_CHARS": "cairn.agent.paste",
    "PASTE_LINES": "cairn.agent.paste",
    "is_large_paste": "cairn.agent.paste",
    "paste_label": "cairn.agent.paste",
    "PromptPoint": "cairn.agent.rewind",
    "RestoredFiles": "cairn.agent.rewind",
    "RewindPointError": "cairn.agent.rewind",
    "PERMISSION_DECISIONS": "cairn.agent.runtime",
    "PERMISSION_OPTIONS": "cairn.agent.runtime",
    "PermissionDecision": "cairn.agent.runtime",
    "Runtime": "cairn.agent.runtime",
    "Session": "cairn.agent.runtime",
    "SessionInfo": "cairn.agent.runtime",
    "Settings": "cairn.agent.settings",
    "SettingsError": "cairn.agent.settings",
    "load_settings": "cairn.agent.settings",
    "ShellOutcome": "cairn.agent.shell",
    "PermissionMode": "cairn.agent.tools.base",
    "HostIOError": "cairn.agent.tools.host_io",
    "TerminalEnd": "cairn.agent.tools.host_io",
    "TerminalOutcome": "cairn.agent.tools.host_io",
}


# Hidden from type checkers, which see the imports above instead.
if not _typing.TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value: object = getattr(_importlib.import_module(module), name)
        globals()[name] = value  # the next lookup is an ordinary attribute
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "COMMANDS",
    "FOLDED_HEAD_LINES",
    "HELP",
    "PASTE_CHARS",
    "PASTE_LINES",
    "PERMISSION_DECISIONS",
    "PERMISSION_OPTIONS",
    "SESSION_MODES",
    "AgentSession",
    "CommandOutcome",
    "CompactBlockAdded",
    "CompactionContentUpdate",
    "CompactionStateChange",
    "ErrorEvent",
    "Event",
    "HostIOError",
    "MessageAdded",
    "MessageUpdated",
    "MeterReading",
    "ModeChange",
    "Notice",
    "PermissionDecision",
    "PermissionMode",
    "PermissionRequested",
    "PromptPoint",
    "QueueChange",
    "QueuedPrompt",
    "RestoredFiles",
    "RewindOutcome",
    "RewindPointError",
    "Runtime",
    "SendOutcome",
    "Session",
    "SessionBusyError",
    "SessionInfo",
    "SessionMode",
    "SessionStatus",
    "SessionUsage",
    "Settings",
    "SettingsError",
    "ShellOutcome",
    "StatusChange",
    "StoreFailedError",
    "SummaryPrepared",
    "TerminalEnd",
    "TerminalOutcome",
    "ToolFinished",
    "ToolStarted",
    "TurnError",
    "TurnResult",
    "UsageUpdate",
    "event_to_wire",
    "is_large_paste",
    "load_settings",
    "message_to_wire",
    "parse_command",
    "paste_label",
    "store_failure",
]
