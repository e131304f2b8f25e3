"""Sessions and the runtime that hosts them: new, resume, clear, list.

A ``Session`` binds one transcript to a model, the tools, the session state
and the context pipeline. The ``Runtime`` knows which session is current —
the fact the pipeline's session guard checks before it writes a compaction.

SessionStart hooks fire with the source the session was opened with:
``startup`` (``Runtime.new_session``), ``resume`` (``Runtime.resume``) or
``clear`` (``Runtime.clear``, ``/clear``); the pipeline fires ``compact``
itself. Opening a session stays synchronous, so the hooks run on the first
``await session.start()`` — surfaces call it once they listen to the
session's events (``Runtime.on_switch``), so the hooks' notices reach the
user. Their stdout becomes one hidden reminder in the model's context.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from cairn.agent.events import (
    CompactionStateChange,
    Event,
    EventBus,
    Notice,
    SessionStatus,
    StatusChange,
)
from cairn.agent.hooks import HookRunner
from cairn.agent.instructions import InstructionFiles, with_instructions
from cairn.agent.mcp.client import McpManager
from cairn.agent.mcp.tool_search import install_mcp_tools
from cairn.agent.permissions import PermissionDecision, PermissionRequests
from cairn.agent.settings import Settings
from cairn.agent.skills import SkillCatalog, discover_skills, skills_prompt
from cairn.agent.snapshots import SNAPSHOTS_DIR, FileSnapshots
from cairn.agent.state import STATE_KEY, SessionState
from cairn.agent.subagent import SubagentSetup, run_subagent
from cairn.agent.tools.base import PermissionMode, Tool, ToolContext
from cairn.agent.tools.host_io import HostFiles, HostTerminal
from cairn.agent.tools.registry import ToolRegistry, default_tools
from cairn.agent.tools.skill import SkillTool
from cairn.agent.tools.task import TASK_TOOL_NAMES, task_tools
from cairn.context import CompactionConfig, ContextPipeline, FixedContext
from cairn.context.hooks import SessionStartSource, session_start_reminder
from cairn.context.llm_summarizer import LLMSummarizer
from cairn.messages import JSONValue, Message, system
from cairn.prompts import load_prompt
from cairn.provider import ChatProvider, ModelConfig, window_notice
from cairn.provider.metering import MeteredProvider
from cairn.provider.registry import lookup
from cairn.store import (
    SessionRecord,
    StateRecord,
    StoreError,
    StoreFactory,
    TranscriptStore,
    UiPage,
    new_session_id,
)
from cairn.store.paths import SUBAGENTS_DIR, cairn_home, normalize_workspace
from cairn.store.selection import open_store_factory


@dataclass(frozen=True)
class SessionInfo:
    """One line of ``cairn sessions``: newest first."""

    id: str
    path: Path
    first_prompt: str
    messages: int
    last_activity: float


class Session:
    """One conversation: its transcript, context pipeline, tools and state."""

    def __init__(
        self,
        runtime: Runtime,
        session_id: str,
        *,
        resume: bool,
        source: SessionStartSource | None = None,
    ) -> None:
        self.runtime = runtime
        self.id = session_id
        self.workspace = runtime.workspace
        self.model = runtime.model
        self.events = EventBus()
        self.status: SessionStatus = "idle"
        stores = runtime.store_factory
        self.session_dir = stores.artifacts_dir(self.workspace, session_id)
        self.state = SessionState(session_id, self.workspace)
        self._closed = False
        self._abort = asyncio.Event()
        #: How the session was opened, until ``start()`` has run its SessionStart hooks.
        self._start_source: SessionStartSource | None = source or (
            "resume" if resume else "startup"
        )
        self.catalog: SkillCatalog = discover_skills(self.workspace, runtime.home)
        self.tool_list: list[Tool] = [
            *default_tools(),
            SkillTool(self.catalog),
            *task_tools(self._run_subagent),
        ]
        self.tools = ToolRegistry(self.tool_list)
        #: Notices found while opening (a damaged state record), shown by ``start()``
        #: once a surface listens.
        self._open_notices: list[str] = []
        #: AGENTS.md / CLAUDE.md, re-read before a request when one changed; ``None``: off.
        self.instructions: InstructionFiles | None = (
            InstructionFiles(self.workspace, runtime.home, on_notice=self._instruction_notice)
            if runtime.instructions
            else None
        )
        #: The sessions this one was branched from (rewind, fork), oldest first:
        #: their folders' saved outputs, named by the copied messages, stay readable.
        self.lineage: tuple[str, ...] = ()
        if resume:
            store = stores.open(self.workspace, session_id)
            self._restore_state(store)
            self.lineage = _lineage(store.resumption.state.get(BRANCH_KEY))
        else:
            store = stores.create(
                self.workspace,
                SessionRecord(session_id, str(self.workspace), model=self.model.model),
            )
        self.lineage_dirs = tuple(stores.artifacts_dir(self.workspace, p) for p in self.lineage)
        # A transcript replaced or deleted under the writer is recovered by the
        # store; the user must hear where the session went, on every surface.
        store.on_warning(lambda text: self.events.publish(Notice(text)))
        #: Where the transcript lives (hooks get it as ``transcript_path``).
        self.path = store.path
        self.state.on_change = self._persist_state
        self.hooks = HookRunner(
            runtime.settings.hooks,
            session_id=session_id,
            transcript_path=self.path,
            cwd=self.workspace,
        )
        #: Every response this session is billed for, main requests, forks and
        #: background tasks alike (``/cost``).
        self.meter = MeteredProvider(runtime.provider)
        self.summarizer = LLMSummarizer(self.meter, self.model)
        self.pipeline = ContextPipeline(
            store,
            runtime.settings.compaction,
            model=self.model,
            workspace=self.workspace,
            tool_effects=self.tools.effects(),
            summarizer=self.summarizer,
            hooks=self.hooks,
            restoration=self.state,
            listener=self.events,
            current_session=runtime.current_id,
            artifacts_dir=self.session_dir,
        )
        self._store = store
        #: What write_file / edit_file replaced, saved before each write (rewind).
        self.snapshots = FileSnapshots(
            self.session_dir / SNAPSHOTS_DIR, self.workspace, self._last_record_id
        )
        #: Permission requests waiting for ``answer``, and the tools allowed for good.
        self.permissions = PermissionRequests(self.events.publish)
        #: The state a compaction interrupted, restored when it ends.
        self._before_compaction: SessionStatus = "idle"
        self.events.on(self._follow_compaction)

    # -- views -----------------------------------------------------------

    @property
    def api_messages(self) -> Sequence[Message]:
        return self.pipeline.messages

    def ui_messages(self) -> list[Message]:
        """Everything a person saw, across every compaction, in order (read from the store)."""
        return self._store.ui_page().messages

    def ui_page(self, before: int | None = None, limit: int | None = None) -> UiPage:
        """The ``limit`` UI entries before position ``before`` (default: the last ones)."""
        return self._store.ui_page(before, limit)

    @property
    def provider(self) -> ChatProvider:
        return self.meter

    def base_prompt(self) -> str:
        """The system prompt without the instruction files."""
        return load_prompt("system").format(
            workspace=self.workspace, skills=skills_prompt(self.catalog)
        )

    def fixed_context(self) -> FixedContext:
        prompt = self.base_prompt()
        if self.instructions is not None:
            # Fixed context, never history: no compaction summarizes or drops them.
            prompt = with_instructions(prompt, self.instructions.load(self.state.cwd()))
        return FixedContext((system(prompt),), tuple(self.tools.schemas()))

    def tool_context(self) -> ToolContext:
        return ToolContext(
            workspace=self.workspace,
            state=self.state,
            session_dir=self.session_dir,
            lineage_dirs=self.lineage_dirs,
            permission_mode=self.runtime.permission_mode,
            ask=self.permissions.ask if self.runtime.answers_permissions else None,
            abort=self._abort,
            clock=time.time,
            files=self.runtime.host_files,
            terminal=self.runtime.host_terminal,
            allow=self.runtime.settings.permissions.allow,
            snapshots=self.snapshots,
        )

    def set_status(self, status: SessionStatus) -> None:
        """One state machine: idle → streaming → tools → streaming … → idle, and compacting.

        A compaction (manual or automatic) is its own state, entered and left
        with the pipeline's compaction state; the state it interrupted comes
        back after it. Every transition is a ``statusChange`` event.
        """
        self.status = status
        self.pipeline.streaming = status == "streaming"
        self.events.publish(StatusChange(status))

    def _follow_compaction(self, event: Event) -> None:
        if not isinstance(event, CompactionStateChange):
            return
        if event.is_compacting:
            self._before_compaction = self.status
            self.set_status("compacting")
        else:
            self.set_status(self._before_compaction)

    def latest_total_tokens(self) -> int | None:
        """The provider's ``total_tokens`` of the latest response that reported usage."""
        return next(
            (
                m.meta.usage.total_tokens
                for m in reversed(self.api_messages)
                if m.role == "assistant" and m.meta.usage is not None
            ),
            None,
        )

    def abort(self) -> None:
        """Stop the running turn, or the compaction, at the next safe point.

        The transcript stays whole: a compaction waiting for its summary is
        dropped before it writes anything.

        Every pending permission request is answered as cancelled.
        """
        self._abort.set()
        self.pipeline.cancel_compaction()
        self.permissions.cancel_all()

    def answer(self, permission_id: str, decision: PermissionDecision) -> bool:
        """Answer a pending ``permissionRequested``; false when nothing waits under that id."""
        return self.permissions.answer(permission_id, decision)

    def reset_abort(self) -> asyncio.Event:
        self._abort = asyncio.Event()
        return self._abort

    @property
    def abort_event(self) -> asyncio.Event:
        return self._abort

    def close(self) -> None:
        self._closed = True
        self.pipeline.close()
        self.events.close()

    # -- the background subagent ------------------------------------------

    async def _run_subagent(self, task_id: str, prompt: str, ctx: ToolContext) -> str:
        """The ``task`` tool's runner: the same loop, on a fresh context of its own."""
        tools = [t for t in self.tool_list if t.name not in TASK_TOOL_NAMES]
        setup = SubagentSetup(
            task_id=task_id,
            workspace=self.workspace,
            parent_id=self.id,
            stores=self.runtime.store_factory,
            artifacts_dir=self.session_dir / SUBAGENTS_DIR / task_id,
            model=self.model,
            provider=self.meter,
            config=self.pipeline.config,
            tools=ToolRegistry(tools),
            parent=self.events,
        )
        return await run_subagent(setup, prompt, ctx)

    # -- SessionStart ------------------------------------------------------

    async def start(self) -> None:
        """Run the SessionStart hooks for how this session was opened; once, later calls no-op.

        Notices (a hook's stderr, a timeout, a cut output) are published as
        ``Notice`` events; the hooks' stdout is added to the model's context
        as a durable hidden reminder, never rendered in the UI view.
        """
        source, self._start_source = self._start_source, None
        if source is None or self._closed:
            return
        if self.instructions is not None:
            # Read now, so their notices come when the session opens, not at its first request.
            self.instructions.load(self.state.cwd())
        window = self.runtime.take_window_notice()
        if window is not None:
            self.events.publish(Notice(window))
        for notice in self._open_notices:
            self.events.publish(Notice(notice))
        self._open_notices.clear()
        # MCP servers start with the runtime's first session (a failure is one
        # notice); their tools join this session's fixed context from here on.
        await self.runtime.mcp.start()
        install_mcp_tools(self.runtime.mcp, self.tools, self.state, self.pipeline.input_budget)
        outcome = await self.hooks.session_start(source)
        for notice in outcome.notices:
            self.events.publish(Notice(notice))
        reminder = session_start_reminder(outcome.output, source)
        if reminder is None or self._closed:
            # Switched away while the hooks ran: the transcript is no longer ours to write.
            return
        self.pipeline.add(reminder)
        self.pipeline.end_turn()

    def _instruction_notice(self, text: str) -> None:
        if self._start_source is not None:
            self._open_notices.append(text)  # nobody may listen yet: ``start()`` shows it
        else:
            self.events.publish(Notice(text))

    # -- rewind and fork ---------------------------------------------------------

    def _last_record_id(self) -> str | None:
        """The id of the last record written (``None``: only the header): a file
        snapshot's place in the transcript (``cairn.agent.rewind``)."""
        records = self._store.resumption.records
        return records[-1].id if records else None

    # -- state persistence -------------------------------------------------------

    def _persist_state(self, state: SessionState) -> None:
        if self._closed:
            # A background task finishing after the session was switched away:
            # its state belongs to a transcript that is no longer open here.
            return
        self._store.append(StateRecord(STATE_KEY, state.to_json()))

    def _restore_state(self, store: TranscriptStore) -> None:
        saved = store.resumption.state.get(STATE_KEY)
        if saved is not None:
            self._open_notices += self.state.restore(saved)


