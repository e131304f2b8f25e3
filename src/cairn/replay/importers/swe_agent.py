"""``swe-agent``: a SWE-agent ``.traj`` file, replayed from its ``history``.

``history`` is the conversation the agent kept, in one of two styles:

- **function calling** (SWE-agent 1.x): assistant messages carry native
  ``tool_calls``; observations are ``tool`` messages that name their call in
  ``tool_call_ids`` (the first id is used).
- **thought/action text** (older and the CTF demonstrations): the assistant
  writes a thought and one command in a fenced block, recorded separately as
  ``thought`` and ``action``, and the observation comes back as the next
  ``user`` message. Cairn replays this as the tool call it is: the assistant
  message's text is the ``thought`` and it calls one tool with
  ``{"command": <action>}``, and the observation becomes that call's result.
  The tool is named after the command when the system prompt documents it
  (``signature: edit …`` → ``edit``), otherwise ``bash``.

System message(s) go to ``RecordedSession.system``. Demonstration messages
(``is_demo: true``) are dropped: they are examples pasted into the prompt,
not the session. Only the main agent's messages are kept (the ``agent`` of
the first message); others are skipped with one warning. SWE-agent records
no tool schemas; the final ``submit`` usually has no observation, so it gets
the placeholder result (and a warning).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from cairn.messages import Message, ToolCall
from cairn.replay.importers._conversion import chat_message, content_parts, make_content
from cairn.replay.importers._session_builder import Loaded, SessionBuilder
from cairn.replay.importers._source import (
    IdMaker,
    RecordError,
    Source,
    describe,
    dump_json,
    expect_dict,
    expect_list,
    kind_of,
    opt_str,
    pick_sessions,
)
from cairn.replay.session import SessionImportError

FORMAT = "swe-agent"

_SIGNATURE = re.compile(r"^\s*signature:\s*([A-Za-z_][\w-]*)", re.M)


def load(source: Source, session: int | None) -> Loaded:
    document = source.document(FORMAT)
    if not isinstance(document, dict):
        raise SessionImportError(f"{FORMAT}: expected a JSON object, found {kind_of(document)}")
    pick_sessions(FORMAT, 1, session)
    builder = SessionBuilder(source.path.stem, IdMaker(source.digest, 0))
    try:
        _read_history(expect_list(document, "history"), builder)
    except RecordError as exc:
        raise SessionImportError(f"{FORMAT}: {exc}") from None
    return Loaded((builder.build(),), tuple(builder.warnings))


def _read_history(history: list[object], builder: SessionBuilder) -> None:
    entries = [expect_dict(raw, f"history[{i}]") for i, raw in enumerate(history)]
    main_agent = next((opt_str(e, "agent") for e in entries if opt_str(e, "agent")), None)
    commands = _documented_commands(entries)
    others: dict[str, int] = {}
    action_call: ToolCall | None = None  # the text action waiting for its observation
    for index, entry in enumerate(entries):
        where = f"history[{index}]"
        if entry.get("is_demo") is True:
            continue
        agent = opt_str(entry, "agent")
        if main_agent is not None and agent is not None and agent != main_agent:
            others[agent] = others.get(agent, 0) + 1
            continue
        role = entry.get("role")
        message: Message
        if role == "assistant" and not entry.get("tool_calls") and _action(entry):
            action = _action(entry)
            name = action.split(None, 1)[0] if action.strip() else "bash"
            call = ToolCall(
                builder.ids.next("call"),
                name if name in commands else "bash",
                dump_json({"command": action}, where),
            )
            thought = entry.get("thought")
            text = thought if isinstance(thought, str) else _text(entry, where, builder)
            message = Message(
                role="assistant",
                content=text.rstrip() or None,
                id=builder.ids.next("msg"),
                tool_calls=(call,),
            )
            builder.add(message, where)
            action_call = call
            continue
        if (
            role == "user"
            and action_call is not None
            and entry.get("message_type") in (None, "observation")
        ):
            parts = content_parts(entry.get("content"), where, builder.warn)
            message = Message(
                role="tool",
                content=make_content(parts) or "",
                id=builder.ids.next("msg"),
                tool_call_id=action_call.id,
                name=action_call.name,
            )
        elif role == "tool" and entry.get("tool_call_id") is None:
            ids = entry.get("tool_call_ids")
            call_ids = [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else []
            if len(call_ids) > 1:
                builder.warn(
                    f"{where}: one observation for {len(call_ids)} calls; paired with the first"
                )
            patched = {**entry, "tool_call_id": call_ids[0]} if call_ids else entry
            message = chat_message(patched, where, builder.ids, builder.warn)
        else:
            message = chat_message(entry, where, builder.ids, builder.warn)
        action_call = None
        builder.add(message, where)
    for agent, n in others.items():
        builder.warn(
            f"history: {n} message(s) of agent {describe(agent)} skipped "
            f"(main agent {describe(main_agent)})"
        )


def _action(entry: Mapping[str, object]) -> str:
    action = entry.get("action")
    return action.rstrip("\n") if isinstance(action, str) else ""


def _text(entry: Mapping[str, object], where: str, builder: SessionBuilder) -> str:
    content = make_content(content_parts(entry.get("content"), where, builder.warn))
    return content if isinstance(content, str) else ""


def _documented_commands(entries: list[Mapping[str, object]]) -> frozenset[str]:
    """Command names the system prompt documents (``signature: <name> …`` lines)."""
    names: set[str] = set()
    for entry in entries:
        if entry.get("role") != "system":
            continue
        content = entry.get("content")
        texts = [content] if isinstance(content, str) else []
        if isinstance(content, list):
            texts = [
                b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str)
            ]
        for text in texts:
            names.update(_SIGNATURE.findall(text))
    return frozenset(names)
