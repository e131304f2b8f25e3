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
import typing as _typing

from cairn.lazy import lazy_exports as _lazy_exports

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
    from cairn.agent.permissions import (
        PERMISSION_DECISIONS,
        PERMISSION_OPTIONS,
        PermissionDecision,
    )
    from cairn.agent.rewind import (
        PromptPoint,
        RestoredFiles,
        RewindPointError,
    )
    from cairn.agent.runtime import (
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

#: The names loaded on first use, by the module each comes from.
_EXPORTS: _typing.Final[dict[str, tuple[str, ...]]] = {
    "cairn.agent.commands": ("COMMANDS", "HELP", "CommandOutcome", "parse_command"),
    "cairn.agent.events": (
        "SESSION_MODES",
        "CompactBlockAdded",
        "CompactionContentUpdate",
        "CompactionStateChange",
        "ErrorEvent",
        "Event",
        "MessageAdded",
        "MessageUpdated",
        "ModeChange",
        "Notice",
        "PermissionRequested",
        "QueueChange",
        "QueuedPrompt",
        "SessionMode",
        "SessionStatus",
        "StatusChange",
        "SummaryPrepared",
        "ToolFinished",
        "ToolStarted",
        "UsageUpdate",
        "event_to_wire",
        "message_to_wire",
    ),
    "cairn.agent.facade": (
        "AgentSession",
        "MeterReading",
        "RewindOutcome",
        "SendOutcome",
        "SessionBusyError",
        "SessionUsage",
    ),
    "cairn.agent.loop": ("StoreFailedError", "TurnError", "TurnResult", "store_failure"),
    "cairn.agent.paste": (
        "FOLDED_HEAD_LINES",
        "PASTE_CHARS",
        "PASTE_LINES",
        "is_large_paste",
        "paste_label",
    ),
    "cairn.agent.rewind": ("PromptPoint", "RestoredFiles", "RewindPointError"),
    "cairn.agent.permissions": ("PERMISSION_DECISIONS", "PERMISSION_OPTIONS", "PermissionDecision"),
    "cairn.agent.runtime": ("Runtime", "Session", "SessionInfo"),
    "cairn.agent.settings": ("Settings", "SettingsError", "load_settings"),
    "cairn.agent.shell": ("ShellOutcome",),
    "cairn.agent.tools.base": ("PermissionMode",),
    "cairn.agent.tools.host_io": ("HostIOError", "TerminalEnd", "TerminalOutcome"),
}
_LAZY: _typing.Final[dict[str, str]] = {
    name: module for module, names in _EXPORTS.items() for name in names
}


# Hidden from type checkers, which see the imports above instead.
if not _typing.TYPE_CHECKING:
    __getattr__, __dir__ = _lazy_exports(__name__, _LAZY)
