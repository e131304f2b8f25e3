"""The bash tool — a command in the workspace — and bash_output for background runs.

A command runs as ``bash -c <command>`` in the workspace, in its own process
group (so a timeout or an abort kills everything it started), with stdin
closed and stdout and stderr merged into one captured stream. Output beyond
``OUTPUT_HEAD_BYTES`` + ``OUTPUT_TAIL_BYTES`` keeps its beginning and its end.

The output is read from a pipe the tool owns rather than an asyncio
subprocess pipe, so the end of the command is noticed when *it* exits, even
if something it left running in the background still holds the pipe open
(asyncio's ``Process.wait`` would wait for that too). Such leftovers are not
killed; their later output is not captured.

When the host runs commands (``ctx.terminal``, see ``host_io``), a
foreground command runs in its terminal instead, with the same timeout and
abort; the result reads the same — the output cut the same way, the same
exit, timeout and interruption wording — so the model cannot tell the
difference, beyond a note when the host itself cut the output.

In background mode the command's output goes to
``<session_dir>/tasks/<id>.log``; the session state's task list says
``running`` and, when the command ends, ``completed (exit 0)`` or
``failed (exit N)``. ``bash_output`` shows the log so far and that status.
Background commands always run here, never in the host's terminal: that log
file, and the process they are watched and killed by, are what ``bash_output``
and the end of a session rely on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from dataclasses import dataclass
from pathlib import Path

from cairn.agent.state import SessionState
from cairn.agent.tools.args import bool_arg, number_arg, str_arg
from cairn.agent.tools.base import ToolContext, ToolResult
from cairn.agent.tools.files import error
from cairn.agent.tools.host_io import HostTerminal, TerminalEnd, TerminalOutcome, host_problem
from cairn.context.effects import ToolEffect
from cairn.context.restoration_source import BackgroundTask
from cairn.messages import JSONObject

DEFAULT_TIMEOUT_S = 120.0
MAX_TIMEOUT_S = 600.0
OUTPUT_HEAD_BYTES = 15_000
OUTPUT_TAIL_BYTES = 15_000
#: bash_output shows at most the last this many bytes of a log.
LOG_TAIL_BYTES = 30_000
#: After the command exits, how long leftovers may keep its output pipe open.
_PIPE_GRACE_S = 0.5
#: After a kill, how long to wait for the process to be reaped.
_REAP_GRACE_S = 5.0
#: How long past the timeout a host terminal may take to report before it is cancelled.
_HOST_GRACE_S = 10.0
#: How much of the command a background task's description keeps.
_DESCRIPTION_CHARS = 200
TASK_PREFIX = "bash_"


def tasks_dir(ctx: ToolContext) -> Path:
    return ctx.session_dir / "tasks"


class Bash:
    name = "bash"
    description = (
        "Run a command with `bash -c` in the workspace; returns stdout+stderr and "
        "the exit code. No stdin. For servers and other long-running commands set "
        "run_in_background, then check them with bash_output."
    )
    effect: ToolEffect = "write"

    def __init__(self) -> None:
        #: The watchers of background commands still running (kept referenced).
        self._running: dict[str, _Background] = {}

    @property
    def parameters(self) -> JSONObject:
        return {
            "type": "object",
            "properties": {
                "command": {"type": "string"},
                "timeout": {
                    "type": "number",
                    "description": f"Seconds (default {DEFAULT_TIMEOUT_S:g}, max "
                    f"{MAX_TIMEOUT_S:g}), then it is killed.",
                },
                "run_in_background": {
                    "type": "boolean",
                    "description": "Return a task id at once.",
                },
            },
            "required": ["command"],
            "additionalProperties": False,
        }

    def summarize(self, args: JSONObject) -> str:
        prefix = "in the background: " if args.get("run_in_background") is True else ""
        return f"{prefix}{args.get('command')}"

    async def run(self, args: JSONObject, ctx: ToolContext) -> ToolResult:
        try:
            command = str_arg(args, "command")
            timeout = number_arg(
                args,
                "timeout",
                default=DEFAULT_TIMEOUT_S,
                minimum=0.001,
                maximum=MAX_TIMEOUT_S,
            )
            background = bool_arg(args, "run_in_background")
        except ValueError as exc:
            return error(exc)
        if not command.strip():
            return error("the command is empty")
        if background:
            return await self._start_background(command, ctx)
        if ctx.abort.is_set():
            return error("interrupted: the command was not started")
        if ctx.terminal is not None:
            return await _run_in_host(ctx.terminal, command, timeout, ctx)
        return await _run_foreground(command, timeout, ctx)

    # -- background ------------------------------------------------------------

    async def _start_background(self, command: str, ctx: ToolContext) -> ToolResult:
        task_id = _next_task_id(ctx)
        log = tasks_dir(ctx) / f"{task_id}.log"
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("wb") as handle:
                process = await asyncio.create_subprocess_exec(
                    "bash",
                    "-c",
                    command,
                    cwd=ctx.workspace,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=handle,
                    stderr=asyncio.subprocess.STDOUT,
                    start_new_session=True,
                    env=_environment(),
                )
        except OSError as exc:
            return error(f"could not start bash: {exc}")
        ctx.state.set_task(BackgroundTask(task_id, f"bash: {_one_line(command)}", "running"))
        watcher = asyncio.create_task(_watch(task_id, process, ctx.state))
        self._running[task_id] = _Background(process, watcher)
        watcher.add_done_callback(lambda _: self._running.pop(task_id, None))
        return ToolResult(
            f"Started background task {task_id} (pid {process.pid}).\n"
            f"Its output goes to {log}; call bash_output with task_id {task_id!r} "
            "to see the output so far and whether it has finished."
        )

    def running_tasks(self) -> list[str]:
        """The ids of the background commands still running."""
        return list(self._running)

    async def kill_background(self) -> None:
        """Kill every background command (with its process group) and wait for the watchers."""
        running = list(self._running.values())
        for task in running:
            _kill_group(task.process)
        if running:
            await asyncio.wait([t.watcher for t in running], timeout=_REAP_GRACE_S)


@dataclass
class _Background:
    process: asyncio.subprocess.Process
    watcher: asyncio.Task[None]


async def _watch(task_id: str, process: asyncio.subprocess.Process, state: SessionState) -> None:
    try:
        code = await process.wait()
    except asyncio.CancelledError:
        # The event loop is going away: leave nothing running behind it.
        _kill_group(process)
        state.update_task(task_id, "interrupted (killed when the session stopped)")
        raise
    state.update_task(task_id, exit_status(code))


def exit_status(code: int) -> str:
    if code == 0:
        return "completed (exit 0)"
    if code < 0:
        return f"failed (killed by signal {-code})"
    return f"failed (exit {code})"


def _next_task_id(ctx: ToolContext) -> str:
    numbers = [
        int(match.group(1))
        for task_id in ctx.state.tasks
        if (match := re.fullmatch(rf"{TASK_PREFIX}(\d+)", task_id))
    ]
    number = max(numbers, default=0) + 1
    while (tasks_dir(ctx) / f"{TASK_PREFIX}{number}.log").exists():
        number += 1
    return f"{TASK_PREFIX}{number}"


def _one_line(command: str) -> str:
    text = " ".join(command.split())
    if len(text) <= _DESCRIPTION_CHARS:
        return text
    return text[: _DESCRIPTION_CHARS - 1] + "…"


# ---------------------------------------------------------------------------
# Foreground


class _Output:
    """The captured bytes: the first ``OUTPUT_HEAD_BYTES`` and the last ``OUTPUT_TAIL_BYTES``."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, data: bytes) -> None:
        room = OUTPUT_HEAD_BYTES - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            excess = len(self.tail) - OUTPUT_TAIL_BYTES
            if excess > 0:
                del self.tail[:excess]
                self.dropped += excess

    def text(self) -> str:
        if not self.dropped:
            return bytes(self.head + self.tail).decode("utf-8", errors="replace")
        return (
            self.head.decode("utf-8", errors="replace")
            + f"\n[… {self.dropped} bytes of output omitted …]\n"
            + self.tail.decode("utf-8", errors="replace")
        )


class _Collector(asyncio.Protocol):
    def __init__(self, output: _Output, closed: asyncio.Future[None]) -> None:
        self._output = output
        self._closed = closed

    def data_received(self, data: bytes) -> None:
        self._output.add(data)

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._closed.done():
            self._closed.set_result(None)


async def _run_foreground(command: str, timeout: float, ctx: ToolContext) -> ToolResult:
    loop = asyncio.get_running_loop()
    read_fd, write_fd = os.pipe()
    try:
        process = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            command,
            cwd=ctx.workspace,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=write_fd,
            stderr=write_fd,
            start_new_session=True,
            env=_environment(),
        )
    except BaseException as exc:
        os.close(read_fd)
        if isinstance(exc, OSError):
            return error(f"could not start bash: {exc}")
        raise
    finally:
        os.close(write_fd)

    output = _Output()
    closed: asyncio.Future[None] = loop.create_future()
    transport: asyncio.BaseTransport | None = None
    exited = asyncio.ensure_future(process.wait())
    aborted = asyncio.ensure_future(_abort_wait(ctx.abort))
    outcome: TerminalEnd = "exited"
    try:
        pipe = os.fdopen(read_fd, "rb", buffering=0)
        transport, _ = await loop.connect_read_pipe(lambda: _Collector(output, closed), pipe)
        done, _ = await asyncio.wait(
            {exited, aborted}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
        if exited not in done:
            outcome = "interrupted" if aborted in done else "timed out"
            _kill_group(process)
            await asyncio.wait({exited}, timeout=_REAP_GRACE_S)
        await asyncio.wait({closed}, timeout=_PIPE_GRACE_S)
    finally:
        aborted.cancel()
        if process.returncode is None:
            # Cancelled (or failed) while the command ran: leave nothing behind.
            _kill_group(process)
        exited.cancel()
        if transport is not None:
            transport.close()

    text = _shown(output)
    if outcome != "exited":
        return _killed(text, outcome, timeout)
    code = process.returncode
    assert code is not None
    status = f"exit code {code}"
    if code < 0:
        status += f" (killed by signal {-code})"
    if not closed.done():
        status += (
            "\n(processes the command left running still hold its output open; their "
            "output is not captured — use run_in_background for long-running commands)"
        )
    return ToolResult(f"{text}\n{status}", is_error=code != 0)


async def _run_in_host(
    terminal: HostTerminal, command: str, timeout: float, ctx: ToolContext
) -> ToolResult:
    running = asyncio.ensure_future(
        terminal.run(command, cwd=ctx.workspace, timeout=timeout, abort=ctx.abort)
    )
    try:
        # The host kills the command at the timeout; this bound only keeps a
        # host that never answers from hanging the turn (cancelling kills).
        done, _ = await asyncio.wait({running}, timeout=timeout + _HOST_GRACE_S)
    finally:
        running.cancel()  # a no-op once it has finished
    if running not in done:
        await asyncio.wait({running}, timeout=_REAP_GRACE_S)
        ended = TerminalOutcome("", None, ended="timed out")
    else:
        try:
            ended = running.result()
        except OSError as exc:
            return error(f"could not run the command in the host's terminal: {host_problem(exc)}")
    # Cut as a local command's output is: the model never gets more than from a local run.
    output = _Output()
    output.add(ended.output.encode("utf-8", errors="replace"))
    text = _shown(output)
    note = "\n(the host's terminal kept only part of the output)" if ended.truncated else ""
    if ended.ended != "exited":
        return _killed(text, ended.ended, timeout, note)
    code = ended.exit_code
    if code is None:
        status = f"killed by signal {ended.signal}" if ended.signal else "no exit code"
    else:
        status = f"exit code {code}"
        if ended.signal:
            status += f" (killed by signal {ended.signal})"
    return ToolResult(f"{text}\n{status}{note}", is_error=code != 0)


def _shown(output: _Output) -> str:
    return output.text().rstrip("\n") or "(no output)"


def _killed(text: str, ended: TerminalEnd, timeout: float, note: str = "") -> ToolResult:
    """The result of a command killed at its timeout or by an abort."""
    if ended == "timed out":
        return error(f"{text}\ncommand timed out after {timeout:g} s and was killed{note}")
    return error(f"{text}\ninterrupted: the command was killed{note}")


async def _abort_wait(abort: asyncio.Event) -> None:
    try:
        await abort.wait()
    except RuntimeError:
        # The event is bound to another event loop (a context reused across
        # loops): it can still be set, so watch it by polling.
        while not abort.is_set():
            await asyncio.sleep(0.1)


def _kill_group(process: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    except PermissionError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()


def _environment() -> dict[str, str]:
    # No pager may wait for a keypress that cannot come.
    return {**os.environ, "PAGER": "cat", "GIT_PAGER": "cat"}


# ---------------------------------------------------------------------------
# bash_output


class BashOutput:
    name = "bash_output"
    description = (
        f"Status and output so far (last {LOG_TAIL_BYTES // 1000} KB) of a background bash command."
    )
    effect: ToolEffect = "read_only"

    @property
    def parameters(self) -> JSONObject:
        return {
            "type": "object",
            "properties": {"task_id": {"type": "string", "description": "E.g. bash_1."}},
            "required": ["task_id"],
            "additionalProperties": False,
        }

    async def run(self, args: JSONObject, ctx: ToolContext) -> ToolResult:
        try:
            task_id = str_arg(args, "task_id").strip()
        except ValueError as exc:
            return error(exc)
        task = ctx.state.tasks.get(task_id)
        if task is None:
            known = ", ".join(sorted(ctx.state.tasks)) or "none"
            return error(f"there is no background task {task_id!r}; known tasks: {known}")
        log = tasks_dir(ctx) / f"{task_id}.log"
        if not re.fullmatch(r"[\w-]+", task_id) or not log.is_file():
            return ToolResult(f"status: {task.status}\n(no output was recorded)")
        try:
            size = log.stat().st_size
            with log.open("rb") as handle:
                handle.seek(max(0, size - LOG_TAIL_BYTES))
                data = handle.read()
        except OSError as exc:
            return error(f"cannot read the output of {task_id}: {exc.strerror or exc}")
        text = data.decode("utf-8", errors="replace").rstrip("\n")
        if size > LOG_TAIL_BYTES:
            text = f"[… the first {size - len(data)} bytes are omitted …]\n{text}"
        return ToolResult(f"status: {task.status}\n{text or '(no output yet)'}")
