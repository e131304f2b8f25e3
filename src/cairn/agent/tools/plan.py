"""Plan mode: enter_plan_mode and exit_plan_mode.

While plan mode is on the registry refuses every writing tool except
write_file / edit_file on the plan file, ``<session_dir>/plan.md`` — which
lies outside the workspace and is allowed by name (``plan_file.is_plan_file``).
Both tools only change the session's own state and the plan file, so their
effect is ``read_only``: they stay callable in plan mode. The plan file is
read and written through a descriptor of its folder, never through a
symlink: a plan file that is one is refused, not followed.
"""

from __future__ import annotations

from pathlib import Path

from cairn.agent.fd_io import read_all, write_at
from cairn.agent.sandbox import SymlinkRefusedError
from cairn.agent.tools.args import opt_str_arg
from cairn.agent.tools.base import ToolContext, ToolResult
from cairn.agent.tools.files import error
from cairn.agent.tools.plan_file import open_plan, plan_file_path, plan_root, plan_slot
from cairn.context.effects import ToolEffect
from cairn.context.restoration_source import PlanState
from cairn.context.restore import plan_mode_reminder
from cairn.messages import JSONObject

PLAN_FILE_NAME = "plan.md"


def plan_file_for(ctx: ToolContext) -> Path:
    return ctx.session_dir / PLAN_FILE_NAME


class EnterPlanMode:
    name = "enter_plan_mode"
    description = (
        "Before a large or unclear change: explore read-only and write a plan for "
        "the user to approve."
    )
    effect: ToolEffect = "read_only"

    @property
    def parameters(self) -> JSONObject:
        return {"type": "object", "properties": {}, "additionalProperties": False}

    async def run(self, args: JSONObject, ctx: ToolContext) -> ToolResult:
        current = plan_file_path(ctx)
        if current is not None:
            reminder = plan_mode_reminder(PlanState(current), workspace=ctx.workspace)
            return ToolResult(f"Plan mode is already on.\n{reminder.text}")
        plan_file = plan_file_for(ctx)
        ctx.state.enter_plan_mode(plan_file)
        reminder = plan_mode_reminder(PlanState(plan_file), workspace=ctx.workspace)
        return ToolResult(
            "Plan mode is on: everything is read-only until you call exit_plan_mode, "
            f"except the plan file {plan_file}, which you write with write_file.\n"
            f"{reminder.text}"
        )


class ExitPlanMode:
    name = "exit_plan_mode"
    description = "Leave plan mode and present the plan; then wait for the user's approval."
    effect: ToolEffect = "read_only"

    @property
    def parameters(self) -> JSONObject:
        return {
            "type": "object",
            "properties": {
                "plan": {
                    "type": "string",
                    "description": "The whole plan, in Markdown (default: the plan file).",
                }
            },
            "additionalProperties": False,
        }

    async def run(self, args: JSONObject, ctx: ToolContext) -> ToolResult:
        try:
            plan = opt_str_arg(args, "plan")
        except ValueError as exc:
            return error(exc)
        plan_file = plan_file_path(ctx)
        if plan_file is None:
            return error("plan mode is not on; there is no plan to present")
        try:
            if plan is None or not plan.strip():
                plan = _read_plan(ctx)
                if not plan.strip():
                    return error(
                        "there is no plan: pass it as `plan`, or write it to the plan file "
                        f"{plan_file} first"
                    )
            else:
                _write_plan(ctx, plan)
        except SymlinkRefusedError as exc:
            return error(exc)
        except OSError as exc:
            return error(f"cannot write the plan file {plan_file}: {exc.strerror or exc}")
        ctx.state.exit_plan_mode()
        return ToolResult(
            f"Plan mode is off. The plan (saved to {plan_file}) is presented to the user; "
            "wait for their approval before you start implementing it.\n\n"
            f"{plan.rstrip()}"
        )


def _read_plan(ctx: ToolContext) -> str:
    """The plan file's text; ``""`` when it is missing or unreadable (not a symlink: refused)."""
    where = plan_root(ctx)
    if where is None:
        return ""
    try:
        with open_plan(*where) as opened:
            return read_all(opened.fd).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _write_plan(ctx: ToolContext, plan: str) -> None:
    where = plan_root(ctx)
    if where is None:
        return
    ctx.session_dir.mkdir(parents=True, exist_ok=True)
    with plan_slot(*where) as slot:
        assert slot.name is not None  # the plan file's own name
        write_at(slot.dir_fd, slot.name, plan.encode("utf-8"))
