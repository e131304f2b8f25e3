"""The ``task`` tool: a subagent with its own fresh context, usually in the background.

The subagent gets the same model and tools (except ``task`` itself), its own
durable transcript and context pipeline under the session's folder, and the
task prompt; it runs the session's own agent loop, through the runner the
session injects (``cairn.agent.subagent``). Its description and status live
in the session state, so they survive a compaction through restoration.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeAlias

from cairn.agent.tools.base import Tool, ToolContext, ToolResult
from cairn.context.effects import ToolEffect
from cairn.context.restoration_source import BackgroundTask
from cairn.errors import CairnError
from cairn.messages import JSONObject

#: The tools a subagent does not get (it cannot start subagents of its own).
TASK_TOOL_NAMES = ("task", "task_output")

#: A task's id: ``task_<n>``, numbered within its session.
_TASK_ID = re.compile(r"task_([1-9][0-9]*)")

#: ``runner(task_id, prompt, ctx)`` → the subagent's report.
SubagentRunner: TypeAlias = Callable[[str, str, ToolContext], Awaitable[str]]


def next_task_id(taken: Iterable[str]) -> str:
    """The id after the session's tasks so far (its state keeps them across resumes).

    Numbered per session, not per process: a resumed session goes on from its
    last task instead of reusing ``task_1``, whose transcript already exists.
    """
    numbers = [int(match.group(1)) for task in taken if (match := _TASK_ID.fullmatch(task))]
    return f"task_{max(numbers, default=0) + 1}"


class SubagentError(CairnError, RuntimeError):
    """The subagent stopped without a report; the message says why."""


class TaskTool:
    """Starts a subagent; ``task_output`` reads what it reported."""

    name = "task"
    description = (
        "Start a subagent with a fresh context for one self-contained task. It runs "
        "in the background by default; read its report with task_output."
    )
    parameters: JSONObject = {  # noqa: RUF012 - a read-only schema
        "type": "object",
        "properties": {
            "description": {"type": "string", "description": "A few words."},
            "prompt": {"type": "string", "description": "All the subagent needs to know."},
            "run_in_background": {"type": "boolean", "default": True},
        },
        "required": ["description", "prompt"],
    }
    effect: ToolEffect = "write"

    def __init__(self, runner: SubagentRunner) -> None:
        self._runner = runner
        self.reports: dict[str, str] = {}
        self._running: dict[str, asyncio.Task[None]] = {}

    async def run(self, args: JSONObject, ctx: ToolContext) -> ToolResult:
        description, prompt = args.get("description"), args.get("prompt")
        if not isinstance(description, str) or not isinstance(prompt, str) or not prompt.strip():
            return ToolResult("task needs a string 'description' and a non-empty 'prompt'", True)
        task_id = next_task_id(ctx.state.tasks)
        ctx.state.set_task(BackgroundTask(task_id, description, "running"))
        job = asyncio.create_task(self._run(task_id, prompt, ctx))
        self._running[task_id] = job
        if args.get("run_in_background", True) is False:
            await job
            return ToolResult(self.reports.get(task_id, ""))
        return ToolResult(
            f"Started background task {task_id} ({description}). "
            f'Read its report with task_output {{"task_id": "{task_id}"}}.'
        )

    async def _run(self, task_id: str, prompt: str, ctx: ToolContext) -> None:
        try:
            report = await self._runner(task_id, prompt, ctx)
        except SubagentError as exc:
            self.reports[task_id] = f"the subagent failed: {exc}"
            ctx.state.update_task(task_id, f"failed: {exc}"[:200])
            return
        self.reports[task_id] = report
        first_line = report.strip().splitlines()[0] if report.strip() else "no report"
        ctx.state.update_task(task_id, f"completed: {first_line}"[:200])


class TaskOutputTool:
    """Reads a background subagent's report (or says it is still running)."""

    name = "task_output"
    description = "Read the report of a task started with the task tool."
    parameters: JSONObject = {  # noqa: RUF012 - a read-only schema
        "type": "object",
        "properties": {"task_id": {"type": "string"}},
        "required": ["task_id"],
    }
    effect: ToolEffect = "read_only"

    def __init__(self, tasks: TaskTool) -> None:
        self._tasks = tasks

    async def run(self, args: JSONObject, ctx: ToolContext) -> ToolResult:
        task_id = args.get("task_id")
        task = ctx.state.tasks.get(task_id) if isinstance(task_id, str) else None
        if task is None:
            known = ", ".join(ctx.state.tasks) or "none"
            return ToolResult(f"no task {task_id!r}; known tasks: {known}", True)
        report = self._tasks.reports.get(task.id)
        if report is None:
            return ToolResult(f"{task.id} is {task.status}; no report yet")
        return ToolResult(f"{task.id} ({task.status}):\n{report}")


def task_tools(runner: SubagentRunner) -> list[Tool]:
    tasks = TaskTool(runner)
    return [tasks, TaskOutputTool(tasks)]
