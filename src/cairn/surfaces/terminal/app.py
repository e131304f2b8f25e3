"""``CairnApp``: the terminal surface over one ``AgentSession`` (DESIGN §8, seed 004).

Kept whole: one Textual ``App``; Textual finds its ``on_*``/``action_*`` handlers on the class.

The app owns its message list (``transcript.Transcript``): events from the
session are folded into it by one worker, and prompts and commands run as
workers of their own, so the screen stays live while the agent works.
After a compaction the old messages stay; the compact block is appended
and new messages follow it; only the latest 30 entries (10 expanded) are
mounted, while the session and the transcript keep everything.

A session opens with only the end of its UI view read from the transcript
(``HISTORY_PAGE`` entries, ``AgentSession.ui_page``), however long it is. A
line above the first entry shown counts the messages before it; scrolling to
the top of the list, or Ctrl+Home, mounts ``EARLIER_STEP`` more above it —
reading the page before from the transcript once those held run out — and
leaves what is on the screen where it was.

A line from the prompt box goes through ``AgentSession.send``, the one
gesture every surface shares: a prompt (its ``@path`` mentions attached by
the core), a ``!command`` (shown as its block, live and on resume), or a
``/command``. While the agent works a prompt or ``!command`` is queued by the
core: the queued lines show under the list, Esc takes them back into the box
(a second Esc cancels), and the core sends them when the work ends. Commands sent while the agent
works run at once, as they always did (queued, the core would drop what they
say). The app keeps the commands that are about what it shows: ``/help``,
``/clear``, ``/resume`` and ``/fork`` (switching the session shown), the
rewind picker (``/rewind``, or Esc Esc on an empty idle prompt), and
``/compact``'s notices. Tab completes a ``/command`` or an ``@path``;
Shift+Tab cycles the mode, which the footer shows beside the context meter
(``SessionUsage.meter``: never a number over the budget).

Every failure a person can cause or meet — a provider error, a hook, a
store that cannot be opened, a bad command — becomes one notice or error
block in the list, never a traceback.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import ClassVar

from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.driver import Driver
from textual.widgets import Static
from textual.worker import Worker

from cairn.agent import (
    HELP,
    AgentSession,
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
    PromptPoint,
    QueueChange,
    QueuedPrompt,
    RewindPointError,
    Runtime,
    SendOutcome,
    SessionBusyError,
    SessionMode,
    StatusChange,
    SummaryPrepared,
    ToolFinished,
    ToolStarted,
    TurnError,
    UsageUpdate,
)
from cairn.errors import CairnError
from cairn.store import StoreError
from cairn.surfaces.terminal.permission import PermissionScreen
from cairn.surfaces.terminal.picker import RestoreChoice, RewindPicker, SessionPicker
from cairn.surfaces.terminal.transcript import Transcript, earlier_messages, window
from cairn.surfaces.terminal.view import (
    EARLIER_STEP,
    HISTORY_PAGE,
    Submission,
    classify,
    completion_hint,
    earlier_text,
    hint_text,
    mention_prefix,
    meter_text,
    mode_text,
    one_line,
    paths_hint,
    queued_text,
    refusal,
    rewound_text,
)
from cairn.surfaces.terminal.widgets import MessageList, PromptInput

KEYS = """Keys:
  Enter          send the prompt (queued while the agent works); !cmd runs cmd
  Ctrl+J         a new line in the prompt (so does \\ then Enter)
  Tab            complete a /command or an @path; else move the focus (Enter on ▶
                 expands a result)
  Shift+Tab      cycle the mode: ask → accept-edits → bypass → plan
  Esc            queued lines back into the prompt; else cancel the running
                 response or compaction; Esc Esc on an empty prompt: rewind
  Ctrl+C         cancel the running response or compaction
  Ctrl+C twice   quit (on an idle prompt); Ctrl+D quits too
  Ctrl+O         expand: render the latest 10 messages instead of 30
  Ctrl+Home      to the top of the list, and earlier messages above it (so does
                 scrolling up at the top)
  Ctrl+End       to the end of the list (the latest message)
  Up / Down      input history (from the prompt's first / last line)"""

EXIT_ARMED = "Press Ctrl+C again to exit"
REWIND_ARMED = "Press Esc again to rewind to an earlier prompt"


class CairnApp(App[None]):
    """One session: the message list, the hint line, the input and the context meter."""

    TITLE = "cairn"
    CSS = """
    #messages { height: 1fr; padding: 0 1; }
    .entry { margin-bottom: 1; }
    .notice { color: $text-muted; }
    #hint { height: 1; padding: 0 1; color: $accent; }
    #queued { height: auto; max-height: 5; padding: 0 1; color: $text-muted; }
    #completions { height: 1; padding: 0 1; color: $text-muted; }
    #footer { height: 1; background: $panel; color: $text-muted; }
    /* The meter whole; the mode takes what is left (cut first on a narrow screen). */
    #meter { width: auto; padding: 0 1; }
    #mode {
        width: 1fr; padding: 0 1; text-align: right; text-wrap: nowrap; text-overflow: ellipsis;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        # Priority: the input binds Ctrl+C (copy) and Ctrl+D (delete) itself.
        Binding("ctrl+c", "interrupt", "Cancel / quit", priority=True),
        Binding("ctrl+d", "quit_app", "Quit", priority=True),
        Binding("ctrl+o", "toggle_expanded", "Expand", priority=True),
        Binding("ctrl+home", "earlier", "Earlier messages", priority=True),
        Binding("ctrl+end", "latest", "Latest messages", priority=True),
        # Priority: the screen binds Shift+Tab to move the focus back.
        Binding("shift+tab", "cycle_mode", "Mode", priority=True),
        Binding("escape", "cancel", "Cancel"),
    ]

    def __init__(
        self, runtime: Runtime, agent: AgentSession, *, driver_class: type[Driver] | None = None
    ) -> None:
        super().__init__(driver_class=driver_class)
        self.runtime = runtime
        self.agent = agent
        self.transcript = Transcript()
        self.expanded = False
        #: The UI view position of the first message read from the transcript (0: all read).
        self._history_start = 0
        #: The position the next message of the session takes (every one so far is known).
        self._next_position = 0
        #: The first entry mounted, once the user went up (``None``: the latest ones).
        self._top: int | None = None
        #: The hint line's text, as shown (empty: hidden).
        self.hint = ""
        self._compacting = False
        self._compaction_text = ""
        #: The summary prepared in the background: ``preparing``, ``ready`` or ``None``.
        self._prepared: str | None = None
        self._streamed = ""
        self._status = agent.status
        self._frame = 0
        #: Prompt and command workers still running (their status may not have reached
        #: the session yet, so the session's own status alone is not enough).
        self._work: set[Worker[None]] = set()
        self._errors_shown: set[str] = set()
        #: A failed turn's message, until the events show whether its error event said it.
        self._turn_errors: list[str] = []
        #: Turns the events have seen end (an ``idle`` not ending a compaction).
        self._turns_ended = 0
        self._meter_tokens: int | None = agent.usage.latest_total_tokens
        #: Whether a response of the running turn reported usage.
        self._usage_seen = False
        self._exit_armed = False
        #: Esc presses in a row on an empty idle prompt (two open the rewind picker).
        self._idle_escapes = 0
        self._permissions: dict[str, PermissionScreen] = {}

    # -- layout ------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield MessageList(id="messages")
        yield Static("", id="hint", markup=False)
        yield Static("", id="queued", markup=False)
        yield PromptInput()
        yield Static("", id="completions", markup=False)
        with Horizontal(id="footer"):
            yield Static("", id="meter", markup=False)
            yield Static("", id="mode", markup=False)

    def on_mount(self) -> None:
        self.query_one("#completions", Static).display = False
        self.query_one("#queued", Static).display = False
        self.query_one(PromptInput).paths = self._paths
        self._open(self.agent, announce=None)
        self.set_interval(0.1, self._tick)
        self.query_one(PromptInput).focus()

    @property
    def busy(self) -> bool:
        return bool(self._work) or self.agent.status != "idle"

    @property
    def resume_command(self) -> str | None:
        """``cairn --resume <id>`` for the session open now; ``None`` while it has no
        message (there is nothing to come back to)."""
        try:
            messages = self.agent.ui_page(limit=1).total
        except (CairnError, OSError):  # what the app has seen then: the exit must not fail
            messages = self._next_position
        return f"cairn --resume {self.agent.id}" if messages else None

    # -- sessions ----------------------------------------------------------

    def _open(self, agent: AgentSession, *, announce: str | None) -> None:
        """Show ``agent``: the end of its UI history, then follow its events."""
        self.agent = agent
        self.transcript = Transcript()
        self._compacting, self._compaction_text, self._streamed = False, "", ""
        self._status = agent.status
        self._history_start = self._next_position = 0
        self._top = None
        try:
            page = agent.ui_page(limit=HISTORY_PAGE)
        except (CairnError, OSError) as exc:
            self.transcript.error(f"cannot read the session: {one_line(str(exc), 300)}")
        else:
            self.transcript.prepend(page.messages, page.start)
            self._history_start, self._next_position = page.start, page.total
        self._meter_tokens = agent.usage.latest_total_tokens
        if announce:
            self.transcript.notice(announce)
        self._refresh_meter()
        self._show_mode(agent.mode)
        self._show_queue(agent.queued)
        self.run_worker(self._follow(agent), group="events", exit_on_error=False)
        self._refresh()

    async def _follow(self, agent: AgentSession) -> None:
        async for event in agent.events():
            if agent is not self.agent:
                continue  # the tail of a session switched away from
            try:
                self._on_event(event)
            except Exception as exc:  # a rendering bug must not end the stream
                self.transcript.error(f"cannot show {type(event).__name__}: {exc}")
            self._refresh()

    # -- events ------------------------------------------------------------

    def _on_event(self, event: Event) -> None:
        match event:
            case MessageUpdated(message_id=message_id, content=content, reasoning=reasoning):
                self.transcript.streamed(message_id, content)
                self._streamed = content or reasoning
            case MessageAdded(message=message):
                self.transcript.add(message, self._next_position)
                self._next_position += 1
                if message.role == "assistant":
                    self._streamed = ""
            case ToolStarted(call=call):
                self.transcript.tool_started(call)
            case ToolFinished(call_id=call_id, result=result):
                self.transcript.tool_result(call_id, result)
            case CompactionStateChange(is_compacting=is_compacting):
                self._compacting, self._compaction_text = is_compacting, ""
                if not is_compacting:
                    self._refresh_meter()
            case CompactionContentUpdate(content=content):
                self._compaction_text = content
            case SummaryPrepared(state=state):
                self._prepared = state
                self._refresh_meter()
            case CompactBlockAdded(block=block):
                self.transcript.add(block, self._next_position)
                self._next_position += 1
                post = block.meta.extra.get("post_tokens")
                if isinstance(post, int):
                    self._meter_tokens = post
                self._refresh_meter()
            case UsageUpdate(latest_total_tokens=tokens):
                self._meter_tokens, self._usage_seen = tokens, True
                self._refresh_meter()
            case StatusChange(status=status):
                if status == "streaming" and self._status == "idle":
                    # A turn starts (a queued line's too): only its responses count.
                    self._usage_seen = False
                if status == "idle" and self._status != "compacting":
                    self._turn_ended()
                    if not self._usage_seen:
                        # No response of the turn reported usage: any count shown
                        # (a compaction's) is older than the turn; the estimate is not.
                        self._meter_tokens = None
                self._status = status
                if status == "idle":
                    self._streamed = ""
                    # A server that sends no usage leaves the estimate, which the turn moved.
                    self._refresh_meter()
            case Notice(text=text):
                self.transcript.notice(text)
            case ErrorEvent(message=message):
                self._errors_shown.add(message)
                self.transcript.error(message)
            case PermissionRequested():
                self._ask(event)
            case ModeChange(mode=mode):
                self._show_mode(mode)
            case QueueChange(prompts=prompts):
                self._show_queue(prompts)

    def _turn_ended(self) -> None:
        self._turns_ended += 1
        for message in self._turn_errors:
            self._report_turn_error(message)
        self._turn_errors.clear()

    def _report_turn_error(self, message: str) -> None:
        if message not in self._errors_shown:  # else its error event said it already
            self._errors_shown.add(message)
            self.transcript.error(one_line(message, 500))

    def _ask(self, request: PermissionRequested) -> None:
        agent = self.agent
        screen = PermissionScreen(request)
        self._permissions[request.id] = screen

        def answered(decision: PermissionDecision | None) -> None:
            self._permissions.pop(request.id, None)
            if decision is not None and not agent.answer(request.id, decision):
                self.transcript.notice(f"the permission request for {request.tool} had ended")
                self._refresh()

        self.push_screen(screen, answered)

    # -- drawing -----------------------------------------------------------

    def _refresh(self) -> None:
        entries = self.transcript.entries
        shown = window(entries, self.expanded, self._top)
        above = len(shown) < len(entries) or self._history_start > 0
        earlier = earlier_text(earlier_messages(shown, self._next_position)) if above else None
        self.query_one(MessageList).sync(shown, earlier)
        self._refresh_hint()

    def _load_earlier(self) -> None:
        """Mount ``EARLIER_STEP`` more entries above the first shown, reading a page if need be."""
        entries = self.transcript.entries
        first = len(entries) - len(window(entries, self.expanded, self._top))
        if first < EARLIER_STEP and self._history_start > 0:
            try:
                page = self.agent.ui_page(self._history_start, HISTORY_PAGE)
            except (CairnError, OSError) as exc:
                self.transcript.error(f"cannot read earlier messages: {one_line(str(exc), 300)}")
                self._refresh()
                return
            first += self.transcript.prepend(page.messages, page.start)
            self._history_start = page.start
        if first > 0:
            self._top = max(0, first - EARLIER_STEP)
            self._refresh()

    def on_message_list_reached_top(self, event: MessageList.ReachedTop) -> None:
        event.stop()
        self._load_earlier()

    def _refresh_hint(self) -> None:
        text = EXIT_ARMED if self._exit_armed and not self.busy else ""
        if not text and self._idle_escapes == 1 and not self.busy:
            text = REWIND_ARMED
        text = text or hint_text(
            compacting=self._compacting,
            compaction_text=self._compaction_text,
            status=self._status,
            streamed=self._streamed,
            frame=self._frame,
        )
        if text != self.hint:
            self.hint = text
            hint = self.query_one("#hint", Static)
            hint.update(text)
        self.query_one("#hint", Static).display = bool(self.hint)

    def _refresh_meter(self) -> None:
        # The count is the latest the events gave (a compaction's new size included),
        # which the session's stored messages may not show yet; the reading of it —
        # an estimate marked, never a number over the budget — is the core's.
        usage = replace(self.agent.usage, latest_total_tokens=self._meter_tokens)
        self.query_one("#meter", Static).update(meter_text(usage, prepared=self._prepared))

    def _show_mode(self, mode: SessionMode) -> None:
        self.query_one("#mode", Static).update(mode_text(mode))

    @property
    def mode(self) -> str:
        """The footer's mode, as shown."""
        return str(self.query_one("#mode", Static).content)

    def _show_queue(self, prompts: Sequence[QueuedPrompt]) -> None:
        line = self.query_one("#queued", Static)
        line.update(queued_text(prompts))
        line.display = bool(prompts)

    @property
    def queued(self) -> str:
        """The queued lines under the list, as shown (empty: none)."""
        line = self.query_one("#queued", Static)
        return str(line.content) if line.display else ""

    @property
    def meter(self) -> str:
        return str(self.query_one("#meter", Static).content)

    def _tick(self) -> None:
        if self._status in ("streaming", "tools") and not self._compacting:
            self._frame += 1
            self._refresh_hint()

    # -- input -------------------------------------------------------------

    def on_prompt_input_submitted(self, event: PromptInput.Submitted) -> None:
        event.stop()
        prompt = event.prompt
        text = event.value
        prompt.remember()
        self._exit_armed = False
        if self.submit(classify(text)):
            prompt.value = ""  # sent, or queued: either way it left the box
            self._refresh_completions("")
        self._refresh()
        # What was sent and what answers it show at the end, wherever the list was.
        self.query_one(MessageList).follow()

    def on_key(self, event: events.Key) -> None:
        # A key typed while the focus is elsewhere on the main screen (on an
        # expanded result's title, say) is meant for the prompt: it goes there.
        prompt = self.query_one(PromptInput)
        if len(self.screen_stack) > 1 or prompt.has_focus:
            return
        if event.is_printable and event.character:
            event.stop()
            prompt.focus()
            prompt.insert(event.character)

    def on_text_area_changed(self, event: PromptInput.Changed) -> None:
        if not isinstance(event.text_area, PromptInput):
            return
        event.stop()
        text = event.text_area.text
        self._refresh_completions(text)
        if self._exit_armed and text:  # typing means the user is not leaving
            self._exit_armed = False
            self._refresh_hint()

    def _refresh_completions(self, text: str) -> None:
        """The line under the input: the commands a typed ``/`` prefix can become, or
        the workspace paths an ``@`` before the cursor can."""
        completions = self.query_one("#completions", Static)
        hint = completion_hint(text)
        if not hint and text:
            prefix = mention_prefix(self.query_one(PromptInput).before_cursor())
            hint = paths_hint(self._paths(prefix)) if prefix is not None else ""
        if hint != str(completions.content):
            completions.update(hint)
        completions.display = bool(hint)

    @property
    def completions(self) -> str:
        """The command or path completions shown under the input (empty: hidden)."""
        return str(self.query_one("#completions", Static).content)

    def _paths(self, prefix: str) -> list[str]:
        """The open session's workspace paths for ``@prefix``; none if they cannot be read."""
        try:
            return self.agent.complete_path(prefix)
        except (CairnError, OSError):
            return []

    def submit(self, submission: Submission) -> bool:
        """Run what the input line asked for; anything refused becomes one notice.

        A prompt or ``!command`` goes to ``AgentSession.send``, which queues it
        while the agent works. True: the line left the box.
        """
        match submission.kind:
            case "empty":
                pass
            case "unknown":
                self.transcript.notice(
                    f"unknown command {submission.command}; /help lists the commands"
                )
            case "prompt":
                self._start(self._send(submission.text))
            case "command":
                self._command(submission)
        return True

    def _command(self, submission: Submission) -> None:
        name, argument = submission.command, submission.argument
        refused = refusal(name, self.agent.status, bool(self._work))
        if refused is not None:
            self.transcript.notice(refused)
        elif name == "/compact":
            self._start(self._compact(argument or None))
        elif name == "/clear":
            self._switch(lambda: self.agent.clear(), "new session {id}")
        elif name == "/resume" and argument == self.agent.id:
            self.transcript.notice(f"already in session {argument}")
        elif name == "/resume" and argument:
            self._resume(argument)
        elif name == "/resume":
            self._pick()
        elif name == "/fork":
            original = self.agent.id
            announce = f"forked {original} into {{id}}: this is the copy (/resume {original})"
            self._switch(lambda: self.agent.fork(), announce)
        elif name == "/rewind" and not argument:
            self._pick_point()
        elif name == "/help":
            self.transcript.notice(f"{HELP}\n{KEYS}")
        elif self.agent.busy:
            # At once, as always: queued, the core would send it after the turn and
            # drop what it says.
            self._start(self._outcome(submission.text))
        else:
            self._start(self._send(submission.text))

    def _resume(self, session_id: str) -> None:
        self._switch(lambda: AgentSession.resume(self.runtime, session_id), "resumed session {id}")

    def _pick(self) -> None:
        """``/resume`` with no id: a picker of the workspace's other sessions."""
        try:
            sessions = [s for s in AgentSession.sessions(self.runtime) if s.id != self.agent.id]
        except (CairnError, OSError) as exc:
            self.transcript.error(one_line(f"cannot list the sessions: {exc}", 300))
            return
        if not sessions:
            self.transcript.notice("no other session in this workspace")
            return

        def picked(session_id: str | None) -> None:
            if session_id is None:
                return
            refused = refusal("/resume", self.agent.status, bool(self._work))
            if refused is not None:
                self.transcript.notice(refused)
            else:
                self._resume(session_id)
            self._refresh()

        self.push_screen(SessionPicker(sessions), picked)

    def _switch(self, open_session: Callable[[], AgentSession], announce: str) -> None:
        try:
            agent = open_session()
        except (SessionBusyError, LookupError, StoreError) as exc:
            self.transcript.notice(one_line(str(exc), 300))
            return
        except (CairnError, OSError) as exc:
            self.transcript.error(one_line(str(exc), 300))
            return
        self._open(agent, announce=announce.format(id=agent.id))

    # -- rewind --------------------------------------------------------------

    def _pick_point(self) -> None:
        """Esc Esc, ``/rewind``: a picker of the prompts typed, then what to put back."""
        refused = refusal("/rewind", self.agent.status, bool(self._work))
        if refused is not None:
            self.transcript.notice(refused)
            return
        try:
            points = self.agent.prompt_points()
        except (CairnError, OSError) as exc:
            self.transcript.error(one_line(f"cannot list the prompts: {exc}", 300))
            return
        if not points:
            self.transcript.notice("no earlier prompts to rewind to")
            return

        def restore(point: PromptPoint, restore_files: bool | None) -> None:
            if restore_files is not None:
                self._rewind(point, restore_files=restore_files)
            self._refresh()

        def picked(point: PromptPoint | None) -> None:
            if point is None:
                return
            if point.files_changed:
                # Only the user knows whether the files should go back with the talk.
                self.push_screen(RestoreChoice(point), lambda files: restore(point, files))
            else:
                restore(point, False)

        self.push_screen(RewindPicker(points), picked)

    def _rewind(self, point: PromptPoint, *, restore_files: bool) -> None:
        refused = refusal("/rewind", self.agent.status, bool(self._work))
        if refused is not None:
            self.transcript.notice(refused)
            return
        original = self.agent.id
        try:
            outcome = self.agent.rewind(point.id, restore_files=restore_files)
        except (SessionBusyError, RewindPointError, StoreError) as exc:
            self.transcript.notice(one_line(str(exc), 300))
            return
        except (CairnError, OSError) as exc:
            self.transcript.error(one_line(f"cannot rewind: {exc}", 300))
            return
        branch = outcome.session
        self._open(branch, announce=rewound_text(original, branch.id, outcome.files))
        self._edit(outcome.prompt)

    def _follow_branch(self, text: str) -> bool:
        """After ``/rewind N``: show the branch the core switched the runtime to."""
        current = self.runtime.current_session
        if current is None or current.id == self.agent.id:
            return False
        self._open(AgentSession(self.runtime, current), announce=text)
        return True

    def _edit(self, text: str) -> None:
        """Put ``text`` in the prompt box for editing (a draft typed there stays after it)."""
        prompt = self.query_one(PromptInput)
        prompt.value = "\n\n".join(part for part in (text, prompt.value) if part)
        prompt.focus()

    # -- workers -----------------------------------------------------------

    def _start(self, work: Awaitable[None]) -> Worker[None]:
        worker: Worker[None] = self.run_worker(work, group="work", exit_on_error=False)
        self._work.add(worker)
        return worker

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker in self._work and event.worker.is_finished:
            self._work.discard(event.worker)
            self._refresh()

    async def _send(self, text: str) -> None:
        """A prompt or a command through ``AgentSession.send`` (which sends the queue after it)."""
        agent = self.agent
        self._line_starts(agent)
        await self._reporting(self._send_then_show(agent, text))

    def _line_starts(self, agent: AgentSession) -> None:
        if not agent.busy:  # else the line is queued: the running turn's state stays
            self._errors_shown.clear()  # only this turn's error events can repeat its error

    async def _reporting(self, work: Awaitable[None]) -> None:
        """Run ``work``; whatever it raises becomes one block, never a traceback."""
        ended = self._turns_ended
        try:
            await work
        except TurnError as exc:
            # The turn's events travel through a queue and may not have been shown
            # yet: decide once they have, so an error event is not repeated.
            if self._turns_ended > ended:
                self._report_turn_error(str(exc))
            else:
                self._turn_errors.append(str(exc))
        except SessionBusyError as exc:
            self.transcript.notice(one_line(str(exc), 300))
        except Exception as exc:  # a store or hook failure: a block, never a traceback
            self.transcript.error(one_line(f"{type(exc).__name__}: {exc}", 500))
        self._refresh()

    async def _send_then_show(self, agent: AgentSession, text: str) -> None:
        self._show(await agent.send(text))

    def _show(self, outcome: SendOutcome) -> None:
        """Show what ``send`` did that no event shows."""
        shell, command = outcome.shell, outcome.command
        if shell is not None and shell.ok is None:
            self.transcript.notice(shell.output)  # not run: no message shows it
        if command is not None:
            if command.prompt is not None and self._follow_branch(command.text):
                self._edit(command.prompt)
            elif command.compaction is None:  # a compaction shows as its block
                (self.transcript.notice if command.ok else self.transcript.error)(command.text)

    async def _compact(self, instructions: str | None) -> None:
        agent = self.agent
        if not agent.busy:
            # Through send, which marks the session busy at once: a line typed while it
            # compacts is queued, and goes once the compaction ends.
            self._line_starts(agent)
            try:
                sent = await agent.send(f"/compact {instructions or ''}".strip())
            except Exception as exc:
                self.transcript.error(one_line(f"compaction failed: {exc}", 500))
                self._refresh()
                return
            self._show(sent)
            self._refresh()
            return
        # The events worker may not have seen the block yet: ask the session itself.
        before = agent.usage.compactions
        try:
            outcome = await agent.compact(instructions)
        except Exception as exc:
            self.transcript.error(one_line(f"compaction failed: {exc}", 500))
        else:
            # A compaction that happened shows as its block; say only what else came of it.
            if not (outcome.ok and self.agent.usage.compactions > before):
                add = self.transcript.notice if outcome.ok else self.transcript.error
                add(outcome.text)
        self._refresh()

    async def _outcome(self, text: str) -> None:
        try:
            outcome = await self.agent.command(text)
        except Exception as exc:
            self.transcript.error(one_line(f"{text.split()[0]}: {exc}", 500))
        else:
            (self.transcript.notice if outcome.ok else self.transcript.error)(outcome.text)
        self._refresh()

    # -- keys --------------------------------------------------------------

    async def on_event(self, event: events.Event) -> None:
        # Esc Esc means two Esc presses in a row: any other key in between breaks it.
        if isinstance(event, events.Key) and event.key != "escape" and self._idle_escapes:
            self._idle_escapes = 0
            self._refresh_hint()
        await super().on_event(event)

    def action_cancel(self) -> None:
        """Esc: the queued lines back into the box; else cancel; idle, twice, rewind."""
        if self.agent.queued:
            self._idle_escapes = 0
            self._edit(self.agent.take_queued())
        elif self.busy:
            self._idle_escapes = 0
            self._cancel()
        elif self.query_one(PromptInput).value:
            self._idle_escapes = 0
        elif self._idle_escapes:
            self._idle_escapes = 0
            self._pick_point()
            self._refresh()
        else:
            self._idle_escapes = 1
        self._refresh_hint()

    def action_cycle_mode(self) -> None:
        """Shift+Tab: the next mode (the footer follows the ``modeChange`` event too)."""
        try:
            self._show_mode(self.agent.cycle_mode())
        except (CairnError, OSError, ValueError) as exc:
            self.transcript.error(one_line(f"cannot change the mode: {exc}", 300))
            self._refresh()

    def action_interrupt(self) -> None:
        prompt = self.query_one(PromptInput)
        if self.busy:
            self._cancel()
        elif self._exit_armed:
            self.exit()
        elif prompt.value:
            prompt.value = ""
        else:
            self._exit_armed = True
            self._refresh_hint()

    def action_quit_app(self) -> None:
        self.exit()

    def action_toggle_expanded(self) -> None:
        self.expanded = not self.expanded
        self._top = None  # the view renders the latest 10 (or 30) again
        self.query_one(MessageList).expand_all(self.expanded)
        self._refresh()

    def action_earlier(self) -> None:
        """Ctrl+Home: to the top of the list, and the entries before it mounted above."""
        messages = self.query_one(MessageList)
        # Reaching the top this way must not mount a second step: the call below does one.
        with messages.prevent(MessageList.ReachedTop):
            messages.scroll_home(animate=False, immediate=True)
        self._load_earlier()

    def action_latest(self) -> None:
        """Ctrl+End: to the end of the list, which then follows new messages again."""
        self.query_one(MessageList).follow()

    def _cancel(self) -> None:
        """Stop the response, or the compaction, at its next safe point (the session's cancel)."""
        self.agent.cancel()
        for screen in list(self._permissions.values()):
            screen.dismiss(None)  # the session answered them as cancelled
