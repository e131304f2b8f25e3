"""The root of every exception Cairn raises on purpose, and its families.

``except CairnError`` catches them all (a bad setting, a store that cannot
open, a provider error, a request that cannot fit, a compaction that failed),
and never a bug: a ``TypeError`` from Cairn's own code is not a ``CairnError``.
Each error keeps its standard base too (``ValueError``, ``RuntimeError``, …),
so code that caught those keeps working.

The tree, as httpx groups its errors (each leaf lives with the code that
raises it; ``tests/test_public_api.py`` checks this list against the code):

- ``CairnError``
  - ``FormatError`` (``ValueError``) — bad input: ``MessageFormatError``,
    ``RecordFormatError``, ``CheckpointFormatError`` (a record that may not be
    a checkpoint), ``EventFormatError``, ``FrameError`` (a browser frame),
    ``RecordError`` and ``SessionImportError`` (an imported session),
    ``FixedContextError``, ``JSONDepthError``, ``SetupError`` (a surface's
    arguments).
  - ``ContextError`` (``RuntimeError``) — the context pipeline refused or
    could not finish, each with a stable ``code``: ``RequestTooLargeError``,
    ``ContextWindowExceededError``, ``CompactionFailedError`` (and
    ``NothingToCompactError``), ``CompactionBlockedError``,
    ``CompactionCancelledError``, ``SummarizerError``.
  - ``ToolError`` (``ValueError``) — a tool refused its arguments or a path:
    ``ToolArgumentError``, ``PathOutsideWorkspaceError``,
    ``OutsideRootsError``, ``SymlinkRefusedError``.
  - ``StoreError`` (``RuntimeError``) — the transcript could not be read or
    written: ``TranscriptLockedError``, ``TranscriptWriteError``,
    ``NotATranscriptError``, ``CheckpointWriteError`` (the compaction's save).
  - ``ProviderError`` (``RuntimeError``) — the model's server refused or
    failed: ``ContextLimitError`` (its "too long"), ``ProviderTimeoutError``;
    ``StreamReportedError`` is an error the stream itself reported.
  - ``TurnError`` (``RuntimeError``) — a turn ended on one of the above;
    ``StoreFailedError`` when the transcript could not be written.
  - Standing alone, each keeping its standard base: settings, MCP, model
    configuration and registry errors (``ValueError``); the host's I/O and the
    tool budget's folder (``OSError``); a busy session, a subagent, the
    tokenizer, the plot (``RuntimeError``); a rewind point (``LookupError``);
    ``InspectError``, ``ReplayUsageError``.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["CairnError", "ContextError", "FormatError", "ToolError"]


class CairnError(Exception):
    """Something Cairn reports to its user; the message says what and, where it can, what to do."""


class FormatError(CairnError, ValueError):
    """Input of the wrong shape: the message names what was expected and where."""


class ContextError(CairnError, RuntimeError):
    """The context pipeline refused a request or a compaction; nothing was lost.

    ``code`` is stable and is what an error event carries for it.
    """

    code: ClassVar[str] = "context_error"


class ToolError(CairnError, ValueError):
    """A tool refused its arguments or a path; the model is told why and may try again."""
