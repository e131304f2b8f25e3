"""The todo_write tool: the model's own task list for the session.

It only changes the session's todo list (kept across compactions in the
session state), never the world, so its effect is ``read_only``.
"""

from __future__ import annotations

from cairn.agent.state import Todo
from cairn.agent.tools.base import ToolContext, ToolResult
from cairn.agent.tools.files import error
from cairn.context.effects import ToolEffect
from cairn.messages import JSONObject

TODO_STATUSES = ("pending", "in_progress", "completed")
_MARKS = {"pending": "[ ]", "in_progress": "[>]", "completed": "[x]"}


class TodoWrite:
    name = "todo_write"
    description = (
        "Replace the todo list (send the whole list). For multi-step work: one step "
        "in_progress at a time, completed as soon as it is done."
    )
    effect: ToolEffect = "read_only"

    @property
    def parameters(self) -> JSONObject:
        return {
            "type": "object",
            "properties": {
                "todos": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "content": {"type": "string"},
                            "status": {"type": "string", "enum": list(TODO_STATUSES)},
                        },
                        "required": ["content", "status"],
                    },
                }
            },
            "required": ["todos"],
            "additionalProperties": False,
        }

    async def run(self, args: JSONObject, ctx: ToolContext) -> ToolResult:
        raw = args.get("todos")
        if not isinstance(raw, list):
            return error("argument 'todos' must be a list of {content, status} objects")
        todos: list[Todo] = []
        for index, item in enumerate(raw):
            if not isinstance(item, dict):
                return error(f"todos[{index}] must be an object with content and status")
            content = item.get("content")
            status = item.get("status", "pending")
            if not isinstance(content, str) or not content.strip():
                return error(f"todos[{index}].content must be a non-empty string")
            if status not in TODO_STATUSES:
                return error(
                    f"todos[{index}].status must be one of {', '.join(TODO_STATUSES)}; "
                    f"got {status!r}"
                )
            todos.append(Todo(content.strip(), str(status)))
        ctx.state.set_todos(todos)
        return ToolResult(render_todos(todos))


def render_todos(todos: list[Todo]) -> str:
    if not todos:
        return "The todo list is empty."
    done = sum(t.status == "completed" for t in todos)
    lines = [f"Todo list ({done}/{len(todos)} completed):"]
    lines += [f"{_MARKS.get(t.status, '[ ]')} {t.content}" for t in todos]
    return "\n".join(lines)