#: The state key of the record that ends a branch (``cairn.agent.rewind``):
#: ``{"from", "at", "kind", "lineage"}``.
BRANCH_KEY = "branch"


def _lineage(value: JSONValue | None) -> tuple[str, ...]:
    """The session ids of a branch record's ``lineage``, oldest first."""
    lineage = value.get("lineage") if isinstance(value, dict) else None
    if not isinstance(lineage, list):
        return ()
    return tuple(parent for parent in lineage if isinstance(parent, str))


class Runtime:
    """Hosts the current session of one workspace and switches between sessions."""

    def __init__(
        self,
        workspace: str | Path,
        model: ModelConfig,
        provider: ChatProvider,
        *,
        settings: Settings | None = None,
        home: Path | None = None,
        permission_mode: PermissionMode = "ask",
        answers_permissions: bool = False,
        store_factory: StoreFactory | None = None,
        host_files: HostFiles | None = None,
        host_terminal: HostTerminal | None = None,
        instructions: bool = True,
    ) -> None:
        self.workspace = Path(normalize_workspace(workspace))
        self.model = model
        self.provider = provider
        self.settings = settings or Settings()
        self.home = home if home is not None else cairn_home()
        self.permission_mode: PermissionMode = permission_mode
        #: A surface answers ``permissionRequested`` events (``session.answer``). Without
        #: one, a call that needs permission is refused at once: nobody can be asked,
        #: and nothing may wait forever for an answer that cannot come.
        self.answers_permissions = answers_permissions
        #: Every session is opened through it: another store plugs in here. A
        #: factory the runtime opened itself (from ``store.url``) it also closes.
        self._owns_store_factory = store_factory is None
        self.store_factory: StoreFactory = store_factory or open_store_factory(
            self.settings.store.url,
            self.home,
            fsync_every_record=self.settings.store.fsync == "record",
        )
        #: The hosting editor's file I/O and terminal (ACP), given to every tool; ``None``: local.
        self.host_files = host_files
        self.host_terminal = host_terminal
        #: Read AGENTS.md / CLAUDE.md into every session's system prompt (``--no-instructions``).
        self.instructions = instructions
        self._current: Session | None = None
        self._switch_callbacks: list[Callable[[Session], None]] = []
        #: The MCP servers of ``settings.mcpServers``, started by the first ``session.start()``.
        self.mcp = McpManager(
            self.settings.mcpServers, workspace=self.workspace, notify=self._mcp_notice
        )
        #: The first session to start says once that a model without a window
        #: runs without automatic compaction (``take_window_notice``).
        self._window_notice_due = True

    @property
    def current(self) -> Session:
        if self._current is None:
            raise RuntimeError("no session: call new_session() or resume()")
        return self._current

    @property
    def current_session(self) -> Session | None:
        """The current session, or ``None`` before the first one is opened."""
        return self._current

    def take_window_notice(self) -> str | None:
        """The line about a model with no window (``window_notice``), once per runtime.

        The first session to start publishes it, so every surface shows it the
        way it shows any notice; later sessions (``/clear``, ``/resume``) do
        not repeat it.
        """
        if not self._window_notice_due:
            return None
        self._window_notice_due = False
        return window_notice(self.model)

    def current_id(self) -> str:
        return self._current.id if self._current else ""

    def on_switch(self, callback: Callable[[Session], None]) -> None:
        """Call ``callback(session)`` whenever a session becomes current (new, resume, clear).

        A surface subscribes to each new session's events here, before the
        session's SessionStart hooks run, so it sees their notices.
        """
        self._switch_callbacks.append(callback)

    def new_session(self) -> Session:
        self._switch(Session(self, new_session_id(), resume=False))
        return self.current

    def resume(self, session_id: str | None = None) -> Session:
        """Resume ``session_id``, or the most recent session of this workspace."""
        if session_id is None:
            listed = self.list_sessions()
            if not listed:
                raise LookupError(f"no session to resume in {self.workspace}")
            session_id = listed[0].id
        if not self.store_factory.exists(self.workspace, session_id):
            raise LookupError(f"no session {session_id!r} in {self.workspace}")
        self._switch(Session(self, session_id, resume=True))
        return self.current

    def clear(self) -> Session:
        """``/clear``: a fresh session with a new id; the old transcript stays on disk."""
        self._switch(Session(self, new_session_id(), resume=False, source="clear"))
        return self.current

    def list_sessions(self) -> list[SessionInfo]:
        """The workspace's sessions, newest first; the open one is always the newest.

        The factory orders by last activity, which a file system records to a
        clock tick: a ``/clear`` right after a turn can give the old and the
        new session the same time, and either could come first.
        """
        stored_sessions = self.store_factory.sessions(self.workspace)
        current = self._current.id if self._current is not None else None
        stored_sessions.sort(key=lambda s: s.session_id != current)  # stable: the rest keep order
        infos = []
        for stored in stored_sessions:
            try:
                # Not ``read``: a picker must not parse every long session whole.
                digest = self.store_factory.describe(self.workspace, stored.session_id)
            except StoreError:
                continue  # listed by what it holds; one that cannot be read is skipped
            infos.append(
                SessionInfo(
                    stored.session_id,
                    stored.location,
                    digest.first_prompt[:120],
                    digest.messages,
                    stored.last_activity,
                )
            )
        return infos

    def reconfigure(
        self, *, model: ModelConfig | None = None, compaction: CompactionConfig | None = None
    ) -> None:
        """Change the model configuration or the compaction settings from now on.

        The current session adopts them at once (its pipeline's input budget
        follows the window); sessions opened later (``/clear``) start with them.
        """
        if model is not None:
            self.model = model
        if compaction is not None:
            self.settings = self.settings.model_copy(update={"compaction": compaction})
        session = self._current
        if session is not None:
            if model is not None:
                session.model = model
                session.summarizer.model = model
            session.pipeline.reconfigure(model=model, config=compaction)

    def switch_model(self, name: str) -> ModelConfig:
        """Talk to ``name`` from the next request on, through the same endpoint (``/model``).

        Its window and image support come from the registry and the settings'
        ``models``; a model neither knows keeps the current window, so that
        compaction never silently stops. The output cap, endpoint and deadlines
        stay. The pipeline re-measures the fixed context with the new model's
        first response and compacts first if the context is past its line.
        """
        known = lookup(name, self.settings.models)
        window = self.model.context_window
        images = self.model.images
        if known is not None:
            window = known.context_window or window
            images = known.images
        model = replace(self.model, model=name, context_window=window, images=images)
        self.reconfigure(model=model)
        return model

    def delete_session(self, session_id: str) -> bool:
        """Remove a stored session of this workspace for good (``StoreFactory.delete``).

        The current session is closed first, which releases its transcript;
        one another process writes is refused (``TranscriptLockedError``).
        False when there was no such session.
        """
        current = self._current
        if current is not None and current.id == session_id:
            current.close()
            self._current = None
        return self.store_factory.delete(self.workspace, session_id)

    def _mcp_notice(self, text: str) -> None:
        if self._current is not None:
            self._current.events.publish(Notice(text))

    def close(self) -> None:
        if self._current is not None:
            self._current.close()
            self._current = None
        self.mcp.close()  # every server stopped, a stdio server's process group too
        if self._owns_store_factory:
            self.store_factory.close()

    def _switch(self, session: Session) -> None:
        if self._current is not None:
            self._current.close()
        self._current = session
        for callback in self._switch_callbacks:
            callback(session)
        session.set_status("idle")
