"""Settings-file hooks as real subprocesses: the ``CompactionHooks`` of one session.

Each hook is a shell command run in the workspace with the event's JSON on
stdin and ``CAIRN_PROJECT_DIR`` set to the workspace. Its exit code decides:

- 0: success; stdout is the hook's output for the event (PreCompact: extra
  compaction instructions; SessionStart: context added to the model's context
  as a hidden reminder; PostCompact: returned as is). A stdout that is a JSON
  object with a ``decision``, ``hookSpecificOutput`` or ``systemMessage`` key
  is Claude Code's JSON output, not text: ``{"decision": "block", "reason":
  "…"}`` blocks a PreCompact (the only event that can be blocked; others
  report it in a notice and go on), ``hookSpecificOutput.additionalContext``
  is the output text, ``systemMessage`` is a notice for the user.
- 2: a non-blocking error (seed 004, DESIGN §1): stderr becomes a notice shown
  to the user, and the work goes on.
- anything else, a crash, a timeout: a notice with the exit code or reason and
  stderr; the work goes on.

A hook failure never raises: the caller gets notices in ``HookOutcome``. Only
cancellation of the caller propagates (after the hook's processes are killed).

Bounds, so a hook can neither flood the session nor hang it:

- stdout is capped at ``MAX_STDOUT_BYTES`` (64 KiB) per hook and stderr at
  ``MAX_STDERR_BYTES`` (64 KiB). Both pipes are read incrementally and drained
  to the end, so a hook that prints 10 MB finishes normally; what is over the
  cap is dropped and a notice says how many bytes were. SessionStart text is
  further capped at ``MAX_REMINDER_CHARS`` (``cairn.context.hooks``), the
  rest dropped with a notice.
- stdin is a temporary file holding the JSON, not a pipe: a hook that never
  reads it, or a child that keeps it open, cannot block anything.
- when the hook's main process exits, or its timeout passes, or the caller is
  cancelled, its whole process group is killed (``SIGKILL``), background
  children included. A child that left the group (``setsid``) and still holds
  stdout or stderr gets ``DRAIN_GRACE_S`` to finish writing; then, on Linux,
  every process still holding those pipes is killed (it can only be the
  hook's), and the pipes and the subprocess transport are closed before the
  runner returns — no task, transport or child watcher is left behind.

The hooks of one event run **one after another**, in settings order (user file
first, then project). Compaction hooks are a protocol in time — PreCompact,
then the compaction, then SessionStart (``compact``), then PostCompact — and
users rely on that order within an event as well: one hook writes a notes file
another one reads, or several append to the same log. Running them in parallel
(as Claude Code does) would make such setups race.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cairn.agent.settings import CommandHook, HookEvent, HooksSettings
from cairn.context.hooks import (
    MAX_REMINDER_CHARS,
    HookOutcome,
    SessionStartSource,
    cap_reminder,
)
from cairn.store.records import Trigger

#: Environment variable that holds the workspace path in every hook process.
PROJECT_DIR_ENV = "CAIRN_PROJECT_DIR"
#: Exit code of a hook that reports a non-blocking error on stderr.
NOTICE_EXIT_CODE = 2
#: Longest hook stderr quoted in one notice, in characters.
MAX_NOTICE_CHARS = 4_000
#: Most bytes of one hook's stdout kept; the rest is read and dropped.
MAX_STDOUT_BYTES = 64 * 1024
#: Most bytes of one hook's stderr kept (only ``MAX_NOTICE_CHARS`` are quoted).
MAX_STDERR_BYTES = 64 * 1024
#: After the hook's main process exits, how long its pipes may stay open, in seconds.
DRAIN_GRACE_S = 2.0
#: How long a killed process may take to be reaped and its pipes to close, in seconds.
_REAP_GRACE_S = 5.0
_MAX_COMMAND_CHARS = 80
#: The keys that make a JSON object on stdout Claude Code's JSON output.
_JSON_OUTPUT_KEYS = ("decision", "hookSpecificOutput", "systemMessage")


@dataclass(frozen=True, slots=True)
class _Finished:
    """A hook process that ran to its end within its timeout."""

    returncode: int
    stdout: str
    stderr: str
    #: Bytes of stdout over ``MAX_STDOUT_BYTES``, read and dropped.
    stdout_dropped: int = 0
    #: Processes that left the group and held the output open, killed after the grace.
    escaped: int = 0


class _Capture:
    """The first ``limit`` bytes of one output pipe; the rest is only counted."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = max(self.limit - len(self.data), 0)
        self.data += chunk[:room]
        self.dropped += max(len(chunk) - room, 0)

    def text(self) -> str:
        data = bytes(self.data)
        # A cut in the middle of a UTF-8 sequence would decode as U+FFFD.
        return (_utf8_prefix(data) if self.dropped else data).decode("utf-8", errors="replace")


