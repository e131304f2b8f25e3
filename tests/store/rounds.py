"""Small real rounds for the store tests: a user turn, or a tool round with its results."""

from __future__ import annotations

from cairn.messages import Message, ToolCall, Usage, assistant, new_id, tool_result, user


def tool_round(n_calls: int = 1, *, text: str = "result", tag: str = "") -> list[Message]:
    """An assistant message with ``n_calls`` parallel calls and all their results."""
    calls = [
        ToolCall(new_id("call"), "read_file", f'{{"path": "f{i}{tag}.py"}}') for i in range(n_calls)
    ]
    head = assistant(f"reading {tag}", calls, usage=Usage(100, 10, 110))
    return [head, *(tool_result(c.id, f"{text} {c.id}") for c in calls)]


def chat_round(text: str) -> list[Message]:
    return [user(text)]
