"""The editor as the tools' host: files through ``fs/*``, commands through ``terminal/*``.

Given to the ``Runtime`` only when the client advertised the capability
(both ``fs`` methods for files; ``terminal`` for commands). The tools still
confine every path to the workspace before they hand it here; the editor
then reads its buffer (saved or not) and shows the edits and the commands as
its own. A failure is a ``HostIOError`` — one line the model reads — never a
protocol error for the user.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path

from acp.exceptions import RequestError
from acp.schema import CreateTerminalResponse, ReadTextFileResponse, TerminalOutputResponse
from pydantic import ValidationError

from cairn.agent import HostIOError, TerminalEnd, TerminalOutcome
from cairn.messages import JSONObject, JSONValue
from cairn.surfaces.acp.channel import Channel

#: The editor keeps at most this much of a command's output; the bash tool cuts it
#: further (its head and tail), as it does for a local command.
OUTPUT_BYTE_LIMIT = 1_000_000


async def _request(channel: Channel, method: str, params: JSONObject, what: str) -> JSONValue:
    try:
        return await channel.request(method, params)
    except RequestError as exc:
        raise HostIOError(f"the editor could not {what}: {exc}") from exc
    except ConnectionError as exc:
        raise HostIOError(f"the editor could not {what}: the connection is closed") from exc


class EditorFiles:
    """``HostFiles`` over ``fs/read_text_file`` and ``fs/write_text_file``."""

    def __init__(self, channel: Channel, session_id: str) -> None:
        self._channel = channel
        self._session_id = session_id

    async def read_text(self, path: Path) -> str:
        raw = await _request(
            self._channel,
            "fs/read_text_file",
            {"sessionId": self._session_id, "path": str(path)},
            f"read {path}",
        )
        try:
            return ReadTextFileResponse.model_validate(raw).content
        except ValidationError as exc:
            raise HostIOError(f"the editor's answer for {path} has no text content") from exc

    async def write_text(self, path: Path, content: str) -> None:
        await _request(
            self._channel,
            "fs/write_text_file",
            {"sessionId": self._session_id, "path": str(path), "content": content},
            f"write {path}",
        )


class EditorTerminal:
    """``HostTerminal`` over ``terminal/create`` … ``terminal/release``."""

    def __init__(
        self, channel: Channel, session_id: str, show: Callable[[str], None] | None = None
    ) -> None:
        self._channel = channel
        self._session_id = session_id
        #: Called with the new terminal's id, so the running tool call can embed it.
        self._show = show

    async def run(
        self, command: str, *, cwd: Path, timeout: float, abort: asyncio.Event
    ) -> TerminalOutcome:
        created = await _request(
            self._channel,
            "terminal/create",
            {
                "sessionId": self._session_id,
                "command": "bash",
                "args": ["-c", command],
                "cwd": str(cwd),
                "outputByteLimit": OUTPUT_BYTE_LIMIT,
            },
            "start a terminal",
        )
        try:
            terminal_id = CreateTerminalResponse.model_validate(created).terminal_id
        except ValidationError as exc:
            raise HostIOError("the editor's terminal/create answer has no terminalId") from exc
        ids: JSONObject = {"sessionId": self._session_id, "terminalId": terminal_id}
        if self._show is not None:
            self._show(terminal_id)
        try:
            ended = await self._wait(ids, timeout, abort)
            raw = await _request(self._channel, "terminal/output", ids, "read the terminal")
            try:
                output = TerminalOutputResponse.model_validate(raw)
            except ValidationError as exc:
                raise HostIOError("the editor's terminal/output answer is malformed") from exc
            status = output.exit_status
            return TerminalOutcome(
                output.output,
                status.exit_code if status is not None and ended == "exited" else None,
                ended,
                status.signal if status is not None else None,
                output.truncated,
            )
        finally:
            # Also when cancelled: the editor frees the terminal (and kills what still runs).
            with contextlib.suppress(HostIOError):
                await _request(self._channel, "terminal/release", ids, "release the terminal")

    async def _wait(self, ids: JSONObject, timeout: float, abort: asyncio.Event) -> TerminalEnd:
        exited = asyncio.ensure_future(
            _request(self._channel, "terminal/wait_for_exit", ids, "wait for the command")
        )
        aborted = asyncio.ensure_future(abort.wait())
        try:
            done, _ = await asyncio.wait(
                {exited, aborted}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if exited in done:
                exited.result()  # a failed wait is the editor's error
                return "exited"
            await _request(self._channel, "terminal/kill", ids, "kill the command")
            return "interrupted" if aborted in done else "timed out"
        finally:
            for task in (exited, aborted):
                task.cancel()
