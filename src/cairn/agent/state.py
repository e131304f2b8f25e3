"""The session state compaction must carry across: reads, plan mode, skills, tasks, todos.

It is the agent's side of ``cairn.context.restore.RestorationSource``, and it
is persisted as ``state`` records so a resumed session restores it too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from cairn.context.restore import BackgroundTask, FileRead, InvokedSkill, PlanState
from cairn.messages import JSONObject, JSONValue

STATE_KEY = "agent_state"


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

    def restore(self, data: JSONValue) -> None:
        """Load a persisted snapshot (bad parts are ignored, never fatal)."""
        if not isinstance(data, dict):
            return
        self.reads = [
            FileRead(
                Path(str(r["path"])), self.session_id, self.workspace, float(str(r["read_at"]))
            )
            for r in _dicts(data.get("reads"))
            if "path" in r and "read_at" in r
        ]
        plan_file = data.get("plan_file")
        self.plan = PlanState(Path(plan_file)) if isinstance(plan_file, str) else None
        self.skills = [
            InvokedSkill(
                str(s.get("name", "")),
                Path(str(s.get("skill_file", ""))),
                str(s.get("description", "")),
                s["body_as_seen"] if isinstance(s.get("body_as_seen"), str) else None,  # type: ignore[arg-type]
            )
            for s in _dicts(data.get("skills"))
        ]
        # A background task does not survive a restart: say so instead of "running".
        self.tasks = {
            str(t.get("id")): BackgroundTask(
                str(t.get("id")),
                str(t.get("description", "")),
                "interrupted (session restarted)"
                if t.get("status") == "running"
                else str(t.get("status")),
            )
            for t in _dicts(data.get("tasks"))
        }
        self.todos = [
            Todo(str(t.get("content", "")), str(t.get("status", "pending")))
            for t in _dicts(data.get("todos"))
        ]


def _dicts(value: JSONValue) -> list[dict[str, JSONValue]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []
