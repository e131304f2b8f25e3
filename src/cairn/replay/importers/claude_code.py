"""``claude-code``: a Claude Code session transcript (``~/.claude/projects/…/<id>.jsonl``).

One session per file, named by its ``sessionId``. Only ``user`` and
``assistant`` records with a ``message`` are conversation; ``system``
(``turn_duration``, ``compact_boundary`` …), ``progress``,
``file-history-snapshot``, ``queue-operation`` and ``summary`` records are not,
and are skipped. Also skipped: sidechain records (``isSidechain``, sub-agent
conversations), the compact summary Claude Code wrote when it compacted
(``isCompactSummary`` / ``isVisibleInTranscriptOnly``), and Claude Code's own
API-error stand-ins (``isApiErrorMessage``, model ``<synthetic>``). The replay
thus sees the whole session as if it had never been compacted. Records are
taken in file order (branches left by a rewind are not untangled).

- **Assistant**: Claude Code writes each content block of one API response as
  its own record; records sharing ``message.id`` are merged into one message
  (at the first record's place) whose id is that ``message.id``. ``text`` →
  text, ``tool_use`` → a ``ToolCall`` with ``input`` dumped as JSON
  arguments, ``thinking``/``redacted_thinking`` dropped. ``meta.usage`` comes
  from the group's last record: prompt tokens = ``input_tokens`` +
  ``cache_read_input_tokens`` + ``cache_creation_input_tokens`` (the context
  size), completion = ``output_tokens``; the two cache numbers are kept.
- **User**: ``tool_result`` blocks become tool messages (text, or text and
  images; ``is_error`` → ``meta.tool_error``), placed before any other text
  of the record, which becomes a user message. Ids: the record's ``uuid``
  (``<uuid>#2``, ``#3`` … for further messages made from one record).
- **Injected content**: what Claude Code itself wrote into a user turn —
  ``<ide_selection>``, ``<ide_opened_file>``, ``<system-reminder>``,
  ``<local-command-stdout>``/``<local-command-caveat>`` elements and the
  ``[Request interrupted by user…]`` marks — becomes a user message of its
  own marked ``meta.synthetic``, in place: the model saw it, the user did not
  type it. The typed text around it stays a plain user message; a turn that
  is all injected content is wholly synthetic, as are ``isMeta`` records.

Claude Code does not write the system prompt or the tool schemas into the
transcript, so ``system`` and ``tools`` are empty.

A **compaction sub-agent's** transcript (``agent-acompact-<id>.jsonl``, its
records' ``agentId`` ``acompact-…``) holds the compaction instruction and the
summary, but its request carried the whole conversation it summarized (the
usage shows ~168k tokens): its response is marked
``meta.extra["context_not_recorded"]``, so the replay gives it the format's
documented default fixed context instead of one inferred from that usage.
"""

from __future__ import annotations

from collections.abc import Mapping
from fnmatch import fnmatchcase
from typing import cast

from cairn.messages import ContentPart, Message, MessageMeta, TextPart, ToolCall, Usage
from cairn.replay.importers._conversion import (
    Injected,
    content_part,
    content_parts,
    count,
    injected_runs,
    make_content,
)
from cairn.replay.importers._session_builder import (
    Draft,
    Loaded,
    SessionBuilder,
    mark_context_not_recorded,
)
from cairn.replay.importers._source import (
    IdMaker,
    RecordError,
    Source,
    describe,
    dump_json,
    kind_of,
    opt_str,
    pick_sessions,
    short,
)
from cairn.replay.session import SessionImportError

FORMAT = "claude-code"

_CONVERSATION = frozenset({"user", "assistant"})

#: What Claude Code writes into user turns itself: the IDE's selection and
#: open file, reminders, a local command's output, and the marks it leaves
#: when the user interrupts a response.
INJECTED = Injected(
    tags=(
        "ide_selection",
        "ide_opened_file",
        "system-reminder",
        "local-command-stdout",
        "local-command-caveat",
    ),
    markers=frozenset(
        {"[Request interrupted by user]", "[Request interrupted by user for tool use]"}
    ),
)
_DROPPED_BLOCKS = frozenset({"thinking", "redacted_thinking"})

#: The file of the sub-agent Claude Code runs to compact a session, and its ``agentId``.
COMPACTION_AGENT_FILE = "agent-acompact-*.jsonl"
COMPACTION_AGENT_ID = "acompact-"


def compaction_agent(file_name: str, agent_ids: set[str]) -> str | None:
    """Why the file is a compaction sub-agent's transcript (by name or ``agentId``), if it is."""
    agent = next((a for a in sorted(agent_ids) if a.startswith(COMPACTION_AGENT_ID)), None)
    if agent is None and not fnmatchcase(file_name, COMPACTION_AGENT_FILE):
        return None
    named = f"agentId {short(agent)}" if agent is not None else short(file_name)
    return (
        f"compaction sub-agent transcript ({named}): the conversation it summarized "
        "is not in the file"
    )


