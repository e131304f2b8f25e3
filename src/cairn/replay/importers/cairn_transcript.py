"""``cairn``: Cairn's own session transcript (JSON Lines of ``{"v": 1, "type": …}`` records).

One session, named by the header's ``session_id``. The replay gets the
conversation a person saw, in file order: every ``message`` record's message
(ids, usage and flags kept as stored), except

- hidden messages (the handoff reminder and other model-only notes), and
- synthetic user or assistant messages the host wrote (compact blocks,
  restorations, plan reminders, skill text …): the replay's own pipeline
  writes its own. Synthetic *tool* results are kept, since they answer calls.

Compaction checkpoints, context edits, state and error records are the
recorded run's decisions, not conversation, and are skipped — so the replay
sees the whole session as if it had never been compacted. System messages go
to ``system``. Damaged lines are skipped with the store's own warning.
"""

from __future__ import annotations

from cairn.replay.importers._session_builder import Loaded, SessionBuilder
from cairn.replay.importers._source import IdMaker, Source, pick_sessions, short
from cairn.replay.session import SessionImportError
from cairn.store.jsonl.reader import parse_transcript
from cairn.store.records import MessageRecord

FORMAT = "cairn"


def load(source: Source, session: int | None) -> Loaded:
    pick_sessions(FORMAT, 1, session)
    transcript, _ = parse_transcript(source.path, source.data)
    # The store's warnings quote what it found; cut them to one short line.
    warnings = tuple(short(w, 1000) for w in transcript.warnings)
    if not transcript.records:
        reason = warnings[0] if warnings else "no record"
        raise SessionImportError(f"{FORMAT}: {reason.removesuffix('; skipped')}")
    builder = SessionBuilder(transcript.session_id or source.path.stem, IdMaker(source.digest, 0))
    for record in transcript.records:
        if not isinstance(record, MessageRecord):
            continue
        message = record.message
        if message.meta.hidden or (message.meta.synthetic and message.role != "tool"):
            continue
        builder.add(message, f"message {message.id}")
    return Loaded((builder.build(),), (*warnings, *builder.warnings))
