"""Settings-file hooks as real subprocesses: the ``CompactionHooks`` of one session.

Each hook is a shell command run in the workspace with the event's JSON on
stdin and ``CAIRN_PROJECT_DIR`` set to the workspace. Its exit code decides:

- 0: success; stdout is the hook's output for the event (PreCompact: extra
  compaction instructions; SessionStart: context to add; PostCompact: returned
  as is). A stdout that is a JSON object with a ``decision`` key is a decision,
  not text: ``{"decision": "block", "reason": "…"}`` blocks a PreCompact (the
  only event that can be blocked; others report it in a notice and go on).
- 2: a non-blocking error (seed 004, DESIGN §1): stderr becomes a notice shown
  to the user, and the work goes on.
- anything else, a crash, a timeout: a notice with the exit code or reason and
  stderr; the work goes on.

A hook failure never raises: the caller gets notices in ``HookOutcome``. Only
cancellation of the caller propagates (after the hook's processes are killed).

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cairn.agent.settings import CommandHook, HookEvent, HooksSettings
from cairn.context.hooks import HookOutcome, SessionStartSource
from cairn.store.records import Trigger

#: Environment variable that holds the workspace path in every hook process.
PROJECT_DIR_ENV = "CAIRN_PROJECT_DIR"
#: Exit code of a hook that reports a non-blocking error on stderr.
NOTICE_EXIT_CODE = 2
#: Longest hook stderr quoted in one notice, in characters.
MAX_NOTICE_CHARS = 4_000
_MAX_COMMAND_CHARS = 80
#: How long a killed hook may take to release its pipes, in seconds.
_REAP_GRACE_S = 5.0


@dataclass(frozen=True, slots=True)
class _Finished:
    """A hook process that ran to its end within its timeout."""

    returncode: int
    stdout: str
    stderr: str


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
        return await self._run_event("SessionStart", source, {"source": source})

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
            if result.returncode == 0:
                text = result.stdout.strip()
                decision = _decision(text)
                if decision is None:
                    if text:
                        outputs.append(text)
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
                elif verdict is not None:
                    notices.append(
                        f"{name} printed decision {verdict!r}; only 'block' is understood"
                    )
            elif result.returncode == NOTICE_EXIT_CODE:
                notices.append(f"{name}: {_quote(result.stderr) or '(exit code 2, no message)'}")
            else:
                notices.append(f"{name} {_failure(result)}")
        return HookOutcome(output="\n\n".join(outputs), notices=tuple(notices))

    async def _run_hook(self, hook: CommandHook, payload: bytes) -> _Finished | str:
        """Run one hook; a string is why it did not finish (for a notice)."""
        env = {**os.environ, PROJECT_DIR_ENV: str(self._cwd)}
        try:
            process = await asyncio.create_subprocess_shell(
                hook.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=self._cwd,
                env=env,
                # Its own process group, so a timeout kills what it spawned too.
                start_new_session=True,
            )
        except OSError as exc:
            return f"could not start: {exc}"
        try:
            stdout, stderr = await asyncio.wait_for(process.communicate(payload), hook.timeout)
        except TimeoutError:
            await _kill_and_reap(process)
            return f"timed out after {hook.timeout:g} s and was killed"
        except asyncio.CancelledError:
            # The caller was cancelled (the session was aborted): leave nothing running.
            await _kill_and_reap(process)
            raise
        except BaseException:
            _kill_group(process)
            raise
        assert process.returncode is not None
        return _Finished(
            process.returncode,
            stdout.decode("utf-8", errors="replace"),
            stderr.decode("utf-8", errors="replace"),
        )


async def _kill_and_reap(process: asyncio.subprocess.Process) -> None:
    """Kill the hook's process group and wait for it, so its pipes and transport close.

    The wait is bounded: a grandchild that left the group (``setsid``) may
    hold the pipes open, and it must not hang the session.
    """
    _kill_group(process)
    if process.stdin is not None:
        process.stdin.close()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(process.communicate(), _REAP_GRACE_S)


def _kill_group(process: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    except PermissionError:
        process.kill()


def _decision(text: str) -> tuple[str | None, str] | None:
    """``(decision, reason)`` when stdout is a JSON object with a ``decision`` key."""
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(value, dict) or "decision" not in value:
        return None
    verdict = value["decision"]
    reason = value.get("reason")
    return (
        None if verdict is None else str(verdict),
        reason.strip() if isinstance(reason, str) else "",
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
