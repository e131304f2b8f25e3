"""The session state compaction must carry across: reads, plan mode, skills, tasks, todos.

It is the agent's side of ``cairn.context.restore.RestorationSource``, and it
is persisted as ``state`` records so a resumed session restores it too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

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

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self)

    # -- persistence -----------------------------------------------------------

    def to_json(self) -> JSONObject:
        reads: list[JSONValue] = [
            {"path": str(r.path), "read_at": r.read_at} for r in self.reads[-50:]
        ]
        return {
            "reads": reads,
            "plan_file": str(self.plan.plan_file) if self.plan else None,
            "skills": [
                {
                    "name": s.name,
                    "skill_file": str(s.skill_file),
                    "description": s.description,
                    "body_as_seen": s.body_as_seen,
                }
                for s in self.skills
            ],
            "tasks": [
                {"id": t.id, "description": t.description, "status": t.status}
                for t in self.tasks.values()
            ],
            "todos": [{"content": t.content, "status": t.status} for t in self.todos],
        }

    def restore(self, data: JSONValue) -> list[str]:
        """Load a persisted snapshot; return a warning for each part that was skipped.

        The snapshot comes from a file that may be damaged or from an older
        version: a part of the wrong shape is skipped, never fatal, and the
        rest is restored.
        """
        if not isinstance(data, dict):
            return [f"state snapshot is {json_kind(data)}, not an object; ignored"]
        warnings: list[str] = []
        self.reads = _restore_items(data, "reads", warnings, self._read)
        self.plan = _plan(data.get("plan_file"), warnings)
        self.skills = _restore_items(data, "skills", warnings, _skill)
        self.tasks = {t.id: t for t in _restore_items(data, "tasks", warnings, _task)}
        self.todos = _restore_items(data, "todos", warnings, _todo)
        return warnings

    def _read(self, item: dict[str, JSONValue]) -> FileRead:
        return FileRead(
            _path(item, "path"), self.session_id, self.workspace, _timestamp(item, "read_at")
        )


class _BadPartError(ValueError):
    """One part of a state snapshot has the wrong shape; the message says how."""


def _restore_items(
    data: dict[str, JSONValue],
    key: str,
    warnings: list[str],
    build: Callable[[dict[str, JSONValue]], _T],
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
            if not isinstance(item, dict):
                raise _BadPartError(f"is {json_kind(item)}, not an object")
            items.append(build(item))
        except _BadPartError as exc:
            warnings.append(f"state '{key}' item {index} {exc}; skipped")
    return items


def _plan(raw: JSONValue, warnings: list[str]) -> PlanState | None:
    if raw is None:
        return None
    try:
        return PlanState(_path({"plan_file": raw}, "plan_file"))
    except _BadPartError as exc:
        warnings.append(f"state 'plan_file' {exc}; plan mode not restored")
        return None


def _skill(item: dict[str, JSONValue]) -> InvokedSkill:
    body = item.get("body_as_seen")
    if body is not None and not isinstance(body, str):
        raise _BadPartError(f"field 'body_as_seen' is {json_kind(body)}, not a string")
    return InvokedSkill(
        _text(item, "name", required=True),
        _path(item, "skill_file"),
        _text(item, "description"),
        body,
    )


def _task(item: dict[str, JSONValue]) -> BackgroundTask:
    status = _text(item, "status") or "unknown"
    # A background task does not survive a restart: say so instead of "running".
    if status == "running":
        status = "interrupted (session restarted)"
    return BackgroundTask(_text(item, "id", required=True), _text(item, "description"), status)


def _todo(item: dict[str, JSONValue]) -> Todo:
    return Todo(_text(item, "content"), _text(item, "status") or "pending")


def _text(item: dict[str, JSONValue], key: str, *, required: bool = False) -> str:
    value = item.get(key, "")
    if not isinstance(value, str):
        raise _BadPartError(f"field '{key}' is {json_kind(value)}, not a string")
    if required and not value:
        raise _BadPartError(f"field '{key}' is missing or empty")
    return value


def _path(item: dict[str, JSONValue], key: str) -> Path:
    value = _text(item, key, required=True)
    if "\0" in value:
        raise _BadPartError(f"field '{key}' holds a NUL character, which no path can")
    return Path(value)


def _timestamp(item: dict[str, JSONValue], key: str) -> float:
    value = item.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _BadPartError(f"field '{key}' is {json_kind(value)}, not a number")
    try:
        number = float(value)
    except (ValueError, OverflowError):
        raise _BadPartError(f"field '{key}' is not a number") from None
    if not math.isfinite(number):
        raise _BadPartError(f"field '{key}' is not a finite number")
    return number
