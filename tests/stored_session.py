"""A small stored session (tool calls, a compaction, state) for the tests that move sessions."""

from __future__ import annotations

from pathlib import Path

from cairn.messages import Message, MessageMeta, ToolCall, Usage, assistant, user
from cairn.store import (
    CompactionRecord,
    JsonlStoreFactory,
    MessageRecord,
    SessionRecord,
    StateRecord,
)
from cairn.store.paths import normalize_workspace


def make_session(home: Path, workspace: Path, session_id: str = "s1") -> Path:
    """A session with tool calls, a compaction and state, written through the store."""
    stores = JsonlStoreFactory(home)
    store = stores.create(workspace, SessionRecord(session_id, normalize_workspace(workspace)))
    with store:
        store.append(StateRecord("session", {"plan_mode": False}))
        store.append(MessageRecord(user("find the bug in parser.py")))
        call = ToolCall("call_1", "grep", '{"pattern": "def parse"}')
        store.append(
            MessageRecord(
                Message(
                    role="assistant",
                    content="looking",
                    tool_calls=(call,),
                    meta=MessageMeta(usage=Usage(900, 20, 920)),
                )
            )
        )
        store.append(
            MessageRecord(Message(role="tool", content="parser.py:3", tool_call_id="call_1"))
        )
        store.save_compaction(
            CompactionRecord("manual", "fallback", 920, 100, "the ledger", (user("ledger"),))
        )
        store.append(MessageRecord(user("now fix it")))
        store.append(MessageRecord(assistant("fixed")))
    return store.path
