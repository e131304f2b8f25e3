"""``CairnAgent``: the agent side of the Agent Client Protocol, one per connection.

The protocol library (``agent-client-protocol``) routes requests to these
methods and validates their parameters; each ACP session is a ``Thread``
over its own ``Runtime`` (its ``cwd`` is the workspace), so sessions in
different panes never share a guard, a transcript or a compaction.

``initialize`` is also read raw (``observe_initialize``): the 0.12 schema
drops ``clientCapabilities.session.compaction``, which decides whether the
client gets the protocol's own compaction updates, and
``clientCapabilities._meta.cairn.compaction``, which decides whether it gets
Cairn's ``_cairn/compaction…`` notifications (only a client that asks for
them does).

The library routes ``session/resume`` and ``session/close`` only on its
unstable surface and has no route for ``session/delete``: ``agent_router``
adds them, as the stable protocol (schema 1.25) defines them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

from acp.agent.router import build_agent_router
from acp.exceptions import RequestError
from acp.interfaces import Agent
from acp.meta import AGENT_METHODS, PROTOCOL_VERSION
from acp.router import MessageRouter
from acp.schema import (
    AgentCapabilities,
    AudioContentBlock,
    ClientCapabilities,
    CloseSessionRequest,
    CloseSessionResponse,
    DeleteSessionRequest,
    DeleteSessionResponse,
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
    ResourceContentBlock,
    ResumeSessionRequest,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
    SessionDeleteCapabilities,
    SessionInfo,
    SessionListCapabilities,
    SessionMode,
    SessionModeState,
    SessionResumeCapabilities,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
    TextContentBlock,
    TextResourceContents,
)
from acp.utils import normalize_result

from cairn.agent import (
    SESSION_MODES,
    AgentSession,
    PermissionMode,
    Runtime,
    Settings,
    SettingsError,
    load_settings,
)
from cairn.agent import SessionMode as SessionModeId
from cairn.errors import CairnError
from cairn.messages import ContentPart, ImagePart, JSONObject, JSONValue, TextPart
from cairn.provider import ChatProvider, ModelConfig
from cairn.store import StoreError, TranscriptLockedError
from cairn.store.paths import is_session_id
from cairn.surfaces.acp.channel import Channel
from cairn.surfaces.acp.host import EditorFiles, EditorTerminal
from cairn.surfaces.acp.options import MODE_NAMES, config_options, set_option
from cairn.surfaces.acp.thread import Thread

#: The installed package's version (``pyproject.toml``): ``cairn`` itself sits a layer up.
VERSION = version("cairn")

#: JSON-RPC error codes (the protocol's own).
INVALID_PARAMS = -32602
NOT_FOUND = -32002

#: What Cairn adds to the protocol, advertised in ``initialize``'s ``_meta``, by the
#: names on the wire. The notifications go only to a client that sets
#: ``clientCapabilities._meta.cairn.compaction`` to true in ``initialize``.
EXTENSIONS: JSONObject = {
    "cairn": {
        "version": VERSION,
        "requests": {"_cairn/compact": {"params": ["sessionId", "customInstructions"]}},
        "notifications": [
            "_cairn/compactionStateChange",
            "_cairn/compactionContentUpdate",
            "_cairn/summaryPrepared",
        ],
        "notificationsOptIn": "clientCapabilities._meta.cairn.compaction",
    }
}

MODES: tuple[tuple[SessionModeId, str, str], ...] = tuple(
    (mode, *MODE_NAMES[mode]) for mode in SESSION_MODES
)

#: JSON-RPC's "request cancelled" (``$/cancel_request`` answered with an error).
REQUEST_CANCELLED = -32800
#: The image a model without image input gets instead, and what the editor is told once.
IMAGE_PLACEHOLDER = "[image not sent: the model is configured without image input]"
IMAGES_OFF_NOTICE = (
    "This model is configured without image input, so attached images are replaced by a "
    'placeholder. If it takes images, set "images": true in the model settings or '
    "CAIRN_IMAGES=1."
)


@dataclass(frozen=True)
class ClientFeatures:
    """What the client said it can do, read from the raw ``initialize``."""

    read_files: bool = False
    write_files: bool = False
    terminal: bool = False
    #: ``clientCapabilities.session.compaction`` (the protocol's session-compaction updates).
    compaction: bool = False
    #: ``clientCapabilities._meta.cairn.compaction`` is true: Cairn's ``_cairn/compaction…``
    #: notifications.
    cairn_compaction: bool = False


def client_features(params: Mapping[str, object]) -> ClientFeatures:
    capabilities = _object(params.get("clientCapabilities"))
    fs = _object(capabilities.get("fs"))
    session = _object(capabilities.get("session"))
    cairn = _object(_object(capabilities.get("_meta")).get("cairn"))
    return ClientFeatures(
        read_files=fs.get("readTextFile") is True,
        write_files=fs.get("writeTextFile") is True,
        terminal=capabilities.get("terminal") is True,
        compaction=isinstance(session.get("compaction"), dict),
        cairn_compaction=cairn.get("compaction") is True,
    )


def _object(value: object) -> Mapping[str, object]:
    return value if isinstance(value, dict) else {}


@dataclass
class AgentSetup:
    """What every session of the connection shares: the model and the provider."""

    model: ModelConfig
    provider: ChatProvider
    permission_mode: PermissionMode = "accept-edits"
    #: Cairn's home (transcripts); ``None``: ``CAIRN_HOME`` or ``~/.cairn``.
    home: Path | None = None
    settings: Callable[[Path], Settings] = field(default=load_settings)
    #: Read AGENTS.md / CLAUDE.md into each session's prompt (``--no-instructions``: false).
    instructions: bool = True


PromptBlock = (
    TextContentBlock
    | ImageContentBlock
    | AudioContentBlock
    | ResourceContentBlock
    | EmbeddedResourceContentBlock
)


def prompt_text(blocks: list[PromptBlock]) -> str:
    """The prompt as text: its text blocks, with the files the editor attached as context."""
    return "".join(p.text for p in prompt_parts(blocks, images=False) if isinstance(p, TextPart))


def prompt_parts(blocks: list[PromptBlock], *, images: bool) -> list[ContentPart]:
    """The prompt as a user message's parts: text (with the attached files), and each
    image as a ``data:`` URL part when the model takes images, else a placeholder."""
    parts: list[ContentPart] = []

    def text(value: str) -> None:
        if parts and isinstance(last := parts[-1], TextPart):
            parts[-1] = TextPart(last.text + value)
        else:
            parts.append(TextPart(value))

    for block in blocks:
        if isinstance(block, TextContentBlock):
            text(block.text)
        elif isinstance(block, ResourceContentBlock):
            text(f"[{block.name}]({block.uri})")
        elif isinstance(block, EmbeddedResourceContentBlock) and isinstance(
            resource := block.resource, TextResourceContents
        ):
            text(f"\n\n{resource.uri}:\n```\n{resource.text}\n```\n")
        elif isinstance(block, ImageContentBlock) and block.mime_type.startswith("image/"):
            if images and block.data:
                parts.append(ImagePart(f"data:{block.mime_type};base64,{block.data}"))
            else:
                text(f"\n{IMAGE_PLACEHOLDER}\n")
        else:
            text(f"\n[{block.type} attachment: Cairn's editor agent does not read it]\n")
    return parts


class CairnAgent:
    """Every ACP session of one connection."""

    def __init__(self, setup: AgentSetup, channel: Channel) -> None:
        self.setup = setup
        self.channel = channel
        self.features = ClientFeatures()
        self.threads: dict[str, Thread] = {}

    def observe_initialize(self, params: object) -> None:
        if isinstance(params, dict):
            self.features = client_features(params)

    # -- connection ------------------------------------------------------------

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(
                load_session=True,
                # Images are taken always; a model without image input gets a placeholder.
                prompt_capabilities=PromptCapabilities(
                    image=True, audio=False, embedded_context=True
                ),
                session_capabilities=SessionCapabilities(
                    list=SessionListCapabilities(),
                    resume=SessionResumeCapabilities(),
                    close=SessionCloseCapabilities(),
                    delete=SessionDeleteCapabilities(),
                ),
            ),
            agent_info=Implementation(name="cairn", title="Cairn", version=VERSION),
            field_meta=EXTENSIONS,
        )

    # -- sessions ----------------------------------------------------------------

    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[Any] | None = None,
        **kwargs: Any,
    ) -> NewSessionResponse:
        runtime = self._runtime(cwd)
        try:
            agent = AgentSession.new(runtime)
        except (CairnError, OSError) as exc:
            runtime.close()
            raise RequestError(-32603, f"cannot start a session in {cwd}: {exc}") from exc
        thread = self._open(runtime, agent)
        # The client learns the session's id from the response: its updates follow it.
        thread.channel.notify_after_response(thread.send_commands)
        return NewSessionResponse(
            session_id=thread.acp_id,
            modes=self._modes(agent.mode),
            config_options=config_options(runtime, agent.mode),  # type: ignore[arg-type]
        )

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: list[Any] | None = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> LoadSessionResponse:
        thread = self._reopen(cwd, session_id)
        # Every update the load causes goes out before the response (the protocol's rule
        # for load): the whole history, the commands and the meter.
        thread.replay()
        thread.send_commands()
        thread.send_usage()
        await self.channel.flush()
        return LoadSessionResponse(
            modes=self._modes(thread.agent.mode),
            config_options=config_options(thread.runtime, thread.agent.mode),  # type: ignore[arg-type]
        )

    async def resume_session(
        self,
        cwd: str,
        session_id: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[Any] | None = None,
        **kwargs: Any,
    ) -> ResumeSessionResponse:
        """``session/load`` without the history: the client still shows it."""
        thread = self._reopen(cwd, session_id)
        thread.send_commands()
        thread.send_usage()
        await self.channel.flush()
        return ResumeSessionResponse(
            modes=self._modes(thread.agent.mode),
            config_options=config_options(thread.runtime, thread.agent.mode),  # type: ignore[arg-type]
        )

    async def close_session(self, session_id: str, **kwargs: Any) -> CloseSessionResponse:
        """Cancel what the session runs, wait for it to stop, release its transcript.

        Closing a session that is not open (or no longer) does nothing.
        """
        thread = self.threads.pop(session_id, None)
        if thread is not None:
            await thread.shut()
        return CloseSessionResponse()

    async def delete_session(self, session_id: str, **kwargs: Any) -> DeleteSessionResponse:
        """Remove a session from ``session/list`` and from the store, for good.

        A session open here is closed first (as ``session/close`` closes it);
        one another process holds open is refused; an unknown one is a no-op.
        """
        thread = self.threads.pop(session_id, None)
        workspace: str | None = None
        if thread is not None:
            workspace = str(thread.workspace)
            await thread.shut()
        runtime = self._runtime(workspace or str(Path.cwd()))
        try:
            stores = runtime.store_factory
            where = workspace or stores.find(session_id)
            if where is not None:
                stores.delete(Path(where), session_id)
        except ValueError as exc:  # not a session id at all
            raise RequestError(INVALID_PARAMS, str(exc)) from exc
        except TranscriptLockedError as exc:  # its message names the session and says why
            raise RequestError(-32603, str(exc)) from exc
        except (CairnError, OSError) as exc:
            raise RequestError(-32603, f"cannot delete session {session_id}: {exc}") from exc
        finally:
            runtime.close()
        return DeleteSessionResponse()

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kwargs: Any
    ) -> SetSessionConfigOptionResponse:
        thread = self._thread(session_id)
        set_option(thread.agent, thread.runtime, config_id, value)
        thread.send_usage()  # the meter's size follows the window
        await self.channel.flush()
        return SetSessionConfigOptionResponse(
            config_options=config_options(thread.runtime, thread.agent.mode)  # type: ignore[arg-type]
        )

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> ListSessionsResponse:
        workspace = cwd or str(Path.cwd())
        runtime = self._runtime(workspace)
        try:
            listed = runtime.list_sessions()
        except (CairnError, OSError) as exc:
            raise RequestError(-32603, f"cannot list the sessions of {workspace}: {exc}") from exc
        finally:
            runtime.close()
        return ListSessionsResponse(
            sessions=[
                SessionInfo(
                    session_id=info.id,
                    cwd=str(runtime.workspace),
                    title=info.first_prompt[:80] or None,
                    updated_at=dt.datetime.fromtimestamp(info.last_activity, dt.UTC).isoformat(),
                )
                for info in listed
            ]
        )

    async def set_session_mode(
        self, session_id: str, mode_id: str, **kwargs: Any
    ) -> SetSessionModeResponse:
        thread = self._thread(session_id)
        if mode_id not in SESSION_MODES:
            known = ", ".join(SESSION_MODES)
            raise RequestError(INVALID_PARAMS, f"unknown mode {mode_id!r}; one of {known}")
        thread.agent.set_mode(mode_id)
        return SetSessionModeResponse()

    # -- turns -------------------------------------------------------------------------

    async def prompt(
        self, session_id: str, prompt: list[PromptBlock], **kwargs: Any
    ) -> PromptResponse:
        thread = self._thread(session_id)
        parts = prompt_parts(prompt, images=thread.runtime.model.images)
        if not thread.runtime.model.images and any(
            isinstance(block, ImageContentBlock) for block in prompt
        ):
            thread.say_once(IMAGES_OFF_NOTICE)
        return PromptResponse(stop_reason=await thread.prompt(parts))

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        thread = self.threads.get(session_id)
        if thread is not None:
            thread.cancel()

    async def cancel_request(self, method: str, params: object) -> bool:
        """``$/cancel_request`` of a ``session/prompt`` or ``_cairn/compact`` in flight: the
        turn or the compaction stops as ``session/cancel`` stops it, and the request
        answers ``cancelled`` (true). Any other request is cancelled by its caller (false).

        Only once the session runs (streams, runs tools, compacts): before that a
        turn's start would clear the cancel, and after it there is nothing to stop;
        the caller then cancels the request itself (-32800).
        """
        if method not in ("session/prompt", "_cairn/compact") or not isinstance(params, dict):
            return False
        session_id = params.get("sessionId")
        thread = self.threads.get(session_id) if isinstance(session_id, str) else None
        if thread is None or thread.agent.status == "idle":
            return False
        thread.cancel()
        return True

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method != "cairn/compact":
            raise RequestError.method_not_found(f"_{method}")
        session_id = params.get("sessionId")
        instructions = params.get("customInstructions")
        if not isinstance(session_id, str):
            raise RequestError(INVALID_PARAMS, "_cairn/compact needs a string sessionId")
        if instructions is not None and not isinstance(instructions, str):
            raise RequestError(
                INVALID_PARAMS, "_cairn/compact: customInstructions must be a string"
            )
        outcome = await self._thread(session_id).compact(instructions or None)
        result: dict[str, JSONValue] = {"message": outcome.text}
        if outcome.compaction is not None:
            done = outcome.compaction
            result |= {
                "status": "completed",
                "preTokens": done.pre_tokens,
                "postTokens": done.post_tokens,
                "strategy": done.strategy,
            }
        elif outcome.cancelled:
            result["status"] = "cancelled"
        elif outcome.ok:
            result["status"] = "skipped"  # ignored while streaming, or one already runs
        else:
            result |= {"status": "failed", "error": outcome.text}
        return result

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None  # none defined; unknown notifications are ignored, as the protocol asks

    async def close(self) -> None:
        for thread in list(self.threads.values()):
            await thread.close()
        self.threads.clear()

    # -- helpers ---------------------------------------------------------------------

    def _runtime(self, cwd: str) -> Runtime:
        workspace = Path(cwd)
        if not workspace.is_absolute() or not workspace.is_dir():
            raise RequestError(INVALID_PARAMS, f"cwd {cwd!r} is not an absolute path to a folder")
        try:
            settings = self.setup.settings(workspace)
        except SettingsError as exc:
            raise RequestError(INVALID_PARAMS, str(exc)) from exc
        return Runtime(
            workspace,
            self.setup.model,
            self.setup.provider,
            settings=settings,
            home=self.setup.home,
            permission_mode=self.setup.permission_mode,
            answers_permissions=True,
            instructions=self.setup.instructions,
        )

    def _reopen(self, cwd: str, session_id: str) -> Thread:
        """The thread of a stored session (``session/load``, ``session/resume``)."""
        thread = self.threads.get(session_id)
        if thread is not None:
            return thread
        if not is_session_id(session_id):  # a bad argument, not a failure of the agent
            shown = session_id if len(session_id) <= 80 else session_id[:80] + "…"
            raise RequestError(INVALID_PARAMS, f"{shown!r} is not a session id")
        runtime = self._runtime(cwd)
        try:
            agent = AgentSession.resume(runtime, session_id)
        except LookupError as exc:
            runtime.close()
            raise RequestError(NOT_FOUND, str(exc), {"sessionId": session_id}) from exc
        except (CairnError, StoreError, OSError) as exc:
            runtime.close()
            raise RequestError(-32603, f"cannot open session {session_id}: {exc}") from exc
        return self._open(runtime, agent)

    def _open(self, runtime: Runtime, agent: AgentSession) -> Thread:
        thread = Thread(
            agent.id,
            runtime,
            agent,
            self.channel,
            standard_compaction=self.features.compaction,
            cairn_compaction=self.features.cairn_compaction,
        )
        features = self.features
        if features.read_files and features.write_files:
            runtime.host_files = EditorFiles(self.channel, thread.acp_id)
        if features.terminal:
            runtime.host_terminal = EditorTerminal(
                self.channel, thread.acp_id, thread.show_terminal
            )
        self.threads[thread.acp_id] = thread
        return thread

    def _thread(self, session_id: str) -> Thread:
        thread = self.threads.get(session_id)
        if thread is None:
            raise RequestError(
                NOT_FOUND, f"no open session {session_id!r}: session/new or session/load it first"
            )
        return thread

    def _modes(self, current: SessionModeId) -> SessionModeState:
        return SessionModeState(
            current_mode_id=current,
            available_modes=[
                SessionMode(id=mode, name=name, description=description)
                for mode, name, description in MODES
            ],
        )


def agent_router(agent: CairnAgent) -> MessageRouter:
    """The library's router for ``agent``, with the stable session methods it lacks."""
    target: Agent = agent  # type: ignore[assignment]  # no elicitation: Cairn never asks
    router = build_agent_router(target)
    router.route_request(
        AGENT_METHODS["session_resume"], ResumeSessionRequest, agent, "resume_session"
    )
    router.route_request(
        AGENT_METHODS["session_close"],
        CloseSessionRequest,
        agent,
        "close_session",
        adapt_result=normalize_result,
    )
    router.route_request(
        AGENT_METHODS["session_delete"],
        DeleteSessionRequest,
        agent,
        "delete_session",
        adapt_result=normalize_result,
    )
    return router


__all__ = [
    "AgentSetup",
    "CairnAgent",
    "ClientFeatures",
    "agent_router",
    "client_features",
    "prompt_parts",
    "prompt_text",
]
