"""The tool registry: schemas for the request, effects for the pipeline, and ``execute``.

``execute`` turns one tool call into exactly one tool-result message, whatever
happens. In order it checks that the tool exists, that the arguments are a
JSON object, that plan mode allows the call, and that permission is granted;
then it runs the tool, turning any unexpected exception into an error result.
Only cancellation propagates (the caller is being cancelled, and answers the
call itself).

Permission (``ToolContext.permission_mode``) concerns writing tools only:

- ``ask``: every writing tool asks ``ctx.ask`` first; with no asker it is refused;
- ``accept-edits``: write_file and edit_file run without asking, other
  writing tools (bash, …) ask;
- ``bypass``: nothing asks.

In plan mode every writing tool is refused, except write_file / edit_file on
the plan file, which also runs without asking: plan mode exists to write it.
Outside plan mode, a tool matching ``permissions.allow`` (``ToolContext.allow``)
runs without asking in every mode.

A tool registered as *deferred* (an MCP tool when their schemas would take
too much of the budget) is known but not sent: its schema joins ``schemas()``
once it is loaded (``load``, by the ``tool_search`` tool), and a call before
that is refused with a hint to load it.
"""

from __future__ import annotations

from collections.abc import Iterable

import orjson

from cairn.agent.tools.base import PermissionRequest, Tool, ToolContext, ToolResult, tool_schema
from cairn.agent.tools.bash import Bash, BashOutput
from cairn.agent.tools.files import EditFile, ListFiles, ReadFile, WriteFile
from cairn.agent.tools.permissions import is_allowed
from cairn.agent.tools.plan import EnterPlanMode, ExitPlanMode
from cairn.agent.tools.plan_file import is_plan_file, plan_file_path
from cairn.agent.tools.search import Grep
from cairn.agent.tools.todo import TodoWrite
from cairn.context.effects import ToolEffect
from cairn.messages import JSONObject, Message, ToolCall, tool_result

#: The tools that only edit files: allowed without asking in ``accept-edits``,
#: and on the plan file in plan mode.
EDIT_TOOLS = frozenset({"write_file", "edit_file"})
_SHOWN_ARGUMENT_CHARS = 200


