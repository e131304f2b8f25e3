"""``!command`` and in-session modes: what the conversation gets when the user acts directly.

A ``!command`` runs through the real ``bash`` tool (its permission, its
limits), and its command and output reach the model as one message of the
host's (``synthetic``: the user typed the command, not the output, so it
never becomes "the latest instruction" of a checkpoint). Switching plan mode
on or off from a surface tells the model at the next prompt, as a hidden
reminder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cairn.context.restoration_source import PlanState
from cairn.context.restore import plan_mode_reminder
from cairn.messages import Message, MessageMeta
from cairn.prompts import load_prompt

__all__ = ["ShellOutcome", "mode_reminder", "shell_message"]


@dataclass(frozen=True)
class ShellOutcome:
    """A ``!command``'s result as the user sees it."""

    command: str
    #: The output (stdout and stderr, cut like ``bash``'s), or why it did not run.
    output: str
    #: ``True``: it ran and exited 0; ``False``: it failed or was refused; ``None``: not run.
    ok: bool | None

    @classmethod
    def of(cls, command: str, result: Message) -> ShellOutcome:
        return cls(command, result.text, not result.meta.tool_error)


def shell_message(outcome: ShellOutcome) -> Message:
    """The conversation's record of a ``!command``: the command and its output, for the model."""
    text = load_prompt("shell_command").format(command=outcome.command, output=outcome.output)
    return Message(
        role="user",
        content=text,
        meta=MessageMeta(synthetic=True, extra={"shell": outcome.command, "ok": outcome.ok}),
    )


def mode_reminder(plan: PlanState | None, workspace: Path, mode: str) -> Message:
    """What the model is told when the user turned plan mode on (``plan``) or off."""
    if plan is not None:
        reminder = plan_mode_reminder(plan, workspace=workspace)
        text = reminder.text
    else:
        text = load_prompt("plan_mode_off").format(mode=mode)
    return Message(role="user", content=text, meta=MessageMeta(hidden=True, synthetic=True))
