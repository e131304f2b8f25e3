"""``cairn`` with no arguments: build the runtime as ``cairn -p`` does, then open the app.

The model is resolved by the same function ``cairn -p`` uses
(``cairn.surfaces.setup``: settings, then the environment, then the flags),
so both agree on every setting. Unlike ``-p``, the app answers permission
questions itself, so ``--permission-mode`` only decides which calls ask.
Setup failures are one line on stderr and an exit code, as with ``-p``: 2
for a usage or configuration error, 1 for a session that cannot be opened.

On the way out, once the app has left the alternate screen (so the line stays
in the shell's scrollback), a session with at least one message is followed
by how to come back to it: ``cairn --resume <id>``.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass, replace

from cairn.agent import AgentSession, Runtime, Settings
from cairn.provider import ModelConfig, open_provider
from cairn.store import StoreError
from cairn.surfaces.setup import (
    EXIT_FAILED,
    EXIT_USAGE,
    SetupError,
    SurfaceArgs,
    fail,
    load_cli_model,
    one_line,
    open_runtime,
)
from cairn.surfaces.terminal.app import CairnApp
from cairn.surfaces.terminal.driver import driver_class
from cairn.surfaces.terminal.picker import PickerApp


@dataclass(frozen=True, kw_only=True)
class TerminalArgs(SurfaceArgs):
    #: A session id to open (``""``: pick one); ``latest`` opens the most recent one.
    resume: str | None = None
    latest: bool = False


def run_terminal(args: TerminalArgs) -> int:
    try:
        settings, model = load_cli_model(args.workspace, args)
    except SetupError as exc:
        return fail(f"cairn: {exc}", EXIT_USAGE)
    return asyncio.run(_run(args, model, settings))


async def _run(args: TerminalArgs, model: ModelConfig, settings: Settings) -> int:
    async with open_provider(model) as provider:
        runtime = open_runtime(args, model, provider, settings)
        if args.resume == "":
            sessions = AgentSession.sessions(runtime)
            if not sessions:
                return fail(f"cairn: no session to resume in {runtime.workspace}", EXIT_USAGE)
            chosen = await PickerApp(sessions, driver_class=driver_class()).run_async()
            if chosen is None:
                return 0  # the user chose none: nothing was opened
            args = replace(args, resume=chosen)
        try:
            agent = open_session(runtime, args)
        except LookupError as exc:
            return fail(f"cairn: {exc}", EXIT_USAGE)
        except StoreError as exc:
            return fail(f"cairn: {one_line(str(exc))}", EXIT_FAILED)
        app = CairnApp(runtime, agent, driver_class=driver_class())
        try:
            await app.run_async()
            resume = app.resume_command  # the session open at the end (/clear, /resume)
        finally:
            runtime.close()
    if resume is not None:
        _say(f"Resume this session with: {resume}")
    return 0


def open_session(runtime: Runtime, args: TerminalArgs) -> AgentSession:
    """``--resume ID``, ``--continue`` (the latest), or a new session."""
    if args.resume is not None:
        return AgentSession.resume(runtime, args.resume)
    if args.latest:
        return AgentSession.resume(runtime)
    return AgentSession.new(runtime)


def _say(line: str) -> None:
    """A line for the terminal the app drew on: stdout, unless only stderr is one."""
    out = sys.stdout if sys.stdout.isatty() or not sys.stderr.isatty() else sys.stderr
    print(line, file=out, flush=True)
