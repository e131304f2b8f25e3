"""``codex``: a Codex CLI rollout (``~/.codex/sessions/…/rollout-<ts>-<id>.jsonl``).

One session per file, named by ``session_meta.payload.id``. Every line is
``{timestamp, type, payload}``; the model-visible history is the
``response_item`` records, replayed in order:

- ``session_meta.payload.base_instructions.text`` (or ``instructions``) is the
  system prompt → ``system``.
- ``message`` items: ``developer`` messages before the first user or
  assistant message are fixed instructions and go to ``system`` after the base
  instructions (chat completions calls this role ``system``). A developer
  message later in the session stays in place as a user message marked
  ``meta.synthetic`` with ``meta.extra["role"] = "developer"``, so its tokens
  count from the moment it appeared. ``user`` messages are kept; those no
  ``event_msg``/``user_message`` repeats (injected ``<environment_context>``,
  AGENTS.md text) are marked ``meta.synthetic``, as they were not typed.
- One model response is written as several items (an assistant ``message``,
  then ``function_call``/``custom_tool_call`` items for parallel calls); they
  are merged into one assistant message. A new message starts after a
  ``reasoning`` item (each response begins with one), a tool output, a user
  or developer message, or a ``token_count`` event (written when a response
  completes).
- ``function_call`` {name, arguments, call_id} → ``ToolCall``;
  ``custom_tool_call`` {name, input} → ``ToolCall`` with arguments
  ``{"input": <raw input>}``; ``function_call_output`` and
  ``custom_tool_call_output`` → tool results paired by ``call_id``. An output
  whose header says ``Process exited with code N`` (N ≠ 0), whose metadata
  has a non-zero ``exit_code``, or that reports ``success: false`` sets
  ``meta.tool_error``.
- ``reasoning`` items are dropped (the summaries are display text, the content
  is encrypted). Compaction (a top-level ``compacted`` record, or compaction
  items) is skipped: the replay runs its own.
- ``event_msg`` records repeat what the UI shows and are not replayed; the
  ``token_count`` event after a response gives that response's
  ``meta.usage`` from ``last_token_usage`` (prompt = ``input_tokens``, which
  includes ``cached_input_tokens``). Codex re-emits an identical count after
  each ``turn_context``; repeats are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import orjson

from cairn.messages import Content, ContentPart, Message, MessageMeta, TextPart, ToolCall, Usage
from cairn.replay.importers._conversion import (
    Injected,
    content_parts,
    count,
    injected_runs,
    make_content,
    nonzero_exit,
)
from cairn.replay.importers._session_builder import Draft, Loaded, SessionBuilder
from cairn.replay.importers._source import (
    IdMaker,
    RecordError,
    Source,
    describe,
    dump_json,
    kind_of,
    opt_dict,
    opt_str,
    pick_sessions,
)
from cairn.replay.session import SessionImportError

FORMAT = "codex"

_CALLS = frozenset({"function_call", "custom_tool_call", "local_shell_call"})
_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})
_COMPACTION = frozenset({"compacted", "compaction", "compaction_summary"})

#: What Codex itself writes as user messages: the environment (cwd, sandbox,
#: shell), the user's and the repository's instructions (AGENTS.md, under a
#: ``# AGENTS.md instructions for <dir>`` heading).
INJECTED = Injected(
    tags=("environment_context", "user_instructions", "INSTRUCTIONS"),
    prefixes=("# AGENTS.md instructions for ",),
)


def load(source: Source, session: int | None) -> Loaded:
    pick_sessions(FORMAT, 1, session)
    warnings: list[str] = []
    records: list[tuple[int, Mapping[str, object]]] = []
    for number, raw in source.json_lines(FORMAT, warnings.append):
        if isinstance(raw, dict):
            records.append((number, cast(Mapping[str, object], raw)))
        else:
            warnings.append(f"line {number}: expected a JSON object, found {kind_of(raw)}; skipped")
    if not any(r.get("type") == "response_item" for _, r in records):
        first = f"type {describe(records[0][1].get('type'))}" if records else "no JSON object"
        line = records[0][0] if records else 1
        raise SessionImportError(f"{FORMAT}: no response_item record (line {line} has {first})")
    reader = _Reader(SessionBuilder(source.path.stem, IdMaker(source.digest, 0)), records)
    for number, record in records:
        try:
            reader.read(number, record)
        except RecordError as exc:
            reader.builder.warn(f"{exc}; skipped")
    reader.report_unknown()
    return Loaded((reader.builder.build(),), (*warnings, *reader.builder.warnings))


class _Reader:
    def __init__(
        self, builder: SessionBuilder, records: list[tuple[int, Mapping[str, object]]]
    ) -> None:
        self.builder = builder
        self.typed = {
            text.strip()
            for _, r in records
            if r.get("type") == "event_msg"
            and opt_dict(r, "payload").get("type") == "user_message"
            and isinstance(text := opt_dict(r, "payload").get("message"), str)
        }
        self.know_typed = any(
            r.get("type") == "event_msg" and opt_dict(r, "payload").get("type") == "user_message"
            for _, r in records
        )
        self.current: Draft | None = None  # the response being written
        self.last: Draft | None = None  # the latest response, for its token count
        self.last_info: tuple[int, ...] | None = None
        self.started = False  # a user or assistant message has been seen
        self.has_meta = False
        self.unknown: dict[str, list[int]] = {}

    def read(self, number: int, record: Mapping[str, object]) -> None:
        where = f"line {number}"
        kind = opt_str(record, "type")
        payload = opt_dict(record, "payload")
        if kind == "session_meta":
            self._session_meta(payload, where)
        elif kind == "response_item":
            self._item(payload, where, number)
        elif kind == "event_msg" and payload.get("type") == "token_count":
            self.current = None
            self._token_count(payload)

    def _session_meta(self, payload: Mapping[str, object], where: str) -> None:
        if self.has_meta:
            return  # a resumed session repeats it
        self.has_meta = True
        session_id = opt_str(payload, "id")
        if session_id:
            self.builder.name = session_id
        text = opt_str(opt_dict(payload, "base_instructions"), "text")
        text = text or opt_str(payload, "instructions")
        if text:
            self.builder.add(
                Message(role="system", content=text, id=self.builder.ids.next("msg")), where
            )

    def _item(self, payload: Mapping[str, object], where: str, number: int) -> None:
        kind = opt_str(payload, "type")
        if kind == "message":
            self._message(payload, where)
        elif kind in _CALLS:
            self._call(payload, where)
        elif kind in _OUTPUTS:
            self.current = None
            self._output(payload, where)
        elif kind == "reasoning":
            self.current = None
        elif kind is not None and kind not in _COMPACTION:
            self.unknown.setdefault(kind, []).append(number)

    def _response(self, payload: Mapping[str, object], where: str) -> Draft:
        if self.current is None:
            draft = Draft(opt_str(payload, "id") or self.builder.ids.next("msg"))
            self.current = self.last = self.builder.add_draft(draft, where)
        self.started = True
        return self.current

    def _message(self, payload: Mapping[str, object], where: str) -> None:
        role = payload.get("role")
        parts = content_parts(payload.get("content"), where, self.builder.warn)
        if role == "assistant":
            draft = self._response(payload, where)
            draft.parts.extend(parts)
            return
        self.current = None
        message_id = opt_str(payload, "id") or self.builder.ids.next("msg")
        content = make_content(parts)
        if role == "developer":
            if not self.started:
                self.builder.add(Message(role="system", content=content, id=message_id), where)
                return
            meta = MessageMeta(synthetic=True, extra={"role": "developer"})
            self.builder.add(Message(role="user", content=content, id=message_id, meta=meta), where)
        elif role == "user":
            self.started = True
            self._user(parts, message_id, where)
        elif role == "system":
            self.builder.add(Message(role="system", content=content, id=message_id), where)
        else:
            raise RecordError(f"{where}: message with unknown role {describe(role)}")

    def _user(self, parts: list[ContentPart], message_id: str, where: str) -> None:
        """One user item: injected runs are synthetic, and so is text no event says was typed."""
        whole = _text(parts) in self.typed
        for n, (run, injected) in enumerate(injected_runs(parts, INJECTED)):
            untyped = self.know_typed and not whole and _text(run) not in self.typed
            meta = MessageMeta(synthetic=True) if injected or untyped else MessageMeta()
            run_id = message_id if n == 0 else f"{message_id}#{n + 1}"
            self.builder.add(
                Message(role="user", content=make_content(run), id=run_id, meta=meta), where
            )

    def _call(self, payload: Mapping[str, object], where: str) -> None:
        kind = opt_str(payload, "type")
        call_id = opt_str(payload, "call_id") or opt_str(payload, "id")
        name = opt_str(payload, "name") or ("local_shell" if kind == "local_shell_call" else None)
        if call_id is None or name is None:
            raise RecordError(f"{where}: {kind} needs 'call_id' and 'name'")
        if kind == "function_call":
            arguments = payload.get("arguments", "{}")
            if not isinstance(arguments, str):
                arguments = dump_json(arguments, f"{where}: key 'arguments'")
        elif kind == "custom_tool_call":
            arguments = dump_json({"input": payload.get("input", "")}, f"{where}: key 'input'")
        else:
            arguments = dump_json(payload.get("action", {}), f"{where}: key 'action'")
        self._response(payload, where).calls.append(ToolCall(call_id, name, arguments))

    def _output(self, payload: Mapping[str, object], where: str) -> None:
        call_id = opt_str(payload, "call_id")
        if call_id is None:
            raise RecordError(f"{where}: {payload.get('type')} needs a 'call_id'")
        content, error = _output_content(payload.get("output"), where, self.builder)
        self.builder.add(
            Message(
                role="tool",
                content=content,
                id=opt_str(payload, "id") or self.builder.ids.next("msg"),
                tool_call_id=call_id,
                meta=MessageMeta(tool_error=True) if error else MessageMeta(),
            ),
            where,
        )

    def _token_count(self, payload: Mapping[str, object]) -> None:
        info = payload.get("info")
        if not isinstance(info, dict):
            return
        # The counts, not the whole object: ``==`` on a foreign value recurses
        # as deep as it nests, and the counts are what a repeat repeats.
        figures = _figures(cast(Mapping[str, object], info))
        if figures == self.last_info:
            return
        self.last_info = figures
        last = opt_dict(cast(Mapping[str, object], info), "last_token_usage")
        if self.last is None or self.last.usage is not None or not last:
            return
        prompt, output = count(last.get("input_tokens")), count(last.get("output_tokens"))
        cached = count(last.get("cached_input_tokens"))
        self.last.usage = Usage(
            prompt_tokens=prompt,
            completion_tokens=output,
            total_tokens=count(last.get("total_tokens")) or prompt + output,
            cached_tokens=cached or None,
        )

    def report_unknown(self) -> None:
        for kind, numbers in self.unknown.items():
            lines = ", ".join(str(n) for n in numbers[:5]) + (", …" if len(numbers) > 5 else "")
            where = "line" if len(numbers) == 1 else "lines"
            self.builder.warn(
                f"{where} {lines}: response_item type {describe(kind)} not replayed; skipped"
            )


_COUNTS = ("input_tokens", "cached_input_tokens", "output_tokens", "total_tokens")


def _figures(info: Mapping[str, object]) -> tuple[int, ...]:
    """The token counts of a ``token_count`` event's ``info``, to tell a repeat."""
    usages = (opt_dict(info, "total_token_usage"), opt_dict(info, "last_token_usage"))
    return tuple(count(usage.get(key)) for usage in usages for key in _COUNTS)


def _text(parts: list[ContentPart]) -> str:
    return "".join(p.text for p in parts if isinstance(p, TextPart)).strip()


def _output_content(raw: object, where: str, builder: SessionBuilder) -> tuple[Content, bool]:
    """The content of a tool output and whether it reports a failure."""
    if isinstance(raw, str):
        return raw, nonzero_exit(raw) or _failed_metadata(raw)
    error = False
    if isinstance(raw, dict):
        data = cast(Mapping[str, object], raw)
        error = data.get("success") is False
        raw = data.get("content", data.get("output"))
        if isinstance(raw, str):
            return raw, error or nonzero_exit(raw)
    parts: list[ContentPart] = content_parts(raw, where, builder.warn)
    content = make_content(parts)
    return (content if content is not None else ""), error


def _failed_metadata(text: str) -> bool:
    """A custom tool's JSON output (``{"output": …, "metadata": {"exit_code": N}}``) with N ≠ 0."""
    if not text.startswith("{"):
        return False
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    if not isinstance(data, dict):
        return False
    code = opt_dict(cast(Mapping[str, object], data), "metadata").get("exit_code")
    return isinstance(code, int) and not isinstance(code, bool) and code != 0
