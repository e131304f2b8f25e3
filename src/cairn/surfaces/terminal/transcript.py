"""The terminal app's message list: ``Transcript`` folds events and earlier pages into entries.

Each ``Entry`` is one rendered message (a prompt, an answer, a tool call
with its result, a ``!command``'s block, a compact block, a notice); the
app mounts the ones ``window`` picks. Nothing here touches Textual.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from cairn.agent import ShellOutcome
from cairn.messages import KIND_COMPACT_SUMMARY, KIND_ERROR, Message, ToolCall
from cairn.surfaces.labels import compact_label
from cairn.surfaces.terminal.view import one_line, tool_label, visible

EntryKind: TypeAlias = Literal["user", "assistant", "tool", "shell", "notice", "error", "compact"]
_ids = itertools.count(1)


@dataclass
class Entry:
    """One rendered message; ``version`` grows with every change, so widgets redraw once."""

    id: str
    kind: EntryKind
    text: str
    #: A tool's or a ``!command``'s result (one line), or a compact block's label.
    detail: str = ""
    #: The whole result when ``detail`` leaves something out (else empty).
    full: str = ""
    streaming: bool = False
    failed: bool = False
    version: int = 0
    #: The position in the session's UI view of the message that made it (``None``:
    #: what the app said itself, or a response still streaming).
    position: int | None = None

    def change(self, **fields: object) -> None:
        for name, value in fields.items():
            setattr(self, name, value)
        self.version += 1


@dataclass
class Transcript:
    """The app's message list: every entry, in order, across compactions and turns."""

    entries: list[Entry] = field(default_factory=list)
    _by_id: dict[str, Entry] = field(default_factory=dict)

    def get(self, entry_id: str) -> Entry | None:
        return self._by_id.get(entry_id)

    def append(self, entry: Entry) -> Entry:
        self.entries.append(entry)
        self._by_id[entry.id] = entry
        return entry

    def notice(self, text: str) -> Entry:
        return self.append(Entry(f"notice-{next(_ids)}", "notice", text))

    def error(self, text: str, position: int | None = None) -> Entry:
        return self.append(Entry(f"error-{next(_ids)}", "error", text, position=position))

    def prepend(self, messages: Sequence[Message], start: int) -> int:
        """Put a page of the UI view (``messages``, from position ``start``) before every entry.

        The page is the one just before the first message held. Folded on its
        own, it can share one entry with what is held: a tool call whose result
        began the later page, which stays where it is and takes the call's
        label, which only this page knew. Returns how many entries came first.
        """
        earlier = Transcript()
        for offset, message in enumerate(messages):
            earlier.add(message, start + offset)
        added: list[Entry] = []
        for entry in earlier.entries:
            held = self._by_id.get(entry.id)
            if held is None:
                added.append(entry)
                self._by_id[entry.id] = entry
            elif entry.kind == "tool":
                held.change(text=entry.text, position=entry.position)
        self.entries[:0] = added
        return len(added)

    def streamed(self, message_id: str, content: str) -> None:
        """A streaming response so far: one entry per message id, updated in place."""
        entry = self._by_id.get(message_id)
        if entry is None:
            if content:  # reasoning alone shows in the hint, not as an empty message
                self.append(Entry(message_id, "assistant", content, streaming=True))
        elif entry.text != content:
            entry.change(text=content)

    def add(self, message: Message, position: int | None = None) -> None:
        """A message the session added (live or on resume); a repeat updates its entry.

        ``position`` is the message's in the session's UI view, if known.
        """
        if message.meta.kind == KIND_COMPACT_SUMMARY:
            if message.id not in self._by_id:
                label = compact_label(message)
                self.append(Entry(message.id, "compact", message.text, label, position=position))
            return
        if message.meta.kind == KIND_ERROR:
            if message.id not in self._by_id:
                self.error(message.text, position)
            return
        shell = shell_block(message)
        if shell is not None:
            if message.id not in self._by_id:
                self.shell(message.id, shell, position)
            return
        if message.role == "tool":
            self.tool_result(message.tool_call_id or "", message, position)
            return
        if message.role == "assistant":
            self._assistant(message, position)
        elif message.role == "user" and message.id not in self._by_id:
            self.append(Entry(message.id, "user", message.text, position=position))
        for call in message.tool_calls:
            self.tool_started(call, position)

    def _assistant(self, message: Message, position: int | None) -> None:
        entry = self._by_id.get(message.id)
        if entry is not None:
            # The final text replaces what streamed; an empty answer (only calls) goes.
            if message.text:
                entry.change(text=message.text, streaming=False)
                entry.position = position if entry.position is None else entry.position
            else:
                self.entries.remove(entry)
                del self._by_id[message.id]
        elif message.text:
            self.append(Entry(message.id, "assistant", message.text, position=position))

    def shell(self, entry_id: str, outcome: ShellOutcome, position: int | None = None) -> Entry:
        """A ``!command``: the command, and its output as a tool's result shows."""
        detail, full = _result_forms(outcome.output)
        return self.append(
            Entry(
                entry_id,
                "shell",
                outcome.command,
                detail,
                full,
                failed=outcome.ok is False,
                position=position,
            )
        )

    def tool_started(self, call: ToolCall, position: int | None = None) -> None:
        if self.get(_tool_id(call.id)) is None:
            label = tool_label(call)
            self.append(Entry(_tool_id(call.id), "tool", label, "running…", position=position))

    def tool_result(self, call_id: str, result: Message, position: int | None = None) -> None:
        entry = self._by_id.get(_tool_id(call_id))
        text, full = _result_forms(result.text)
        if entry is None:
            name = result.name or "tool"
            entry = self.append(Entry(_tool_id(call_id), "tool", name, text, position=position))
        if (entry.detail, entry.full, entry.failed) != (text, full, result.meta.tool_error):
            entry.change(detail=text, full=full, failed=result.meta.tool_error)


