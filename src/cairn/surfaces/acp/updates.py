"""What a Cairn session looks like in ACP terms: pure functions from messages to updates.

Each function returns one ``session/update`` payload (the ``update`` object,
as JSON). Updates the 0.12 schema knows are built with its models, so the
library checks their shape; the session-compaction updates, stabilised in
the protocol after 0.12, are written by hand from the protocol's text
(``compaction_update`` with ``compactionId``, ``status`` and, once done, the
``summary``; ``compaction_summary_chunk`` with a ``content`` block).

The same functions serve the live stream and ``session/load``'s replay, so
a loaded thread shows what the live one showed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeAlias

from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AvailableCommand,
    AvailableCommandInput,
    AvailableCommandsUpdate,
    ContentToolCallContent,
    CurrentModeUpdate,
    ImageContentBlock,
    PlanEntry,
    TerminalToolCallContent,
    TextContentBlock,
    ToolCallLocation,
    ToolCallProgress,
    ToolCallStart,
    ToolKind,
    UnstructuredCommandInput,
    UserMessageChunk,
)
from acp.schema import UsageUpdate as AcpUsageUpdate
from pydantic import BaseModel

from cairn.messages import KIND_COMPACT_SUMMARY, KIND_ERROR, JSONObject, Message, ToolCall
from cairn.surfaces.labels import compact_label

#: A tool result's text in a ``tool_call_update`` is cut to this many characters.
RESULT_CHARS = 4_000
#: The fallback tool call that shows a compaction to clients without the capability.
COMPACTION_TITLE = "Compacting conversation"

TOOL_KINDS: dict[str, ToolKind] = {
    "read_file": "read",
    "bash_output": "read",
    "task_output": "read",
    "write_file": "edit",
    "edit_file": "edit",
    "list_files": "search",
    "grep": "search",
    "bash": "execute",
    "todo_write": "think",
    "enter_plan_mode": "switch_mode",
    "exit_plan_mode": "switch_mode",
}

#: ``available_commands_update``: what a client offers after ``/``. Handled by Cairn,
#: never sent to the model.
COMMANDS: tuple[tuple[str, str, str | None], ...] = (
    ("compact", "Summarize the conversation now to free context", "what the summary must keep"),
    ("clear", "Start a new session (this one stays on disk)", None),
    ("status", "Model, window, tokens, thresholds and compactions so far", None),
    ("context", "What the next request holds, source by source", None),
    ("cost", "Tokens billed this session and their price", None),
    ("model", "The model in use; with a name, switch to it", "a model name"),
    ("mcp", "MCP servers: their state and their tools", None),
    ("help", "The commands Cairn handles itself", None),
)

_PLAN_STATUSES = ("pending", "in_progress", "completed")

CompactionStatus: TypeAlias = Literal["in_progress", "completed", "failed", "cancelled"]
ToolStatus: TypeAlias = Literal["pending", "in_progress"]


def _json(model: BaseModel) -> JSONObject:
    dumped: JSONObject = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


def _text(text: str) -> TextContentBlock:
    return TextContentBlock(type="text", text=text)


# -- messages --------------------------------------------------------------


def agent_text(text: str) -> JSONObject:
    return _json(AgentMessageChunk(session_update="agent_message_chunk", content=_text(text)))


def agent_thought(text: str) -> JSONObject:
    return _json(AgentThoughtChunk(session_update="agent_thought_chunk", content=_text(text)))


def user_text(text: str) -> JSONObject:
    return _json(UserMessageChunk(session_update="user_message_chunk", content=_text(text)))


def user_image(url: str) -> JSONObject | None:
    """A user message's image (a ``data:`` URL) as the block the editor sent; ``None`` for
    an image Cairn did not get as data (a remote URL from an imported session)."""
    head, comma, data = url.partition(",")
    if not (comma and head.startswith("data:") and head.endswith(";base64")):
        return None
    mime = head.removeprefix("data:").removesuffix(";base64")
    block = ImageContentBlock(type="image", data=data, mime_type=mime)
    return _json(UserMessageChunk(session_update="user_message_chunk", content=block))


@dataclass
class StreamedText:
    """How much of each streaming message went out already, so only the new part is sent.

    Cairn's ``messageUpdated`` carries the text so far; ACP chunks are deltas.
    """

    _sent: dict[str, tuple[int, int]] = field(default_factory=dict)

    def deltas(self, message_id: str, content: str, reasoning: str) -> list[JSONObject]:
        sent_content, sent_reasoning = self._sent.get(message_id, (0, 0))
        out: list[JSONObject] = []
        if len(reasoning) > sent_reasoning:
            out.append(agent_thought(reasoning[sent_reasoning:]))
        if len(content) > sent_content:
            out.append(agent_text(content[sent_content:]))
        self._sent[message_id] = (
            max(sent_content, len(content)),
            max(sent_reasoning, len(reasoning)),
        )
        return out

    def finish(self, message: Message) -> list[JSONObject]:
        """What of the final message did not stream (all of it, from a non-streaming server)."""
        out = self.deltas(message.id, message.text, message.reasoning or "")
        self._sent.pop(message.id, None)
        return out


# -- tool calls ------------------------------------------------------------


def _arguments(call: ToolCall) -> JSONObject:
    try:
        parsed = json.loads(call.arguments or "{}")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def tool_kind(name: str) -> ToolKind:
    return TOOL_KINDS.get(name, "other")


def tool_title(call: ToolCall) -> str:
    """One line a person reads in the editor: ``bash: pytest -q``, ``read_file src/a.py``."""
    args = _arguments(call)
    if call.name == "bash" and isinstance(args.get("command"), str):
        return f"bash: {_one_line(str(args['command']), 120)}"
    for key in ("path", "pattern", "task_id", "prompt"):
        value = args.get(key)
        if isinstance(value, str) and value:
            return f"{call.name} {_one_line(value, 120)}"
    return call.name


def tool_locations(call: ToolCall, workspace: Path) -> list[ToolCallLocation]:
    """The file a call touches, absolute (editors open it and follow along)."""
    args = _arguments(call)
    path = args.get("path")
    if call.name not in ("read_file", "write_file", "edit_file") or not isinstance(path, str):
        return []
    absolute = Path(path) if Path(path).is_absolute() else workspace / path
    offset = args.get("offset")
    line = (
        offset if isinstance(offset, int) and not isinstance(offset, bool) and offset > 0 else None
    )
    return [ToolCallLocation(path=str(absolute), line=line)]


def tool_started(call: ToolCall, workspace: Path, status: ToolStatus = "in_progress") -> JSONObject:
    """The call's ``tool_call``: ``pending`` while it waits for the user's permission."""
    return _json(
        ToolCallStart(
            session_update="tool_call",
            tool_call_id=call.id,
            title=tool_title(call),
            kind=tool_kind(call.name),
            status=status,
            locations=tool_locations(call, workspace),
            raw_input=_arguments(call),
        )
    )


def tool_finished(call_id: str, result: Message) -> JSONObject:
    text = result.text
    if len(text) > RESULT_CHARS:
        text = text[:RESULT_CHARS] + f"\n[… {len(result.text) - RESULT_CHARS:,} more characters]"
    return _json(
        ToolCallProgress(
            session_update="tool_call_update",
            tool_call_id=call_id,
            status="failed" if result.meta.tool_error else "completed",
            content=[ContentToolCallContent(type="content", content=_text(text))],
        )
    )


def tool_status(call_id: str, status: ToolStatus) -> JSONObject:
    """A ``tool_call_update`` that changes only the call's status."""
    return _json(
        ToolCallProgress(session_update="tool_call_update", tool_call_id=call_id, status=status)
    )


