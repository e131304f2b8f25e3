"""The background subagent: the one agent loop, on a fresh context of its own.

The ``task`` tool gets ``run_subagent`` injected by the session (so the tool
imports neither the session nor the loop). The subagent has its own durable
transcript (opened through the runtime's store factory, kept with the parent
session) and pipeline, the session's tools but
``task`` itself, and the parent's tool context (workspace, permissions, the
turn's abort). It runs ``run_loop`` — the same check → request → tools cycle
as a session, with reactive recovery and abort — and its notices and errors
reach the parent session's events, prefixed with the task id.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from cairn.agent.events import ErrorEvent, Event, EventBus, Notice, SessionStatus
from cairn.agent.loop import TurnError, run_loop
from cairn.agent.tools.base import ToolContext
from cairn.agent.tools.registry import ToolRegistry
from cairn.agent.tools.task import SubagentError
from cairn.context.config import CompactionConfig
from cairn.context.llm_summarizer import LLMSummarizer
from cairn.context.pipeline import ContextPipeline
from cairn.context.tracker import FixedContext
from cairn.messages import system
from cairn.prompts import load_prompt
from cairn.provider import ChatProvider
from cairn.provider.config import ModelConfig
from cairn.store import SessionRecord, StoreError, StoreFactory

#: Requests a subagent may make before it must report.
MAX_SUBAGENT_REQUESTS = 30


@dataclass(frozen=True)
class SubagentSetup:
    """Everything a subagent takes from the session that starts it."""

    task_id: str
    workspace: Path
    #: The parent session's id: the task's transcript is kept with it.
    parent_id: str
    stores: StoreFactory
    #: The local folder for the task's saved outputs.
    artifacts_dir: Path
    model: ModelConfig
    provider: ChatProvider
    config: CompactionConfig
    tools: ToolRegistry
    #: The parent session's events: the subagent's notices and errors go there.
    parent: EventBus


class _SubagentHost:
    """A ``LoopHost`` for the subagent: its own pipeline and events, the parent's context."""

    def __init__(self, setup: SubagentSetup, pipeline: ContextPipeline, ctx: ToolContext) -> None:
        self.pipeline = pipeline
        self.model = setup.model
        self.tools = setup.tools
        self.provider = setup.provider
        self.events = EventBus()
        self._ctx = ctx
        self._fixed = FixedContext(
            (system(load_prompt("subagent").format(workspace=setup.workspace)),),
            tuple(setup.tools.schemas()),
        )
        prefix, parent = setup.task_id, setup.parent

        def forward(event: Event) -> None:
            if isinstance(event, Notice):
                parent.publish(Notice(f"{prefix}: {event.text}"))
            elif isinstance(event, ErrorEvent):
                parent.publish(Notice(f"{prefix} error: {event.message}"))

        self.events.on(forward)

    @property
    def abort_event(self) -> asyncio.Event:
        return self._ctx.abort

    def fixed_context(self) -> FixedContext:
        return self._fixed

    def tool_context(self) -> ToolContext:
        return self._ctx

    def set_status(self, status: SessionStatus) -> None:
        # A background task never changes its parent session's state; only
        # its own pipeline needs to know when a response streams.
        self.pipeline.streaming = status == "streaming"


async def run_subagent(setup: SubagentSetup, prompt: str, ctx: ToolContext) -> str:
    """Run the task to its report; ``SubagentError`` says why there is none."""
    try:
        store = setup.stores.create_subagent(
            setup.workspace, setup.parent_id, SessionRecord(setup.task_id, str(setup.workspace))
        )
    except (OSError, StoreError) as exc:
        raise SubagentError(f"its transcript could not be created: {exc}") from exc
    pipeline = ContextPipeline(
        store,
        setup.config,
        model=setup.model,
        workspace=setup.workspace,
        tool_effects=setup.tools.effects(),
        summarizer=LLMSummarizer(setup.provider, setup.model),
        artifacts_dir=setup.artifacts_dir,
    )
    try:
        result = await run_loop(
            _SubagentHost(setup, pipeline, ctx), prompt, max_turns=MAX_SUBAGENT_REQUESTS
        )
    except TurnError as exc:
        raise SubagentError(str(exc)) from exc
    finally:
        pipeline.close()
    if result.aborted:
        raise SubagentError("interrupted before it reported")
    if result.max_turns_reached:
        return f"stopped after {MAX_SUBAGENT_REQUESTS} requests without a final report"
    return result.text
