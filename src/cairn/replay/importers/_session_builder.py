"""Building one imported session: pairing tool calls and results, unique ids, usage checks.

An importer reads its format into a ``SessionBuilder`` one message at a time,
in recorded order, naming where each message came from (``line 7``,
``history[3]``). ``SessionBuilder.build`` then makes the session sound: every
tool call is followed by all of its results, a call nobody answered gets a
placeholder result, a result nobody asked for is dropped, and every message
id is unique. Each repair is one warning that names the place.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from cairn.messages import (
    ContentPart,
    JSONObject,
    Message,
    MessageMeta,
    TextPart,
    ToolCall,
    Usage,
    find_orphans,
)
from cairn.replay.fixed_context import (
    CONTEXT_NOT_RECORDED,
    ELSEWHERE_RATIO,
    UNRECORDED_TOKENS,
    context_not_recorded,
    first_response_with_usage,
    recorded_fixed,
    usage_exceeds_recording,
)
from cairn.replay.importers._conversion import make_content
from cairn.replay.importers._source import IdMaker, Warn, describe, short
from cairn.replay.session import RecordedSession, SessionImportError
from cairn.tokens import estimate_messages_tokens

#: The text of the result added for a tool call that has none in the recording.
PLACEHOLDER_RESULT = "[no result was recorded for this call]"


@dataclass(frozen=True)
class Loaded:
    """What one importer read: the sessions and the warnings, in file order."""

    sessions: tuple[RecordedSession, ...]
    warnings: tuple[str, ...] = ()


# ---------------------------------------------------------------------------
# Building one session


@dataclass
class Draft:
    """An assistant message still being assembled from several records."""

    id: str
    parts: list[ContentPart] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    usage: Usage | None = None

    def add_text(self, text: str) -> None:
        if text:
            self.parts.append(TextPart(text))

    def message(self) -> Message:
        return Message(
            role="assistant",
            content=make_content(self.parts),
            id=self.id,
            tool_calls=tuple(self.calls),
            meta=MessageMeta(usage=self.usage) if self.usage is not None else MessageMeta(),
        )


class SessionBuilder:
    """Collects one session's messages in order and makes the result sound."""

    def __init__(self, name: str, ids: IdMaker, *, label: str | None = None) -> None:
        self.name = name
        self.ids = ids
        self.system: list[Message] = []
        self.tools: list[JSONObject] = []
        self.warnings: list[str] = []
        self._label = label
        self._entries: list[tuple[Message | Draft, str]] = []

    def warn(self, text: str) -> None:
        label = f"{short(self._label)}: " if self._label else ""
        self.warnings.append(short(f"{label}{text}", 1000))

    def add(self, message: Message, where: str) -> None:
        if message.role == "system":
            self.system.append(message)
        else:
            self._entries.append((message, where))

    def add_draft(self, draft: Draft, where: str) -> Draft:
        self._entries.append((draft, where))
        return draft

    @property
    def has_messages(self) -> bool:
        return bool(self._entries)

    def build(self) -> RecordedSession:
        # One id space for both: the replay stores system and other messages alike.
        taken: set[str] = set()
        system = _unique_ids(self.system, self.warn, taken)
        messages = _unique_ids(self._pair(), self.warn, taken)
        orphans = find_orphans(messages)
        if orphans:  # pragma: no cover - _pair makes this impossible
            raise SessionImportError(f"{self.name}: tool calls left unpaired: {orphans}")
        return RecordedSession(
            name=short(self.name, 200),
            messages=tuple(messages),
            system=tuple(system),
            tools=tuple(self.tools),
        )

    def _pair(self) -> list[Message]:
        out: list[Message] = []
        pending: dict[str, ToolCall] = {}
        this_round: set[str] = set()
        earlier: set[str] = set()
        round_where = ""

        def close_round() -> None:
            for call_id, call in pending.items():
                out.append(
                    Message(
                        role="tool",
                        content=PLACEHOLDER_RESULT,
                        id=self.ids.next("msg"),
                        tool_call_id=call_id,
                        name=call.name,
                        meta=MessageMeta(synthetic=True),
                    )
                )
                self.warn(
                    f"{round_where}: call {short(call_id)} ({short(call.name)}) has no recorded "
                    "result; added a placeholder result"
                )
            pending.clear()

        for entry, where in self._entries:
            message = entry.message() if isinstance(entry, Draft) else entry
            if message.role == "assistant" and not message.tool_calls and message.content is None:
                self.warn(
                    f"{where}: assistant message {short(message.id)} has no text and no tool call"
                )
                continue
            if message.role == "tool":
                call_id = message.tool_call_id
                if call_id is not None and call_id in pending:
                    call = pending.pop(call_id)
                    if not message.name:
                        message = replace(message, name=call.name)
                    if message.content is None:
                        message = replace(message, content="")
                    out.append(message)
                elif call_id in this_round:
                    self.warn(f"{where}: a second result for call {short(call_id)}; dropped")
                elif call_id in earlier:
                    self.warn(
                        f"{where}: result for call {short(call_id)} arrives after the "
                        "conversation moved on; dropped"
                    )
                else:
                    self.warn(f"{where}: result for unknown call {describe(call_id)}; dropped")
                continue
            close_round()
            earlier |= this_round
            this_round = set()
            if message.role == "assistant" and message.tool_calls:
                message = self._distinct_calls(message, where)
                pending = {call.id: call for call in message.tool_calls}
                this_round = set(pending)
                round_where = where
            out.append(message)
        close_round()
        return out

    def _distinct_calls(self, message: Message, where: str) -> Message:
        seen: set[str] = set()
        calls: list[ToolCall] = []
        changed = False
        for call in message.tool_calls:
            if call.id in seen:
                new = f"{call.id}~{len(calls) + 1}"
                self.warn(
                    f"{where}: tool call id {short(call.id)} repeated in one message; "
                    f"renamed {short(new)}"
                )
                call = replace(call, id=new)
                changed = True
            seen.add(call.id)
            calls.append(call)
        return replace(message, tool_calls=tuple(calls)) if changed else message


