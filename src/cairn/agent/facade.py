"""``AgentSession``: the one facade a surface uses (DESIGN §7).

A surface — the terminal UI, the editor agent, the browser UI, ``cairn -p``
— drives a session only through this: ``prompt``, ``compact``, ``cancel``,
``answer``, ``events`` (or ``on_event``), ``status``, ``ui_messages`` and ``usage``, plus
``new`` / ``resume`` / ``clear`` / ``sessions`` that respect the session
guard: while the session streams, runs tools or compacts, switching away is
refused with ``SessionBusyError`` (a compaction's write phase must not land
in a session the user left). Events carry everything else, in their wire
form (``cairn.agent.events.event_to_wire``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from cairn.agent.commands import CommandOutcome, parse_command, run_command
from cairn.agent.events import (
    SESSION_MODES,
    ErrorEvent,
    Event,
    MessageAdded,
    ModeChange,
    Notice,
    QueueChange,
    QueuedPrompt,
    SessionMode,
    SessionStatus,
)
from cairn.agent.loop import DEFAULT_MAX_TURNS, TurnResult, run_turn
from cairn.agent.mentions import complete_paths, find_mentions
from cairn.agent.permissions import PermissionDecision
from cairn.agent.rewind import (
    PromptPoint,
    RestoredFiles,
    fork_session,
    prompt_points,
    rewind_session,
)
from cairn.agent.runtime import Runtime, Session, SessionInfo
from cairn.agent.shell import ShellOutcome, mode_reminder, shell_message
from cairn.agent.tools.plan import plan_file_for
from cairn.errors import CairnError
from cairn.messages import Message, ToolCall, new_id
from cairn.store import UiPage


class SessionBusyError(CairnError, RuntimeError):
    """The session streams, runs tools or compacts: the request must wait."""


@dataclass(frozen=True)
class SessionUsage:
    """What a context meter shows: the provider's ``total_tokens`` of the latest response."""

    #: ``None`` until a response with usage arrived (some servers never send it).
    latest_total_tokens: int | None
    window: int | None
    input_budget: int | None
    compactions: int
    #: The pipeline's projection of the next request (what ``/status`` shows),
    #: for a meter when the provider reports no usage.
    projected_tokens: int | None = None

    @property
    def meter(self) -> MeterReading:
        """What a context meter shows: the next request's size, never more than is sent.

        The provider's count when it reported one, else the pipeline's
        estimate. Past the input budget no request of that size is ever sent:
        the next one compacts first, so the meter says so instead of a number
        (a resumed long session, a long last answer).
        """
        tokens = self.latest_total_tokens
        estimated = tokens is None
        if tokens is None:
            tokens = self.projected_tokens
        budget = self.input_budget
        over = budget is not None and any(
            n is not None and n > budget for n in (tokens, self.projected_tokens)
        )
        return MeterReading(None if over else tokens, estimated, over)


@dataclass(frozen=True)
class MeterReading:
    """One context meter's reading (``SessionUsage.meter``)."""

    #: The next request's tokens; ``None`` when unknown or over the budget.
    tokens: int | None
    #: ``tokens`` is the pipeline's estimate (the provider reported no usage).
    estimated: bool
    #: Over the input budget: the next request compacts before it is sent.
    over_budget: bool


@dataclass(frozen=True)
class SendOutcome:
    """What ``AgentSession.send`` did with a line: exactly one field is set."""

    turn: TurnResult | None = None
    command: CommandOutcome | None = None
    shell: ShellOutcome | None = None
    #: The session was working: the line waits in the queue.
    queued: QueuedPrompt | None = None


