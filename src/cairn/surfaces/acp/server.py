"""``CairnAgent``: the agent side of the Agent Client Protocol, one per connection.

The protocol library (``agent-client-protocol``) routes requests to these
methods and validates their parameters; each ACP session is a ``Thread``
over its own ``Runtime`` (its ``cwd`` is the workspace), so sessions in
different panes never share a guard, a transcript or a compaction.

``initialize`` is also read raw (``observe_initialize``): the 0.12 schema
drops ``clientCapabilities.session.compaction``, which decides whether the
client gets the protocol's own compaction updates.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

from acp.exceptions import RequestError
from acp.meta import PROTOCOL_VERSION
from acp.schema import (
    AgentCapabilities,
    AudioContentBlock,
    ClientCapabilities,
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
    SessionCapabilities,
    SessionInfo,
    SessionListCapabilities,
    SessionMode,
    SessionModeState,
    SetSessionModeResponse,
    TextContentBlock,
    TextResourceContents,
)

from cairn.agent.agent_session import AgentSession
from cairn.agent.session import Runtime
from cairn.agent.settings import Settings, SettingsError, load_settings
from cairn.agent.tools.base import PERMISSION_MODES, PermissionMode
from cairn.errors import CairnError
from cairn.messages import JSONObject, JSONValue
from cairn.provider import ChatProvider, ModelConfig
from cairn.store import StoreError
from cairn.surfaces.acp.channel import Channel
from cairn.surfaces.acp.host import EditorFiles, EditorTerminal
from cairn.surfaces.acp.thread import Thread

#: The installed package's version (``pyproject.toml``): ``cairn`` itself sits a layer up.
VERSION = version("cairn")

#: JSON-RPC error codes (the protocol's own).
INVALID_PARAMS = -32602
NOT_FOUND = -32002

#: What Cairn adds to the protocol, advertised in ``initialize``'s ``_meta``.
EXTENSIONS: JSONObject = {
    "cairn": {
        "version": VERSION,
        "requests": {"cairn/compact": {"params": ["sessionId", "customInstructions"]}},
        "notifications": ["cairn/compactionStateChange", "cairn/compactionContentUpdate"],
    }
}

MODES: tuple[tuple[PermissionMode, str, str], ...] = (
    ("ask", "Ask", "Ask before every edit and command"),
    ("accept-edits", "Accept edits", "Edit files in the workspace; ask before commands"),
    ("bypass", "Bypass permissions", "Run everything without asking"),
)
assert tuple(mode for mode, _, _ in MODES) == PERMISSION_MODES


@dataclass(frozen=True)
class ClientFeatures:
    """What the client said it can do, read from the raw ``initialize``."""

    read_files: bool = False
    write_files: bool = False
    terminal: bool = False
    #: ``clientCapabilities.session.compaction`` (the protocol's session-compaction updates).
    compaction: bool = False


def client_features(params: Mapping[str, object]) -> ClientFeatures:
    capabilities = _object(params.get("clientCapabilities"))
    fs = _object(capabilities.get("fs"))
    session = _object(capabilities.get("session"))
    return ClientFeatures(
        read_files=fs.get("readTextFile") is True,
        write_files=fs.get("writeTextFile") is True,
        terminal=capabilities.get("terminal") is True,
        compaction=isinstance(session.get("compaction"), dict),
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


PromptBlock = (
    TextContentBlock
    | ImageContentBlock
    | AudioContentBlock
    | ResourceContentBlock
    | EmbeddedResourceContentBlock
)


def prompt_text(blocks: list[PromptBlock]) -> str:
    """The prompt as text: its text blocks, with the files the editor attached as context."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, TextContentBlock):
            parts.append(block.text)
        elif isinstance(block, ResourceContentBlock):
            parts.append(f"[{block.name}]({block.uri})")
        elif isinstance(block, EmbeddedResourceContentBlock) and isinstance(
            resource := block.resource, TextResourceContents
        ):
            parts.append(f"\n\n{resource.uri}:\n```\n{resource.text}\n```\n")
        else:
            parts.append(f"\n[{block.type} attachment: Cairn's editor agent reads text only]\n")
    return "".join(parts)


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
                prompt_capabilities=PromptCapabilities(
                    image=False, audio=False, embedded_context=True
                ),
                session_capabilities=SessionCapabilities(list=SessionListCapabilities()),
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
        thread.channel.notify_after_response(thread.send_commands)
        return NewSessionResponse(session_id=thread.acp_id, modes=self._modes(runtime))

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: list[Any] | None = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> LoadSessionResponse:
        thread = self.threads.get(session_id)
        if thread is None:
            runtime = self._runtime(cwd)
            try:
                agent = AgentSession.resume(runtime, session_id)
            except LookupError as exc:
                runtime.close()
                raise RequestError(NOT_FOUND, str(exc), {"sessionId": session_id}) from exc
            except (CairnError, StoreError, OSError) as exc:
                runtime.close()
                raise RequestError(-32603, f"cannot open session {session_id}: {exc}") from exc
            thread = self._open(runtime, agent)
        # The whole history goes out before the response (the protocol's rule for load).
        thread.replay()
        await self.channel.flush()
        thread.channel.notify_after_response(thread.send_commands)
        return LoadSessionResponse(modes=self._modes(thread.runtime))

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
        if mode_id not in PERMISSION_MODES:
            known = ", ".join(PERMISSION_MODES)
            raise RequestError(INVALID_PARAMS, f"unknown mode {mode_id!r}; one of {known}")
        thread.runtime.permission_mode = mode_id
        return SetSessionModeResponse()

    # -- turns -------------------------------------------------------------------------

    async def prompt(
        self, session_id: str, prompt: list[PromptBlock], **kwargs: Any
    ) -> PromptResponse:
        thread = self._thread(session_id)
        return PromptResponse(stop_reason=await thread.prompt(prompt_text(prompt)))

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        thread = self.threads.get(session_id)
        if thread is not None:
            thread.cancel()

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
        )

    def _open(self, runtime: Runtime, agent: AgentSession) -> Thread:
        thread = Thread(
            agent.id, runtime, agent, self.channel, standard_compaction=self.features.compaction
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

    def _modes(self, runtime: Runtime) -> SessionModeState:
        return SessionModeState(
            current_mode_id=runtime.permission_mode,
            available_modes=[
                SessionMode(id=mode, name=name, description=description)
                for mode, name, description in MODES
            ],
        )


__all__ = ["AgentSetup", "CairnAgent", "ClientFeatures", "client_features", "prompt_text"]