def tool_terminal(call_id: str, terminal_id: str) -> JSONObject:
    """The running call's content: the editor terminal it runs in (the editor shows it live)."""
    return _json(
        ToolCallProgress(
            session_update="tool_call_update",
            tool_call_id=call_id,
            content=[TerminalToolCallContent(type="terminal", terminal_id=terminal_id)],
        )
    )


def plan(call: ToolCall) -> JSONObject | None:
    """The todo list a ``todo_write`` call set, as ACP's ``plan`` (``None``: not one)."""
    todos = _arguments(call).get("todos")
    if call.name != "todo_write" or not isinstance(todos, list):
        return None
    entries: list[PlanEntry] = []
    for todo in todos:
        if not isinstance(todo, dict) or not isinstance(todo.get("content"), str):
            continue
        status = todo.get("status")
        entries.append(
            PlanEntry(
                content=str(todo["content"]),
                priority="medium",
                status=status if status in _PLAN_STATUSES else "pending",  # type: ignore[arg-type]
            )
        )
    return _json(AgentPlanUpdate(session_update="plan", entries=entries))


# -- session -----------------------------------------------------------------


def usage(used: int, size: int) -> JSONObject:
    """``used``: the provider's ``total_tokens`` of the latest response; ``size``: the window."""
    return _json(AcpUsageUpdate(session_update="usage_update", used=used, size=size))


