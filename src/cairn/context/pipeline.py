"""``check_and_compact``: the one check that runs before every request (DESIGN §5.9).

The order is fixed: micro compact → snip → projection → compaction when due
→ the deferred edits applied together with the result → handoff in the band.
Edits are only planned until the check has succeeded, and every change to
the model's context is made durable in the transcript before it takes
effect: the in-memory context *is* the store's API view, which only moves
after a successful write.

Kept whole: the one owner of the context's state; every method keeps durable-before-memory.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cairn.context.boundary import Boundary, prompt_tokens
from cairn.context.breaker import CompactionBreaker, breaker_key
from cairn.context.budget import (
    cautious,
    compaction_due,
    compaction_hold,
    handoff_line,
    may_send,
    reactive_allowed,
)
from cairn.context.calibration import (
    CALIBRATION_KEY,
    DENSITY_KEY,
    FixedCalibration,
    calibrated_tokens,
    density_from_json,
    learned_density,
    measure,
    sharper,
)
from cairn.context.compactor import (
    UNKNOWN_WINDOW,
    Compactor,
)

# The compaction's errors and outcome are the façade's too: callers import them from here.
from cairn.context.compactor import CheckpointWriteError as CheckpointWriteError
from cairn.context.compactor import CompactionCancelledError as CompactionCancelledError
from cairn.context.compactor import CompactionFailedError as CompactionFailedError
from cairn.context.compactor import CompactionOutcome as CompactionOutcome
from cairn.context.compactor import NothingToCompactError as NothingToCompactError
from cairn.context.config import CompactionConfig
from cairn.context.effects import ToolEffect
from cairn.context.events import CompactionListener, NoListener, PreparedState
from cairn.context.handoff import HandoffLedger, build_handoff_message, handoff_answered
from cairn.context.hooks import (
    CompactionHooks,
    NoHooks,
)
from cairn.context.index import ContextIndex
from cairn.context.precompute import PrecomputeStats
from cairn.context.restoration_source import RestorationSource
from cairn.context.snip import snip_target, snip_worth_it
from cairn.context.summarizer import (
    FallbackSummarizer,
    Summarizer,
)
from cairn.context.tool_budget import apply_tool_budget, tool_budget_for
from cairn.context.tracker import ContextTokenTracker, FixedContext, TokenSnapshot
from cairn.errors import ContextError
from cairn.messages import (
    KIND_HANDOFF,
    JSONValue,
    Message,
    group_rounds,
    tool_result,
)
from cairn.provider.config import ModelConfig
from cairn.provider.errors import ContextLimitError
from cairn.store.base import StoreFactory, TranscriptStore, TranscriptWriteError
from cairn.store.jsonl.factory import JsonlStoreFactory
from cairn.store.paths import new_session_id, normalize_workspace
from cairn.store.records import (
    ContentEdit,
    ContextEditRecord,
    HandoffRecord,
    MessageRecord,
    Record,
    SessionRecord,
    StateRecord,
)
from cairn.tokens import message_counter


class ContextWindowExceededError(ContextError):
    """The provider refused the request as too long and it cannot be recovered here.

    ``code`` is ``invalid_request``, as the provider's own error; the message is
    meant for the user.
    """

    code = "invalid_request"


class RequestTooLargeError(ContextError):
    """The next request would be over the input budget, compacted or not; it is not sent.

    Nothing is lost: the context stays as it was on disk and in memory. The
    message names the sizes, why compaction could not help, and what the
    user can do.
    """

    code = "context_budget_exceeded"

    def __init__(
        self,
        tokens: int,
        budget: int,
        fixed_tokens: int,
        mandatory_tokens: int,
        reason: str | None = None,
    ) -> None:
        self.tokens = tokens
        self.budget = budget
        self.fixed_tokens = fixed_tokens
        #: The conversation that is left once compaction did what it could.
        self.mandatory_tokens = mandatory_tokens
        self.reason = reason
        why = f" ({reason})" if reason else ""
        super().__init__(
            f"the next request would take up to {tokens:,} tokens, over the {budget:,}-token input "
            f"budget: the system prompt and tools take {fixed_tokens:,} and the conversation, "
            f"after what compaction could do, {mandatory_tokens:,}{why}. The request was not "
            "sent and nothing was lost. Run /compact, use a model with a larger context window "
            "(CAIRN_CONTEXT_WINDOW), lower CAIRN_MAX_OUTPUT_TOKENS, or shorten the last "
            "message, and ask again."
        )


@dataclass(frozen=True, slots=True)
class CheckResult:
    """What one check did. ``after`` is the projection the request goes out with."""

    before: TokenSnapshot
    after: TokenSnapshot
    edits: int = 0
    compaction: CompactionOutcome | None = None
    handoff: bool = False
    skipped: str | None = None
    warnings: tuple[str, ...] = ()


_UNKNOWN = TokenSnapshot(None, "unknown", None, "unknown")
#: The result a call left unanswered by a crash gets when the session reopens.
CRASH_INTERRUPTED = "[interrupted: the session stopped before this tool call finished]"
#: The open round is at the end: only this many messages are grouped to find
#: it (a round of parallel calls is one assistant message and its results).
_OPEN_ROUND_SCAN = 512


class ContextPipeline:
    """The context of one session: its durable history and the rules that keep it small."""

    def __init__(
        self,
        store: TranscriptStore,
        config: CompactionConfig,
        *,
        model: ModelConfig,
        workspace: str | Path,
        tool_effects: Mapping[str, ToolEffect] | None = None,
        summarizer: Summarizer | None = None,
        breaker: CompactionBreaker | None = None,
        clock: Callable[[], float] = time.time,
        artifacts_dir: Path | None = None,
        hooks: CompactionHooks | None = None,
        restoration: RestorationSource | None = None,
        listener: CompactionListener | None = None,
        current_session: Callable[[], str] | None = None,
    ) -> None:
        self.config = config
        #: The one model configuration: the window and the reserve come from it.
        self.model = model
        self._store = store
        self._workspace = normalize_workspace(workspace)
        self._effects = dict(tool_effects or {})
        self._breaker = breaker or CompactionBreaker(config.breaker_threshold)
        self._clock = clock
        self._artifacts_dir = artifacts_dir
        self._count = message_counter(config.tokenizer)
        self._tracker = ContextTokenTracker(config, model, self._count)
        #: Counts, tool turns and snip candidates of the API view, so that a check
        #: costs what changed since the last one, not the history's length. It
        #: follows appends by itself; edits and compactions are told (below).
        self._index = ContextIndex(
            lambda: self._store.api_view.messages, self._count, self._effects
        )
        self._revision = 0
        #: The fixed context of the last checked request (what the next response answers).
        self._fixed: FixedContext | None = None
        self._fixed_tokens: int | None = None
        #: Estimated message tokens of the last checked request when its size was a
        #: full estimate: the next response then measures the fixed context.
        self._measurable: int | None = None
        #: (provider-counted part, estimated part) of the last checked request's
        #: anchored projection: the next response measures the density.
        self._probe: tuple[int, int] | None = None
        self._calibration: FixedCalibration | None = None
        self._boundary = Boundary()
        #: The epoch a background summary was last started in: one per epoch.
        self._prepared_epoch: int | None = None
        self._listener = listener or NoListener()
        #: Which session the host shows now; a compaction whose session changed
        #: while it ran abandons its whole write phase.
        self._current_session = current_session or (lambda: self.session_id)
        self._compactor = Compactor(
            self,
            store,
            workspace=self._workspace,
            tool_effects=self._effects,
            summarizer=summarizer or FallbackSummarizer(),
            breaker=self._breaker,
            hooks=hooks or NoHooks(),
            listener=self._listener,
            restoration=restoration,
            artifacts_dir=artifacts_dir,
        )
        #: Set by the host while a response streams: a manual compaction then waits.
        self.streaming = False
        # Only the records since the last valid checkpoint: a resume costs what
        # came after it, however long the history before it.
        resumed = store.resumption
        records = resumed.records
        self._handoffs = HandoffLedger.from_records(
            r for r in records if isinstance(r, HandoffRecord)
        )
        self._last_call = _timestamp(resumed.last_response_ts)
        self._restore_boundary(records, resumed.state.get(CALIBRATION_KEY))
        density = density_from_json(resumed.state.get(DENSITY_KEY))
        if density is not None:
            self._tracker.density = density
        #: (epoch, tokens) of the handoff reminders in the context: the
        #: compaction line is measured without them (``budget.compaction_due``).
        self._control = (
            self.epoch,
            sum(self._count(m) for m in self.messages if m.meta.kind == KIND_HANDOFF),
        )
        # A crash while tools ran leaves calls without results, and a provider
        # rejects that round (HTTP 400) on every later request: answer them now,
        # durably, before anything can be sent.
        if self.answer_open_calls(CRASH_INTERRUPTED):
            self._store.sync()

    @classmethod
    def open(
        cls,
        workspace: str | Path,
        config: CompactionConfig,
        *,
        model: ModelConfig,
        session_id: str | None = None,
        home: Path | None = None,
        tool_effects: Mapping[str, ToolEffect] | None = None,
        summarizer: Summarizer | None = None,
        clock: Callable[[], float] = time.time,
        hooks: CompactionHooks | None = None,
        restoration: RestorationSource | None = None,
        listener: CompactionListener | None = None,
        store_factory: StoreFactory | None = None,
        current_session: Callable[[], str] | None = None,
    ) -> ContextPipeline:
        """Resume ``session_id`` in ``workspace``, or start a new session.

        Sessions are opened through ``store_factory`` (default: JSONL files
        under ``home``), never a store class named here.
        """
        session_id = session_id or new_session_id()
        stores = store_factory or JsonlStoreFactory(home)
        folder = Path(workspace)
        if stores.exists(folder, session_id):
            store = stores.open(folder, session_id)
        else:
            header = SessionRecord(session_id, normalize_workspace(workspace))
            store = stores.create(folder, header)
        return cls(
            store,
            config,
            model=model,
            workspace=workspace,
            tool_effects=tool_effects,
            summarizer=summarizer,
            clock=clock,
            artifacts_dir=stores.artifacts_dir(folder, session_id),
            hooks=hooks,
            restoration=restoration,
            listener=listener,
            current_session=current_session,
        )

    # -- the conversation ------------------------------------------------

    @property
    def session_id(self) -> str:
        return self._store.session_id

    @property
    def transcript_path(self) -> Path:
        """The session's transcript file: ``read_transcript`` or ``cairn inspect`` it."""
        return self._store.path

    @property
    def messages(self) -> Sequence[Message]:
        """The API view: what the model gets next (system prompt and tools aside)."""
        return self._store.api_view.messages

    @property
    def density(self) -> float:
        """The session's learned message density (``calibration.learned_density``)."""
        return self._tracker.density

    @property
    def checkpoint_messages(self) -> int:
        """How many of ``messages`` the last compaction put there; the rest came after."""
        return self._store.api_view.checkpoint_messages

    @property
    def epoch(self) -> int:
        """How many compactions this context went through."""
        return self._store.api_view.valid_checkpoints

    @property
    def compacting(self) -> bool:
        return self._compactor.compacting

    @property
    def prepared(self) -> PreparedState | None:
        """The summary prepared in the background: ``preparing``, ``ready`` or ``None``."""
        return self._compactor.prepared

    @property
    def precompute_stats(self) -> PrecomputeStats:
        """What this session's background summaries came to (committed, discarded …)."""
        return self._compactor.precompute_stats

    def cancel_compaction(self) -> None:
        """Stop the running compaction while it waits for its summary; nothing is written.

        The summary is the long wait (a model streams it). Once the summary is
        in, the checkpoint is written without waiting, so a cancel comes
        either before anything is written or after the compaction is whole.
        The compaction then raises ``CompactionCancelledError`` — from
        ``compact``, ``check_and_compact`` or ``recover_from_context_limit`` —
        and the request it was making room for is not sent.
        """
        self._compactor.cancel()

    def answer_open_calls(self, text: str) -> list[Message]:
        """Answer every call of the last round that has no result with ``text`` (an error).

        Returns the results added (persisted like any message), so no round
        is ever left split: a cancelled tool, a crash mid-call.
        """
        messages = self.messages
        rounds = group_rounds(messages[-_OPEN_ROUND_SCAN:])
        if not rounds or not rounds[-1].missing:
            return []
        offset = max(len(messages) - _OPEN_ROUND_SCAN, 0)
        head = messages[offset + rounds[-1].start]
        names = {c.id: c.name for c in head.tool_calls}
        results = [
            tool_result(call_id, text, name=names.get(call_id), error=True)
            for call_id in rounds[-1].missing
        ]
        for result in results:
            self.add(result)
        return results

    def add(self, message: Message) -> None:
        """Persist ``message``, then add it to the context.

        An assistant message carrying usage marks a provider boundary: it
        becomes the projection's new baseline.
        """
        self._store.append(MessageRecord(message))
        usage = message.meta.usage
        if message.role == "assistant" and usage is not None:
            self._tracker.observe(self.messages, self._fixed_tokens, self._revision)
            self._last_call = self._clock()
            prompt = prompt_tokens(usage)
            self._boundary.responded(
                prompt, budget=self._tracker.input_budget, compact_ratio=self.config.compact_ratio
            )
            self._learn_density(prompt)
            self._calibrate(prompt)

    def add_tool_results(self, results: Sequence[Message]) -> list[Message]:
        """Budget a round's tool results (oversized output goes to a file), then add them."""
        if self._artifacts_dir is not None:
            budget = tool_budget_for(self.model.context_window)
            results = apply_tool_budget(results, budget, self._artifacts_dir)
        for result in results:
            self.add(result)
        return list(results)

    def end_turn(self) -> None:
        """Make the turn durable (fsync)."""
        self._store.sync()

    def close(self) -> None:
        self._compactor.discard_prepared()
        self._store.close()

    def project(self, fixed: FixedContext) -> TokenSnapshot:
        return self._tracker.project(
            self.messages,
            self.fixed_tokens(fixed),
            self._revision,
            tokens_from=self._index.tokens_from,
        )

    def fixed_tokens(self, fixed: FixedContext) -> int:
        """The fixed context's size: as the provider measured it, else the estimate."""
        return calibrated_tokens(fixed.fingerprint, fixed.tokens, self._calibration)

    @property
    def calibration(self) -> FixedCalibration | None:
        return self._calibration

    @property
    def input_budget(self) -> int | None:
        """What one request may hold, from the model's window and output cap."""
        return self._tracker.input_budget

    def reconfigure(
        self, *, model: ModelConfig | None = None, config: CompactionConfig | None = None
    ) -> None:
        """Adopt a changed model configuration or compaction settings on a live session
        (an editor's session config options): the next check uses them.

        The tokenizer is not changed here: counts already made must stay comparable.
        Another model (``/model``) counts with another tokenizer: what the old
        one measured — the baseline, the fixed context's size, the density — no
        longer holds, so the next check estimates everything with the margin
        (compacting first if that is past the new line) and the next response
        measures again.
        """
        if model is not None:
            if model.model != self.model.model:
                self._forget_measurements()
            self.model = model
            self._tracker.model = model
        if config is not None:
            self.config = config
            self._tracker.config = config

    # -- the check -------------------------------------------------------

    async def check_and_compact(self, fixed: FixedContext, *, fork: bool = False) -> CheckResult:
        """Run before every request, including follow-ups after tool results."""
        if fork:
            # A fork carries the full history; compacting inside it would recurse.
            return CheckResult(_UNKNOWN, _UNKNOWN, skipped="fork")
        fixed_tokens = self.fixed_tokens(fixed)
        self._fixed, self._fixed_tokens = fixed, fixed_tokens
        shown = self._current_session()
        messages = self.messages
        index = self._index
        before = self._tracker.project(
            messages, fixed_tokens, self._revision, tokens_from=index.tokens_from
        )
        warnings: list[str] = []

        # The planned edits are not applied to a copy of the history: the index
        # answers as the rules would on the edited view.
        edits = index.micro_compact_edits() if self._idle() else []
        tokens = before.tokens
        if tokens is not None:
            tokens -= index.tokens_saved(edits)
        snapshot = (
            self._tracker.snapshot(tokens, before.source, before.estimated)
            if tokens is not None
            else before
        )

        spare: tuple[list[ContentEdit], int] | None = None
        control = self._control_tokens()
        if (
            snapshot.tokens is not None
            and snapshot.input_budget is not None
            and self._due(snapshot, control)
        ):
            budget = snapshot.input_budget
            line = handoff_line(budget, self.config.handoff_ratio)
            more, saved = index.snip_edits(
                excess=snapshot.tokens - snip_target(budget, line), after=edits
            )
            if snip_worth_it(saved, snapshot.tokens, line, self._compactor.would_call_model()):
                spare = None
            else:
                spare = (more, saved)  # taken only if no compaction can run
                more, saved = [], 0
            edits += more
            # What snip saved may have been counted by the provider: the
            # estimated share is kept as it was (the cautious side).
            snapshot = self._tracker.snapshot(
                snapshot.tokens - saved, before.source, before.estimated
            )

        over = _over_budget(snapshot)
        if self._due(snapshot, control) or over:
            held = self._held_back(snapshot)
            if held is not None and not over:
                warnings.append(held)
            else:
                if held is not None:
                    # No guard may let a request over the budget go out: compact once more.
                    warnings.append(f"{held}; compacting anyway: the request would not fit")
                # The unedited context: the fork must extend the request the
                # provider cached, and summarize the contents, not this check's stubs.
                outcome = await self._compactor.run(
                    "auto", messages, fixed, None, warnings, before, epoch=self.epoch
                )
                if outcome is None and self._current_session() != shown:
                    # The host switched or cleared while the compaction ran, which
                    # then wrote nothing: nor does the rest of this check (the
                    # session guard) — no edit, no handoff, no summary started.
                    self._refuse_over_budget(before, fixed_tokens, warnings)
                    return CheckResult(
                        before, before, skipped="session changed", warnings=tuple(warnings)
                    )
                if outcome is not None:
                    after = self.project(fixed)
                    if self._due(after, 0):
                        # Never silent (issue 25 item 1): the next request goes out past the line.
                        line = math.ceil(self.config.compact_ratio * (after.input_budget or 0))
                        warnings.append(
                            f"the compaction left {after.tokens:,} tokens, still at or over the "
                            f"compaction line ({line:,}): the system prompt, tools and what it "
                            "must keep take that much"
                        )
                    self._will_send(after, fixed_tokens)
                    self._refuse_over_budget(after, fixed_tokens, warnings)
                    return CheckResult(before, after, len(edits), outcome, warnings=tuple(warnings))

        if spare is not None and spare[0]:
            # No compaction ran: the snip held back for the cache is the next best thing.
            edits += spare[0]
            snapshot = self._tracker.snapshot(
                (snapshot.tokens or 0) - spare[1], before.source, before.estimated
            )
        # The request goes out with the projection the decisions were made on,
        # plus the handoff reminder if one is added now.
        self._refuse_over_budget(snapshot, fixed_tokens, warnings)
        if edits:
            self._apply_edits(edits)
        after = snapshot
        handoff = self._maybe_handoff(snapshot)
        if handoff is not None and snapshot.tokens is not None:
            cost = self._count(handoff)
            after = self._tracker.snapshot(
                snapshot.tokens + cost, before.source, snapshot.estimated + cost
            )
        elif not edits:
            # The request goes out as ``messages``: the fork extends it byte for byte.
            self._maybe_prepare(messages, fixed, before)
        self._will_send(after, fixed_tokens, edited=bool(edits))
        return CheckResult(
            before, after, len(edits), None, handoff is not None, warnings=tuple(warnings)
        )

    async def compact(
        self, fixed: FixedContext, *, instructions: str | None = None
    ) -> CompactionOutcome | None:
        """A manual ``/compact``, whatever the token count.

        Returns ``None`` when it is ignored: a response is streaming, or a
        compaction is already running. It resets the breaker. If it fails, an
        error block is written to this session and ``CompactionFailedError``
        is raised — never a silent fallback. A PreCompact hook's block raises
        ``CompactionBlockedError``.
        """
        if self.streaming or self._compactor.compacting:
            return None
        self._breaker.reset(breaker_key(self._workspace, self.session_id))
        before = self.project(fixed)
        warnings: list[str] = []
        try:
            return await self._compactor.run(
                "manual", self.messages, fixed, instructions, warnings, before
            )
        finally:
            # A manual compaction has no CheckResult: its notices (hook stderr,
            # a skipped step) reach the user through the listener — unless the
            # host moved to another session meanwhile.
            if self._current_session() == self.session_id:
                for warning in warnings:
                    self._listener.compaction_notice(warning)

    async def recover_from_context_limit(
        self, error: ContextLimitError, fixed: FixedContext
    ) -> CompactionOutcome:
        """Reactive compaction after the provider refused a request as too long.

        Allowed once per successful provider boundary and only when the error
        came before any output; then the caller replays the request. Otherwise
        ``ContextWindowExceededError`` carries the friendly ``invalid_request``
        message. A PreCompact block raises ``CompactionBlockedError`` and the
        context stays as it was.
        """
        allowed = reactive_allowed(
            output_started=error.output_started, reactive_used=self._boundary.reactive_used
        )
        if not allowed and error.output_started:
            raise ContextWindowExceededError(
                "the model stopped because the conversation no longer fits its context "
                "window, after it had started answering; the context was left as it was. "
                "Run /compact, then ask again."
            ) from error
        if not allowed:
            raise ContextWindowExceededError(
                "the conversation still does not fit the model's context window after an "
                "emergency compaction; run /compact with instructions to keep less, or "
                "start a new session."
            ) from error
        self._boundary.reactive_used = True
        if error.prompt_tokens is not None:
            # The refusal says what the request really counted: what the
            # replacement is planned with should know it (DESIGN §4).
            self._learn_density(error.prompt_tokens)
        warnings: list[str] = []
        messages = self.messages
        fixed_tokens = self.fixed_tokens(fixed)
        self._fixed, self._fixed_tokens = fixed, fixed_tokens
        # No projection: the provider has just said ours was wrong.
        outcome = await self._compactor.run("reactive", messages, fixed, None, warnings)
        if outcome is None:
            raise ContextWindowExceededError(
                "the conversation does not fit the model's context window and could not be "
                "compacted" + (f" ({'; '.join(warnings)})" if warnings else "")
            ) from error
        after = self.project(fixed)
        self._will_send(after, fixed_tokens)
        self._refuse_over_budget(after, fixed_tokens, warnings)
        return outcome

    # -- what the compactor asks (``CompactionHost``) ----------------------

    def sized(self, message: Message) -> int:
        """A message's estimate at the session's density: what compaction plans with,
        so that a replacement aimed at half the budget lands there as the provider counts."""
        return self._tracker.scaled(self._count(message))

    def projected_after(self, replacement: Sequence[Message], fixed: FixedContext) -> TokenSnapshot:
        """The next request's projection once ``replacement`` is the context: what
        ``check_and_compact`` re-projects after a compaction. The checkpoint drops the
        provider's baseline, so every message is estimated (the margin applies to all)."""
        estimated = self._tracker.scaled(sum(self._count(m) for m in replacement))
        return self._tracker.snapshot(self.fixed_tokens(fixed) + estimated, "estimate", estimated)

    def conversation_share(self, fixed: FixedContext) -> int:
        """The conversation's share of the input budget ; the fixed context takes the rest."""
        budget = self._tracker.input_budget or UNKNOWN_WINDOW
        return max(budget - self.fixed_tokens(fixed), 0)

    def shown_session(self) -> str:
        """Which session the host shows now (a compaction for another writes nothing)."""
        return self._current_session()

    def checkpoint_committed(self) -> None:
        """A checkpoint is durable and the view is its replacement: re-measure from it."""
        self._tracker.invalidate()
        # The view is now the replacement: rebuilt from it (a short list) on the next use.
        self._index.reset()
        self._revision += 1
        self._boundary.compacted()

    # -- steps -----------------------------------------------------------

    def _held_back(self, snapshot: TokenSnapshot) -> str | None:
        """Why a due compaction should wait, if a guard against loops says so."""
        hold = compaction_hold(
            snapshot.tokens or 0,
            snapshot.input_budget or 0,
            compacted_since_response=self._boundary.compacted_since_response,
            floor=self._boundary.floor,
        )
        if hold == "awaiting_response":
            return (
                "compaction already ran before this request; not compacting again "
                "until the provider answers"
            )
        if hold == "no_regrowth":
            return (
                "the last compaction could not get under the compaction line "
                f"({self._boundary.floor or 0:,} tokens: the system prompt, tools and what it "
                "must keep); not compacting again until the context grows"
            )
        return None

    def _refuse_over_budget(
        self, snapshot: TokenSnapshot, fixed_tokens: int, warnings: Sequence[str]
    ) -> None:
        """Never send a request known to be over the input budget (DESIGN §5.9 step 4)."""
        if not _over_budget(snapshot):
            return
        assert snapshot.input_budget is not None
        tokens = _cautious(snapshot)
        raise RequestTooLargeError(
            tokens,
            snapshot.input_budget,
            fixed_tokens,
            max(tokens - fixed_tokens, 0),
            "; ".join(warnings) or None,
        )

    def _will_send(self, after: TokenSnapshot, fixed_tokens: int, edited: bool = False) -> None:
        """Remember what the response to this request can measure (fixed context, density)."""
        self._measurable = _message_estimate(after, fixed_tokens)
        # Edits remove content at its estimate: the difference would read as density.
        self._probe = (
            (after.tokens - after.estimated, after.estimated)
            if after.source == "anchored" and after.tokens is not None and not edited
            else None
        )

    def _forget_measurements(self) -> None:
        """Drop the baseline, the calibration and the density, durably (a resume re-measures)."""
        self._tracker.invalidate()
        if self._calibration is not None:
            self._store.append(StateRecord(CALIBRATION_KEY, None))
            self._calibration = None
        if self._tracker.density != 1.0:
            self._store.append(StateRecord(DENSITY_KEY, 1.0))
            self._tracker.density = 1.0

    def _learn_density(self, prompt_tokens: int) -> None:
        """What the estimated part of the last request really cost (DESIGN §4)."""
        probe, self._probe = self._probe, None
        if probe is None or prompt_tokens <= 0:
            return
        counted, estimated = probe
        tracker = self._tracker
        density = learned_density(tracker.density, estimated, prompt_tokens - counted)
        if density == tracker.density:
            return
        # Persisted before it is used, so a resumed session projects the same way.
        self._store.append(StateRecord(DENSITY_KEY, density))
        tracker.density = density

    def _calibrate(self, prompt_tokens: int) -> None:
        """Learn the fixed context's true size from a response to a fully estimated request."""
        fixed, message_tokens = self._fixed, self._measurable
        self._measurable = None
        if fixed is None or message_tokens is None:
            return
        measured = measure(prompt_tokens, message_tokens, fixed.fingerprint, fixed.tokens)
        if measured is None:
            return
        kept = sharper(self._calibration, measured)
        if kept == self._calibration:
            return
        # Persisted before it is used, so a resumed session projects the same way.
        self._store.append(StateRecord(CALIBRATION_KEY, kept.to_json()))
        self._calibration = kept

    def _restore_boundary(self, records: Sequence[Record], calibration: JSONValue) -> None:
        """Rebuild what the last provider boundary left: anchor, floor, flags, calibration.

        A resumed session must project exactly as the one that stopped: the
        last response's usage is still the baseline unless the context was
        rewritten after it (a compaction or an edit).
        """
        if calibration is not None:
            self._calibration = FixedCalibration.from_json(calibration) or self._calibration
        self._boundary = Boundary.from_records(
            records,
            self._store.api_view.ignored_checkpoints,
            budget=self._tracker.input_budget,
            compact_ratio=self.config.compact_ratio,
        )
        anchor = self._boundary.anchor
        if anchor is None:
            return
        messages = self.messages
        for index in range(len(messages) - 1, -1, -1):
            if messages[index].id == anchor.id:
                fixed = self._calibration.tokens if self._calibration else None
                self._tracker.observe(messages, fixed, self._revision, index)
                self._fixed_tokens = fixed
                return

    def _apply_edits(self, edits: list[ContentEdit]) -> None:
        try:
            self._store.append(ContextEditRecord(tuple(edits)))
        except TranscriptWriteError as exc:
            raise CheckpointWriteError(f"context edits not saved: {exc}") from exc
        finally:
            # Applied or not, the index re-reads the messages named.
            self._index.edited(edits)
        # The baseline counted the old contents: re-estimate until the next response.
        self._revision += 1

    def _maybe_handoff(self, snapshot: TokenSnapshot) -> Message | None:
        """Append this epoch's handoff reminder when the context is in the band."""
        if snapshot.phase != "handoff_band" or self._handoffs.status(self.epoch) != "open":
            return None
        record = HandoffRecord(build_handoff_message(snapshot), epoch=self.epoch)
        self._store.append(record)
        self._handoffs.observe(record)
        self._control = (self.epoch, self._count(record.message))
        return record.message

    def _maybe_prepare(
        self, messages: Sequence[Message], fixed: FixedContext, snapshot: TokenSnapshot
    ) -> None:
        """Start the summary in the background once the model has answered this
        epoch's handoff (its frontier is then in the history), in the band."""
        budget = snapshot.input_budget
        if (
            not self.config.precompute
            or snapshot.tokens is None
            or budget is None
            or self._compactor.prepared is not None
            or self._prepared_epoch == self.epoch
            or self._handoffs.status(self.epoch) != "done"
            or not self._compactor.would_call_model()
        ):
            return
        start = self.config.precompute_ratio or self.config.handoff_ratio
        if snapshot.tokens - self._control_tokens() < start * budget:
            return
        if handoff_answered(messages) and self._compactor.prepare(
            messages, fixed, snapshot, self.epoch
        ):
            self._prepared_epoch = self.epoch

    def _control_tokens(self) -> int:
        """Tokens of this epoch's handoff reminder in the context (a compaction drops it)."""
        epoch, tokens = self._control
        return tokens if epoch == self.epoch else 0

    def _due(self, snapshot: TokenSnapshot, control: int) -> bool:
        budget = snapshot.input_budget
        if snapshot.tokens is None or budget is None:
            return False
        return compaction_due(snapshot.tokens, control, budget, self.config.compact_ratio)

    def _idle(self) -> bool:
        if self._last_call is None:
            return False
        return self._clock() - self._last_call > self.config.micro_compact_idle_s


def _cautious(snapshot: TokenSnapshot) -> int:
    """The projection with the margin on what the provider has not counted yet."""
    return cautious(snapshot.tokens or 0, snapshot.estimated)


def _over_budget(snapshot: TokenSnapshot) -> bool:
    return (
        snapshot.tokens is not None
        and snapshot.input_budget is not None
        and not may_send(snapshot.tokens, snapshot.estimated, snapshot.input_budget)
    )


def _message_estimate(snapshot: TokenSnapshot, fixed_tokens: int) -> int | None:
    """The messages' share of a full estimate (what a response can calibrate against)."""
    if snapshot.source != "estimate" or snapshot.tokens is None:
        return None
    return max(snapshot.tokens - fixed_tokens, 0)


def _timestamp(ts: str | None) -> float | None:
    """A record's ``ts`` as a Unix time (``None`` if absent or unreadable)."""
    if ts is None:
        return None
    try:
        return datetime.fromisoformat(ts).timestamp()
    except ValueError:
        return None
