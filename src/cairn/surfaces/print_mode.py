"""``cairn -p``: run one task to the end against the configured endpoint and print the answer.

Streams by output format:

- ``text`` and ``json``: stdout holds only the answer (the text, or one JSON
  result object); every ``Notice`` (a hook's stderr, a timeout, a skipped
  compaction …) and every ``ErrorEvent`` goes to stderr as one line,
  ``cairn: notice: …`` / ``cairn: error: …`` (line breaks shown as ``\\n``);
- ``stream-json``: every event, then the result, as JSON lines on stdout.

It drives an ``AgentSession`` as every surface does. Each session that
becomes current (the first one, and one opened by ``/clear`` or ``/resume``)
is subscribed before its SessionStart hooks run, so their notices are
printed too. Nobody can answer a permission question here: the permission
policy (``DenyAndExplain``) refuses each one and says why in a notice.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeAlias

import orjson

from cairn.agent import (
    AgentSession,
    ErrorEvent,
    Event,
    Notice,
    PermissionRequested,
    Runtime,
    Session,
    Settings,
    StoreFailedError,
    TurnError,
    event_to_wire,
    parse_command,
    store_failure,
)
from cairn.messages import JSONValue, user
from cairn.provider import ModelConfig, open_provider
from cairn.store import StoreError
from cairn.surfaces.setup import (
    EXIT_FAILED,
    EXIT_STORE,
    EXIT_USAGE,
    SetupError,
    SurfaceArgs,
    fail,
    load_cli_model,
    one_line,
    open_runtime,
)

OutputFormat: TypeAlias = Literal["text", "json", "stream-json"]


@dataclass(frozen=True, kw_only=True)
class PrintArgs(SurfaceArgs):
    #: The task (``None`` or ``-``: read it from stdin).
    prompt: str | None
    output_format: OutputFormat = "text"
    resume: str | None = None
    max_turns: int = 50


def run_print(args: PrintArgs) -> int:
    prompt = args.prompt
    if prompt is None or prompt == "-":
        if sys.stdin is None or sys.stdin.isatty():
            return fail("cairn -p: give a prompt, or pipe one on standard input", EXIT_USAGE)
        prompt = sys.stdin.read()
    if not prompt.strip():
        return fail("cairn -p: the prompt is empty", EXIT_USAGE)
    if args.max_turns < 1:
        return fail(f"cairn -p: --max-turns must be at least 1, got {args.max_turns}", EXIT_USAGE)
    try:
        settings, model = load_cli_model(args.workspace, args)
    except SetupError as exc:
        return fail(f"cairn -p: {exc}", EXIT_USAGE)
    return asyncio.run(_run(args, prompt, settings_model=model, settings=settings))


async def _run(
    args: PrintArgs, prompt: str, *, settings_model: ModelConfig, settings: Settings
) -> int:
    async with open_provider(settings_model) as provider:
        runtime = open_runtime(args, settings_model, provider, settings)
        on_stderr = _StderrNotices()
        printer = _print_event if args.output_format == "stream-json" else on_stderr
        policy = DenyAndExplain(args, printer)

        def subscribe(session: Session) -> None:
            agent = AgentSession(runtime, session)
            agent.on_event(printer)
            agent.on_event(lambda event: policy(agent, event))

        runtime.on_switch(subscribe)
        try:
            agent = (
                AgentSession.resume(runtime, args.resume)
                if args.resume
                else AgentSession.new(runtime)
            )
        except LookupError as exc:
            return fail(f"cairn -p: {exc}", EXIT_USAGE)
        except StoreError as exc:
            # A transcript that cannot be opened (locked, not a transcript, damaged
            # beyond repair): one line, and the file is left as it is.
            return fail(f"cairn -p: {one_line(str(exc))}", EXIT_FAILED)
        code = EXIT_FAILED
        try:
            code = await _task(args, prompt, runtime, agent, on_stderr)
        except StoreError as exc:
            # Outside a turn (opening a /clear session, its SessionStart context):
            # one line too, never a traceback.
            code = fail(f"cairn -p: {store_failure(exc, runtime.current_id())}", EXIT_STORE)
        finally:
            try:
                runtime.close()
            except StoreError as exc:
                # The last fsync at close: the answer may be out, the session is not safe.
                if code != EXIT_STORE:
                    text = store_failure(exc, runtime.current_id(), stopped="closing it failed")
                    code = fail(f"cairn -p: {text}", EXIT_STORE)
        return code


async def _task(
    args: PrintArgs, prompt: str, runtime: Runtime, agent: AgentSession, on_stderr: _StderrNotices
) -> int:
    """The prompt or the command, run to its end: the exit code."""
    await agent.start()
    if parse_command(prompt) is not None:
        try:
            outcome = await agent.command(prompt)
        except StoreFailedError as exc:
            return fail(f"cairn -p: {exc}", EXIT_STORE)
        _emit(args, outcome.text, runtime.current.id, 0)
        return 0 if outcome.ok else EXIT_FAILED
    try:
        # The prompt as written: ``@path`` mentions are not attached here.
        result = await agent.prompt(user(prompt), max_turns=args.max_turns)
    except TurnError as exc:
        code = EXIT_STORE if isinstance(exc, StoreFailedError) else EXIT_FAILED
        if str(exc) in on_stderr.errors:
            return code  # already on stderr as its error event
        return fail(f"cairn -p: {exc}", code)
    if result.max_turns_reached:
        stopped = (
            f"stopped after {result.requests} requests (--max-turns {args.max_turns}) "
            f"before the task finished; continue with --resume {agent.stored_id}"
        )
        _emit(args, result.text, agent.stored_id, result.requests, error=stopped)
        return fail(f"cairn -p: {stopped}", EXIT_FAILED)
    # Where the session is stored now: a new id if its file was replaced meanwhile.
    _emit(args, result.text, agent.stored_id, result.requests)
    return 0


class DenyAndExplain:
    """The permission policy of ``cairn -p``: nobody can be asked, so every question is refused.

    ``--permission-mode`` is the answer, and it said ask: the call is rejected
    (the model reads that it was denied) and the user reads why, in the
    output's notice form, with the modes that would let it run.
    """

    def __init__(self, args: PrintArgs, show: Callable[[Event], None]) -> None:
        self._mode = args.permission_mode
        self._show = show

    def __call__(self, agent: AgentSession, event: Event) -> None:
        if not isinstance(event, PermissionRequested):
            return
        agent.answer(event.id, "reject")
        self._show(
            Notice(
                f"permission refused: {event.tool} ({event.summary}) needs permission in "
                f"--permission-mode {self._mode}; cairn -p cannot ask — use "
                "accept-edits or bypass"
            )
        )


def _emit(
    args: PrintArgs, text: str, session_id: str, requests: int, *, error: str | None = None
) -> None:
    if args.output_format == "text":
        if error is None:
            print(text)
        return
    payload: dict[str, JSONValue] = {
        "type": "result",
        "result": text,
        "session_id": session_id,
        "requests": requests,
    }
    if error is not None:
        payload["is_error"] = True
        payload["error"] = error
    sys.stdout.buffer.write(orjson.dumps(payload) + b"\n")
    sys.stdout.flush()


class _StderrNotices:
    """Prints notices and errors on stderr, one line each, so stdout keeps only the answer."""

    def __init__(self) -> None:
        #: Messages of the error events printed, so a failed turn is not reported twice.
        self.errors: set[str] = set()

    def __call__(self, event: Event) -> None:
        if isinstance(event, Notice):
            _stderr_line("notice", event.text)
        elif isinstance(event, ErrorEvent):
            self.errors.add(event.message)
            _stderr_line("error", event.message)


def _stderr_line(kind: str, text: str) -> None:
    print(f"cairn: {kind}: {one_line(text)}", file=sys.stderr, flush=True)


def _print_event(event: Event) -> None:
    sys.stdout.buffer.write(orjson.dumps(event_to_wire(event)) + b"\n")
    sys.stdout.flush()