def _result_forms(result: str) -> tuple[str, str]:
    """A result's one-line form, and its whole text when the line leaves some out (else "")."""
    text = one_line(result) or "(no output)"
    full = result.strip("\n").rstrip()
    if full.strip().replace("\t", " ") == text:
        full = ""  # the short form is the whole result (its tabs as spaces)
    return text, full


#: Around a ``!command``'s output in its message (the ``shell_command`` prompt).
_OUTPUT_OPEN = "<bash-output>\n"
_OUTPUT_CLOSE = "\n</bash-output>"


def shell_block(message: Message) -> ShellOutcome | None:
    """The ``!command`` a message records (``meta.extra["shell"]``), else ``None``.

    The core adds the command and its output to the conversation as a user
    message of the host's; a person typed only the command, so it shows as
    the command's block, live and on resume alike, never as a prompt. The
    output is read back from between the message's ``<bash-output>`` tags (the
    first opening, the last closing: an output may hold the tags itself); a
    text without them is shown whole rather than lost.
    """
    command = message.meta.extra.get("shell") if message.role == "user" else None
    if not isinstance(command, str):
        return None
    text = message.text
    start, end = text.find(_OUTPUT_OPEN), text.rfind(_OUTPUT_CLOSE)
    output = text[start + len(_OUTPUT_OPEN) : end] if 0 <= start <= end else text
    ok = message.meta.extra.get("ok")
    return ShellOutcome(command, output, ok if isinstance(ok, bool) else None)


def more_label(full: str) -> str:
    """The title of a tool's collapsed whole result: ``full result · 58 lines``."""
    lines = len(full.splitlines())
    if lines > 1:
        return f"full result · {lines} lines"
    return f"full result · {len(full):,} characters"


def _tool_id(call_id: str) -> str:
    return f"tool-{call_id}"


def window(entries: Sequence[Entry], expanded: bool, top: int | None) -> list[Entry]:
    """The entries to mount: from index ``top`` on once the user went up, else ``visible``'s."""
    return list(entries[top:]) if top is not None else visible(entries, expanded)


def earlier_messages(shown: Sequence[Entry], known: int) -> int:
    """How many of the session's messages come before the first entry of ``shown``.

    That is the first position among them; ``known`` (every message the app
    has seen) when none has one, all of them being the app's own lines.
    """
    return next((e.position for e in shown if e.position is not None), known)
