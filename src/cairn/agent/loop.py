"""The agent loop: check the context, stream a request, run the tools, repeat.

Every request — the first and each follow-up after tool results — goes
through ``check_and_compact`` first. Every message is persisted before the
next step uses it, and an abort at any point leaves whole rounds: a tool call
that did not run gets a result saying it was interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from cairn.agent.events import (
    ErrorEvent,
    EventBus,
    MessageAdded,
    MessageUpdated,
    Notice,
    SessionStatus,
    ToolFinished,
    ToolStarted,
    UsageUpdate,
)
from cairn.agent.tools.base import ToolContext
from cairn.agent.tools.registry import ToolRegistry
from cairn.context.pipeline import (
    CheckpointWriteError,
    CompactionCancelledError,
    ContextPipeline,
)
from cairn.context.tracker import FixedContext
from cairn.errors import CairnError, ContextError
from cairn.messages import Message, MessageMeta, ToolCall, new_id, tool_result, user
from cairn.provider import (
    ChatProvider,
    ContentDelta,
    ContextLimitError,
    ProviderError,
    ReasoningDelta,
    StreamEvent,
    TurnAccumulator,
    chat_request,
)
from cairn.provider.config import ModelConfig
from cairn.store import StoreError

INTERRUPTED = "[interrupted by the user before this tool call finished]"
DEFAULT_MAX_TURNS = 50


class TurnError(CairnError, RuntimeError):
    """The turn could not finish; the message is for the user, the transcript is whole."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class StoreFailedError(TurnError):
    """The transcript could not be written (a full disk, an I/O error, a lost database).

    One line: what failed, what is saved, and how to resume. ``code`` is the
    phase: ``store`` for a record or a sync, ``checkpoint`` for a compaction
    checkpoint (the context is then unchanged).
    """


def store_failure(exc: StoreError, session_id: str, *, stopped: str = "the turn stopped") -> str:
    """The one line a surface shows for a store failure, and how to go on."""
    if isinstance(exc, CheckpointWriteError):
        state = f"the context could not be saved: {exc}; the context is unchanged"
    else:
        state = f"the session could not be saved: {exc}; {stopped}, what was saved before is kept"
    text = f"{state}: resume with cairn --resume {session_id}"
    return " ".join(text.split())


@dataclass(frozen=True)
class TurnResult:
    text: str
    requests: int
    aborted: bool = False
    #: Stopped at ``max_turns`` requests with tool calls still coming: the task is unfinished.
    max_turns_reached: bool = False


class _AbortedError(Exception):
    pass


class LoopHost(Protocol):
    """What the loop needs from whoever runs it: a session, or a background subagent."""

    @property
    def pipeline(self) -> ContextPipeline: ...
    @property
    def events(self) -> EventBus: ...
    @property
    def model(self) -> ModelConfig: ...
    @property
    def tools(self) -> ToolRegistry: ...
    @property
    def provider(self) -> ChatProvider: ...
    @property
    def abort_event(self) -> asyncio.Event: ...
    def fixed_context(self) -> FixedContext: ...
    def tool_context(self) -> ToolContext: ...
    def set_status(self, status: SessionStatus) -> None: ...


class TurnHost(LoopHost, Protocol):
    """A session: it also runs its SessionStart hooks and owns the abort of a turn."""

    async def start(self) -> None: ...
    def reset_abort(self) -> asyncio.Event: ...


async def run_turn(
    session: TurnHost,
    text: str | Message,
    *,
    max_turns: int = DEFAULT_MAX_TURNS,
    attach: Sequence[ToolCall] = (),
) -> TurnResult:
    """Run one user turn to the end (or to ``max_turns`` requests, or an abort).

    ``attach``: read-only tool calls the host runs for the user right after
    the message (``@path`` mentions), as one round of its own: the results
    are budgeted, counted and restored like the model's own reads.
    """
    try:
        await session.start()  # SessionStart hooks, once per session (startup / resume / clear)
    except StoreError as exc:
        raise _store_failed(session, exc) from exc
    session.reset_abort()
    return await run_loop(session, text, max_turns=max_turns, attach=attach)


