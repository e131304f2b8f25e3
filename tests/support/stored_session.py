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


def add_tasks_and_artifacts(home: Path, workspace: Path, session_id: str = "s1") -> list[str]:
    """Give a stored session two background tasks' transcripts and artifact files, as a
    session that ran tasks and saved outputs has; the artifacts' paths, relative to its folder.
    """
    stores = JsonlStoreFactory(home)
    for task in ("task_1", "task_2"):
        header = SessionRecord(task, normalize_workspace(workspace))
        with stores.create_subagent(workspace, session_id, header) as store:
            store.append(MessageRecord(user(f"the prompt of {task}")))
            store.append(MessageRecord(assistant(f"the report of {task}")))
    folder = stores.artifacts_dir(workspace, session_id)
    files = {
        "user-messages/m1.txt": "a long paste, saved in full\n",
        "tool-outputs/call_1.txt": "parser.py:3\n" * 500,
        "subagents/task_1/tool-outputs/call_9.txt": "a task's own saved output\n",
    }
    for relative, text in files.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(text)
    return sorted(files)