def load(source: Source, session: int | None) -> Loaded:
    pick_sessions(FORMAT, 1, session)
    warnings: list[str] = []
    records = source.json_lines(FORMAT, warnings.append)
    builder = SessionBuilder(source.path.stem, IdMaker(source.digest, 0))
    # A sub-agent's own file (``agent-<id>.jsonl``) holds only sidechain records:
    # then they are the conversation.
    sidechain_file = not any(
        isinstance(r, dict)
        and opt_str(r, "type") in _CONVERSATION
        and r.get("isSidechain") is not True
        for _, r in records
    )
    drafts: dict[str, Draft] = {}
    agent_ids: set[str] = set()
    conversation = 0
    for number, raw in records:
        where = f"line {number}"
        if not isinstance(raw, dict):
            builder.warn(f"{where}: expected a JSON object, found {kind_of(raw)}; skipped")
            continue
        record = cast(Mapping[str, object], raw)
        kind = opt_str(record, "type")
        if kind not in _CONVERSATION:
            continue
        session_id = opt_str(record, "sessionId")
        if conversation == 0 and session_id:
            builder.name = session_id
        agent_id = opt_str(record, "agentId")
        if agent_id and record.get("isSidechain") is True:
            agent_ids.add(agent_id)
        if (
            (record.get("isSidechain") is True and not sidechain_file)
            or record.get("isCompactSummary") is True
            or record.get("isVisibleInTranscriptOnly") is True
        ):
            continue
        message = record.get("message")
        if not isinstance(message, dict):
            builder.warn(f"{where}: {kind} record has no 'message' object; skipped")
            continue
        conversation += 1
        try:
            if kind == "assistant":
                _assistant(record, cast(Mapping[str, object], message), where, builder, drafts)
            else:
                _user(record, cast(Mapping[str, object], message), where, builder)
        except RecordError as exc:
            builder.warn(f"{exc}; skipped")
    if conversation == 0:
        first = records[0][1]
        seen = f"type {describe(first.get('type'))}" if isinstance(first, dict) else kind_of(first)
        raise SessionImportError(
            f"{FORMAT}: no user or assistant record with a 'message' "
            f"(line {records[0][0]} has {seen})"
        )
    built = builder.build()
    compacting = compaction_agent(source.path.name, agent_ids if sidechain_file else set())
    if compacting is not None:
        built = mark_context_not_recorded(built, compacting)
    return Loaded((built,), (*warnings, *builder.warnings))


def _assistant(
    record: Mapping[str, object],
    message: Mapping[str, object],
    where: str,
    builder: SessionBuilder,
    drafts: dict[str, Draft],
) -> None:
    if record.get("isApiErrorMessage") is True or message.get("model") == "<synthetic>":
        return
    message_id = opt_str(message, "id") or opt_str(record, "uuid") or builder.ids.next("msg")
    draft = drafts.get(message_id)
    known = {call.id for call in draft.calls} if draft is not None else set()
    read = Draft(message_id)  # this record's share: merged only once all of it reads
    content = message.get("content")
    if isinstance(content, str):
        read.add_text(content)
        content = []
    if not isinstance(content, list):
        raise RecordError(f"{where}: message.content must be a string or a list")
    for block in content:
        if not isinstance(block, dict):
            raise RecordError(f"{where}: each content block must be an object")
        kind = opt_str(block, "type")
        if kind == "tool_use":
            call_id, name = block.get("id"), block.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise RecordError(f"{where}: tool_use block needs string 'id' and 'name'")
            if call_id in known:
                builder.warn(f"{where}: tool_use {short(call_id)} written twice; kept once")
                continue
            known.add(call_id)
            arguments = dump_json(block.get("input", {}), f"{where}: tool_use {short(call_id)}")
            read.calls.append(ToolCall(call_id, name, arguments))
        elif kind in _DROPPED_BLOCKS:
            continue
        else:
            part = content_part(block)
            if part is None:
                builder.warn(
                    f"{where}: content block of type {describe(block.get('type'))} not replayed; "
                    "skipped"
                )
            else:
                read.parts.append(part)
    if draft is None:
        draft = drafts[message_id] = builder.add_draft(Draft(message_id), where)
    draft.parts.extend(read.parts)
    draft.calls.extend(read.calls)
    usage = _usage(message.get("usage"))
    if usage is not None:
        draft.usage = usage


def _user(
    record: Mapping[str, object],
    message: Mapping[str, object],
    where: str,
    builder: SessionBuilder,
) -> None:
    uuid = opt_str(record, "uuid")
    made = 0

    def next_id() -> str:
        nonlocal made
        made += 1
        if uuid is None:
            return builder.ids.next("msg")
        return uuid if made == 1 else f"{uuid}#{made}"

    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(blocks, list):
        raise RecordError(f"{where}: message.content must be a string or a list")
    parts: list[ContentPart] = []
    answers: list[Message] = []  # added only once the whole record reads
    for block in blocks:
        if not isinstance(block, dict):
            raise RecordError(f"{where}: each content block must be an object")
        if block.get("type") == "tool_result":
            call_id = block.get("tool_use_id")
            result = make_content(content_parts(block.get("content"), where, builder.warn))
            answers.append(
                Message(
                    role="tool",
                    content=result if result is not None else "",
                    id=next_id(),
                    tool_call_id=call_id if isinstance(call_id, str) else None,
                    meta=MessageMeta(tool_error=block.get("is_error") is True),
                )
            )
        else:
            part = content_part(block)
            if part is None:
                builder.warn(
                    f"{where}: content block of type {describe(block.get('type'))} not replayed; "
                    "skipped"
                )
            elif not (isinstance(part, TextPart) and not part.text):
                parts.append(part)
    for answer in answers:
        builder.add(answer, where)
    written_by_host = record.get("isMeta") is True
    for run, injected in injected_runs(parts, INJECTED):
        synthetic = injected or written_by_host
        builder.add(
            Message(
                role="user",
                content=make_content(run),
                id=next_id(),
                meta=MessageMeta(synthetic=True) if synthetic else MessageMeta(),
            ),
            where,
        )


def _usage(raw: object) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    data = cast(Mapping[str, object], raw)
    fresh = count(data.get("input_tokens"))
    read = count(data.get("cache_read_input_tokens"))
    created = count(data.get("cache_creation_input_tokens"))
    output = count(data.get("output_tokens"))
    prompt = fresh + read + created
    if not (prompt or output):
        return None
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=output,
        total_tokens=prompt + output,
        cache_read_input_tokens=read,
        cache_creation_input_tokens=created,
    )