def _unique_ids(messages: list[Message], warn: Warn, seen: set[str]) -> list[Message]:
    """``messages`` with each id not in ``seen`` (renamed ``<id>~2`` …); ``seen`` grows."""
    out: list[Message] = []
    for message in messages:
        if message.id in seen:
            n = 2
            while f"{message.id}~{n}" in seen:
                n += 1
            new = f"{message.id}~{n}"
            warn(f"message id {short(message.id)} repeated; the later one is now {short(new)}")
            message = replace(message, id=new)
        seen.add(message.id)
        out.append(message)
    return out


# ---------------------------------------------------------------------------
# Usage that counts context the file does not hold


def carried_tokens(session: RecordedSession, before: int) -> int:
    """What the file can account for in request ``before``'s prompt (an estimate).

    The estimate of the messages before it plus the format's documented
    default fixed context: what the file records of it and the tokens its
    recordings leave out (``UNRECORDED_TOKENS``).
    """
    fixed = recorded_fixed(session).tokens + UNRECORDED_TOKENS.get(session.format, 0)
    return estimate_messages_tokens(session.messages[:before]) + fixed


def usage_beyond_file(session: RecordedSession) -> str | None:
    """Why the first response's usage counts context the file lacks, by the size rule.

    ``None`` unless the format documents a default fixed context (it leaves
    some out: ``UNRECORDED_TOKENS``) and the first recorded prompt is over
    ``ELSEWHERE_RATIO`` times ``carried_tokens`` (``usage_exceeds_recording``);
    whatever the file is called. A format without a documented default has
    nothing better to fall back on: where it does not record its tool schemas
    (an OpenAI chat log, say), the usage is the only measure of them.
    """
    if not UNRECORDED_TOKENS.get(session.format, 0):
        return None
    index = first_response_with_usage(session.messages)
    usage = session.messages[index].meta.usage if index is not None else None
    if index is None or usage is None:
        return None
    carried = carried_tokens(session, index)
    if not usage_exceeds_recording(usage.prompt_tokens, carried):
        return None
    return (
        f"the first request's recorded usage ({usage.prompt_tokens:,} prompt tokens) is over "
        f"{ELSEWHERE_RATIO}x what the file carries (~{carried:,} tokens with the format's "
        "documented default fixed context): the rest of that context (a summarized "
        "conversation?) is not in the file"
    )


def mark_context_not_recorded(session: RecordedSession, reason: str) -> RecordedSession:
    """``session`` with its first response marked ``CONTEXT_NOT_RECORDED`` (``reason``).

    The replay then gives the session the format's documented default fixed
    context instead of one inferred from that response's usage, and says why.
    A session without recorded usage is returned as it is.
    """
    index = first_response_with_usage(session.messages)
    if index is None:
        return session
    message = session.messages[index]
    extra = {**message.meta.extra, CONTEXT_NOT_RECORDED: reason}
    marked = replace(message, meta=replace(message.meta, extra=extra))
    messages = (*session.messages[:index], marked, *session.messages[index + 1 :])
    return replace(session, messages=messages)


def check_context_not_recorded(session: RecordedSession) -> tuple[RecordedSession, str | None]:
    """Mark ``session`` by the size rule unless its importer did; the warning, if marked."""
    reason = context_not_recorded(session.messages)
    if reason is None:
        reason = usage_beyond_file(session)
        if reason is None:
            return session, None
        session = mark_context_not_recorded(session, reason)
    return session, (
        f"session {short(session.name)}: {reason}; the replay gives it the format's "
        "documented default fixed context, not one inferred from that usage"
    )