class _HookProtocol(asyncio.SubprocessProtocol):
    """Captures stdout and stderr within their caps; says when the process and pipes end."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.stdout = _Capture(MAX_STDOUT_BYTES)
        self.stderr = _Capture(MAX_STDERR_BYTES)
        self.exited: asyncio.Future[None] = loop.create_future()
        #: Both output pipes reached EOF (or were closed).
        self.outputs_closed: asyncio.Future[None] = loop.create_future()
        #: The transport finished: process reaped and every pipe closed.
        self.finished: asyncio.Future[None] = loop.create_future()
        self._open = {1, 2}

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        chunk = data.encode() if isinstance(data, str) else data
        (self.stdout if fd == 1 else self.stderr).add(chunk)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._open.discard(fd)
        if not self._open:
            _settle(self.outputs_closed)

    def process_exited(self) -> None:
        _settle(self.exited)

    def connection_lost(self, exc: Exception | None) -> None:
        _settle(self.finished)


class HookRunner:
    """Runs the settings-file hooks of one session; implements ``CompactionHooks``."""

    def __init__(
        self,
        settings: HooksSettings,
        *,
        session_id: str,
        transcript_path: Path,
        cwd: Path,
    ) -> None:
        self._settings = settings
        self._session_id = session_id
        self._transcript_path = transcript_path
        self._cwd = cwd

    async def pre_compact(self, trigger: Trigger, instructions: str | None) -> HookOutcome:
        """Run PreCompact hooks; ``output`` is their stdout joined by blank lines.

        The output is only the hooks' text: the caller appends it to the
        custom instructions. The first block decision stops the event (no
        compaction will happen for the remaining hooks to prepare).
        """
        text = instructions or ""
        return await self._run_event(
            "PreCompact",
            trigger,
            # ``custom_instructions`` is Claude Code's name for the same field,
            # so hook scripts written for Claude Code work unchanged.
            {"trigger": trigger, "compact_instructions": text, "custom_instructions": text},
        )

    async def session_start(self, source: SessionStartSource) -> HookOutcome:
        """Run SessionStart hooks; ``output`` is the text for the model, capped.

        The caller adds it to the model's context as a hidden reminder
        (``cairn.context.hooks.session_start_reminder``).
        """
        outcome = await self._run_event("SessionStart", source, {"source": source})
        text, dropped = cap_reminder(outcome.output)
        if not dropped:
            return outcome
        notice = (
            f"SessionStart hooks printed {len(outcome.output):,} characters for the model's "
            f"context, over the {MAX_REMINDER_CHARS:,}-character cap; kept the first "
            f"{len(outcome.output) - dropped:,} and dropped {dropped:,}"
        )
        return replace(outcome, output=text, notices=(*outcome.notices, notice))

    async def post_compact(self, trigger: Trigger, summary: str) -> HookOutcome:
        return await self._run_event(
            "PostCompact", trigger, {"trigger": trigger, "compact_summary": summary}
        )

    async def _run_event(
        self, event: HookEvent, match_value: str, fields: dict[str, Any]
    ) -> HookOutcome:
        hooks = self._settings.commands(event, match_value)
        if not hooks:
            return HookOutcome()
        payload = json.dumps(
            {
                "session_id": self._session_id,
                "transcript_path": str(self._transcript_path),
                "cwd": str(self._cwd),
                "hook_event_name": event,
                **fields,
            },
            ensure_ascii=False,
        ).encode()
        outputs: list[str] = []
        notices: list[str] = []
        for hook in hooks:
            name = f"{event} hook `{_short(hook.command)}`"
            result = await self._run_hook(hook, payload)
            if isinstance(result, str):
                notices.append(f"{name} {result}")
                continue
            if result.stdout_dropped:
                notices.append(_dropped_notice(name, result.stdout_dropped))
            if result.escaped:
                notices.append(
                    f"{name} left {result.escaped} process(es) holding its output open after "
                    f"it exited; killed them after {DRAIN_GRACE_S:g} s"
                )
            if result.returncode == NOTICE_EXIT_CODE:
                notices.append(f"{name}: {_quote(result.stderr) or '(exit code 2, no message)'}")
                continue
            if result.returncode != 0:
                notices.append(f"{name} {_failure(result)}")
                continue
            text = result.stdout.strip()
            output = _json_output(text)
            if output is None:
                if text:
                    outputs.append(text)
                continue
            outputs.extend(_additional_context(output))
            notices.extend(f"{name}: {message}" for message in _system_message(output))
            decision = _decision(output)
            if decision is None:
                continue
            verdict, reason = decision
            if verdict == "block" and event == "PreCompact":
                return HookOutcome(
                    output="\n\n".join(outputs),
                    notices=tuple(notices),
                    blocked=reason or "no reason given",
                )
            if verdict == "block":
                notices.append(f"{name} asked to block; only PreCompact can be blocked")
            else:
                notices.append(f"{name} printed decision {verdict!r}; only 'block' is understood")
        return HookOutcome(output="\n\n".join(outputs), notices=tuple(notices))

    async def _run_hook(self, hook: CommandHook, payload: bytes) -> _Finished | str:
        """Run one hook; a string is why it did not finish (for a notice)."""
        loop = asyncio.get_running_loop()
        env = {**os.environ, PROJECT_DIR_ENV: str(self._cwd)}
        with tempfile.TemporaryFile() as stdin:
            stdin.write(payload)
            stdin.seek(0)
            try:
                transport, protocol = await loop.subprocess_shell(
                    lambda: _HookProtocol(loop),
                    hook.command,
                    stdin=stdin,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    cwd=self._cwd,
                    env=env,
                    # Its own process group, so killing the group kills what it spawned.
                    start_new_session=True,
                )
            except OSError as exc:
                return f"could not start: {exc}"
        inodes = _pipe_inodes(transport)
        timed_out = True
        try:
            await asyncio.wait({protocol.exited}, timeout=hook.timeout)
            timed_out = not protocol.exited.done()
        finally:
            # Every way out — exit, timeout, cancellation — leaves nothing running.
            escaped = await _end(transport, protocol, inodes)
        returncode = transport.get_returncode()
        if timed_out or returncode is None:
            return f"timed out after {hook.timeout:g} s and was killed"
        return _Finished(
            returncode,
            protocol.stdout.text(),
            protocol.stderr.text(),
            protocol.stdout.dropped,
            escaped,
        )


async def _end(
    transport: asyncio.SubprocessTransport, protocol: _HookProtocol, inodes: frozenset[int]
) -> int:
    """Kill the hook's group, drain its pipes for a while, then close everything.

    A child that left the group (``setsid``) may hold the pipes open after
    the main process is gone: it gets ``DRAIN_GRACE_S``, then it is killed
    and the pipes are closed regardless, so the session never hangs on it.
    Returns how many such processes were killed.
    """
    _kill_group(transport)
    await _settled(protocol.exited, _REAP_GRACE_S)
    escaped = 0
    if not await _settled(protocol.outputs_closed, DRAIN_GRACE_S):
        escaped = _kill_pipe_holders(inodes)
        await _settled(protocol.outputs_closed, _REAP_GRACE_S)
    transport.close()
    # The transport's last callbacks run on the loop: wait for them, so
    # nothing is pending when the loop closes.
    await _settled(protocol.finished, _REAP_GRACE_S)
    return escaped


async def _settled(future: asyncio.Future[None], timeout: float) -> bool:
    """Wait up to ``timeout`` for ``future`` without cancelling it; whether it is done."""
    if not future.done():
        await asyncio.wait({future}, timeout=timeout)
    return future.done()


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _kill_group(transport: asyncio.SubprocessTransport) -> None:
    # The main process leads its group (``start_new_session``), so the group
    # id is its pid; once the group is empty the kill finds nobody.
    try:
        os.killpg(transport.get_pid(), signal.SIGKILL)
    except ProcessLookupError:
        pass
    except PermissionError:
        with contextlib.suppress(ProcessLookupError):
            transport.kill()


def _pipe_inodes(transport: asyncio.SubprocessTransport) -> frozenset[int]:
    """The inodes of the hook's stdout and stderr pipes (to find who still holds them)."""
    inodes: set[int] = set()
    for fd in (1, 2):
        pipe = transport.get_pipe_transport(fd)
        file = pipe.get_extra_info("pipe") if pipe is not None else None
        if file is None:
            continue
        with contextlib.suppress(AttributeError, OSError, ValueError):
            inodes.add(os.fstat(file.fileno()).st_ino)
    return frozenset(inodes)


