"""``cairn -p``: run one task to the end against the configured endpoint and print the answer.

Streams by output format:

- ``text`` and ``json``: stdout holds only the answer (the text, or one JSON
  result object); every ``Notice`` (a hook's stderr, a timeout, a skipped
  compaction …) and every ``ErrorEvent`` goes to stderr as one line,
  ``cairn: notice: …`` / ``cairn: error: …`` (line breaks shown as ``\\n``);
- ``stream-json``: every event, then the result, as JSON lines on stdout.

Each session that becomes current (the first one, and one opened by
``/clear`` or ``/resume``) is subscribed before its SessionStart hooks run,
so their notices are printed too.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeAlias

import orjson

from cairn.agent.commands import parse_command, run_command
from cairn.agent.events import ErrorEvent, Event, Notice, PermissionRequested, event_to_wire
from cairn.agent.loop import StoreFailedError, TurnError, run_turn, store_failure
from cairn.agent.runtime import Runtime, Session
from cairn.agent.settings import Settings, SettingsError, load_settings
from cairn.agent.tools.base import PermissionMode
from cairn.errors import CairnError
from cairn.messages import JSONValue
from cairn.provider import (
    ModelConfig,
    ModelConfigError,
    ModelEntry,
    open_provider,
    resolve_with_env,
)
from cairn.provider.config import MIN_CONTEXT_WINDOW
from cairn.store import StoreError
from cairn.wire_apis import WireAPI

OutputFormat: TypeAlias = Literal["text", "json", "stream-json"]
EXIT_FAILED = 1
EXIT_USAGE = 2
#: The transcript could not be written (disk full, I/O error, database lost): what was
#: saved before is kept, and the one line on stderr says how to resume.
EXIT_STORE = 3


@dataclass(frozen=True)
class PrintArgs:
    prompt: str | None
    output_format: OutputFormat = "text"
    resume: str | None = None
    model: str | None = None
    context_window: int | None = None
    max_output_tokens: int | None = None
    #: ``--api``: the wire API (``cairn.wire_apis``).
    api: WireAPI | None = None
    permission_mode: PermissionMode = "accept-edits"
    max_turns: int = 50
    #: Read AGENTS.md / CLAUDE.md (``--no-instructions``: false).
    instructions: bool = True
    workspace: Path = Path()


def run_print(args: PrintArgs) -> int:
    prompt = args.prompt
    if prompt is None or prompt == "-":
        if sys.stdin is None or sys.stdin.isatty():
            return _fail("cairn -p: give a prompt, or pipe one on standard input", EXIT_USAGE)
        prompt = sys.stdin.read()
    if not prompt.strip():
        return _fail("cairn -p: the prompt is empty", EXIT_USAGE)
    if args.max_turns < 1:
        return _fail(f"cairn -p: --max-turns must be at least 1, got {args.max_turns}", EXIT_USAGE)
    try:
        settings, model = load_cli_model(
            args.workspace,
            model=args.model,
            context_window=args.context_window,
            max_output_tokens=args.max_output_tokens,
            api=args.api,
        )
    except SetupError as exc:
        return _fail(f"cairn -p: {exc}", EXIT_USAGE)
    return asyncio.run(_run(args, prompt, settings_model=model, settings=settings))


async def _run(
    args: PrintArgs, prompt: str, *, settings_model: ModelConfig, settings: Settings
) -> int:
    async with open_provider(settings_model) as provider:
        # Nobody can answer a permission question here: ``ask`` refuses instead.
        runtime = Runtime(
            args.workspace,
            settings_model,
            provider,
            settings=settings,
            permission_mode=args.permission_mode,
            answers_permissions=True,
            instructions=args.instructions,
        )
        on_stderr = _StderrNotices()
        printer = _print_event if args.output_format == "stream-json" else on_stderr

        def subscribe(session: Session) -> None:
            session.events.on(printer)
            session.events.on(lambda event: _refuse_permission(session, event, args))

        runtime.on_switch(subscribe)
        try:
            session = runtime.resume(args.resume) if args.resume else runtime.new_session()
        except LookupError as exc:
            return _fail(f"cairn -p: {exc}", EXIT_USAGE)
        except StoreError as exc:
            # A transcript that cannot be opened (locked, not a transcript, damaged
            # beyond repair): one line, and the file is left as it is.
            return _fail(f"cairn -p: {one_line(str(exc))}", EXIT_FAILED)
        code = EXIT_FAILED
        try:
            code = await _task(args, prompt, runtime, session, on_stderr)
        except StoreError as exc:
            # Outside a turn (opening a /clear session, its SessionStart context):
            # one line too, never a traceback.
            code = _fail(f"cairn -p: {store_failure(exc, runtime.current_id())}", EXIT_STORE)
        finally:
            try:
                runtime.close()
            except StoreError as exc:
                # The last fsync at close: the answer may be out, the session is not safe.
                if code != EXIT_STORE:
                    text = store_failure(exc, runtime.current_id(), stopped="closing it failed")
                    code = _fail(f"cairn -p: {text}", EXIT_STORE)
        return code


async def _task(
    args: PrintArgs, prompt: str, runtime: Runtime, session: Session, on_stderr: _StderrNotices
) -> int:
    """The prompt or the command, run to its end: the exit code."""
    await session.start()
    command = parse_command(prompt)
    if command is not None:
        try:
            outcome = await run_command(runtime, *command)
        except StoreFailedError as exc:
            return _fail(f"cairn -p: {exc}", EXIT_STORE)
        _emit(args, outcome.text, runtime.current.id, 0)
        return 0 if outcome.ok else EXIT_FAILED
    try:
        result = await run_turn(session, prompt, max_turns=args.max_turns)
    except TurnError as exc:
        code = EXIT_STORE if isinstance(exc, StoreFailedError) else EXIT_FAILED
        if str(exc) in on_stderr.errors:
            return code  # already on stderr as its error event
        return _fail(f"cairn -p: {exc}", code)
    if result.max_turns_reached:
        stopped = (
            f"stopped after {result.requests} requests (--max-turns {args.max_turns}) "
            f"before the task finished; continue with --resume {session.pipeline.session_id}"
        )
        _emit(args, result.text, session.pipeline.session_id, result.requests, error=stopped)
        return _fail(f"cairn -p: {stopped}", EXIT_FAILED)
    # Where the session is stored now: a new id if its file was replaced meanwhile.
    _emit(args, result.text, session.pipeline.session_id, result.requests)
    return 0


def _refuse_permission(session: Session, event: Event, args: PrintArgs) -> None:
    """Nobody can be asked here: ``--permission-mode`` is the answer, and it said ask."""
    if not isinstance(event, PermissionRequested):
        return
    session.answer(event.id, "reject")
    session.events.publish(
        Notice(
            f"permission refused: {event.tool} ({event.summary}) needs permission in "
            f"--permission-mode {args.permission_mode}; cairn -p cannot ask — use "
            "accept-edits or bypass"
        )
    )


#: What ``cairn`` says when neither settings, the environment nor a flag names a model.
NO_MODEL = (
    "no model configured: set CAIRN_MODEL (and OPENAI_BASE_URL, OPENAI_API_KEY), "
    'or a "model" entry in settings.json'
)


class SetupError(CairnError, ValueError):
    """The settings or the flags give no usable model: one line for stderr."""


def load_cli_model(
    workspace: Path,
    *,
    model: str | None = None,
    context_window: int | None = None,
    max_output_tokens: int | None = None,
    api: WireAPI | None = None,
) -> tuple[Settings, ModelConfig]:
    """The settings and the model, resolved the same way by every command."""
    try:
        settings = load_settings(workspace)
        resolved = resolve_cli_model(
            settings,
            PrintArgs(
                prompt=None,
                model=model,
                context_window=context_window,
                max_output_tokens=max_output_tokens,
                api=api,
            ),
        )
    except (SettingsError, ModelConfigError) as exc:
        raise SetupError(str(exc)) from exc
    if resolved is None:
        raise SetupError(NO_MODEL)
    return settings, resolved


def resolve_cli_model(settings: Settings, args: PrintArgs) -> ModelConfig | None:
    """Settings (user, then project), then the environment, then the flags: the last wins.

    Beneath them, the model registry with the settings' ``models`` gives a known
    model's window and image support (``resolve_model``).
    """
    for flag, value, low in (
        ("--context-window", args.context_window, MIN_CONTEXT_WINDOW),
        ("--max-output-tokens", args.max_output_tokens, 1),
    ):
        if value is not None and value < low:
            raise ModelConfigError(f"{flag} must be an integer ≥ {low:,}, got {value}")
    flags = ModelEntry(
        model=args.model or None,
        context_window=args.context_window,
        max_output_tokens=args.max_output_tokens,
        api=args.api,
    )
    return resolve_with_env(settings.model, flags, models=settings.models)


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


def one_line(text: str) -> str:
    """``text`` on one line: trailing blanks trimmed, line breaks shown as ``\\n``."""
    return "\\n".join(line.rstrip() for line in text.strip().splitlines())


def _print_event(event: Event) -> None:
    sys.stdout.buffer.write(orjson.dumps(event_to_wire(event)) + b"\n")
    sys.stdout.flush()


def _fail(message: str, code: int) -> int:
    print(message, file=sys.stderr)
    return code