async def run_loop(
    session: LoopHost,
    text: str | Message,
    *,
    max_turns: int = DEFAULT_MAX_TURNS,
    attach: Sequence[ToolCall] = (),
) -> TurnResult:
    """The one agent loop: check → request → tools, until no tool calls (or the limit).

    Sessions run it through ``run_turn``; the background subagent runs it
    directly on its own host, with reactive recovery, abort and events alike.

    A store failure anywhere in the turn ends it with one ``error`` event and
    ``StoreFailedError`` (never a bare store exception): the user learns in one
    line what could not be written and how to resume.
    """
    try:
        result = await _turn(session, text, max_turns, attach)
    except StoreError as exc:
        _end_turn(session, quietly=True)
        raise _store_failed(session, exc) from exc
    except BaseException:
        _end_turn(session, quietly=True)
        raise
    else:
        try:
            _end_turn(session)
        except StoreError as exc:
            raise _store_failed(session, exc) from exc
    finally:
        session.set_status("idle")
    return result


def _end_turn(session: LoopHost, *, quietly: bool = False) -> None:
    """Close the round and make the turn durable; ``quietly``: another error already says why."""
    try:
        _close_open_round(session)
        session.pipeline.end_turn()
    except StoreError:
        if not quietly:
            raise


def _store_failed(session: LoopHost, exc: StoreError) -> StoreFailedError:
    message = store_failure(exc, session.pipeline.session_id)
    code = "checkpoint" if isinstance(exc, CheckpointWriteError) else "store"
    session.events.publish(ErrorEvent(message, code))
    return StoreFailedError(message, code)


async def _turn(
    session: LoopHost, text: str | Message, max_turns: int, attach: Sequence[ToolCall]
) -> TurnResult:
    abort = session.abort_event
    message = text if isinstance(text, Message) else user(text)
    # A store failure in an earlier turn can leave a call without its result:
    # answered first, or the provider would refuse every request from now on.
    _close_open_round(session)
    session.pipeline.add(message)
    session.events.publish(MessageAdded(message))
    answer = ""
    requests = 0
    try:
        if attach:
            await _attach(session, attach)
            if abort.is_set():
                raise _AbortedError
        while requests < max_turns:
            requests += 1
            assistant = await _request(session)
            if not assistant.tool_calls:
                answer = assistant.text
                break
            session.set_status("tools")
            results = await _run_tools(session, assistant.tool_calls)
            stored = session.pipeline.add_tool_results(results)
            for result in stored:
                session.events.publish(MessageAdded(result))
            if abort.is_set():
                raise _AbortedError
        else:
            session.events.publish(Notice(f"stopped after {max_turns} requests (--max-turns)"))
            return TurnResult(answer, requests, max_turns_reached=True)
    except _AbortedError:
        session.events.publish(Notice("interrupted", code="cancelled"))
        return TurnResult(answer, requests, aborted=True)
    return TurnResult(answer, requests)


async def _attach(session: LoopHost, calls: Sequence[ToolCall]) -> None:
    """The host's read of what the user mentioned: a call and its results, one whole round.

    The call is the host's (``synthetic``), so that the model reads the
    content as a tool result — budgeted and restored like its own reads —
    and never as something it said.
    """
    call = Message(
        role="assistant",
        tool_calls=tuple(calls),
        meta=MessageMeta(synthetic=True, extra={"attached": "mentions"}),
    )
    session.pipeline.add(call)
    session.events.publish(MessageAdded(call))
    session.set_status("tools")
    results = await _run_tools(session, calls)
    for result in session.pipeline.add_tool_results(results):
        session.events.publish(MessageAdded(result))


def _close_open_round(session: LoopHost) -> None:
    """Answer any tool call left without a result (a cancelled task), so no round is split."""
    for result in session.pipeline.answer_open_calls(INTERRUPTED):
        session.events.publish(MessageAdded(result))


