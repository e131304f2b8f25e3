"""One ACP session — an editor's thread — over one ``AgentSession``.

The thread turns the session's events into ``session/update`` notifications,
asks the editor for permissions, and runs what the user typed: a prompt for
the model, or one of Cairn's own commands (``/compact``, ``/clear``,
``/status``, ``/mcp``, ``/help``), which never reach the model.

A compaction is shown up to three ways at once (seed 004, DESIGN §8):

- to a client that asked for them (``clientCapabilities._meta.cairn.compaction``),
  Cairn's extension notifications, scoped by session:
  ``_cairn/compactionStateChange {sessionId, isCompacting}`` (true, then
  exactly one false) and ``_cairn/compactionContentUpdate {sessionId,
  content}`` with the fork's text so far;
- to a client that advertised ``session.compaction``, the protocol's own
  ``compaction_update`` (in_progress → completed / failed / cancelled) and
  ``compaction_summary_chunk`` updates; a failed one's ``error`` is the
  reason ``/compact`` gives;
- to any other client, a ``think`` tool call "Compacting conversation" whose
  content is the streamed tail, ending with the compact block's line.

A tool call that waits for the user's permission is ``pending`` until the
client answers, then ``in_progress``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path

from acp.exceptions import RequestError
from acp.schema import (
    AllowedOutcome,
    PermissionOption,
    PermissionOptionKind,
    RequestPermissionResponse,
    ToolCallUpdate,
)
from acp.schema import StopReason as AcpStopReason
from pydantic import ValidationError

from cairn.agent import (
    PERMISSION_OPTIONS,
    AgentSession,
    CommandOutcome,
    CompactBlockAdded,
    CompactionContentUpdate,
    CompactionStateChange,
    ErrorEvent,
    Event,
    MessageAdded,
    MessageUpdated,
    ModeChange,
    Notice,
    PermissionDecision,
    PermissionRequested,
    Runtime,
    SessionBusyError,
    SummaryPrepared,
    ToolFinished,
    ToolStarted,
    TurnError,
    UsageUpdate,
    parse_command,
)
from cairn.errors import CairnError
from cairn.messages import (
    KIND_COMPACT_SUMMARY,
    KIND_ERROR,
    ContentPart,
    JSONObject,
    Message,
    TextPart,
    ToolCall,
    new_id,
    user,
)
from cairn.store import StoreError
from cairn.surfaces.acp import updates
from cairn.surfaces.acp.channel import Channel
from cairn.surfaces.labels import compact_label
from cairn.surfaces.tail import stream_tail

log = logging.getLogger(__name__)

#: How long ``session/close`` waits for a cancelled turn to stop before it lets go anyway.
CLOSE_WAIT_S = 30.0
#: The UI entries read back to find the context size a stored session ended at.
USAGE_LOOKBACK = 200

#: How the turn's last response ended (its ``finish_reason``) → ACP's stop reason.
FINISH_STOP_REASONS: dict[str, AcpStopReason] = {
    "content_filter": "refusal",
    "length": "max_tokens",
}

HELP = """Cairn handles these itself (they never reach the model):
  /compact [instructions]  summarize the conversation now; instructions focus the summary
  /clear                   start a new session (this one stays on disk)
  /status                  model, window, tokens, thresholds and compactions so far
  /context                 what the next request holds, source by source
  /cost                    tokens billed this session and their price
  /model [name]            the model in use; with a name, switch to it
  /mcp                     MCP servers: their state and their tools
  /help                    this list
An earlier session opens from the editor's thread history."""

_PERMISSION_NAMES: dict[str, tuple[str, PermissionOptionKind]] = {
    "allow_once": ("Allow once", "allow_once"),
    "allow_always": ("Allow always (this session)", "allow_always"),
    "reject": ("Deny", "reject_once"),
}


@dataclass
class _LiveCompaction:
    id: str
    streamed: str = ""
    block: Message | None = None
    #: The last notice or error while it ran: why it did not complete.
    problem: str | None = None


