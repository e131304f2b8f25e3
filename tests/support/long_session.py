"""A long past session for the surfaces' tests: ``write_long_session(home, workspace)``.

Written straight through the JSONL store, as a long session would have left it:
``pairs`` questions and answers (``question n`` / ``answer n``) with one
compaction after pair ``pairs // 2``, whose block sits between the two halves
in the UI view (``2 * pairs + 1`` entries).
"""

from __future__ import annotations

from pathlib import Path

from cairn.messages import KIND_COMPACT_SUMMARY, Message, MessageMeta, assistant, user
from cairn.store import CompactionRecord, JsonlStoreFactory, MessageRecord, SessionRecord

#: The session's id.
LONG = "long"
#: The compact block's text in the UI view (the record's summary).
BLOCK_TEXT = "the first half"


def write_long_session(home: Path, workspace: Path, pairs: int = 5_000) -> list[str]:
    """Write the session; return the ids of its UI view's entries, in order."""
    ids: list[str] = []
    stores = JsonlStoreFactory(home)
    with stores.create(workspace, SessionRecord(LONG, str(workspace))) as store:
        for n in range(pairs):
            for message in (user(f"question {n}"), assistant(f"answer {n}")):
                store.append(MessageRecord(message))
                ids.append(message.id)
            if n == pairs // 2:
                block = Message(
                    "user",
                    "Summary of the first half.",
                    meta=MessageMeta(
                        kind=KIND_COMPACT_SUMMARY,
                        extra={"pre_tokens": 40_000, "post_tokens": 900, "strategy": "llm"},
                    ),
                )
                record = CompactionRecord("auto", "llm", 40_000, 900, BLOCK_TEXT, (block,))
                store.save_compaction(record)
                ids.append(record.id)
    return ids