def _kill_pipe_holders(inodes: frozenset[int], proc: Path = Path("/proc")) -> int:
    """Kill every other process holding one of these pipes (Linux; elsewhere none); how many.

    Only the hook's descendants can hold them: the pipes were made for it and
    this process keeps only the read ends.
    """
    if not inodes:
        return 0
    links = {f"pipe:[{inode}]" for inode in inodes}
    holders = list(_pipe_holders(links, proc))
    for pid in holders:
        _kill_escaped(pid)
    return len(holders)


def _pipe_holders(links: set[str], proc: Path) -> Iterable[int]:
    me = str(os.getpid())
    try:
        entries = [e for e in proc.iterdir() if e.name.isdigit() and e.name != me]
    except OSError:
        return
    for entry in entries:
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                if str(fd.readlink()) in links:
                    yield int(entry.name)
                    break


def _kill_escaped(pid: int) -> None:
    """Kill ``pid``, and its whole group when it leads one (a ``setsid`` child does)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)


def _utf8_prefix(data: bytes) -> bytes:
    """``data`` without a UTF-8 sequence cut at its end."""
    end = len(data)
    start = max(end - 4, 0)
    for i in range(end - 1, start - 1, -1):
        byte = data[i]
        if byte < 0x80:
            return data
        if byte >= 0xC0:
            length = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data if end - i >= length else data[:i]
    return data


def _json_output(text: str) -> dict[str, Any] | None:
    """Claude Code's JSON output: an object with one of its known keys; else ``None``."""
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):  # a hook's stdout nested ~1,000 deep
        return None
    if not isinstance(value, dict) or not any(k in value for k in _JSON_OUTPUT_KEYS):
        return None
    return value


