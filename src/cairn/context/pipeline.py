"""``check_and_compact``: the one check that runs before every request (DESIGN §5.9).

The order is fixed: micro compact → snip → projection → compaction when due
→ the deferred edits applied together with the result → handoff in the band.
Edits are only planned until the check has succeeded, and every change to
the model's context is made durable in the transcript before it takes
effect: the in-memory context *is* the store's API view, which only moves
after a successful write.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cairn.context.breaker import CompactionBreaker, breaker_key
from cairn.context.budget import compaction_would_help, handoff_line
from cairn.context.config import CompactionConfig
from cairn.context.effects import ToolEffect
from cairn.context.handoff import HandoffLedger, build_handoff_message
from cairn.context.snip import apply_edits, micro_compact_edits, snip_edits
from cairn.context.summarizer import (
    FallbackSummarizer,
    Summarizer,
    SummarizerError,
    Summary,
    SummaryRequest,
    fallback_summary,
)
from cairn.context.tool_budget import apply_tool_budget, tool_budget_for
from cairn.context.tracker import ContextTokenTracker, FixedContext, TokenSnapshot
from cairn.messages import KIND_HANDOFF, Message
from cairn.store.base import StoreError, TranscriptStore, TranscriptWriteError
from cairn.store.jsonl import JsonlTranscriptStore
from cairn.store.paths import new_session_id, normalize_workspace, session_path
from cairn.store.records import (
    CheckpointError,
    CompactionRecord,
    ContentEdit,
    ContextEditRecord,
    ErrorRecord,
    HandoffRecord,
    MessageRecord,
    Record,
    SessionRecord,
    Strategy,
    Trigger,
)
from cairn.tokens import message_counter


class CheckpointFailedError(StoreError):
    """The compaction could not be saved; the turn fails and the context is unchanged."""

    phase = "checkpoint"


class CompactionFailedError(RuntimeError):
    """A manual compaction failed; an error block was written to the session."""


@dataclass(frozen=True, slots=True)
class CompactionOutcome:
    record_id: str
    trigger: Trigger
    strategy: Strategy
    pre_tokens: int
    post_tokens: int
    summary: str


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


class ContextPipeline:
    """The context of one session: its durable history and the rules that keep it small."""

    def __init__(
        self,
        store: TranscriptStore,
        config: CompactionConfig,
        *,
        workspace: str | Path,
        tool_effects: Mapping[str, ToolEffect] | None = None,
        summarizer: Summarizer | None = None,
        breaker: CompactionBreaker | None = None,
        clock: Callable[[], float] = time.time,
        artifacts_dir: Path | None = None,
    ) -> None:
        self.config = config
        self._store = store
        self._workspace = normalize_workspace(workspace)
        self._effects = dict(tool_effects or {})
        self._summarizer = summarizer or FallbackSummarizer()
        self._breaker = breaker or CompactionBreaker(config.breaker_threshold)
        self._clock = clock
        self._artifacts_dir = artifacts_dir
        self._count = message_counter(config.tokenizer)
        self._tracker = ContextTokenTracker(config, self._count)
        self._revision = 0
        #: The fixed context of the last checked request (what the next response answers).
        self._fixed_tokens: int | None = None
        self._compacted_since_response = False
        #: The true size right after a compaction that could not get under the line.
        self._floor: int | None = None
        self._compacting = False
        records = store.transcript().records
        self._handoffs = HandoffLedger.from_records(
            r for r in records if isinstance(r, HandoffRecord)
        )
        self._last_call = _last_response_time(records)

    @classmethod
    def open(
        cls,
        workspace: str | Path,
        config: CompactionConfig,
        *,
        session_id: str | None = None,
        home: Path | None = None,
        tool_effects: Mapping[str, ToolEffect] | None = None,
        summarizer: Summarizer | None = None,
        clock: Callable[[], float] = time.time,
    ) -> ContextPipeline:
        """Resume ``session_id`` in ``workspace``, or start a new session."""
        session_id = session_id or new_session_id()
        path = session_path(workspace, session_id, home)
        if path.exists():
            store = JsonlTranscriptStore.open(path)
        else:
            header = SessionRecord(session_id, normalize_workspace(workspace))
            store = JsonlTranscriptStore.create(path, header)
        return cls(
            store,
            config,
            workspace=workspace,
            tool_effects=tool_effects,
            summarizer=summarizer,
            clock=clock,
            artifacts_dir=path.with_suffix(""),
        )

    # -- the conversation ------------------------------------------------

    @property
    def session_id(self) -> str:
        return self._store.session_id

    @property
    def messages(self) -> Sequence[Message]:
        """The API view: what the model gets next (system prompt and tools aside)."""
        return self._store.api_view.messages

    @property
    def epoch(self) -> int:
        """How many compactions this context went through."""
        return self._store.api_view.valid_checkpoints

    @property
    def compacting(self) -> bool:
        return self._compacting

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
            if self._compacted_since_response:
                # The provider's count of the compacted context: did it get under the line?
                budget = self._tracker.input_budget
                under = budget is None or usage.context_tokens < self.config.compact_ratio * budget
                self._floor = None if under else usage.context_tokens
            self._compacted_since_response = False

    def add_tool_results(self, results: Sequence[Message]) -> list[Message]:
        """Budget a round's tool results (oversized output goes to a file), then add them."""
        if self._artifacts_dir is not None:
            budget = tool_budget_for(self.config.context_window)
            results = apply_tool_budget(results, budget, self._artifacts_dir)
        for result in results:
            self.add(result)
        return list(results)

    def end_turn(self) -> None:
        """Make the turn durable (fsync)."""
        self._store.sync()

    def close(self) -> None:
        self._store.close()

    def project(self, fixed: FixedContext) -> TokenSnapshot:
        return self._tracker.project(self.messages, fixed.tokens, self._revision)

    # -- the check -------------------------------------------------------

    async def check_and_compact(self, fixed: FixedContext, *, fork: bool = False) -> CheckResult:
        """Run before every request, including follow-ups after tool results."""
        if fork:
            # A fork carries the full history; compacting inside it would recurse.
            return CheckResult(_UNKNOWN, _UNKNOWN, skipped="fork")
        self._fixed_tokens = fixed.tokens
        messages = self.messages
        before = self._tracker.project(messages, fixed.tokens, self._revision)
        warnings: list[str] = []

        edits = micro_compact_edits(messages) if self._idle() else []
        view = apply_edits(messages, edits)
        tokens = before.tokens
        if tokens is not None:
            tokens -= _saved(messages, view, self._count)
        snapshot = self._tracker.snapshot(tokens, before.source) if tokens is not None else before

        if (
            snapshot.tokens is not None
            and snapshot.input_budget is not None
            and snapshot.phase
            in (
                "handoff_band",
                "compaction_due",
            )
        ):
            line = handoff_line(snapshot.input_budget, self.config.handoff_ratio)
            more, saved = snip_edits(
                view, excess=snapshot.tokens - line, effects=self._effects, count=self._count
            )
            edits += more
            view = apply_edits(view, more)
            snapshot = self._tracker.snapshot(snapshot.tokens - saved, before.source)

        if snapshot.phase == "compaction_due":
            budget = snapshot.input_budget or 0
            if self._compacted_since_response:
                warnings.append(
                    "compaction already ran before this request; not compacting again "
                    "until the provider answers"
                )
            elif not compaction_would_help(snapshot.tokens or 0, self._floor, budget):
                warnings.append(
                    f"the last compaction could not get under the compaction line "
                    f"({self._floor:,} tokens: the system prompt, tools and the user's own "
                    "messages, which it must keep); not compacting again until the context "
                    "grows"
                )
            else:
                outcome = await self._auto_compact(view, fixed, before, warnings)
                if outcome is not None:
                    after = self.project(fixed)
                    return CheckResult(before, after, len(edits), outcome, warnings=tuple(warnings))

        if edits:
            self._apply_edits(edits)
        handoff = self._maybe_handoff(snapshot)
        after = self.project(fixed) if handoff or edits else snapshot
        return CheckResult(before, after, len(edits), None, handoff, warnings=tuple(warnings))

    async def compact(
        self, fixed: FixedContext, *, instructions: str | None = None
    ) -> CompactionOutcome | None:
        """A manual ``/compact``: whatever the token count; ``None`` if one is already running.

        It resets the breaker. If the summarizer fails, an error block is
        written to this session and ``CompactionFailedError`` is raised —
        never a silent fallback.
        """
        if self._compacting:
            return None
        self._compacting = True
        try:
            key = breaker_key(self._workspace, self.session_id)
            self._breaker.reset(key)
            before = self.project(fixed)
            request = self._request(self.messages, fixed, "manual", instructions)
            try:
                summary = await self._summarizer.summarize(request)
            except SummarizerError as exc:
                self._breaker.record_failure(key)
                self._store.append(ErrorRecord(f"Compaction failed: {exc}", source="compact"))
                raise CompactionFailedError(str(exc)) from exc
            self._breaker.record_success(key)
            return self._commit(summary, "manual", before.tokens, fixed)
        finally:
            self._compacting = False

    # -- steps -----------------------------------------------------------

    async def _auto_compact(
        self,
        view: Sequence[Message],
        fixed: FixedContext,
        before: TokenSnapshot,
        warnings: list[str],
    ) -> CompactionOutcome | None:
        if self.config.context_window is None:
            return None
        key = breaker_key(self._workspace, self.session_id)
        request = self._request(view, fixed, "auto", None)
        skip = self.config.on_failure == "skip"
        self._compacting = True
        try:
            if self._breaker.is_open(key):
                failures = self._breaker.failures(key)
                if skip:
                    warnings.append(
                        f"compaction skipped: the summarizer failed {failures} times in a row"
                    )
                    return None
                warnings.append(
                    f"the summarizer failed {failures} times in a row; "
                    "used the deterministic fallback"
                )
                summary = fallback_summary(request.messages, request)
            else:
                try:
                    summary = await self._summarizer.summarize(request)
                except SummarizerError as exc:
                    failures = self._breaker.record_failure(key)
                    warnings.append(f"compaction failed ({failures} in a row): {exc}")
                    if skip:
                        return None
                    summary = fallback_summary(request.messages, request)
                else:
                    self._breaker.record_success(key)
            return self._commit(summary, "auto", before.tokens, fixed)
        finally:
            self._compacting = False

    def _request(
        self,
        view: Sequence[Message],
        fixed: FixedContext,
        trigger: Trigger,
        instructions: str | None,
    ) -> SummaryRequest:
        window = self.config.context_window or 0
        # The conversation's share of the budget: the fixed context goes out
        # with every request, so the replacement must leave room for it.
        budget = max((self._tracker.input_budget or window) - fixed.tokens, 0)
        return SummaryRequest(
            # The handoff reminder is a control message for the live model only.
            messages=tuple(m for m in view if m.meta.kind != KIND_HANDOFF),
            fixed=fixed,
            window=window,
            input_budget=budget,
            trigger=trigger,
            tool_effects=self._effects,
            instructions=instructions,
            count=self._count,
        )

    def _commit(
        self, summary: Summary, trigger: Trigger, pre_tokens: int | None, fixed: FixedContext
    ) -> CompactionOutcome:
        post = fixed.tokens + sum(self._count(m) for m in summary.replacement)
        pre = (
            pre_tokens
            if pre_tokens is not None
            else fixed.tokens + sum(self._count(m) for m in self.messages)
        )
        record = CompactionRecord(
            trigger=trigger,
            strategy=summary.strategy,
            pre_tokens=pre,
            post_tokens=post,
            summary=summary.summary,
            replacement_messages=summary.replacement,
            files=summary.files,
        )
        try:
            # Append + fsync; the store swaps its API view only after that.
            self._store.save_compaction(record)
        except (CheckpointError, TranscriptWriteError) as exc:
            raise CheckpointFailedError(f"compaction checkpoint not saved: {exc}") from exc
        self._tracker.invalidate()
        self._revision += 1
        self._compacted_since_response = True
        return CompactionOutcome(record.id, trigger, summary.strategy, pre, post, summary.summary)

    def _apply_edits(self, edits: list[ContentEdit]) -> None:
        try:
            self._store.append(ContextEditRecord(tuple(edits)))
        except TranscriptWriteError as exc:
            raise CheckpointFailedError(f"context edits not saved: {exc}") from exc
        # The baseline counted the old contents: re-estimate until the next response.
        self._revision += 1

    def _maybe_handoff(self, snapshot: TokenSnapshot) -> bool:
        if snapshot.phase != "handoff_band" or self._handoffs.status(self.epoch) != "open":
            return False
        record = HandoffRecord(build_handoff_message(snapshot), epoch=self.epoch)
        self._store.append(record)
        self._handoffs.observe(record)
        return True

    def _idle(self) -> bool:
        if self._last_call is None:
            return False
        return self._clock() - self._last_call > self.config.micro_compact_idle_s


def _saved(old: Sequence[Message], new: Sequence[Message], count: Callable[[Message], int]) -> int:
    return sum(count(a) - count(b) for a, b in zip(old, new, strict=True) if a is not b)


def _last_response_time(records: Sequence[Record]) -> float | None:
    """When the provider last answered, from the newest assistant message with usage."""
    for record in reversed(records):
        if isinstance(record, MessageRecord):
            message = record.message
            if message.role == "assistant" and message.meta.usage is not None:
                try:
                    return datetime.fromisoformat(record.ts).timestamp()
                except ValueError:
                    return None
    return None
