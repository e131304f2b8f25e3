"""``openhands``: OpenHands evaluation output, one session per JSON line.

Each line is ``{instance_id, instruction, history: [events], metrics, …}``
(a single such object, or a bare JSON array of events, is one session too).
Sessions are named by ``instance_id``. Events become messages like this:

- ``action: system`` → the system message (``args.content``); its
  ``args.tools`` are the session's tool schemas.
- ``action: message`` → a user message (``source: user``, with
  ``args.image_urls`` as images) or a plain assistant reply (``source: agent``).
- an action with ``tool_call_metadata`` → the assistant message of that LLM
  response, rebuilt from ``model_response.choices[0].message`` (text and every
  tool call; the usage of the response goes to ``meta.usage``). Several
  actions from one response (same ``model_response.id``) make one message.
- an observation with ``tool_call_metadata`` → the tool result for
  ``tool_call_id``: its ``content`` (for commands with the recorded
  ``metadata.prefix``/``suffix`` the agent was shown); an ``error``
  observation or ``success: false`` sets ``meta.tool_error``.
- an ``error`` observation without metadata (a tool call OpenHands rejected
  before running it) → a synthetic user message, as OpenHands shows it.
- ``recall`` actions and observations, state changes and other bookkeeping
  events are not part of the model's conversation and are skipped.

A line that is not valid JSON, or has no ``history``, is skipped with a
warning; ``session=N`` picks the session on the N-th non-blank line (0-based),
so numbers do not shift when a line is damaged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from cairn.messages import (
    Content,
    ContentPart,
    ImagePart,
    JSONObject,
    Message,
    MessageMeta,
    Role,
    TextPart,
    ToolCall,
)
from cairn.replay.importers._conversion import (
    chat_message,
    content_parts,
    make_content,
    openai_usage,
)
from cairn.replay.importers._session_builder import Draft, Loaded, SessionBuilder
from cairn.replay.importers._source import (
    TOOL_ROOM,
    BadLine,
    IdMaker,
    RecordError,
    Source,
    Warn,
    dump_json,
    expect_dict,
    first_bad,
    json_problem,
    kind_of,
    label_of,
    opt_dict,
    opt_str,
    pick_sessions,
)
from cairn.replay.session import RecordedSession, SessionImportError

FORMAT = "openhands"

#: ``args`` keys of an action that are bookkeeping, not tool arguments.
_NOT_ARGUMENTS = frozenset(
    {"thought", "blocking", "is_static", "cwd", "hidden", "confirmation_state", "security_risk"}
)


def load(source: Source, session: int | None) -> Loaded:
    warnings: list[str] = []
    if source.head == b"[":
        records: list[tuple[int, object]] = [(1, source.document(FORMAT))]
    else:
        records = source.parsed_lines()
    if all(isinstance(record, BadLine) for _, record in records):
        first_bad(FORMAT, records)
    sessions: list[RecordedSession] = []
    problems: list[str] = []
    chosen = pick_sessions(FORMAT, len(records), session)
    for index in chosen:
        number, record = records[index]
        try:
            if isinstance(record, BadLine):
                raise RecordError(f"line {number}: not valid JSON ({record.message})")
            history, name = _history(record, f"line {number}")
        except RecordError as exc:
            if session is not None or len(records) == 1:
                raise SessionImportError(f"{FORMAT}: {exc}") from None
            problems.append(str(exc))
            warnings.append(f"{exc}; skipped")
            continue
        label = name if len(chosen) > 1 else None
        builder = SessionBuilder(name, IdMaker(source.digest, index), label=label)
        _read_events(history, f"line {number}: ", builder)
        sessions.append(builder.build())
        warnings.extend(builder.warnings)
    if problems and not sessions:
        raise SessionImportError(f"{FORMAT}: {problems[0]} (and no line holds a session)")
    return Loaded(tuple(sessions), tuple(warnings))


def _history(record: object, where: str) -> tuple[list[object], str]:
    if isinstance(record, list):
        return record, where
    data = expect_dict(record, where)
    history = data.get("history")
    if history is None:
        raise RecordError(f"{where}: key 'history' missing")
    if not isinstance(history, list):
        raise RecordError(f"{where}: key 'history' must be a list, found {kind_of(history)}")
    return history, label_of(data.get("instance_id")) or where


def _read_events(history: list[object], at: str, builder: SessionBuilder) -> None:
    responses: set[str] = set()
    for index, raw in enumerate(history):
        where = f"{at}history[{index}]"
        if not isinstance(raw, dict):
            builder.warn(f"{where}: expected an event object, found {kind_of(raw)}; skipped")
            continue
        event = cast(Mapping[str, object], raw)
        try:
            if "action" in event:
                _action(event, where, builder, responses)
            elif "observation" in event:
                _observation(event, where, builder)
        except RecordError as exc:
            builder.warn(f"{exc}; skipped")


def _event_id(event: Mapping[str, object], builder: SessionBuilder) -> str:
    value = event.get("id")
    if isinstance(value, int | str) and not isinstance(value, bool):
        return f"event-{value}"
    return builder.ids.next("msg")


def _action(
    event: Mapping[str, object], where: str, builder: SessionBuilder, responses: set[str]
) -> None:
    kind = event.get("action")
    args = opt_dict(event, "args")
    metadata = event.get("tool_call_metadata")
    if kind == "system":
        text = opt_str(args, "content") or opt_str(event, "message") or ""
        builder.add(Message(role="system", content=text, id=_event_id(event, builder)), where)
        tools = args.get("tools")
        if isinstance(tools, list) and not builder.tools:
            builder.tools.extend(_tools(tools, f"{where}.args.tools", builder))
    elif isinstance(metadata, dict):
        _tool_action(event, cast(Mapping[str, object], metadata), where, builder, responses)
    elif kind == "message":
        said = opt_str(args, "content")
        text = said if said is not None else opt_str(event, "message") or ""
        parts: list[ContentPart] = [TextPart(text)] if text else []
        images = args.get("image_urls")
        if isinstance(images, list):
            parts.extend(ImagePart(url) for url in images if isinstance(url, str))
        role: Role = "user" if event.get("source") == "user" else "assistant"
        builder.add(
            Message(role=role, content=make_content(parts), id=_event_id(event, builder)), where
        )


def _tool_action(
    event: Mapping[str, object],
    metadata: Mapping[str, object],
    where: str,
    builder: SessionBuilder,
    responses: set[str],
) -> None:
    response = opt_dict(metadata, "model_response")
    response_id = opt_str(response, "id")
    if response_id is not None:
        if response_id in responses:
            return  # another action of a response already rebuilt
        responses.add(response_id)
    choices = response.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    message_raw = choice.get("message") if isinstance(choice, dict) else None
    if isinstance(message_raw, dict):
        message = chat_message(
            {**message_raw, "role": "assistant", "id": response_id or _event_id(event, builder)},
            f"{where}.tool_call_metadata.model_response",
            builder.ids,
            builder.warn,
        )
        usage = openai_usage(response.get("usage"))
        if usage is not None:
            message = Message(
                role="assistant",
                content=message.content,
                id=message.id,
                tool_calls=message.tool_calls,
                reasoning=message.reasoning,
                meta=MessageMeta(usage=usage),
            )
        builder.add(message, where)
        return
    # No recorded response: rebuild the one call from the action itself.
    call_id, name = opt_str(metadata, "tool_call_id"), opt_str(metadata, "function_name")
    if call_id is None or name is None:
        raise RecordError(f"{where}: tool_call_metadata needs 'tool_call_id' and 'function_name'")
    args = opt_dict(event, "args")
    draft = Draft(response_id or _event_id(event, builder))
    draft.add_text(opt_str(args, "thought") or "")
    arguments = {k: v for k, v in args.items() if k not in _NOT_ARGUMENTS}
    draft.calls.append(ToolCall(call_id, name, dump_json(arguments, f"{where}.args")))
    builder.add_draft(draft, where)


def _tools(raw: list[object], where: str, builder: SessionBuilder) -> list[JSONObject]:
    """The tool schemas a JSON writer can write back (the replay counts and sends them)."""
    tools: list[JSONObject] = []
    for index, tool in enumerate(raw):
        if not isinstance(tool, dict):
            continue
        problem = json_problem(tool, TOOL_ROOM)
        if problem is not None:
            builder.warn(f"{where}[{index}]: cannot be written as JSON ({problem}); skipped")
        else:
            tools.append(cast(JSONObject, tool))
    return tools


def _observation(event: Mapping[str, object], where: str, builder: SessionBuilder) -> None:
    kind = event.get("observation")
    metadata = event.get("tool_call_metadata")
    if isinstance(metadata, dict):
        call_id = opt_str(cast(Mapping[str, object], metadata), "tool_call_id")
        if call_id is None:
            raise RecordError(f"{where}: key 'tool_call_metadata.tool_call_id' missing")
        error = kind == "error" or event.get("success") is False
        builder.add(
            Message(
                role="tool",
                content=_observation_content(event, where, builder.warn),
                id=_event_id(event, builder),
                tool_call_id=call_id,
                name=opt_str(cast(Mapping[str, object], metadata), "function_name"),
                meta=MessageMeta(tool_error=True) if error else MessageMeta(),
            ),
            where,
        )
    elif kind == "error":
        builder.add(
            Message(
                role="user",
                content=_observation_content(event, where, builder.warn),
                id=_event_id(event, builder),
                meta=MessageMeta(synthetic=True, extra={"openhands": "error_observation"}),
            ),
            where,
        )


def _observation_content(event: Mapping[str, object], where: str, warn: Warn) -> Content:
    raw = event.get("content")
    if raw is None:
        raw = event.get("message")
    if isinstance(raw, str) or raw is None:
        metadata = opt_dict(opt_dict(event, "extras"), "metadata")
        prefix, suffix = opt_str(metadata, "prefix") or "", opt_str(metadata, "suffix") or ""
        return f"{prefix}{raw or ''}{suffix}"
    content = make_content(content_parts(raw, where, warn))
    return content if content is not None else ""
