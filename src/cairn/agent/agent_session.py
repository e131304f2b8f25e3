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

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from cairn.agent.commands import CommandOutcome, parse_command, run_command
from cairn.agent.events import Event, SessionStatus
from cairn.agent.loop import DEFAULT_MAX_TURNS, TurnResult, run_turn
from cairn.agent.session import PermissionDecision, Runtime, Session, SessionInfo
from cairn.errors import CairnError
from cairn.messages import Message
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


class AgentSession:
    """One session, as a surface sees it."""

    def __init__(self, runtime: Runtime, session: Session) -> None:
        self._runtime = runtime
        self._session = session

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
    def sessions(runtime: Runtime) -> list[SessionInfo]:
        """This workspace's sessions, newest first."""
        return runtime.list_sessions()

    # -- driving ---------------------------------------------------------

    async def prompt(
        self, text: str | Message, *, max_turns: int = DEFAULT_MAX_TURNS
    ) -> TurnResult:
        """Run one user turn to its end; a slash command is ``command`` instead.

        ``text`` may be a whole user message (``cairn.messages.user``): text with images.
        """
        if isinstance(text, str) and parse_command(text) is not None:
            raise ValueError(f"{text.split()[0]} is a command: use AgentSession.command")
        self._check_idle("send a prompt")
        return await run_turn(self._session, text, max_turns=max_turns)

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

    def _check_idle(self, what: str) -> None:
        if self._session.status != "idle":
            raise SessionBusyError(
                f"cannot {what}: session {self._session.id} is {self._session.status}"
            )


def _guard(runtime: Runtime, what: str) -> None:
    current = runtime.current_session
    if current is not None and current.status != "idle":
        raise SessionBusyError(
            f"cannot {what}: session {current.id} is {current.status}; wait for it or cancel it"
        )
