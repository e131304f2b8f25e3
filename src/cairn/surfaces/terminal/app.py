"""``CairnApp``: the terminal surface over one ``AgentSession`` (DESIGN §8, seed 004).

The app owns its message list (``view.Transcript``): events from the
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

Every failure a person can cause or meet — a provider error, a hook, a
store that cannot be opened, a bad command — becomes one notice or error
block in the list, never a traceback.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import ClassVar

from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.driver import Driver
from textual.widgets import Static
from textual.worker import Worker

from cairn.agent.agent_session import AgentSession, SessionBusyError
from cairn.agent.commands import HELP
from cairn.agent.events import (
    CompactBlockAdded,
    CompactionContentUpdate,
    CompactionStateChange,
    ErrorEvent,
    Event,
    MessageAdded,
    MessageUpdated,
    Notice,
    PermissionRequested,
    StatusChange,
    SummaryPrepared,
    ToolFinished,
    ToolStarted,
    UsageUpdate,
)
from cairn.agent.loop import TurnError
from cairn.agent.session import PermissionDecision, Runtime
from cairn.errors import CairnError
from cairn.store import StoreError
from cairn.surfaces.terminal.permission import PermissionScreen
from cairn.surfaces.terminal.picker import SessionPicker
from cairn.surfaces.terminal.view import (
    EARLIER_STEP,
    HISTORY_PAGE,
    Submission,
    Transcript,
    classify,
    completion_hint,
    earlier_messages,
    earlier_text,
    hint_text,
    meter_text,
    one_line,
    refusal,
    window,
)
from cairn.surfaces.terminal.widgets import MessageList, PromptInput

KEYS = """Keys:
  Enter          send the prompt
  Ctrl+J         a new line in the prompt (so does \\ then Enter)
  Tab            complete a /command; else move the focus (Enter on ▶ expands a result)
  Esc / Ctrl+C   cancel the running response or compaction
  Ctrl+C twice   quit (on an idle prompt); Ctrl+D quits too
  Ctrl+O         expand: render the latest 10 messages instead of 30
  Ctrl+Home      to the top of the list, and earlier messages above it (so does
                 scrolling up at the top)
  Ctrl+End       to the end of the list (the latest message)
  Up / Down      input history (from the prompt's first / last line)"""

EXIT_ARMED = "Press Ctrl+C again to exit"


class CairnApp(App[None]):
    """One session: the message list, the hint line, the input and the context meter."""

    TITLE = "cairn"
    CSS = """
    #messages { height: 1fr; padding: 0 1; }
    .entry { margin-bottom: 1; }
    .notice { color: $text-muted; }
    #hint { height: 1; padding: 0 1; color: $accent; }
    #completions { height: 1; padding: 0 1; color: $text-muted; }
    #meter { height: 1; padding: 0 1; background: $panel; color: $text-muted; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        # Priority: the input binds Ctrl+C (copy) and Ctrl+D (delete) itself.
        Binding("ctrl+c", "interrupt", "Cancel / quit", priority=True),
        Binding("ctrl+d", "quit_app", "Quit", priority=True),
        Binding("ctrl+o", "toggle_expanded", "Expand", priority=True),
        Binding("ctrl+home", "earlier", "Earlier messages", priority=True),
        Binding("ctrl+end", "latest", "Latest messages", priority=True),
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
        self._permissions: dict[str, PermissionScreen] = {}

    # -- layout ------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield MessageList(id="messages")
        yield Static("", id="hint", markup=False)
        yield PromptInput()
        yield Static("", id="completions", markup=False)
        yield Static("", id="meter", markup=False)

    def on_mount(self) -> None:
        self.query_one("#completions", Static).display = False
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
        usage = self.agent.usage
        text = meter_text(
            self._meter_tokens,
            usage.input_budget,
            usage.compactions,
            estimate=usage.projected_tokens,
            prepared=self._prepared,
        )
        self.query_one("#meter", Static).update(text)

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
            prompt.value = ""  # a prompt refused while the agent works stays to be sent later
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
        """The line under the input: the commands a typed ``/`` prefix can become."""
        completions = self.query_one("#completions", Static)
        hint = completion_hint(text)
        if hint != str(completions.content):
            completions.update(hint)
        completions.display = bool(hint)

    @property
    def completions(self) -> str:
        """The command completions shown under the input (empty: hidden)."""
        return str(self.query_one("#completions", Static).content)

    def submit(self, submission: Submission) -> bool:
        """Run what the input line asked for; anything refused becomes one notice.

        False for a prompt that could not be sent yet (the agent is working),
        so the box keeps it.
        """
        match submission.kind:
            case "empty":
                pass
            case "unknown":
                self.transcript.notice(
                    f"unknown command {submission.command}; /help lists the commands"
                )
            case "prompt":
                if self.busy:
                    self.transcript.notice(
                        f"the session is {self._busy_state()}: wait for it, or press Esc to cancel"
                    )
                    return False
                self._start(self._prompt(submission.text))
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
        elif name == "/help":
            self.transcript.notice(f"{HELP}\n{KEYS}")
        else:
            self._start(self._outcome(submission.text))

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

    def _busy_state(self) -> str:
        status = self.agent.status
        return "busy" if status == "idle" else status

    # -- workers -----------------------------------------------------------

    def _start(self, work: Awaitable[None]) -> Worker[None]:
        worker: Worker[None] = self.run_worker(work, group="work", exit_on_error=False)
        self._work.add(worker)
        return worker

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker in self._work and event.worker.is_finished:
            self._work.discard(event.worker)
            self._refresh()

    async def _prompt(self, text: str) -> None:
        ended = self._turns_ended
        self._usage_seen = False
        self._errors_shown.clear()  # only this turn's error events can repeat its error
        try:
            await self.agent.prompt(text)
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

    async def _compact(self, instructions: str | None) -> None:
        # The events worker may not have seen the block yet: ask the session itself.
        before = self.agent.usage.compactions
        try:
            outcome = await self.agent.compact(instructions)
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

    def action_cancel(self) -> None:
        if self.busy:
            self._cancel()

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
