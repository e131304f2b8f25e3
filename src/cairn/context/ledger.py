"""The compact block: continuation ledger plus the verbatim active-task checkpoint.

Both the deterministic fallback and the LLM summarizer produce this block, so
its layout lives here. The checkpoint's entries are also kept in
``meta.extra["active_task"]`` so the next compaction carries them over
exactly, without parsing its own output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cairn.messages import KIND_COMPACT_SUMMARY, Message, MessageMeta
from cairn.prompts import load_prompt

#: The seven headings of the continuation ledger, in order (a host protocol).
LEDGER_HEADINGS: tuple[str, ...] = (
    "Objective and constraints",
    "Decisions and rationale",
    "Workspace mutations",
    "Verification evidence",
    "Active tasks and background work",
    "Open risks or blockers",
    "Exact next action",
)
ACTIVE_TASK_KEY = "active_task"
EMPTY_SECTION = "(none)"


def render_ledger(sections: Mapping[str, str]) -> str:
    """The ledger text: every heading in order, ``(none)`` where nothing is known."""
    parts = []
    for heading in LEDGER_HEADINGS:
        body = sections.get(heading, "").strip() or EMPTY_SECTION
        parts.append(f"## {heading}\n{body}")
    return "\n\n".join(parts)


def render_checkpoint(active_task: Sequence[str]) -> str:
    if not active_task:
        return ""
    entries = "\n".join(
        f'<user-message index="{i}">\n{text}\n</user-message>'
        for i, text in enumerate(active_task, start=1)
    )
    return f"<active-task-checkpoint>\n{entries}\n</active-task-checkpoint>"


def build_compact_block(ledger: str, active_task: Sequence[str]) -> Message:
    """The user message that opens the context after a compaction (seed 004 §1.3)."""
    body = [
        load_prompt("continuation_preface"),
        f"<continuation-ledger>\n{ledger}\n</continuation-ledger>",
    ]
    checkpoint = render_checkpoint(active_task)
    if checkpoint:
        body.append(checkpoint)
    return Message(
        role="user",
        content="\n\n".join(body),
        meta=MessageMeta(
            kind=KIND_COMPACT_SUMMARY,
            synthetic=True,
            extra={ACTIVE_TASK_KEY: list(active_task)},
        ),
    )


def active_task_of(messages: Sequence[Message]) -> list[str]:
    """Everything the user wrote in the active task, verbatim, oldest first.

    The entries a previous compact block carried, then the text of every user
    message the user wrote since (host-written messages excluded).
    """
    entries: list[str] = []
    for message in messages:
        if message.meta.kind == KIND_COMPACT_SUMMARY:
            carried = message.meta.extra.get(ACTIVE_TASK_KEY)
            if isinstance(carried, list):
                entries.extend(e for e in carried if isinstance(e, str))
        elif message.role == "user" and not message.meta.synthetic and message.text.strip():
            entries.append(message.text)
    return entries
