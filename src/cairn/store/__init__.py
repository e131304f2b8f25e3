"""Durable session transcripts: records, the JSONL store, and the UI and API views."""

from cairn.store.base import (
    NotATranscriptError,
    StoreError,
    Transcript,
    TranscriptHeaderError,
    TranscriptLockedError,
    TranscriptStore,
    TranscriptWriteError,
)
from cairn.store.jsonl import JsonlTranscriptStore, read_transcript
from cairn.store.paths import cairn_home, new_session_id, session_path, workspace_slug
from cairn.store.records import (
    MAX_JSON_DEPTH,
    MAX_REPLACEMENT_BYTES,
    MAX_REPLACEMENT_MESSAGES,
    CheckpointError,
    CompactionRecord,
    ContentEdit,
    ContextEditRecord,
    ErrorRecord,
    HandoffRecord,
    MessageRecord,
    Record,
    RecordFormatError,
    SessionRecord,
    StateRecord,
)
from cairn.store.views import ApiView, api_view, ui_view

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_REPLACEMENT_BYTES",
    "MAX_REPLACEMENT_MESSAGES",
    "ApiView",
    "CheckpointError",
    "CompactionRecord",
    "ContentEdit",
    "ContextEditRecord",
    "ErrorRecord",
    "HandoffRecord",
    "JsonlTranscriptStore",
    "MessageRecord",
    "NotATranscriptError",
    "Record",
    "RecordFormatError",
    "SessionRecord",
    "StateRecord",
    "StoreError",
    "Transcript",
    "TranscriptHeaderError",
    "TranscriptLockedError",
    "TranscriptStore",
    "TranscriptWriteError",
    "api_view",
    "cairn_home",
    "new_session_id",
    "read_transcript",
    "session_path",
    "ui_view",
    "workspace_slug",
]