class AgentSession:
    """One session, as a surface sees it."""

    def __init__(self, runtime: Runtime, session: Session) -> None:
        self._runtime = runtime
        self._session = session
        #: Prompts sent while the agent worked, sent in order when the turn ends.
        self._queue: list[QueuedPrompt] = []
        #: A ``send`` or ``prompt`` is running (set before the first await, so that a
        #: second line sent meanwhile queues instead of starting a turn beside it).
        self._working = False
        #: What the model must be told about a mode the user chose, at the next prompt
        #: (never between a call and its results).
        self._mode_note: Message | None = None

    # -- opening (the runtime's current session) ---------------------------

    @classmethod
    def new(cls, runtime: Runtime) -> AgentSession:
        _guard(runtime, "start a new session")
        return cls(runtime, runtime.new_session())

    @classmethod
    def resume(cls, runtime: Runtime, session_id: str | None = None) -> AgentSession:
        """Resume ``session_id`` (``None``: this workspace's latest)."""
        _guard(runtime, "resume another session")
        return cls(runtime, runtime.resume(session_id))

    def clear(self) -> AgentSession:
        """``/clear``: a fresh session; this one stays on disk."""
        _guard(self._runtime, "clear the session")
        return AgentSession(self._runtime, self._runtime.clear())

    @staticmethod
    def busy_reason(state: str, *, cancel: str = "cancel it") -> str:
        """Why a request must wait, in the words every surface uses: what the session
        is doing (``streaming``, ``compacting`` …) and what the user can do about it."""
        return f"the session is {state}; wait for it or {cancel}"

    @staticmethod
    def sessions(runtime: Runtime) -> list[SessionInfo]:
        """This workspace's sessions, newest first."""
        return runtime.list_sessions()

    # -- driving ---------------------------------------------------------

    async def start(self) -> None:
        """Run the SessionStart hooks now (once per session; the first prompt runs them
        otherwise), for a surface that listens (``on_event``) before anything is sent."""
        await self._session.start()

    async def prompt(
        self, text: str | Message, *, max_turns: int = DEFAULT_MAX_TURNS
    ) -> TurnResult:
        """Run one user turn to its end; a slash command is ``command`` instead.

        ``text`` may be a whole user message (``cairn.messages.user``): text with images.
        """
        if isinstance(text, str) and parse_command(text) is not None:
            raise ValueError(f"{text.split()[0]} is a command: use AgentSession.command")
        self._check_idle("send a prompt")
        self._working = True
        try:
            result = await self._turn(text, max_turns)
            last = await self._drain(max_turns)
        finally:
            self._working = False
        return result if last is None else last

    async def send(self, text: str, *, max_turns: int = DEFAULT_MAX_TURNS) -> SendOutcome:
        """What a prompt box does with a line: a ``/command``, a ``!command`` or a prompt.

        While the session works the line is queued instead (``queued``) and
        goes when the work ends — a turn, a command or a ``!command`` — in
        order; a queued command's result comes as a ``notice`` (or ``error``)
        event. A cancel leaves the queue for the user to edit (``take_queued``).
        """
        if self.busy:
            item = QueuedPrompt(new_id(), text)
            self._queue.append(item)
            self._publish_queue()
            return SendOutcome(queued=item)
        if parse_command(text) is not None or text.startswith("!"):
            self._working = True
            try:
                # An earlier turn's cancel is spent: only one during this line stops the queue.
                self._session.reset_abort()
                outcome = await self._send_now(text, max_turns)
                await self._drain(max_turns)
            finally:
                self._working = False
            return outcome
        return SendOutcome(turn=await self.prompt(text, max_turns=max_turns))

    async def _drain(self, max_turns: int) -> TurnResult | None:
        """Send the queued lines in order until none is left or the user cancels;
        the last turn's result (``None``: no turn ran)."""
        last: TurnResult | None = None
        while self._queue and not self._session.abort_event.is_set():
            queued = self._queue.pop(0)
            self._publish_queue()
            sent = await self._send_now(queued.text, max_turns)
            if sent.turn is not None:
                last = sent.turn
            self._announce(sent)
        return last

    def _announce(self, sent: SendOutcome) -> None:
        """What a queued line did that no event says (nobody awaits its outcome)."""
        events = self._session.events
        command, shell = sent.command, sent.shell
        if command is not None and command.compaction is None:
            events.publish(Notice(command.text) if command.ok else ErrorEvent(command.text))
        if shell is not None and shell.ok is None:
            events.publish(Notice(shell.output))

    async def _send_now(self, text: str, max_turns: int) -> SendOutcome:
        if parse_command(text) is not None:
            return SendOutcome(command=await self.command(text))
        if text.startswith("!"):
            return SendOutcome(shell=await self._shell(text[1:].strip()))
        return SendOutcome(turn=await self._turn(text, max_turns))

    async def _turn(self, text: str | Message, max_turns: int) -> TurnResult:
        session = self._session
        attach: list[ToolCall] = []
        if isinstance(text, str):
            for mention in find_mentions(text, session.workspace):
                tool = "list_files" if mention.is_dir else "read_file"
                arguments = json.dumps({"path": mention.raw})
                attach.append(ToolCall(new_id(), tool, arguments))
        if self._mode_note is not None:
            await session.start()  # the SessionStart context stays first
            session.pipeline.add(self._mode_note)
            self._mode_note = None
        return await run_turn(session, text, max_turns=max_turns, attach=attach)

    # -- the queue ---------------------------------------------------------

    @property
    def queued(self) -> tuple[QueuedPrompt, ...]:
        """The prompts waiting for the turn to end, in the order they will go."""
        return tuple(self._queue)

    def edit_queued(self, prompt_id: str, text: str) -> bool:
        """Change a waiting prompt's text; ``False`` when it has already gone."""
        for n, item in enumerate(self._queue):
            if item.id == prompt_id:
                self._queue[n] = QueuedPrompt(prompt_id, text)
                self._publish_queue()
                return True
        return False

    def unqueue(self, prompt_id: str) -> QueuedPrompt | None:
        """Withdraw a waiting prompt (cancelled by the user); ``None`` when it has gone."""
        for item in self._queue:
            if item.id == prompt_id:
                self._queue.remove(item)
                self._publish_queue()
                return item
        return None

    def take_queued(self) -> str:
        """Every waiting prompt, withdrawn and joined for the prompt box (Esc edits them)."""
        texts = [item.text for item in self._queue]
        if self._queue:
            self._queue.clear()
            self._publish_queue()
        return "\n\n".join(texts)

    def _publish_queue(self) -> None:
        self._session.events.publish(QueueChange(tuple(self._queue)))

    # -- @path and !command ----------------------------------------------

    def complete_path(self, prefix: str) -> list[str]:
        """Workspace paths for what follows an ``@`` (folders end with ``/``)."""
        return complete_paths(self._session.workspace, prefix)

    async def shell(self, command: str) -> ShellOutcome:
        """``!command``: run it in the workspace as ``bash`` runs (same permission and
        limits), show its output, and add both to the conversation for the next turn."""
        self._check_idle("run a command")
        self._working = True
        try:
            return await self._shell(command)
        finally:
            self._working = False

    async def _shell(self, command: str) -> ShellOutcome:
        session = self._session
        if not command:
            return ShellOutcome(command, "usage: !command (runs it in the workspace)", None)
        await session.start()
        session.reset_abort()
        call = ToolCall(new_id(), "bash", json.dumps({"command": command}))
        session.set_status("tools")
        try:
            result = await session.tools.execute(call, session.tool_context())
            outcome = ShellOutcome.of(command, result)
            message = shell_message(outcome)
            session.pipeline.add(message)  # persisted before the model may see it
            session.pipeline.end_turn()
            session.events.publish(MessageAdded(message))
        finally:
            session.set_status("idle")
        return outcome

    # -- modes -------------------------------------------------------------

    @property
    def mode(self) -> SessionMode:
        """``plan`` while plan mode is on, else the permission mode."""
        if self._session.state.plan is not None:
            return "plan"
        return self._runtime.permission_mode

    def set_mode(self, mode: SessionMode) -> SessionMode:
        """Switch the mode (Shift+Tab, a control); the model learns of it at the next prompt.

        The permission mode applies from the next tool call; entering or
        leaving plan mode changes what the tools allow at once.
        """
        if mode not in SESSION_MODES:
            raise ValueError(f"unknown mode {mode!r}; the modes are {', '.join(SESSION_MODES)}")
        session = self._session
        before = self.mode
        if mode == before:
            return mode
        if mode == "plan":
            plan_file = plan_file_for(session.tool_context())
            session.state.enter_plan_mode(plan_file)
        else:
            if before == "plan":
                session.state.exit_plan_mode()
            self._runtime.permission_mode = mode
        if "plan" in (mode, before):
            self._mode_note = mode_reminder(session.state.plan, session.workspace, mode)
        session.events.publish(ModeChange(mode))
        return mode

    def cycle_mode(self) -> SessionMode:
        """The next mode in ``SESSION_MODES`` order (ask → accept-edits → bypass → plan → ask)."""
        modes = SESSION_MODES
        return self.set_mode(modes[(modes.index(self.mode) + 1) % len(modes)])

    async def command(self, text: str) -> CommandOutcome:
        """``/compact [instructions]``, ``/status``, ``/help`` (the guard applies as in the CLI)."""
        parsed = parse_command(text)
        if parsed is None:
            raise ValueError(f"not a command: {text[:40]!r}")
        return await run_command(self._runtime, *parsed)

    async def compact(self, instructions: str | None = None) -> CommandOutcome:
        """A manual compaction; ignored while a response streams or tools run."""
        return await run_command(self._runtime, "/compact", instructions or "")

    def cancel(self) -> None:
        """Stop the turn (or the compaction) at the next safe point; pending
        permission requests are answered as cancelled."""
        self._session.abort()

    def answer(self, permission_id: str, decision: PermissionDecision) -> bool:
        return self._session.answer(permission_id, decision)

    # -- rewind and fork (cairn.agent.rewind) ------------------------------

    def prompt_points(self) -> list[PromptPoint]:
        """The prompts the user typed, oldest first: the points ``rewind`` goes back to."""
        return prompt_points(self._session)

    def rewind(self, point_id: str, *, restore_files: bool = False) -> RewindOutcome:
        """A new session branched just before prompt ``point_id``, now the current one.

        This session stays as it is, listed among the workspace's sessions.
        ``restore_files``: also put back the files write_file / edit_file
        changed after the prompt (``bash`` commands since are named, not
        undone). Raises ``RewindPointError`` for an unknown point.
        """
        self._check_idle("rewind")
        _guard(self._runtime, "rewind")
        branch = rewind_session(self._session, point_id, restore_files=restore_files)
        return RewindOutcome(
            AgentSession(self._runtime, branch.session), branch.prompt or "", branch.files
        )

    def fork(self) -> AgentSession:
        """A copy of this session as it stands (same context, same compactions), now current."""
        self._check_idle("fork the session")
        _guard(self._runtime, "fork the session")
        return AgentSession(self._runtime, fork_session(self._session).session)

    # -- watching --------------------------------------------------------

    def events(self) -> AsyncIterator[Event]:
        """Every event from now on, until the session closes."""
        return self._session.events.subscribe()

    def on_event(self, callback: Callable[[Event], None]) -> None:
        """Call ``callback`` with every event as it is published, in order, synchronously.

        For a surface that must have passed on all of a turn's events before
        it answers the request that ran the turn (the editor agent answers
        ``session/prompt`` only after the turn's updates); others use ``events()``.
        """
        self._session.events.on(callback)

    @property
    def id(self) -> str:
        return self._session.id

    @property
    def status(self) -> SessionStatus:
        return self._session.status

    @property
    def stored_id(self) -> str:
        """The id the transcript is stored under now: a new one if its file was replaced."""
        return self._session.pipeline.session_id

    @property
    def transcript_path(self) -> Path:
        return self._session.pipeline.transcript_path

    @property
    def running_tasks(self) -> list[str]:
        """The background tasks still running (``bash`` in the background, ``task``)."""
        return [t.id for t in self._session.state.tasks.values() if t.status == "running"]

    def ui_messages(self) -> list[Message]:
        """Everything a person saw, across every compaction, in order."""
        return self._session.ui_messages()

    def ui_page(self, before: int | None = None, limit: int | None = None) -> UiPage:
        """A page of what a person saw: the ``limit`` entries before position ``before``.

        Read from the transcript holding only the page, so a UI can show a long
        session's end first and fetch earlier pages as the user scrolls up.
        """
        return self._session.ui_page(before, limit)

    @property
    def usage(self) -> SessionUsage:
        session = self._session
        return SessionUsage(
            session.latest_total_tokens(),
            session.model.context_window,
            session.pipeline.input_budget,
            session.pipeline.epoch,
            session.pipeline.project(session.fixed_context()).tokens,
        )

    @property
    def busy(self) -> bool:
        """The session works (a turn, a command, a compaction): a line sent now is queued."""
        return self._working or self._session.status != "idle"

    def _check_idle(self, what: str) -> None:
        if self.busy:
            raise SessionBusyError(f"cannot {what}: {self.busy_reason(self._session.status)}")


def _guard(runtime: Runtime, what: str) -> None:
    current = runtime.current_session
    if current is not None and current.status != "idle":
        raise SessionBusyError(f"cannot {what}: {AgentSession.busy_reason(current.status)}")


# -- rewind and fork ------------------------------------------------------------


@dataclass(frozen=True)
class RewindOutcome:
    """What ``AgentSession.rewind`` made: the branch, the prompt to edit, the files."""

    #: The new session, branched just before the prompt; the runtime's current one.
    session: AgentSession
    #: The prompt's text, for the prompt box.
    prompt: str
    #: Files restored and removed, what could not be, and the ``bash`` commands since.
    files: RestoredFiles
