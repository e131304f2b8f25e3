"""The compaction executor: request → summary → gates → checkpoint (DESIGN §5.5, §5.5a).

``Compactor.run`` is one compaction, whatever triggered it: the PreCompact
hooks, the summary (the LLM fork behind the breaker and the failure policy,
or the model-free fallback), the gates, the restoration, then the checkpoint
— appended and fsynced before the context swaps — and the SessionStart and
PostCompact hooks. ``ContextPipeline`` decides when; the compactor does it,
through the small ``CompactionHost`` view of the pipeline it works for.

Kept whole: ``run`` and the background summary's commit share one write phase and its guards.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

from cairn.context.breaker import CompactionBreaker, breaker_key
from cairn.context.budget import cautious, handoff_line, may_send
from cairn.context.config import CompactionConfig
from cairn.context.effects import ToolEffect
from cairn.context.events import CompactionListener, PreparedState
from cairn.context.hooks import (
    CompactionBlockedError,
    CompactionHooks,
    session_start_reminder,
)
from cairn.context.llm_summarizer import MAX_SUMMARY_TOKENS, check_gates, nothing_to_compact
from cairn.context.precompute import (
    PrecomputeStats,
    PreparedSummary,
    join_rounds_after,
    settled,
    summary_outcome,
)
from cairn.context.restoration_source import RestorationSource
from cairn.context.restore import build_restoration
from cairn.context.summarizer import (
    RESULT_SHARE,
    FallbackSummarizer,
    Summarizer,
    SummarizerError,
    Summary,
    SummaryRequest,
    fallback_summary,
)
from cairn.context.tracker import FixedContext, TokenSnapshot
from cairn.errors import ContextError
from cairn.messages import (
    KIND_COMPACT_SUMMARY,
    KIND_HANDOFF,
    KIND_PLAN_REMINDER,
    Message,
    group_rounds,
)
from cairn.provider.config import ModelConfig
from cairn.store.base import StoreError, TranscriptStore, TranscriptWriteError
from cairn.store.records import (
    CheckpointFormatError,
    CompactionRecord,
    ErrorRecord,
    Strategy,
    Trigger,
)
from cairn.store.views import compact_block

_R = TypeVar("_R")


#: The window a manual compaction assumes when the model's is unknown: half
#: of it is the absolute cap on a summary, so only that cap applies.
UNKNOWN_WINDOW = 2 * MAX_SUMMARY_TOKENS


class CheckpointWriteError(StoreError):
    """The compaction could not be saved; the turn fails and the context is unchanged."""

    phase = "checkpoint"


class CompactionFailedError(ContextError):
    """A manual compaction failed; an error block was written to the session."""

    code = "compaction_failed"


class NothingToCompactError(CompactionFailedError):
    """A manual compaction had nothing to gain (an empty conversation, a result that
    would not be smaller): a notice, nothing is written and the context is unchanged."""

    code = "nothing_to_compact"


class CompactionCancelledError(ContextError):
    """A compaction was cancelled (``cancel_compaction``); nothing was written."""

    code = "compaction_cancelled"


@dataclass(frozen=True, slots=True)
class CompactionOutcome:
    record_id: str
    trigger: Trigger
    strategy: Strategy
    pre_tokens: int
    post_tokens: int
    summary: str

    @classmethod
    def of(cls, record: CompactionRecord) -> CompactionOutcome:
        return cls(
            record.id,
            record.trigger,
            record.strategy,
            record.pre_tokens,
            record.post_tokens,
            record.summary,
        )


class CompactionHost(Protocol):
    """What the compactor needs of the pipeline it works for (``ContextPipeline``)."""

    config: CompactionConfig
    model: ModelConfig

    @property
    def session_id(self) -> str: ...

    @property
    def messages(self) -> Sequence[Message]: ...

    @property
    def input_budget(self) -> int | None: ...

    @property
    def density(self) -> float: ...

    def fixed_tokens(self, fixed: FixedContext) -> int: ...

    def sized(self, message: Message) -> int:
        """A message's estimate at the session's density."""
        ...

    def conversation_share(self, fixed: FixedContext) -> int:
        """The conversation's share of the input budget."""
        ...

    def projected_after(self, replacement: Sequence[Message], fixed: FixedContext) -> TokenSnapshot:
        """The next request's projection once ``replacement`` is the context."""
        ...

    def shown_session(self) -> str:
        """Which session the host shows now."""
        ...

    def add(self, message: Message) -> None: ...

    def checkpoint_committed(self) -> None:
        """A checkpoint is durable and the view swapped: measurements restart."""
        ...


