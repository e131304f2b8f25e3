"""A recorded session, as every importer hands it to the replay engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cairn.errors import FormatError
from cairn.messages import JSONObject, Message


class SessionImportError(FormatError):
    """A file could not be imported; the message names the format and the line or key."""


@dataclass(frozen=True)
class RecordedSession:
    """One conversation in Cairn's model.

    ``system`` and ``tools`` are the fixed context every request carries;
    ``messages`` holds user, assistant and tool messages in recorded order,
    every tool call followed by its results (an importer pairs them, or
    reports what it could not pair). Each assistant message is one request
    the recorded agent made. ``format`` names the importer that read it
    (``""`` for a session built in code): the replay looks up what that
    format's recordings leave out of the fixed context.
    """

    name: str
    messages: tuple[Message, ...]
    system: tuple[Message, ...] = ()
    tools: tuple[JSONObject, ...] = ()
    format: str = ""


@dataclass(frozen=True)
class ImportResult:
    source: Path
    format: str
    sessions: tuple[RecordedSession, ...]
    #: What was skipped or repaired, one line each, naming the line or key.
    warnings: tuple[str, ...] = field(default=())