def current_mode(mode: str) -> JSONObject:
    """The session's mode changed (Shift+Tab's cycle, a config option, plan mode)."""
    return _json(CurrentModeUpdate(session_update="current_mode_update", current_mode_id=mode))


def available_commands() -> JSONObject:
    return _json(
        AvailableCommandsUpdate(
            session_update="available_commands_update",
            available_commands=[
                AvailableCommand(
                    name=name,
                    description=description,
                    input=AvailableCommandInput(UnstructuredCommandInput(hint=hint))
                    if hint
                    else None,
                )
                for name, description, hint in COMMANDS
            ],
        )
    )


# -- compaction ----------------------------------------------------------------


def compaction_update(
    compaction_id: str,
    status: CompactionStatus,
    *,
    summary: str | None = None,
    error: str | None = None,
) -> JSONObject:
    """The protocol's own compaction entity: created by its first update, patched by the rest."""
    update: JSONObject = {
        "sessionUpdate": "compaction_update",
        "compactionId": compaction_id,
        "status": status,
    }
    if summary is not None:
        update["summary"] = [{"type": "text", "text": summary}]
    if error is not None and status == "failed":
        update["error"] = error  # the protocol allows an error only on a failed one
    return update


def compaction_summary_chunk(compaction_id: str, text: str) -> JSONObject:
    return {
        "sessionUpdate": "compaction_summary_chunk",
        "compactionId": compaction_id,
        "content": {"type": "text", "text": text},
    }


def compaction_tool_started(tool_call_id: str) -> JSONObject:
    """For a client without the capability: the compaction as a ``think`` tool call."""
    return _json(
        ToolCallStart(
            session_update="tool_call",
            tool_call_id=tool_call_id,
            title=COMPACTION_TITLE,
            kind="think",
            status="in_progress",
        )
    )


def compaction_tool_progress(
    tool_call_id: str,
    text: str,
    status: Literal["in_progress", "completed", "failed"] = "in_progress",
) -> JSONObject:
    """The tool call's content: the streamed tail while running, the outcome once done."""
    return _json(
        ToolCallProgress(
            session_update="tool_call_update",
            tool_call_id=tool_call_id,
            status=status,
            content=[ContentToolCallContent(type="content", content=_text(text))] if text else None,
        )
    )


# -- replay (session/load) ---------------------------------------------------------


def history(
    messages: Sequence[Message], workspace: Path, *, standard_compaction: bool
) -> Iterator[JSONObject]:
    """Every UI message as the updates the live stream sent for it, in order.

    Compact blocks stay where they happened: old messages before them are
    replayed too (a compaction never removes what a person saw).
    """
    calls: dict[str, ToolCall] = {}
    for message in messages:
        if message.meta.kind == KIND_COMPACT_SUMMARY:
            yield from replayed_compaction(message, standard_compaction=standard_compaction)
        elif message.meta.kind == KIND_ERROR:
            yield agent_text(f"Error: {message.text}")
        elif message.role == "user":
            if message.text:
                yield user_text(message.text)
            for image in message.images:
                if (update := user_image(image.url)) is not None:
                    yield update
        elif message.role == "assistant":
            if message.reasoning:
                yield agent_thought(message.reasoning)
            if message.text:
                yield agent_text(message.text)
            for call in message.tool_calls:
                calls[call.id] = call
                yield tool_started(call, workspace)
        elif message.role == "tool" and message.tool_call_id in calls:
            call = calls.pop(message.tool_call_id)
            yield tool_finished(call.id, message)
            if (update := plan(call)) is not None and not message.meta.tool_error:
                yield update


def replayed_compaction(block: Message, *, standard_compaction: bool) -> list[JSONObject]:
    compaction_id = f"compaction-{block.id}"
    if standard_compaction:
        return [compaction_update(compaction_id, "completed", summary=block.text)]
    return [
        compaction_tool_started(compaction_id),
        compaction_tool_progress(compaction_id, compact_label(block), "completed"),
    ]


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