class Compactor:
    """Runs one compaction at a time for one session's pipeline."""

    def __init__(
        self,
        host: CompactionHost,
        store: TranscriptStore,
        *,
        workspace: str,
        tool_effects: Mapping[str, ToolEffect],
        summarizer: Summarizer,
        breaker: CompactionBreaker,
        hooks: CompactionHooks,
        listener: CompactionListener,
        restoration: RestorationSource | None,
        artifacts_dir: Path | None,
    ) -> None:
        self._host = host
        self._store = store
        self._workspace = workspace
        self._effects = tool_effects
        self._summarizer = summarizer
        self._breaker = breaker
        self._hooks = hooks
        self._listener = listener
        self._restoration = restoration
        self._artifacts_dir = artifacts_dir
        self._compacting = False
        #: Set by ``cancel`` while a compaction runs.
        self._cancel: asyncio.Event | None = None
        #: The summary being prepared in the background, or ready (DESIGN §5.5a).
        self._prepared: PreparedSummary | None = None
        self.precompute_stats = PrecomputeStats()

    @property
    def compacting(self) -> bool:
        return self._compacting

    def cancel(self) -> None:
        """Stop the running compaction while it waits for its summary (see
        ``ContextPipeline.cancel_compaction``), and the one prepared in the background."""
        if self._cancel is not None:
            self._cancel.set()
        self.discard_prepared()

    # -- the summary prepared in the background (DESIGN §5.5a) ------------

    @property
    def prepared(self) -> PreparedState | None:
        """``preparing`` or ``ready`` while a background summary is held; else ``None``."""
        if self._prepared is None:
            return None
        task = self._prepared.task
        if not task.done():
            return "preparing"
        return "ready" if summary_outcome(task)[0] is not None else None

    def prepare(
        self,
        view: Sequence[Message],
        fixed: FixedContext,
        projection: TokenSnapshot | None,
        epoch: int,
    ) -> bool:
        """Start the compaction fork on ``view`` in the background; whether it started.

        The same request the line would send (the main request's prefix, the
        same instruction, the PreCompact hooks with ``trigger: "auto"``), held
        in memory only: nothing is written until ``run`` commits it at the line.
        """
        if self._prepared is not None or self._compacting:
            return False
        prepared = PreparedSummary(self._host.shown_session(), epoch, tuple(view), self._listener)
        prepared.task = asyncio.get_running_loop().create_task(
            self._prepare(prepared, fixed, projection)
        )
        prepared.task.add_done_callback(lambda _: self._prepared_done(prepared))
        self._prepared = prepared
        self.precompute_stats.started += 1
        self._announce()
        return True

    def discard_prepared(self) -> None:
        """Drop the background summary (cancelling it if it still runs); nothing was written."""
        prepared, self._prepared = self._prepared, None
        if prepared is None:
            return
        if not prepared.task.done():
            prepared.task.cancel()
        else:
            summary_outcome(prepared.task)  # read, so a failure is never left unretrieved
        self.precompute_stats.discarded += 1
        self._announce()

    def _announce(self) -> None:
        self._listener.summary_prepared(self.prepared)

    def _prepared_done(self, prepared: PreparedSummary) -> None:
        # Announced only while still held: the line may have taken it meanwhile.
        if self._prepared is prepared:
            self._announce()

    async def _prepare(
        self, prepared: PreparedSummary, fixed: FixedContext, projection: TokenSnapshot | None
    ) -> Summary | None:
        pre_hook = await self._hooks.pre_compact("auto", None)
        prepared.notices.extend(pre_hook.notices)
        if pre_hook.blocked is not None:
            prepared.notices.append(f"compaction blocked by a PreCompact hook: {pre_hook.blocked}")
            return None
        merged = _join_instructions(None, pre_hook.output)
        request = self._request(
            prepared.view,
            fixed,
            "auto",
            merged,
            projection,
            on_text=prepared.streamed,
            on_elided=prepared.elided,
        )
        try:
            summary = await self._summarizer.summarize(request)
        except SummarizerError as exc:
            # Not counted by the breaker: the line's own attempt is (today's path).
            prepared.elisions = exc.elisions
            prepared.notices.append(
                f"the summary prepared in the background failed: {exc}" + _left_out(exc.elisions)
            )
            return None
        source = sum(self._host.sized(m) for m in prepared.view)
        return self._with_restoration(summary, fixed, source)

    async def _commit_prepared(
        self,
        view: Sequence[Message],
        fixed: FixedContext,
        projection: TokenSnapshot | None,
        warnings: list[str],
        epoch: int,
    ) -> CompactionOutcome | None:
        """The prepared summary + the rounds after its snapshot, committed without a
        model call; ``None``: it is gone, stale, failed or too big (today's path runs)."""
        prepared, self._prepared = self._prepared, None
        assert prepared is not None
        stats = self.precompute_stats
        size = len(prepared.view)
        valid = (
            prepared.task.get_loop() is asyncio.get_running_loop()
            and prepared.session == self._host.shown_session()
            and prepared.epoch == epoch
            # The same messages up to ``P``: an edit since (a snip, a micro compact)
            # only stubs what the summary already read whole.
            and [m.id for m in view[:size]] == [m.id for m in prepared.view]
        )
        if not valid:
            prepared.task.cancel()
            stats.discarded += 1
            self._announce()
            return None
        session = prepared.session
        self._compacting = True
        self._cancel = asyncio.Event()
        hinted = False
        try:
            if not prepared.task.done():
                # Only now does the user wait: the usual hint, and the tail so far.
                self._listener.compaction_state_changed(True)
                hinted = True
                prepared.watched()
                stats.waited += 1
                try:
                    await _unless_set(self._cancel, settled(prepared.task))
                except _CancelledError:
                    prepared.task.cancel()
                    raise CompactionCancelledError(
                        "compaction cancelled; the context is unchanged"
                    ) from None
            summary, failure = summary_outcome(prepared.task)
            warnings.extend(prepared.notices)
            if failure is not None:
                warnings.append(failure)
            if self._host.shown_session() != session:
                # The host switched or cleared while the line waited: the whole write
                # phase is abandoned (the session guard), and no second fork is sent.
                stats.discarded += 1
                warnings.append("compaction abandoned: the session changed while it ran")
                raise _SessionChangedError
            if summary is None:
                stats.failed += 1
                return None
            after = tuple(m for m in view[size:] if m.meta.kind != KIND_HANDOFF)
            source = sum(self._host.sized(m) for m in view)
            window = self._host.model.context_window or UNKNOWN_WINDOW
            share = self._host.conversation_share(fixed)

            def gate(replacement: Sequence[Message]) -> str | None:
                post = sum(self._host.sized(m) for m in replacement)
                if post >= source:
                    return f"{post:,} of {source:,} tokens"
                return check_gates(post, source, window, share) or self._unsendable(
                    replacement, fixed
                )

            kept_ids = {m.id for m in prepared.view}
            replacement, failed = join_rounds_after(summary.replacement, kept_ids, after, gate)
            if replacement is None:
                stats.rejected += 1
                warnings.append(
                    "the summary prepared in the background no longer makes the context small "
                    f"enough with the {len(group_rounds(after))} round(s) since ({failed}); "
                    "compacting now"
                )
                return None
            summary = replace(summary, replacement=replacement)
            if not hinted:
                # The commit is the only wait (no model call): bracketed like any
                # compaction, so the block still comes between the two state events.
                self._listener.compaction_state_changed(True)
                hinted = True
            record = self._commit(
                summary, "auto", projection, fixed, rounds_after=len(group_rounds(after))
            )
            stats.committed += 1
            return await self._finish(record, session, warnings)
        finally:
            self._compacting = False
            self._cancel = None
            if hinted:
                self._listener.compaction_state_changed(False)
            self._announce()

    async def _finish(
        self, record: CompactionRecord, session: str, warnings: list[str]
    ) -> CompactionOutcome:
        """After the checkpoint: the SessionStart and PostCompact hooks, then the block."""
        started = await self._hooks.session_start("compact")
        reminder = session_start_reminder(started.output, "compact")
        if reminder is not None and self._host.shown_session() == session:
            # After the checkpoint: part of the API view, never rendered.
            self._host.add(reminder)
        ended = await self._hooks.post_compact(record.trigger, record.summary)
        for event in (started, ended):
            warnings.extend(event.notices)
        self._listener.compact_block_added(compact_block(record))
        return CompactionOutcome.of(record)

    async def run(
        self,
        trigger: Trigger,
        view: Sequence[Message],
        fixed: FixedContext,
        instructions: str | None,
        warnings: list[str],
        projection: TokenSnapshot | None = None,
        *,
        epoch: int = 0,
    ) -> CompactionOutcome | None:
        """PreCompact → summary → (session still the same?) → save → swap → hooks → block.

        ``projection`` is the projected size of a request carrying ``view``: the
        record's ``pre_tokens``, and the fork is sent unchanged when it, plus its
        instruction, fits. Without it, both come from the estimate of ``view``.
        An automatic compaction first takes the summary prepared in the
        background (``prepare``), if it is still valid for ``view`` at ``epoch``.
        """
        if self._host.model.context_window is None and trigger != "manual":
            return None
        # The provider refused the request: anything in it may be compacted, an
        # earlier block included (re-summarized whole), as for /compact.
        if nothing_to_compact(view, on_demand=trigger != "auto"):
            self._not_compacted(
                trigger,
                "nothing to compact: the conversation is empty"
                if trigger != "auto"
                else "nothing to compact yet: the conversation has no complete round",
                warnings,
            )
            return None
        if trigger != "manual" and self._first_request_fits(view, fixed, trigger):
            self._not_compacted(
                trigger,
                "nothing to compact yet: this is the first request, and the conversation fits "
                "beside the system prompt and tools",
                warnings,
            )
            return None
        prepared = self._prepared
        if prepared is not None:
            if trigger == "auto":
                try:
                    ready = await self._commit_prepared(view, fixed, projection, warnings, epoch)
                except _SessionChangedError:
                    return None
                if ready is not None:
                    return ready
            else:
                # /compact (with its instructions) and a refused request compact now.
                self.discard_prepared()
        # A background summary that failed sent forks no record of its own names
        # (one may have been shrunk to fit): this compaction's record names them.
        earlier = _in_background(prepared.elisions) if prepared is not None else ()
        session = self._host.shown_session()
        self._compacting = True
        self._cancel = asyncio.Event()
        self._listener.compaction_state_changed(True)
        try:
            pre_hook = await self._hooks.pre_compact(trigger, instructions)
            warnings.extend(pre_hook.notices)
            if pre_hook.blocked is not None:
                if trigger == "auto":
                    warnings.append(f"compaction blocked by a PreCompact hook: {pre_hook.blocked}")
                    return None
                raise CompactionBlockedError(pre_hook.blocked)
            merged = _join_instructions(instructions, pre_hook.output)
            request = self._request(view, fixed, trigger, merged, projection)
            try:
                asked = self._summarize(trigger, request, warnings)
                summary = await _unless_set(self._cancel, asked)
            except _CancelledError:
                raise CompactionCancelledError(
                    "compaction cancelled; the context is unchanged"
                ) from None
            except SummarizerError as exc:
                if self._host.shown_session() != session:
                    return None
                # The forks sent are named even when no checkpoint records them.
                reason = str(exc) + _left_out((*earlier, *exc.elisions))
                self._store.append(ErrorRecord(f"Compaction failed: {reason}", source="compact"))
                raise CompactionFailedError(reason) from exc
            if summary is None:
                return None
            if earlier:
                summary = replace(summary, elisions=(*earlier, *summary.elisions))
            if self._host.shown_session() != session:
                # The host switched or cleared the session meanwhile: write nothing anywhere.
                warnings.append("compaction abandoned: the session changed while it ran")
                return None
            source = sum(self._host.sized(m) for m in view)
            summary = self._with_restoration(summary, fixed, source)
            result = sum(self._host.sized(m) for m in summary.replacement)
            if result >= source:
                self._not_compacted(
                    trigger,
                    f"compaction not applied: its result ({result:,} tokens) is not smaller "
                    f"than the context it would replace ({source:,} tokens)"
                    + _left_out(summary.elisions),
                    warnings,
                )
                return None
            unsendable = self._unsendable(summary.replacement, fixed)
            if unsendable is not None:
                # Committed, the next check would refuse the request it was made for,
                # with the context already replaced: a refusal must change nothing.
                self._not_compacted(
                    trigger,
                    f"compaction not applied: {unsendable}" + _left_out(summary.elisions),
                    warnings,
                )
                return None
            record = self._commit(summary, trigger, projection, fixed)
            return await self._finish(record, session, warnings)
        finally:
            self._compacting = False
            self._cancel = None
            self._listener.compaction_state_changed(False)

    async def _summarize(
        self, trigger: Trigger, request: SummaryRequest, warnings: list[str]
    ) -> Summary | None:
        """Ask the summarizer, honouring the breaker and the failure policy.

        Raises ``SummarizerError`` only for a manual compaction, which never
        falls back silently.
        """
        key = breaker_key(self._workspace, self._host.session_id)
        skip = self._host.config.on_failure == "skip"
        if trigger != "manual" and self._breaker.is_open(key):
            failures = self._breaker.failures(key)
            if skip:
                warnings.append(
                    f"compaction skipped: the summarizer failed {failures} times in a row"
                )
                return None
            warnings.append(
                f"the summarizer failed {failures} times in a row; used the deterministic fallback"
            )
            return fallback_summary(request.messages, request)
        try:
            summary = await self._summarizer.summarize(request)
        except SummarizerError as exc:
            failures = self._breaker.record_failure(key)
            if trigger == "manual":
                raise
            # With ``skip`` no record names what its forks left out: the notice does.
            warnings.append(
                f"compaction failed ({failures} in a row): {exc}" + _left_out(exc.elisions)
            )
            return None if skip else fallback_summary(request.messages, request, exc.elisions)
        self._breaker.record_success(key)
        return summary

    def _first_request_fits(
        self, view: Sequence[Message], fixed: FixedContext, trigger: Trigger
    ) -> bool:
        """The very first request, with a conversation that fits its share of the budget.

        Only the fixed context brought it to the line: compacting the user's
        opening message would restate it (issue 9). A first message bigger
        than its share is compacted — saved to a file, head and tail kept.
        """
        # After a compaction whose tail kept no answer the view holds no assistant
        # message either, but it is no first request: the block may be re-summarized.
        if any(m.role == "assistant" or m.meta.kind == KIND_COMPACT_SUMMARY for m in view):
            return False
        size = sum(self._host.sized(m) for m in view)
        if trigger == "reactive":
            # The provider said the request does not fit, so our count is not
            # trusted; but only an opening message too big for the checkpoint
            # (saved to a file, head and tail kept) can come out smaller.
            budget = self._host.input_budget or UNKNOWN_WINDOW
            return size <= self._host.config.checkpoint_share * budget
        # With the margin the request is sent under (``_refuse_over_budget``): an
        # opening message that fits only without it is compacted, not refused.
        return cautious(size, size) <= self._host.conversation_share(fixed)

    def _unsendable(self, replacement: Sequence[Message], fixed: FixedContext) -> str | None:
        """Why the request after ``replacement`` would be refused, or ``None`` when it may go.

        Measured as the check before every request measures it once the
        checkpoint is in (``CompactionHost.projected_after``, the estimate's
        margin on every message): a fallback whose mandatory block was raised
        past its target can pass every size gate and still leave a request
        that the very next check refuses.
        """
        after = self._host.projected_after(replacement, fixed)
        if (
            after.tokens is None
            or after.input_budget is None
            or may_send(after.tokens, after.estimated, after.input_budget)
        ):
            return None
        return (
            f"the next request would take up to {cautious(after.tokens, after.estimated):,} "
            f"tokens with the estimate's margin, over the {after.input_budget:,}-token input budget"
        )

    def would_call_model(self) -> bool:
        """Whether an automatic compaction now would ask the LLM (not the model-free
        fallback, nor the summary prepared in the background, paid for already)."""
        if isinstance(self._summarizer, FallbackSummarizer) or self._prepared is not None:
            return False
        return not self._breaker.is_open(breaker_key(self._workspace, self._host.session_id))

    def _not_compacted(self, trigger: Trigger, reason: str, warnings: list[str]) -> None:
        """A compaction that cannot help says why: a notice, not an error (DESIGN §5.6).

        A manual one raises ``NothingToCompactError`` so that its command
        reports the reason; nothing is written, the context is unchanged.
        """
        if trigger == "manual":
            raise NothingToCompactError(reason)
        warnings.append(reason)

    def _with_restoration(self, summary: Summary, fixed: FixedContext, source: int) -> Summary:
        """Insert what must be re-injected right after the compact block, within budget.

        Files and skills fit under the handoff line and never take the result
        past ``RESULT_SHARE`` of the ``source`` it replaces: a restoration that
        grew the context would turn a compaction that helps into one refused
        as not smaller (a short conversation that read big files).
        """
        if self._restoration is None or not summary.replacement:
            return summary
        restored = build_restoration(
            self._restoration, session_id=self._host.session_id, workspace=Path(self._workspace)
        )
        block, *rest = summary.replacement
        budget = self._host.input_budget
        replacement = sum(self._host.sized(m) for m in summary.replacement)
        room = int(RESULT_SHARE * source) - replacement
        if budget is not None:
            line = handoff_line(budget, self._host.config.handoff_ratio)
            room = min(room, line - self._host.fixed_tokens(fixed) - replacement)
        kept: list[Message] = []
        for i, message in enumerate(restored):
            cost = self._host.sized(message)
            # The working directory and the plan-mode reminder always go; files
            # and skills only while they fit.
            mandatory = i == 0 or message.meta.kind == KIND_PLAN_REMINDER
            if mandatory or cost <= room:
                kept.append(message)
                room -= cost
        return replace(summary, replacement=(block, *kept, *rest))

    def _request(
        self,
        view: Sequence[Message],
        fixed: FixedContext,
        trigger: Trigger,
        instructions: str | None,
        projection: TokenSnapshot | None = None,
        *,
        on_text: Callable[[str], None] | None = None,
        on_elided: Callable[[tuple[str, ...]], None] | None = None,
    ) -> SummaryRequest:
        window = self._host.model.context_window or UNKNOWN_WINDOW
        projected = projection.tokens if projection is not None else None
        request_budget = self._host.input_budget
        return SummaryRequest(
            # The handoff reminder is a control message for the live model only:
            # the replacement never carries it, the fork sends it as it was sent.
            messages=tuple(m for m in view if m.meta.kind != KIND_HANDOFF),
            sent=tuple(view),
            fixed=fixed,
            window=window,
            # The conversation's share of the budget: the fixed context goes out
            # with every request, so the replacement must leave room for it.
            input_budget=self._host.conversation_share(fixed),
            trigger=trigger,
            tool_effects=self._effects,
            instructions=instructions,
            count=self._host.sized,
            keep_rounds=self._host.config.keep_rounds,
            on_text=on_text or self._listener.compaction_content_updated,
            on_elided=on_elided,
            request_budget=request_budget,
            fixed_tokens=self._host.fixed_tokens(fixed),
            # The checkpoint is measured by the formula: at a higher density the
            # same share of the budget holds fewer estimated tokens.
            checkpoint_tokens=int(
                self._host.config.checkpoint_share * (request_budget or window) / self._host.density
            ),
            artifacts_dir=self._artifacts_dir,
            projected=projected,
            projected_estimated=projection.estimated if projection is not None else 0,
        )

    def _commit(
        self,
        summary: Summary,
        trigger: Trigger,
        projection: TokenSnapshot | None,
        fixed: FixedContext,
        *,
        rounds_after: int | None = None,
    ) -> CompactionRecord:
        fixed_tokens = self._host.fixed_tokens(fixed)
        post = fixed_tokens + sum(self._host.sized(m) for m in summary.replacement)
        pre = projection.tokens if projection is not None else None
        if pre is None:
            pre = fixed_tokens + sum(self._host.sized(m) for m in self._host.messages)
        record = CompactionRecord(
            trigger=trigger,
            strategy=summary.strategy,
            pre_tokens=pre,
            post_tokens=post,
            summary=summary.summary,
            replacement_messages=summary.replacement,
            files=summary.files,
            fork_elisions=summary.elisions,
            precomputed=rounds_after is not None,
            rounds_after=rounds_after or 0,
        )
        try:
            # Append + fsync; the store swaps its API view only after that.
            self._store.save_compaction(record)
        except (CheckpointFormatError, TranscriptWriteError) as exc:
            raise CheckpointWriteError(f"compaction checkpoint not saved: {exc}") from exc
        self._host.checkpoint_committed()
        return record


def _left_out(elisions: Sequence[str]) -> str:
    """What a fork left out, for a compaction that wrote no record to name it."""
    return f" (the fork left out: {'; '.join(elisions)})" if elisions else ""


def _in_background(elisions: Sequence[str]) -> tuple[str, ...]:
    """A failed background summary's elisions, told from those of the line's own fork."""
    return tuple(f"a fork prepared in the background: {line}" for line in elisions)


def _join_instructions(*parts: str | None) -> str | None:
    texts = [p.strip() for p in parts if p and p.strip()]
    return "\n\n".join(texts) if texts else None


class _SessionChangedError(Exception):
    """The host showed another session when a waited-for summary arrived: write nothing."""


class _CancelledError(Exception):
    """``_unless_set``'s event was set first; the awaited work was cancelled."""


async def _unless_set(event: asyncio.Event, work: Coroutine[Any, Any, _R]) -> _R:
    """``await work``, unless ``event`` is set first: then cancel it, raise ``_CancelledError``."""
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        if not task.done():
            task.cancel()
    if not task.done() or task.cancelled():
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise _CancelledError
    return task.result()
