"""The root of every exception Cairn raises on purpose, and its families.

``except CairnError`` catches them all (a bad setting, a store that cannot
open, a provider error, a request that cannot fit, a compaction that failed),
and never a bug: a ``TypeError`` from Cairn's own code is not a ``CairnError``.
Each error keeps its standard base too (``ValueError``, ``RuntimeError``, …),
so code that caught those keeps working.

The tree, as httpx groups its errors (each leaf lives with the code that
raises it; ``tests/test_public_api.py`` checks every one derives from here):

- ``CairnError``
  - ``FormatError`` (``ValueError``) — bad input of any kind: a message, a
    stored record, a checkpoint, an event, a browser frame, an imported
    session, JSON nested too deep.
  - ``ContextError`` (``RuntimeError``) — the context pipeline refused or
    could not finish: the request cannot fit, the compaction failed, was
    blocked by a hook or cancelled. Each carries a stable ``code``.
  - ``ToolError`` — a tool refused its arguments or a path.
  - ``StoreError`` (``cairn.store``) — the transcript could not be read or
    written; ``CheckpointWriteError`` is the compaction's save failing.
  - ``ProviderError`` (``cairn.provider``) — the model's server refused or
    failed; ``ContextLimitError`` is its "too long".
  - ``TurnError`` (``cairn.agent``) — a turn ended on one of the above.
  - settings, model configuration, tokenizer, plot and usage errors.
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