class ToolRegistry:
    """The tools of a session, by name."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        #: Deferred tools not loaded yet: registered, callable only once loaded.
        self._unloaded: set[str] = set()
        self._deferred: list[str] = []
        #: Deferred tools loaded so far, in load order: their schemas go last, so
        #: a load only appends to what the requests carried before.
        self._loaded: list[str] = []
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool, *, deferred: bool = False) -> None:
        """Add ``tool``; ``deferred``: its schema is not sent until ``load`` names it."""
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        if deferred:
            self._deferred.append(tool.name)
            self._unloaded.add(tool.name)

    def deferred_tools(self) -> list[Tool]:
        """The tools registered as deferred, loaded or not, in registration order."""
        return [self._tools[name] for name in self._deferred]

    def is_loaded(self, name: str) -> bool:
        """Whether ``name`` is registered and its schema is sent."""
        return name in self._tools and name not in self._unloaded

    def load(self, names: Iterable[str]) -> list[str]:
        """Send these deferred tools' schemas from now on; the names newly loaded."""
        loaded = [name for name in dict.fromkeys(names) if name in self._unloaded]
        self._unloaded.difference_update(loaded)
        self._loaded += loaded
        return loaded

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def tools(self) -> list[Tool]:
        return list(self._tools.values())

    def names(self) -> list[str]:
        return list(self._tools)

    def schemas(self) -> list[JSONObject]:
        """What the request carries: every tool not deferred, then the deferred ones loaded."""
        deferred = set(self._deferred)
        sent = [name for name in self._tools if name not in deferred] + self._loaded
        return [tool_schema(self._tools[name]) for name in sent]

    def effects(self) -> dict[str, ToolEffect]:
        return {name: tool.effect for name, tool in self._tools.items()}

    async def execute(self, call: ToolCall, ctx: ToolContext) -> Message:
        """Run ``call``; always a tool-result message answering it."""
        result = await self._execute(call, ctx)
        return tool_result(
            call.id, result.content or "(no output)", name=call.name, error=result.is_error
        )

    async def _execute(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        tool = self._tools.get(call.name)
        if tool is None:
            known = ", ".join(self._tools) or "none"
            return ToolResult(
                f"unknown tool {call.name!r}; the known tools are: {known}", is_error=True
            )
        if call.name in self._unloaded:
            return ToolResult(
                f"{call.name} is not loaded: load it with tool_search "
                f'({{"load": ["{call.name}"]}}) first, then call it with its schema',
                is_error=True,
            )
        args = _parse_arguments(call)
        if isinstance(args, str):
            return ToolResult(args, is_error=True)
        try:
            refusal = await self._gate(tool, args, ctx)
            if refusal is not None:
                return ToolResult(refusal, is_error=True)
            return await tool.run(args, ctx)
        except Exception as exc:
            return ToolResult(
                f"{call.name} failed with an unexpected error: {type(exc).__name__}: {exc}",
                is_error=True,
            )

    async def _gate(self, tool: Tool, args: JSONObject, ctx: ToolContext) -> str | None:
        """Why the call may not run (plan mode, permission), or ``None`` when it may."""
        if tool.effect != "write":
            return None
        if ctx.state.plan is not None:
            path = args.get("path")
            if tool.name in EDIT_TOOLS and isinstance(path, str) and is_plan_file(ctx, path):
                return None
            return (
                f"plan mode is on: {tool.name} is refused because it may change the "
                "system. Only read-only tools may run, and write_file / edit_file on "
                f"the plan file {plan_file_path(ctx)}. When the plan is ready, present "
                "it with exit_plan_mode."
            )
        mode = ctx.permission_mode
        if mode == "bypass" or (mode == "accept-edits" and tool.name in EDIT_TOOLS):
            return None
        if is_allowed(tool.name, ctx.allow):
            return None
        request = PermissionRequest(tool.name, _summary(tool, args), orjson.dumps(args).decode())
        if ctx.ask is None:
            return (
                f"permission refused: {tool.name} needs the user's permission "
                f"({mode!r} mode), but permission could not be requested — nobody can be "
                "asked in this session"
            )
        if not await ctx.ask(request):
            return (
                f"the user denied {tool.name}: {request.summary}. Do not try the same "
                "call again; ask the user how to proceed if it is unclear."
            )
        return None


def _parse_arguments(call: ToolCall) -> JSONObject | str:
    """The call's arguments as an object, or the error text for the model."""
    text = call.arguments
    if not text.strip():
        return {}
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return (
            f"the arguments of {call.name} are not valid JSON ({exc}): "
            f"{_shorten(text)}; send a JSON object"
        )
    if not isinstance(parsed, dict):
        return (
            f"the arguments of {call.name} must be a JSON object, got "
            f"{type(parsed).__name__}: {_shorten(text)}"
        )
    return parsed


def _summary(tool: Tool, args: JSONObject) -> str:
    """One line for the permission prompt: the tool's own ``summarize`` when it has one."""
    summarize = getattr(tool, "summarize", None)
    if callable(summarize):
        summary = summarize(args)
        if isinstance(summary, str):
            return summary
    return f"{tool.name} {_shorten(orjson.dumps(args).decode())}"


def _shorten(text: str) -> str:
    if len(text) <= _SHOWN_ARGUMENT_CHARS:
        return text
    return text[:_SHOWN_ARGUMENT_CHARS] + "…"


def default_tools() -> list[Tool]:
    """The built-in tools (the skill and task tools are added by the session)."""
    return [
        ReadFile(),
        WriteFile(),
        EditFile(),
        ListFiles(),
        Grep(),
        Bash(),
        BashOutput(),
        TodoWrite(),
        EnterPlanMode(),
        ExitPlanMode(),
    ]