async def _request(session: LoopHost) -> Message:
    """One provider call with its pre-request check and, once, reactive recovery.

    Errors are handled by family: the user's cancel aborts; any other refusal
    of the context pipeline (``ContextError``) or the provider
    (``ProviderError``) becomes an error event and a failed turn, never sent.
    """
    fixed = session.fixed_context()
    try:
        check = await session.pipeline.check_and_compact(fixed)
    except CompactionCancelledError:
        raise _AbortedError from None  # the user's cancel; the request is not sent
    except ContextError as exc:
        # Never sent: the user learns the sizes and what to do; the transcript is whole.
        raise _failed(session, exc, exc.code) from exc
    for warning in check.warnings:
        session.events.publish(Notice(warning))
    if session.abort_event.is_set():
        raise _AbortedError  # e.g. during the compaction the check ran: nothing is sent
    for attempt in range(2):
        try:
            return await _stream(session, fixed)
        except ContextLimitError as error:
            if attempt:
                raise TurnError(str(error), "invalid_request") from error
            try:
                await session.pipeline.recover_from_context_limit(error, fixed)
            except CompactionCancelledError:
                raise _AbortedError from None
            except ContextError as exc:
                raise _failed(session, exc, exc.code) from exc
        except ProviderError as error:
            raise _failed(session, error, error.code) from error
    raise AssertionError("unreachable")


def _failed(session: LoopHost, error: Exception, code: str | None) -> TurnError:
    """Tell the user why the request was not sent or failed; the turn ends with it."""
    session.events.publish(ErrorEvent(str(error), code))
    return TurnError(str(error), code)


async def _stream(session: LoopHost, fixed: FixedContext) -> Message:
    request = chat_request(session.model, fixed.system, fixed.tools, session.pipeline.messages)
    turn = TurnAccumulator()
    message_id = new_id()
    session.set_status("streaming")
    abort = session.abort_event
    try:
        async for event in _until_aborted(session.provider.stream(request), abort):
            turn.add(event)
            if isinstance(event, ContentDelta | ReasoningDelta):
                session.events.publish(MessageUpdated(message_id, turn.text, turn.reasoning))
            if abort.is_set():
                break
    finally:
        # Streaming is over; tools (or the end of the turn) set what comes next.
        session.pipeline.streaming = False
    answer = turn.message()
    answer = Message(
        role="assistant",
        content=answer.content,
        id=message_id,
        tool_calls=() if abort.is_set() else answer.tool_calls,
        reasoning=answer.reasoning,
        meta=answer.meta,
    )
    if abort.is_set():
        if answer.text:
            session.pipeline.add(answer)
            session.events.publish(MessageAdded(answer))
        raise _AbortedError
    session.pipeline.add(answer)
    session.events.publish(MessageAdded(answer))
    usage = answer.meta.usage
    if usage is not None:
        session.events.publish(
            UsageUpdate(
                usage.total_tokens,
                window=session.model.context_window,
                input_budget=session.pipeline.input_budget,
            )
        )
    return answer


async def _until_aborted(
    stream: AsyncIterator[StreamEvent], abort: asyncio.Event
) -> AsyncIterator[StreamEvent]:
    """The stream's events until it ends or ``abort`` is set, whichever comes first.

    A cancel must not wait for the next chunk: a server still reading a long
    prompt, or one that stalls, may send none for minutes.
    """
    events = aiter(stream)
    aborted = asyncio.ensure_future(abort.wait())
    try:
        while True:
            step = asyncio.ensure_future(anext(events))
            await asyncio.wait({step, aborted}, return_when=asyncio.FIRST_COMPLETED)
            if not step.done():
                step.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await step
                return
            try:
                event = step.result()
            except StopAsyncIteration:
                return
            yield event
    finally:
        aborted.cancel()
        close = getattr(events, "aclose", None)
        if close is not None:
            with contextlib.suppress(Exception):
                await close()


async def _run_tools(session: LoopHost, calls: Sequence[ToolCall]) -> list[Message]:
    """Run each call in order; once aborted, the rest are answered as interrupted."""
    ctx = session.tool_context()
    results: list[Message] = []
    for call in calls:
        if ctx.abort.is_set():
            results.append(tool_result(call.id, INTERRUPTED, name=call.name, error=True))
            continue
        session.events.publish(ToolStarted(call))
        result = await session.tools.execute(call, ctx)
        if ctx.abort.is_set() and not result.text.strip():
            result = tool_result(call.id, INTERRUPTED, name=call.name, error=True)
        results.append(result)
        session.events.publish(ToolFinished(call.id, result))
    return results
