"""The browser's panes on the server: each pane one session, all of them in parallel.

A page opens one WebSocket; on it, each pane (``p1``, ``p2`` …, named by the
page) is bound to its own session over its own ``Runtime``, so two panes
stream, run tools and compact at the same time without sharing a guard. The
``Hub`` turns what the page sends (``open``, ``prompt``, ``cancel``,
``answer``, ``close``, ``list``, ``history`` and the everyday gestures:
``complete``, ``unqueue``, ``editQueued``, ``mode``, ``points``, ``rewind``)
into ``AgentSession`` calls and the sessions' events into frames, through one
writer so their order holds.

A line from the prompt box goes through ``AgentSession.send``, as on every
surface: a ``/command``, a ``!command`` or a prompt, queued by the core while
the pane works (the ``queueChange`` event shows the queue). Only the commands
that change which session the pane shows are the hub's: ``/clear``,
``/resume`` (the sidebar), ``/fork`` and ``/rewind N`` — after a fork or a
rewind the pane shows the branch (``rewound`` says what came back).

A long session is paged: ``opened`` carries only the last ``HISTORY_PAGE``
entries of its UI view, with ``start`` (the position of the first of them)
and ``total``; the page asks for earlier ones as the user scrolls up
(``history {pane, before, limit}``, answered by ``history {pane, sessionId,
messages, start, total}``). Positions are stable, since entries only ever
append, so a page fetched while events arrive never overlaps them.

The guard (seed 004, 压缩期间的会话保护): while a pane's session streams, runs
tools or a background task, or compacts, it cannot switch to another session
nor ``/clear``; the page disables the controls, and the server refuses too.
A session is open in at most one pane at a time, across every page. One
that another process is writing (another worker, a terminal ``cairn``) opens
read-only instead, followed live (``watch.Watch``).

A frame the protocol does not allow — an unknown type, a missing field, a
session id that is no id (``../../etc/passwd``, empty, 10,000 characters) —
is answered with an ``error`` frame before anything touches the store; the
page's other panes go on. The sidebar's ``sessions`` are read off the loop
(``listing.SessionList``), one read for however many ``list`` frames came
while one was being read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine

from cairn.agent import (
    HELP,
    PERMISSION_DECISIONS,
    SESSION_MODES,
    AgentSession,
    CompactBlockAdded,
    Event,
    MessageAdded,
    RestoredFiles,
    RewindPointError,
    SendOutcome,
    SessionBusyError,
    StatusChange,
    TurnError,
    UsageUpdate,
    parse_command,
)
from cairn.errors import CairnError
from cairn.messages import JSONObject, JSONValue
from cairn.store import TranscriptLockedError, UiPage
from cairn.store.paths import is_session_id
from cairn.surfaces.web.frames import (
    event_frame,
    history_frame,
    opened_frame,
    state_frame,
)
from cairn.surfaces.web.listing import SessionList
from cairn.surfaces.web.page_frames import (
    HISTORY_LIMIT_MAX,
    WRITING_FRAMES,
    FrameError,
    count_field,
    prefix_field,
    read_frame,
    shown,
    text_field,
)
from cairn.surfaces.web.panes import OpenSessions, Pane, WebSetup, doing
from cairn.surfaces.web.watch import Watch

log = logging.getLogger(__name__)

#: UI entries ``opened`` carries: the end of the session, however long it is.
HISTORY_PAGE = 300


class Hub:
    """One page's panes, over one WebSocket."""

    def __init__(
        self,
        setup: WebSetup,
        send: Callable[[JSONObject], None],
        open_sessions: OpenSessions,
        on_sessions_changed: Callable[[str], None] = lambda session_id: None,
        session_list: SessionList | None = None,
    ) -> None:
        self.setup = setup
        self._send = send
        self._open = open_sessions
        #: Called with a session's id when this page changed what the sidebar shows of it.
        self._sessions_changed = on_sessions_changed
        self._session_list = session_list or SessionList(setup.runtime)
        #: The ``sessions`` frame being read for this page, and whether it was asked
        #: for again meanwhile (then one more read follows, however often it was asked).
        self._listing: asyncio.Task[None] | None = None
        self._list_again = False
        self.panes: dict[str, Pane] = {}
        #: Panes following a session another process writes (never also in ``panes``).
        self.watches: dict[str, Watch] = {}

    # -- frames from the page ------------------------------------------------------

    async def handle(self, frame: object) -> None:
        """Act on one frame; a bad one is answered with an ``error`` frame, never raised."""
        try:
            await self._dispatch(read_frame(frame))
        except FrameError as exc:
            self._send({"type": "error", "pane": None, "text": str(exc)})

    async def _dispatch(self, frame: dict[str, JSONValue]) -> None:
        kind = frame["type"]
        if kind == "list":
            self.send_sessions()
            return
        pane_id = text_field(frame, "pane")
        watch = self.watches.get(pane_id)
        if watch is not None and kind in WRITING_FRAMES:
            self._refuse(pane_id, f"read-only: {watch.reason}")
            return
        if watch is not None and kind == "history":
            await self._watch_history(watch, frame)
            return
        if kind == "open":
            session_id = frame.get("sessionId")
            if session_id is not None and not isinstance(session_id, str):
                raise FrameError("open: sessionId must be a string or null")
            if session_id is not None and not is_session_id(session_id):
                # Checked before the store sees it: an id names a file.
                raise FrameError(
                    f"open: sessionId {shown(session_id)} is not a session id "
                    "(1-128 letters, digits, '.', '_' or '-')"
                )
            self.open(pane_id, session_id)
        elif kind == "prompt":
            self.prompt(pane_id, text_field(frame, "text"))
        elif kind == "cancel":
            self._pane(pane_id).agent.cancel()  # the queue stays (AgentSession.send)
        elif kind == "answer":
            decision = text_field(frame, "decision")
            if decision not in PERMISSION_DECISIONS:
                raise FrameError(f"answer: unknown decision {decision!r}")
            pane = self._pane(pane_id)
            if not pane.agent.answer(text_field(frame, "permissionId"), decision):
                self._notice(pane_id, "that permission request had already ended")
        elif kind == "close":
            await self.close_pane(pane_id)
        elif kind == "history":
            before = count_field(frame, "before", 0)
            self.history(pane_id, before, count_field(frame, "limit", 1, HISTORY_LIMIT_MAX))
        elif kind == "complete":
            await self.complete(pane_id, prefix_field(frame))
        elif kind == "unqueue":
            if self._pane(pane_id).agent.unqueue(text_field(frame, "id")) is None:
                self._notice(pane_id, "that line has been sent already")
        elif kind == "editQueued":
            pane = self._pane(pane_id)
            if not pane.agent.edit_queued(text_field(frame, "id"), text_field(frame, "text")):
                self._notice(pane_id, "that line has been sent already")
        elif kind == "mode":
            mode = frame.get("mode")
            if mode not in SESSION_MODES:
                raise FrameError(f"mode: mode must be one of {', '.join(SESSION_MODES)}")
            self._pane(pane_id).agent.set_mode(mode)
        elif kind == "points":
            self.points(pane_id)
        elif kind == "rewind":
            restore = frame.get("restoreFiles", False)
            if not isinstance(restore, bool):
                raise FrameError("rewind: restoreFiles must be true or false")
            self.rewind(pane_id, text_field(frame, "pointId"), restore_files=restore)

    # -- panes -----------------------------------------------------------------------

    def open(self, pane_id: str, session_id: str | None) -> None:
        """Bind the pane to a new session (``None``) or to a stored one.

        A stored one another process is writing is followed instead, read-only
        (``Watch``); opening it again once that process let it go resumes it.
        """
        pane = self.panes.get(pane_id)
        if pane is not None and session_id == pane.agent.id:
            self._opened(pane)  # the same session again: no switch, so no guard
            return
        if pane is not None and pane.busy:
            self._refuse(
                pane_id, f"cannot open another session: {AgentSession.busy_reason(doing(pane))}"
            )
            return
        if session_id is not None and self._open.held(session_id):
            self._refuse(pane_id, f"session {session_id} is open in another pane")
            return
        runtime = self.setup.runtime()
        try:
            agent = (
                AgentSession.new(runtime)
                if session_id is None
                else AgentSession.resume(runtime, session_id)
            )
        except TranscriptLockedError as exc:
            # Open for writing elsewhere (another worker, a terminal `cairn`): follow it.
            assert session_id is not None  # a new session has no other writer
            if pane is not None:
                self._release(pane)
                del self.panes[pane_id]
            self._unwatch(pane_id)
            reason = f"session {session_id} is being written by another process: {exc}"
            watch = Watch(
                pane_id, session_id, runtime, self._send, reason=reason, page_size=HISTORY_PAGE
            )
            self.watches[pane_id] = watch
            watch.start()
            return
        except LookupError as exc:
            runtime.close()
            self._refuse(pane_id, str(exc))
            return
        except (CairnError, OSError) as exc:
            runtime.close()
            self._send(
                {"type": "error", "pane": pane_id, "text": f"cannot open the session: {exc}"}
            )
            return
        if pane is not None:
            self._release(pane)
        self._unwatch(pane_id)
        self._bind(Pane(pane_id, runtime, agent))

    def _bind(self, pane: Pane) -> None:
        self._open.claim(pane)
        self.panes[pane.id] = pane
        pane.agent.on_event(lambda event: self._on_event(pane, event))
        self._opened(pane)
        self._sessions_changed(pane.agent.id)

    def _branched(self, pane: Pane, agent: AgentSession) -> Pane:
        """The pane shows ``agent``, a branch of its session (a fork, a rewind) on the
        same runtime, which closed the original; the sidebar lists both."""
        self._open.release(pane)
        branch = Pane(pane.id, pane.runtime, agent, pane.works)
        self._bind(branch)
        self._sessions_changed(pane.agent.id)
        return branch

    def _follow_switch(self, pane: Pane) -> Pane:
        """After a command: the pane shows the runtime's current session, should the
        command have switched to another (``/rewind N``, queued and sent by the core)."""
        current = pane.runtime.current_session
        if current is None or current.id == pane.agent.id or self.panes.get(pane.id) is not pane:
            return pane
        return self._branched(pane, AgentSession(pane.runtime, current))

    def _opened(self, pane: Pane) -> None:
        try:
            page = pane.agent.ui_page(limit=HISTORY_PAGE)
        except (CairnError, OSError) as exc:
            # The pane is bound all the same (new messages still show); say why it is empty.
            page = UiPage([], 0, 0)
            self._unreadable(pane.id, exc)
        self._send(
            opened_frame(
                pane.id,
                pane.agent.id,
                page,
                pane.agent.usage,
                status=pane.agent.status,
                busy=pane.busy,
                mode=pane.agent.mode,
                queued=pane.agent.queued,
            )
        )
        pane.shown_busy = pane.busy

    def history(self, pane_id: str, before: int, limit: int) -> None:
        """The ``limit`` entries before position ``before``: a page the user scrolled up to.

        Answered whatever the pane is doing, since it only reads. Events keep
        flowing around it and never overlap it: they append after everything
        ``opened`` sent, and the page lies before it.
        """
        pane = self._pane(pane_id)
        try:
            page = pane.agent.ui_page(before, limit)
        except (CairnError, OSError) as exc:
            self._unreadable(pane_id, exc)
            return
        self._send_history(pane_id, pane.agent.id, before, page)

    async def close_pane(self, pane_id: str) -> None:
        self._unwatch(pane_id)
        pane = self.panes.pop(pane_id, None)
        if pane is None:
            return
        pane.agent.cancel()
        for work in list(pane.works):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(work), 10)
        self._release(pane)

    def _release(self, pane: Pane) -> None:
        # The store's lock goes first: a pane that opens the session as soon as it is
        # released must find it free to resume, not locked (and so only to follow).
        try:
            pane.runtime.close()
        finally:
            self._open.release(pane)

    async def close(self) -> None:
        if self._listing is not None:
            self._listing.cancel()
        for pane_id in [*self.panes, *self.watches]:
            await self.close_pane(pane_id)

    def _unwatch(self, pane_id: str) -> None:
        watch = self.watches.pop(pane_id, None)
        if watch is not None:
            watch.stop()

    async def _watch_history(self, watch: Watch, frame: dict[str, JSONValue]) -> None:
        before = count_field(frame, "before", 0)
        limit = count_field(frame, "limit", 1, HISTORY_LIMIT_MAX)
        try:
            page = await watch.history(before, limit)
        except (CairnError, OSError) as exc:
            self._unreadable(watch.id, exc)
            return
        if self.watches.get(watch.id) is not watch:
            return  # the pane shows something else now
        self._send_history(watch.id, watch.session_id, before, page)

    def _send_history(self, pane_id: str, session_id: str, before: int, page: UiPage) -> None:
        if before > page.total:
            raise FrameError(f"history: before must be at most {page.total}, the session's entries")
        self._send(history_frame(pane_id, session_id, page))

    # -- prompts and commands ---------------------------------------------------------

    def prompt(self, pane_id: str, text: str) -> None:
        """A line from the prompt box: ``AgentSession.send`` (queued while the pane works),
        but for the commands that change which session the pane shows."""
        pane = self._pane(pane_id)
        command = parse_command(text)
        name, argument = command if command is not None else ("", "")
        if name == "/clear":
            self.clear(pane)
        elif name == "/resume":
            self._notice(pane_id, "choose a session in the sidebar to open it in this pane")
        elif name == "/help":
            self._notice(pane_id, HELP)  # at once, even while the pane works
        elif name == "/fork":
            self.fork(pane)
        elif name == "/rewind" and argument:
            if pane.agent.busy:
                # Queued, it would switch the session under a turn; refused as the core
                # refuses AgentSession.rewind.
                self._notice(pane_id, f"cannot rewind: {AgentSession.busy_reason(doing(pane))}")
            else:
                self._start(pane, self._send_line(pane, text))
        else:
            self._start(pane, self._send_line(pane, text))

    def clear(self, pane: Pane) -> None:
        if pane.busy:
            self._refuse(pane.id, f"/clear refused: {AgentSession.busy_reason(doing(pane))}")
            return
        self.open(pane.id, None)

    def fork(self, pane: Pane) -> None:
        """``/fork``: the pane goes on in a copy of its session; the original stays listed."""
        original = pane.agent.id
        try:
            agent = pane.agent.fork()
        except SessionBusyError as exc:
            self._notice(pane.id, str(exc))
            return
        except (CairnError, OSError) as exc:
            self._send({"type": "error", "pane": pane.id, "text": f"/fork failed: {exc}"})
            return
        branch = self._branched(pane, agent)
        self._notice(pane.id, f"forked {original} into {branch.agent.id}: this is the copy")

    async def complete(self, pane_id: str, prefix: str) -> None:
        """The workspace paths for ``@prefix``, read off the loop (a slow disk stalls no pane)."""
        pane = self._pane(pane_id)
        paths = await asyncio.to_thread(pane.agent.complete_path, prefix)
        self._send({"type": "completions", "pane": pane_id, "prefix": prefix, "paths": [*paths]})

    def points(self, pane_id: str) -> None:
        """The prompts the pane's session may be rewound to, and what changed after each."""
        pane = self._pane(pane_id)
        try:
            points = pane.agent.prompt_points()
        except (CairnError, OSError) as exc:
            self._unreadable(pane_id, exc)
            return
        self._send(
            {
                "type": "points",
                "pane": pane_id,
                "sessionId": pane.agent.id,
                "points": [
                    {
                        "id": point.id,
                        "text": point.text,
                        "filesChanged": point.files_changed,
                        "changedFiles": [str(path) for path in point.changed_files],
                        "bashCommands": [*point.bash_commands],
                    }
                    for point in points
                ],
            }
        )

    def rewind(self, pane_id: str, point_id: str, *, restore_files: bool) -> None:
        """A branch from just before prompt ``point_id``, shown in the pane with the prompt
        back in its box; the original stays listed."""
        pane = self._pane(pane_id)
        original = pane.agent.id
        try:
            outcome = pane.agent.rewind(point_id, restore_files=restore_files)
        except SessionBusyError as exc:
            self._notice(pane_id, str(exc))
            return
        except RewindPointError as exc:
            self._refuse(pane_id, str(exc))
            return
        except (CairnError, OSError) as exc:
            self._send({"type": "error", "pane": pane_id, "text": f"cannot rewind: {exc}"})
            return
        branch = self._branched(pane, outcome.session)
        self._rewound(branch, original, outcome.prompt, outcome.files)

    def _rewound(self, pane: Pane, original: str, prompt: str, files: RestoredFiles) -> None:
        self._send(
            {
                "type": "rewound",
                "pane": pane.id,
                "sessionId": pane.agent.id,
                "from": original,
                "prompt": prompt,
                "files": {
                    "restored": [str(path) for path in files.restored],
                    "removed": [str(path) for path in files.removed],
                    "notRestorable": [f"{path}: {why}" for path, why in files.not_restorable],
                    "bashCommands": [*files.bash_commands],
                },
            }
        )

    def _start(self, pane: Pane, work: Coroutine[object, object, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        pane.works.add(task)
        task.add_done_callback(lambda _: self._ended(pane, task))
        self._state(pane)

    def _ended(self, pane: Pane, task: asyncio.Task[None]) -> None:
        pane.works.discard(task)
        # The pane may show a branch by now (a rewind the core ran from the queue): it
        # shares this pane's runtime and its tasks.
        shown = self.panes.get(pane.id)
        if shown is not None and shown.runtime is pane.runtime:
            self._state(shown)
            self._sessions_changed(shown.agent.id)

    async def _send_line(self, pane: Pane, text: str) -> None:
        try:
            # The core sends what was queued meanwhile when this ends (a queued command's
            # result comes as a notice event).
            self._shown(pane, await pane.agent.send(text))
        except SessionBusyError as exc:
            self._refuse(pane.id, str(exc))
        except TurnError as exc:
            # A turn's error event is in the pane already; a command's (a store that
            # failed under /compact) has none.
            if parse_command(text) is not None or text.startswith("!"):
                self._send({"type": "error", "pane": pane.id, "text": f"{text.split()[0]}: {exc}"})
        except (CairnError, OSError) as exc:
            self._send({"type": "error", "pane": pane.id, "text": f"{type(exc).__name__}: {exc}"})

    def _shown(self, pane: Pane, outcome: SendOutcome) -> Pane:
        """Show what ``send`` did that no event shows; the pane as it now is."""
        command = outcome.command
        if outcome.shell is not None and outcome.shell.ok is None:
            # Not run (no command given): no message was added to show it.
            self._notice(pane.id, outcome.shell.output)
        if command is None:
            return pane
        shown = self._follow_switch(pane)
        if command.compaction is not None:
            pass  # the compact block says it
        elif command.prompt is not None and shown is not pane:
            self._rewound(shown, pane.agent.id, command.prompt, RestoredFiles())
            self._notice(shown.id, command.text)
        elif command.ok:
            self._notice(shown.id, command.text)
        else:
            self._send({"type": "error", "pane": shown.id, "text": command.text})
        return shown

    # -- events ------------------------------------------------------------------------

    def _on_event(self, pane: Pane, event: Event) -> None:
        if self.panes.get(pane.id) is not pane:
            return  # a session this pane no longer shows
        self._send(event_frame(pane.id, event))
        if isinstance(event, StatusChange | CompactBlockAdded | UsageUpdate):
            # The meter's reading (never over the budget) is worked out here, not in the
            # page: after new usage too, the page gets it.
            self._state(pane)
        if isinstance(event, MessageAdded) and event.message.role == "user":
            # Stored as it is published: the sidebar shows the new chat by its first
            # prompt now, not "(no prompt yet)" until the turn ends.
            self._sessions_changed(pane.agent.id)

    def refresh_guards(self) -> None:
        """Resend the guard of every pane whose bit changed (a background task ended)."""
        for pane in list(self.panes.values()):
            if pane.busy != pane.shown_busy:
                self._state(pane)

    def _state(self, pane: Pane) -> None:
        pane.shown_busy = pane.busy
        self._send(
            state_frame(pane.id, pane.agent.usage, status=pane.agent.status, busy=pane.shown_busy)
        )

    # -- the sidebar ---------------------------------------------------------------------

    def send_sessions(self) -> None:
        """Send the page a ``sessions`` frame, read off the loop; asked for again while
        one is being read, it is read once more after, not once per asking."""
        if self._listing is not None and not self._listing.done():
            self._list_again = True
            return
        self._listing = asyncio.get_running_loop().create_task(self._send_listing())

    async def _send_listing(self) -> None:
        again = True
        while again:
            self._list_again = False
            try:
                sessions = await self._session_list.listing()
            except (CairnError, OSError) as exc:
                self._send(
                    {"type": "error", "pane": None, "text": f"cannot list the sessions: {exc}"}
                )
            else:
                self._send({"type": "sessions", "sessions": sessions})
            again = self._list_again

    # -- helpers ---------------------------------------------------------------------------

    def _pane(self, pane_id: str) -> Pane:
        pane = self.panes.get(pane_id)
        if pane is None:
            raise FrameError(f"no pane {pane_id!r}: open a session in it first")
        return pane

    def _notice(self, pane_id: str, text: str) -> None:
        self._send({"type": "notice", "pane": pane_id, "text": text})

    def _refuse(self, pane_id: str, text: str) -> None:
        self._send({"type": "refused", "pane": pane_id, "text": text})

    def _unreadable(self, pane_id: str, exc: Exception) -> None:
        self._send({"type": "error", "pane": pane_id, "text": f"cannot read the history: {exc}"})