def _decision(output: dict[str, Any]) -> tuple[str, str] | None:
    """``(decision, reason)`` when the output carries a non-null decision."""
    verdict = output.get("decision")
    if verdict is None:
        return None
    reason = output.get("reason")
    return str(verdict), reason.strip() if isinstance(reason, str) else ""


def _additional_context(output: dict[str, Any]) -> list[str]:
    specific = output.get("hookSpecificOutput")
    context = specific.get("additionalContext") if isinstance(specific, dict) else None
    return [context.strip()] if isinstance(context, str) and context.strip() else []


def _system_message(output: dict[str, Any]) -> list[str]:
    message = output.get("systemMessage")
    return [_quote(message)] if isinstance(message, str) and message.strip() else []


def _dropped_notice(name: str, dropped: int) -> str:
    return (
        f"{name} printed more than {MAX_STDOUT_BYTES // 1024} KiB on stdout; "
        f"kept the first {MAX_STDOUT_BYTES:,} bytes and dropped {dropped:,}"
    )


def _failure(result: _Finished) -> str:
    if result.returncode < 0:
        try:
            how = f"was killed by {signal.Signals(-result.returncode).name}"
        except ValueError:
            how = f"was killed by signal {-result.returncode}"
    else:
        how = f"failed with exit code {result.returncode}"
    message = _quote(result.stderr)
    return f"{how}: {message}" if message else how


def _quote(stderr: str) -> str:
    text = stderr.strip()
    if len(text) > MAX_NOTICE_CHARS:
        text = text[:MAX_NOTICE_CHARS] + f"… ({len(text) - MAX_NOTICE_CHARS} more characters)"
    return text


def _short(command: str) -> str:
    line = " ".join(command.split())
    return line if len(line) <= _MAX_COMMAND_CHARS else line[: _MAX_COMMAND_CHARS - 1] + "…"
