"""Slash commands: handled by the runtime, never sent to the model.

``/clear`` and ``/resume`` run the new session's SessionStart hooks (source
``clear`` / ``resume``) before they return. What a manual ``/compact`` has to
tell the user besides its result (a hook's stderr, a timeout, a cut output)
arrives as ``Notice`` events on the session's stream, delivered by the
pipeline through the session's listener.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cairn.agent.loop import StoreFailedError, store_failure
from cairn.agent.mcp.report import mcp_report
from cairn.agent.reports import context_report, cost_report, model_report
from cairn.agent.rewind import PromptPoint, fork_session, prompt_points, rewind_session
from cairn.agent.runtime import Runtime
from cairn.context.budget import handoff_line, output_reserve
from cairn.context.hooks import CompactionBlockedError
from cairn.context.pipeline import (
    CheckpointWriteError,
    CompactionCancelledError,
    CompactionFailedError,
    CompactionOutcome,
    NothingToCompactError,
)
from cairn.store import StoreError

HELP = """Commands:
  /compact [instructions]  summarize the conversation now (instructions focus the summary)
  /clear                   start a new session (the old one stays on disk)
  /resume [id]             resume a session of this workspace (no id: list them)
  /fork                    continue in a copy of this session (this one stays as it is)
  /rewind [n] [files]      branch from before prompt n (no n: list them); files: restore them
  /status                  model, window, tokens, phase and compactions so far
  /context                 what the next request holds, source by source
  /cost                    tokens billed this session and their price
  /model [name]            the model in use; with a name, switch to it
  /mcp                     MCP servers: their state and their tools
  /help                    this list"""

COMMANDS = (
    "/compact",
    "/clear",
    "/resume",
    "/fork",
    "/rewind",
    "/status",
    "/context",
    "/cost",
    "/model",
    "/mcp",
    "/help",
)


@dataclass(frozen=True)
class CommandOutcome:
    text: str
    ok: bool = True
    #: A ``/compact`` that wrote a compaction: its sizes, strategy and summary.
    compaction: CompactionOutcome | None = None
    #: A ``/compact`` the user's cancel stopped (the transcript is unchanged).
    cancelled: bool = False
    #: After ``/rewind n``: the prompt's text, for the prompt box (the user edits it).
    prompt: str | None = None


def parse_command(text: str) -> tuple[str, str] | None:
    """``("/compact", "focus on X")`` for a known command, ``None`` for anything else."""
    stripped = text.strip()
    if not stripped.startswith("/"):
        return None
    name, _, argument = stripped.partition(" ")
    return (name, argument.strip()) if name in COMMANDS else None


async def run_command(runtime: Runtime, name: str, argument: str) -> CommandOutcome:
    if name == "/compact":
        return await _compact(runtime, argument or None)
    if name == "/clear":
        session = runtime.clear()
        await session.start()
        return CommandOutcome(f"new session {session.id}")
    if name == "/resume":
        return await _resume(runtime, argument or None)
    if name == "/fork":
        return await _fork(runtime)
    if name == "/rewind":
        return await _rewind(runtime, argument)
    if name == "/status":
        return _status(runtime)
    if name == "/mcp":
        return await _mcp(runtime)
    if name == "/context":
        return CommandOutcome(context_report(runtime.current))
    if name == "/cost":
        return CommandOutcome(cost_report(runtime.current))
    if name == "/model":
        return _model(runtime, argument)
    return CommandOutcome(HELP)


def _model(runtime: Runtime, name: str) -> CommandOutcome:
    session = runtime.current
    if not name:
        return CommandOutcome(model_report(session) + "\n(/model NAME switches to another model)")
    if session.status != "idle":
        return CommandOutcome(
            f"/model ignored: the session is {session.status}; try again when it is idle"
        )
    previous = session.model.context_window
    runtime.switch_model(name)
    lines = [model_report(session, previous)]
    if session.model.context_window is None:
        lines.append("automatic compaction is off until a window is set")
    snapshot = session.pipeline.project(session.fixed_context())
    line = snapshot.input_budget and math.ceil(
        session.pipeline.config.compact_ratio * snapshot.input_budget
    )
    if line and snapshot.tokens is not None and snapshot.tokens >= line:
        lines.append(
            f"the context ({snapshot.tokens:,} tokens) is past the new compaction line "
            f"({line:,}): the next request compacts first"
        )
    else:
        lines.append("the fixed context is measured again with the new model's first answer")
    return CommandOutcome("\n".join(lines))


async def _mcp(runtime: Runtime) -> CommandOutcome:
    session = runtime.current
    # The servers start with the session: one not started yet starts now.
    await session.start()
    return CommandOutcome(mcp_report(runtime.mcp, session.tools, session.pipeline.input_budget))


async def _compact(runtime: Runtime, instructions: str | None) -> CommandOutcome:
    session = runtime.current
    if session.status == "streaming":
        return CommandOutcome("/compact ignored: a response is streaming; try again when it ends")
    if session.status == "tools":
        return CommandOutcome("/compact ignored: tools are running; try again when the turn ends")
    # A session opened but not yet started gets its SessionStart context first,
    # so the reminder precedes the compaction instead of following it.
    await session.start()
    if runtime.current is not session:
        return CommandOutcome("/compact skipped: the session changed")
    if session.pipeline.compacting:
        return CommandOutcome("/compact skipped: a compaction is already running")
    try:
        outcome = await session.pipeline.compact(session.fixed_context(), instructions=instructions)
    except NothingToCompactError as exc:
        # A notice, not an error (DESIGN §5.6): the command did what it could.
        return CommandOutcome(f"/compact: {exc}; the context is unchanged")
    except CompactionCancelledError as exc:
        return CommandOutcome(f"/compact: {exc}", cancelled=True)
    except CompactionFailedError as exc:
        return CommandOutcome(f"compaction failed: {exc}", ok=False)
    except CompactionBlockedError as exc:
        # Refused by the user's own hook, as it was told to: a notice, not a failure.
        return CommandOutcome(f"/compact refused: {exc}; the context is unchanged")
    except StoreError as exc:
        # A full disk, an I/O error, a lost database: one line, never a traceback.
        failure = store_failure(exc, session.pipeline.session_id, stopped="the compaction stopped")
        code = "checkpoint" if isinstance(exc, CheckpointWriteError) else "store"
        raise StoreFailedError(failure, code) from exc
    if outcome is None:
        return CommandOutcome("/compact skipped: the session changed or is busy")
    return CommandOutcome(
        f"compacted ({outcome.strategy}): {outcome.pre_tokens:,} → {outcome.post_tokens:,} tokens",
        compaction=outcome,
    )


async def _resume(runtime: Runtime, session_id: str | None) -> CommandOutcome:
    if session_id is None:
        listed = runtime.list_sessions()
        if not listed:
            return CommandOutcome("no sessions in this workspace")
        lines = [f"{s.id}  {s.messages:>4} messages  {s.first_prompt[:60]}" for s in listed[:20]]
        return CommandOutcome("\n".join(lines))
    try:
        session = runtime.resume(session_id)
    except LookupError as exc:
        return CommandOutcome(str(exc), ok=False)
    await session.start()
    return CommandOutcome(f"resumed {session.id} ({len(session.ui_messages())} messages)")


# -- rewind and fork (cairn.agent.rewind) ----------------------------------------


async def _fork(runtime: Runtime) -> CommandOutcome:
    session = runtime.current
    if session.status != "idle":
        return CommandOutcome(f"/fork ignored: the session is {session.status}; try when idle")
    try:
        branch = fork_session(session)
    except StoreError as exc:
        return CommandOutcome(f"/fork failed: {exc}; nothing was changed", ok=False)
    await branch.session.start()
    return CommandOutcome(
        f"forked {session.id} into {branch.session.id}: you are in the copy now "
        f"(/resume {session.id} goes back to the original)"
    )


async def _rewind(runtime: Runtime, argument: str) -> CommandOutcome:
    session = runtime.current
    if session.status != "idle":
        return CommandOutcome(f"/rewind ignored: the session is {session.status}; try when idle")
    points = prompt_points(session)
    number, _, rest = argument.partition(" ")
    if not number:
        if not points:
            return CommandOutcome("no earlier prompts to rewind to")
        lines = [_point_line(i, p) for i, p in enumerate(points, 1)]
        lines.append("/rewind N: the conversation only; /rewind N files: the files too")
        return CommandOutcome("\n".join(lines))
    if not number.isdigit() or not 1 <= int(number) <= len(points) or rest not in ("", "files"):
        return CommandOutcome(
            f"/rewind takes a prompt number from 1 to {len(points)}, then optionally 'files'",
            ok=False,
        )
    try:
        branch = rewind_session(session, points[int(number) - 1].id, restore_files=rest == "files")
    except StoreError as exc:
        return CommandOutcome(f"/rewind failed: {exc}; nothing was changed", ok=False)
    await branch.session.start()
    files = branch.files
    lines = [
        f"rewound to before prompt {number}: new session {branch.session.id} "
        f"(/resume {session.id} goes back to the original)"
    ]
    lines += [f"restored {path}" for path in files.restored]
    lines += [f"removed {path}" for path in files.removed]
    lines += [f"not restorable: {path} ({why})" for path, why in files.not_restorable]
    lines += [f"not restorable, ran by bash: {command}" for command in files.bash_commands]
    return CommandOutcome("\n".join(lines), prompt=branch.prompt)


def _point_line(number: int, point: PromptPoint) -> str:
    first = point.text.strip().splitlines()[0] if point.text.strip() else "(no text)"
    note = "  · files changed since" if point.files_changed else ""
    return f"{number}. {first[:60]}{note}"


def _status(runtime: Runtime) -> CommandOutcome:
    session = runtime.current
    snapshot = session.pipeline.project(session.fixed_context())
    window = session.model.context_window
    tokens = f"{snapshot.tokens:,}" if snapshot.tokens is not None else "unknown"
    budget = f" of {snapshot.input_budget:,}" if snapshot.input_budget else ""
    reserve = (
        f"reserve      {output_reserve(window, session.model.max_output_tokens):,}"
        if window
        else "reserve      unknown"
    )
    latest = session.latest_total_tokens()
    config = session.pipeline.config
    limit = snapshot.input_budget
    lines = [
        f"session      {session.id}",
        f"model        {session.model.model}",
        f"window       {window:,}" if window else "window       unknown",
        reserve,
        f"tokens       {tokens}{budget} ({snapshot.source})",
        # The provider's own count of the last response: total_tokens, never cache fields.
        f"last total   {latest:,} (the provider's total_tokens)"
        if latest is not None
        else "last total   none reported",
        (
            f"thresholds   handoff above {handoff_line(limit, config.handoff_ratio):,}, "
            f"compaction at {math.ceil(config.compact_ratio * limit):,}"
            if limit
            else "thresholds   none: automatic compaction is off until a window is set"
        ),
        f"phase        {snapshot.phase}",
        f"compactions  {session.pipeline.epoch}",
        f"status       {session.status}",
    ]
    return CommandOutcome("\n".join(lines))