@dataclass
class Thread:
    """One ACP session: the client's ``sessionId`` and the Cairn session behind it.

    The id stays the client's for the thread's life; ``/clear`` puts a fresh
    Cairn session behind it (the old one stays on disk and loads by its id).
    """

    acp_id: str
    runtime: Runtime
    agent: AgentSession
    channel: Channel
    #: The client advertised ``session.compaction``: it gets the protocol's own updates.
    standard_compaction: bool = False
    #: The client asked for Cairn's ``_cairn/compaction…`` notifications.
    cairn_compaction: bool = False
    _streamed: updates.StreamedText = field(default_factory=updates.StreamedText)
    _calls: dict[str, ToolCall] = field(default_factory=dict)
    _started: set[str] = field(default_factory=set)
    _current_call: str | None = None
    _compaction: _LiveCompaction | None = None
    _asking: set[asyncio.Task[None]] = field(default_factory=set)
    _errors_said: set[str] = field(default_factory=set)
    _cancelled: bool = False
    _prompting: bool = False
    #: The ``finish_reason`` of the running turn's latest response.
    _finish: str | None = None
    #: Tool calls seen started whose ``tool_call`` is not sent yet (see ``_announce``).
    _unannounced: set[str] = field(default_factory=set)
    #: A manual compaction runs: its failure is reported with the command's reason.
    _manual: bool = False
    _held_failure: _LiveCompaction | None = None
    _said_once: set[str] = field(default_factory=set)
    #: Prompts and compactions running; ``session/close`` waits for none.
    _running: int = 0
    _idle: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self._idle.set()
        self._follow(self.agent)

    @property
    def workspace(self) -> Path:
        return self.runtime.workspace

    # -- what the client sees --------------------------------------------------

    def send(self, update: JSONObject) -> None:
        self.channel.update(self.acp_id, update)

    def say(self, text: str) -> None:
        """A paragraph from Cairn in the thread (a command's answer, a notice, an error)."""
        self.send(updates.agent_text(f"\n{text.strip(chr(10))}\n"))

    def say_once(self, text: str) -> None:
        """``say``, once in the thread's life."""
        if text not in self._said_once:
            self._said_once.add(text)
            self.say(text)

    def replay(self) -> None:
        """``session/load``: the whole UI history, every message and compact block, in order."""
        for update in updates.history(
            self.agent.ui_messages(), self.workspace, standard_compaction=self.standard_compaction
        ):
            self.send(update)

    def send_usage(self, used: int | None = None) -> None:
        usage = self.agent.usage
        used = used if used is not None else self._context_used()
        if used is not None and usage.window:
            self.send(updates.usage(used, usage.window))

    def _context_used(self) -> int | None:
        """The context's size as the meter last showed it: the latest response's total,
        or a compaction's result when one came after it.

        The API view's latest response may predate the last compaction (the rounds
        it kept carry their old usage), so the UI history decides which is later.
        """
        for message in reversed(self.agent.ui_page(None, USAGE_LOOKBACK).messages):
            if message.meta.kind == KIND_COMPACT_SUMMARY:
                post = message.meta.extra.get("post_tokens")
                if isinstance(post, int):
                    return post
            elif message.role == "assistant" and message.meta.usage is not None:
                return message.meta.usage.total_tokens
        return self.agent.usage.latest_total_tokens

    def send_commands(self) -> None:
        self.send(updates.available_commands())

    def show_terminal(self, terminal_id: str) -> None:
        """Embed the editor terminal a command runs in into the running tool call."""
        if self._current_call is not None:
            self.send(updates.tool_terminal(self._current_call, terminal_id))

    # -- events ------------------------------------------------------------------

    def _follow(self, agent: AgentSession) -> None:
        agent.on_event(lambda event: self._on_event(agent, event))

    def _on_event(self, agent: AgentSession, event: Event) -> None:
        if agent is not self.agent:
            return  # a session /clear replaced: its tail is not this thread's any more
        try:
            self._show(agent, event)
        except Exception:  # called inside the session's publish: a bug here must not end a turn
            log.exception("cannot send %s", type(event).__name__)

    def _show(self, agent: AgentSession, event: Event) -> None:
        match event:
            case MessageUpdated(message_id=message_id, content=content, reasoning=reasoning):
                for update in self._streamed.deltas(message_id, content, reasoning):
                    self.send(update)
            case MessageAdded(message=message):
                self._message(message)
            case ToolStarted(call=call):
                self._calls[call.id] = call
                self._started.add(call.id)
                self._current_call = call.id
                # Sent a moment later: a call that asks for permission first is
                # announced ``pending`` instead (its request follows in the same step).
                self._unannounced.add(call.id)
                asyncio.get_running_loop().call_soon(self._announce, call.id, "in_progress")
            case ToolFinished(call_id=call_id, result=result):
                self._announce(call_id, "in_progress")
                self._tool_finished(call_id, result)
            case CompactionStateChange(is_compacting=is_compacting):
                self._compaction_state(is_compacting)
            case CompactionContentUpdate(content=content):
                self._compaction_content(content)
            case SummaryPrepared(state=state):
                # A quiet indicator for clients that asked for Cairn's extensions:
                # nobody waits for it, so no compaction update or tool call.
                if self.cairn_compaction:
                    self.channel.extension(
                        "cairn/summaryPrepared", {"sessionId": self.acp_id, "state": state}
                    )
            case CompactBlockAdded(block=block):
                if self._compaction is not None:
                    self._compaction.block = block
                post = block.meta.extra.get("post_tokens")
                if isinstance(post, int):
                    self.send_usage(post)  # the meter moves as soon as the compaction commits
            case UsageUpdate(latest_total_tokens=tokens, window=window):
                if window:
                    self.send(updates.usage(tokens, window))
            case ModeChange(mode=mode):
                self.send(updates.current_mode(mode))
            case Notice(code="cancelled"):
                pass  # the prompt's stop reason, ``cancelled``, says it: no agent text
            case Notice(text=text):
                if self._compaction is not None:
                    self._compaction.problem = text
                self.say(text)
            case ErrorEvent(message=message):
                if self._compaction is not None:
                    self._compaction.problem = message
                self._say_error(message)
            case PermissionRequested():
                waiting = self._current_call
                if waiting is not None:
                    if waiting in self._unannounced:
                        self._announce(waiting, "pending")
                    else:
                        self.send(updates.tool_status(waiting, "pending"))
                task = asyncio.get_running_loop().create_task(self._ask(agent, event))
                self._asking.add(task)
                task.add_done_callback(self._asking.discard)

    def _announce(self, call_id: str, status: updates.ToolStatus) -> None:
        """Send a started call's ``tool_call`` (once) with ``status``."""
        if call_id not in self._unannounced:
            return
        self._unannounced.discard(call_id)
        call = self._calls.get(call_id)
        if call is not None:
            self.send(updates.tool_started(call, self.workspace, status))

    def _message(self, message: Message) -> None:
        if message.meta.kind == KIND_ERROR:
            self._say_error(message.text)
        elif message.role == "assistant":
            finish = message.meta.extra.get("finish_reason")
            self._finish = finish if isinstance(finish, str) else None
            for update in self._streamed.finish(message):
                self.send(update)
            for call in message.tool_calls:
                self._calls[call.id] = call
        elif message.role == "tool" and message.tool_call_id not in self._started:
            # A call the cancel stopped before it ran: the client learns of it, as failed.
            stopped = self._calls.get(message.tool_call_id or "")
            if stopped is not None:
                self._started.add(stopped.id)
                self.send(updates.tool_started(stopped, self.workspace))
                self.send(updates.tool_finished(stopped.id, message))
        # The user's own prompt is on the client's screen already.

    def _tool_finished(self, call_id: str, result: Message) -> None:
        self.send(updates.tool_finished(call_id, result))
        call = self._calls.get(call_id)
        if call is not None and not result.meta.tool_error:
            plan = updates.plan(call)
            if plan is not None:
                self.send(plan)
        if self._current_call == call_id:
            self._current_call = None

    def _say_error(self, message: str) -> None:
        if message not in self._errors_said:
            self._errors_said.add(message)
            self.say(f"Error: {message}")

    # -- compaction, three ways ---------------------------------------------------

    def _compaction_state(self, is_compacting: bool) -> None:
        if self.cairn_compaction:
            self.channel.extension(
                "cairn/compactionStateChange",
                {"sessionId": self.acp_id, "isCompacting": is_compacting},
            )
        if is_compacting:
            started = self._compaction = _LiveCompaction(new_id("compaction"))
            if self.standard_compaction:
                self.send(updates.compaction_update(started.id, "in_progress"))
            else:
                self.send(updates.compaction_tool_started(started.id))
            return
        live, self._compaction = self._compaction, None
        if live is None:
            return
        if live.block is not None:
            if self.standard_compaction:
                self.send(updates.compaction_update(live.id, "completed", summary=live.block.text))
            else:
                label = compact_label(live.block)
                self.send(updates.compaction_tool_progress(live.id, label, "completed"))
            return
        if self._manual:
            # ``compact`` reports it once it has the command's own reason.
            self._held_failure = live
            return
        self._compaction_failed(live, live.problem)

    def _compaction_failed(self, live: _LiveCompaction, why: str | None) -> None:
        why = why or "the compaction did not complete; the conversation is unchanged"
        if self.standard_compaction:
            status: updates.CompactionStatus = "cancelled" if self._cancelled else "failed"
            self.send(updates.compaction_update(live.id, status, error=why))
        else:
            self.send(updates.compaction_tool_progress(live.id, why, "failed"))

    def _compaction_content(self, content: str) -> None:
        if self.cairn_compaction:
            self.channel.extension(
                "cairn/compactionContentUpdate", {"sessionId": self.acp_id, "content": content}
            )
        live = self._compaction
        if live is None:
            return
        if self.standard_compaction:
            if content.startswith(live.streamed) and len(content) > len(live.streamed):
                self.send(updates.compaction_summary_chunk(live.id, content[len(live.streamed) :]))
        else:
            self.send(updates.compaction_tool_progress(live.id, stream_tail(content)))
        live.streamed = content

    # -- permissions -------------------------------------------------------------

    async def _ask(self, agent: AgentSession, request: PermissionRequested) -> None:
        call = self._calls.get(self._current_call or "")
        tool_call = ToolCallUpdate(
            tool_call_id=call.id if call is not None else request.id,
            title=updates.tool_title(call) if call is not None else request.summary or request.tool,
            kind=updates.tool_kind(request.tool),
            status="pending",
        )
        options = [
            PermissionOption(
                option_id=option,
                name=_PERMISSION_NAMES[option][0],
                kind=_PERMISSION_NAMES[option][1],
            )
            for option in PERMISSION_OPTIONS
        ]
        decision: PermissionDecision = "reject"
        try:
            raw = await self.channel.request(
                "session/request_permission",
                {
                    "sessionId": self.acp_id,
                    "toolCall": tool_call.model_dump(mode="json", by_alias=True, exclude_none=True),
                    "options": [
                        o.model_dump(mode="json", by_alias=True, exclude_none=True) for o in options
                    ],
                },
            )
            outcome = RequestPermissionResponse.model_validate(raw).outcome
            if isinstance(outcome, AllowedOutcome):
                chosen = outcome.option_id
                decision = chosen if chosen in PERMISSION_OPTIONS else "reject"  # type: ignore[assignment]
            else:
                decision = "cancelled"
        except (RequestError, ValidationError, ConnectionError):
            decision = "reject"  # no usable answer: the call does not run
        if decision in ("allow_once", "allow_always") and call is not None:
            self.send(updates.tool_status(call.id, "in_progress"))  # answered: it runs now
        agent.answer(request.id, decision)

    # -- what the user typed ----------------------------------------------------------

    async def prompt(self, prompt: str | list[ContentPart]) -> AcpStopReason:
        """Run a prompt (or a command) to its end; the updates are sent before this returns.

        ``prompt`` is text, or a user message's parts (text and images).
        """
        self._enter()
        try:
            return await self._run(prompt)
        finally:
            await self.channel.flush()
            self._leave()

    def _enter(self) -> None:
        self._running += 1
        self._idle.clear()

    def _leave(self) -> None:
        self._running -= 1
        if not self._running:
            self._idle.set()

    async def _run(self, prompt: str | list[ContentPart]) -> AcpStopReason:
        if isinstance(prompt, str):
            text, images = prompt, False
        else:
            text = "".join(part.text for part in prompt if isinstance(part, TextPart))
            images = any(not isinstance(part, TextPart) for part in prompt)
        # A message with an image is for the model, whatever its text says.
        command = None if images else parse_command(text)
        if command is not None:
            return await self._command(*command)
        if self._prompting:
            raise RequestError(-32600, f"session {self.acp_id} is already running a prompt")
        self._prompting, self._cancelled, self._finish = True, False, None
        self._errors_said.clear()
        try:
            result = await self.agent.prompt(user(prompt) if images else text)
        except SessionBusyError as exc:
            self.say(str(exc))
            return "end_turn"
        except TurnError as exc:
            self._say_error(str(exc))
            return "end_turn"
        except (CairnError, OSError) as exc:  # a store or hook failure: said, never a traceback
            self._say_error(f"{type(exc).__name__}: {exc}")
            return "end_turn"
        finally:
            self._prompting = False
        if result.aborted or self._cancelled:
            return "cancelled"
        if result.max_turns_reached:
            return "max_turn_requests"
        return FINISH_STOP_REASONS.get(self._finish or "", "end_turn")

    async def _command(self, name: str, argument: str) -> AcpStopReason:
        if name == "/compact":
            outcome = await self.compact(argument or None)
            if outcome.cancelled:
                return "cancelled"
            if outcome.compaction is None:
                self.say(outcome.text)  # ignored, skipped or failed: say why
            return "end_turn"
        if name == "/clear":
            self.clear()
            return "end_turn"
        if name == "/resume":
            self.say("An earlier session opens from the editor's thread history (session/load).")
            return "end_turn"
        if name in ("/status", "/context", "/cost", "/model", "/mcp"):
            outcome = await self.agent.command(f"{name} {argument}")
            self.say(f"```\n{outcome.text}\n```")
            return "end_turn"
        self.say(HELP)
        return "end_turn"

    async def compact(self, instructions: str | None) -> CommandOutcome:
        """``/compact`` or ``_cairn/compact``; on return it has ended (done, skipped, failed…)."""
        # A second one while a compaction runs is skipped: the running one keeps its state.
        owner = self._compaction is None and not self._manual
        if owner:
            self._cancelled, self._manual, self._held_failure = False, True, None
        self._enter()
        try:
            try:
                outcome = await self.agent.compact(instructions)
            except (CairnError, OSError) as exc:
                outcome = CommandOutcome(f"compaction failed: {exc}", ok=False)
            if owner:
                held, self._held_failure, self._manual = self._held_failure, None, False
                if held is not None:
                    self._compaction_failed(held, outcome.text)
            await self.channel.flush()
        finally:
            self._leave()
        return outcome

    def clear(self) -> None:
        old = self.agent.id
        try:
            agent = self.agent.clear()
        except SessionBusyError as exc:
            self.say(str(exc))
            return
        except (CairnError, StoreError, OSError) as exc:
            self._say_error(f"cannot start a new session: {exc}")
            return
        self.agent = agent
        self._streamed = updates.StreamedText()
        self._calls.clear()
        self._started.clear()
        self._follow(agent)
        self.say(f"New session {agent.id}; the earlier one ({old}) stays on disk.")

    def cancel(self) -> None:
        """``session/cancel``: the turn or compaction stops; pending permissions end cancelled."""
        self._cancelled = True
        self.agent.cancel()
        for task in list(self._asking):
            task.cancel()

    async def shut(self) -> None:
        """``session/close``: stop what runs, wait (a bounded while) for it to end, release."""
        if self._running:
            self.cancel()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), CLOSE_WAIT_S)
        await self.close()

    async def close(self) -> None:
        for task in list(self._asking):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.runtime.close()
