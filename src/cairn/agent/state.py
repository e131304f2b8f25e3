"""The session state compaction must carry across: reads, plan mode, skills, tasks, todos,
and the MCP tools ``tool_search`` loaded (their schemas stay in the fixed context).

It is the agent's side of ``cairn.context.restore.RestorationSource``, and it
is persisted as ``state`` records so a resumed session restores it too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, TypeAlias, TypeVar

from pydantic import AfterValidator, BeforeValidator, Field

from cairn.codec import Codec, invalid
from cairn.context.restoration_source import BackgroundTask, FileRead, InvokedSkill, PlanState
from cairn.messages import JSONObject, JSONValue, json_kind

STATE_KEY = "agent_state"
_T = TypeVar("_T")


@dataclass(frozen=True)
class Todo:
    content: str
    status: str = "pending"  # pending | in_progress | completed


@dataclass
class SessionState:
    """Mutable state of one session; ``on_change`` persists it after every change."""

    session_id: str
    workspace: Path
    reads: list[FileRead] = field(default_factory=list)
    plan: PlanState | None = None
    skills: list[InvokedSkill] = field(default_factory=list)
    tasks: dict[str, BackgroundTask] = field(default_factory=dict)
    todos: list[Todo] = field(default_factory=list)
    #: Deferred MCP tools loaded by ``tool_search``: a resumed session sends them again.
    loaded_tools: list[str] = field(default_factory=list)
    on_change: Callable[[SessionState], None] | None = None

    # -- RestorationSource --------------------------------------------------

    def cwd(self) -> Path:
        return self.workspace

    def file_reads(self) -> Sequence[FileRead]:
        return self.reads

    def plan_state(self) -> PlanState | None:
        return self.plan

    def invoked_skills(self) -> Sequence[InvokedSkill]:
        return self.skills

    def background_tasks(self) -> Sequence[BackgroundTask]:
        return list(self.tasks.values())

    # -- changes ---------------------------------------------------------------

    def record_read(self, path: Path, at: float) -> None:
        self.reads.append(FileRead(path, self.session_id, self.workspace, at))
        self._changed()

    def enter_plan_mode(self, plan_file: Path) -> None:
        self.plan = PlanState(plan_file)
        self._changed()

    def exit_plan_mode(self) -> None:
        self.plan = None
        self._changed()

    def record_skill(self, skill: InvokedSkill) -> None:
        self.skills = [s for s in self.skills if s.name != skill.name] + [skill]
        self._changed()

    def set_task(self, task: BackgroundTask) -> None:
        self.tasks[task.id] = task
        self._changed()

    def update_task(self, task_id: str, status: str) -> None:
        if task_id in self.tasks:
            self.tasks[task_id] = replace(self.tasks[task_id], status=status)
            self._changed()

    def set_todos(self, todos: Sequence[Todo]) -> None:
        self.todos = list(todos)
        self._changed()

    def record_loaded_tools(self, names: Sequence[str]) -> None:
        new = [name for name in names if name not in self.loaded_tools]
        if new:
            self.loaded_tools = [*self.loaded_tools, *new]
            self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self)

    # -- persistence -----------------------------------------------------------

    def to_json(self) -> JSONObject:
        snapshot = _Snapshot(
            reads=tuple(_StoredRead(str(r.path), r.read_at) for r in self.reads[-50:]),
            plan_file=str(self.plan.plan_file) if self.plan else None,
            skills=tuple(
                _StoredSkill(s.name, str(s.skill_file), s.description, s.body_as_seen)
                for s in self.skills
            ),
            tasks=tuple(_StoredTask(t.id, t.description, t.status) for t in self.tasks.values()),
            todos=tuple(_StoredTodo(t.content, t.status) for t in self.todos),
            loaded_tools=tuple(self.loaded_tools),
        )
        data: JSONObject = _SNAPSHOT.dump(snapshot)
        return data

    def restore(self, data: JSONValue) -> list[str]:
        """Load a persisted snapshot; return a warning for each part that was skipped.

        The snapshot comes from a file that may be damaged or from an older
        version: a part of the wrong shape is skipped, never fatal, and the
        rest is restored.
        """
        if not isinstance(data, dict):
            return [f"state snapshot is {json_kind(data)}, not an object; ignored"]
        warnings: list[str] = []
        self.reads = [
            FileRead(Path(r.path), self.session_id, self.workspace, r.read_at)
            for r in _restore_items(data, "reads", warnings, _READ)
        ]
        self.plan = _plan(data.get("plan_file"), warnings)
        self.skills = [
            InvokedSkill(s.name, Path(s.skill_file), s.description, s.body_as_seen)
            for s in _restore_items(data, "skills", warnings, _SKILL)
        ]
        self.tasks = {
            t.id: BackgroundTask(t.id, t.description, _restarted(t.status or "unknown"))
            for t in _restore_items(data, "tasks", warnings, _TASK)
        }
        self.todos = [
            Todo(t.content, t.status or "pending")
            for t in _restore_items(data, "todos", warnings, _TODO)
        ]
        self.loaded_tools = _restore_items(data, "loaded_tools", warnings, _TOOL_NAME)
        return warnings


# ---------------------------------------------------------------------------
# The snapshot as a ``state`` record stores it


class _BadPartError(ValueError):
    """One part of a state snapshot has the wrong shape; the message says how."""


def _no_nul(value: str) -> str:
    if "\0" in value:
        raise invalid("holds a NUL character, which no path can")
    return value


def _not_a_boolean(value: object) -> object:
    # A JSON true is not a time; pydantic would read it as 1.0.
    if isinstance(value, bool):
        raise invalid(f"is a boolean, not a number (got {str(value).lower()})")
    return value


_StoredPath: TypeAlias = Annotated[str, Field(min_length=1), AfterValidator(_no_nul)]
_ToolName: TypeAlias = Annotated[str, Field(min_length=1)]
_Timestamp: TypeAlias = Annotated[
    float, Field(allow_inf_nan=False), BeforeValidator(_not_a_boolean)
]


@dataclass(frozen=True)
class _StoredRead:
    path: _StoredPath
    read_at: _Timestamp


@dataclass(frozen=True)
class _StoredSkill:
    name: Annotated[str, Field(min_length=1)]
    skill_file: _StoredPath
    description: str = ""
    body_as_seen: str | None = None


@dataclass(frozen=True)
class _StoredTask:
    id: Annotated[str, Field(min_length=1)]
    description: str = ""
    status: str = ""


@dataclass(frozen=True)
class _StoredTodo:
    content: str = ""
    status: str = ""


@dataclass(frozen=True)
class _Snapshot:
    reads: tuple[_StoredRead, ...]
    plan_file: str | None
    skills: tuple[_StoredSkill, ...]
    tasks: tuple[_StoredTask, ...]
    todos: tuple[_StoredTodo, ...]
    #: Absent from snapshots written before MCP tools could be loaded.
    loaded_tools: tuple[_ToolName, ...] = ()


_SNAPSHOT: Codec[_Snapshot] = Codec(_Snapshot, error=_BadPartError, what="state")
_READ: Codec[_StoredRead] = Codec(_StoredRead, error=_BadPartError, what="")
_SKILL: Codec[_StoredSkill] = Codec(_StoredSkill, error=_BadPartError, what="")
_TASK: Codec[_StoredTask] = Codec(_StoredTask, error=_BadPartError, what="")
_TODO: Codec[_StoredTodo] = Codec(_StoredTodo, error=_BadPartError, what="")
_TOOL_NAME: Codec[str] = Codec(_ToolName, error=_BadPartError, what="")
_PLAN_FILE: Codec[str | None] = Codec(_StoredPath | None, error=_BadPartError, what="")


def _restore_items(
    data: dict[str, JSONValue], key: str, warnings: list[str], codec: Codec[_T]
) -> list[_T]:
    raw = data.get(key)
    if raw is None:
        return []
    if not isinstance(raw, list):
        warnings.append(f"state '{key}' is {json_kind(raw)}, not a list; skipped")
        return []
    items: list[_T] = []
    for index, item in enumerate(raw):
        try:
            items.append(codec.load(item))
        except _BadPartError as exc:
            warnings.append(f"state '{key}' item {index}: {exc}; skipped")
    return items


def _plan(raw: JSONValue, warnings: list[str]) -> PlanState | None:
    try:
        plan_file = _PLAN_FILE.load(raw)
    except _BadPartError as exc:
        warnings.append(f"state 'plan_file': {exc}; plan mode not restored")
        return None
    return PlanState(Path(plan_file)) if plan_file is not None else None


def _restarted(status: str) -> str:
    # A background task does not survive a restart: say so instead of "running".
    return "interrupted (session restarted)" if status == "running" else status
