"""The replay engine: a recorded session, request by request, as if it happened live.

For every request the recorded agent made (one per recorded assistant
message): append what the user or the tools produced since the previous
request, let the policy act (Cairn's ``check_and_compact`` before the
request, nothing, or the old after-the-response check), build the exact
request, count it with an exact tokenizer, simulate the provider's usage
from that count and append the recorded answer. Every policy runs on the
same engine, tokenizer and window, so their numbers compare.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import orjson

from cairn.context.budget import input_budget
from cairn.context.config import CompactionConfig
from cairn.context.effects import ToolEffect
from cairn.context.pipeline import CheckResult, CompactionOutcome, ContextPipeline
from cairn.context.summarizer import Summarizer
from cairn.context.tracker import FixedContext
from cairn.messages import Message, Usage
from cairn.replay.metrics import Policy, RequestMetrics, SessionReport
from cairn.replay.session import RecordedSession
from cairn.store.jsonl import JsonlTranscriptStore
from cairn.store.records import CompactionRecord, SessionRecord
from cairn.tokens import get_tokenizer, message_counter

#: Chat templates add a few tokens to prime the reply (OpenAI's accounting).
REPLY_PRIMING_TOKENS = 3

#: Tools of the recorded agents that only read, as those agents declare them.
#: Everything else counts as writing (snip keeps it longer).
_READ_ONLY_NAMES = (
    # Claude Code
    "Read", "Grep", "Glob", "LS", "WebFetch", "WebSearch", "NotebookRead",
    # SWE-agent
    "open", "goto", "scroll_up", "scroll_down", "search_file", "search_dir", "find_file",
    # Cairn and common OpenAI-style agents
    "read_file", "list_files", "glob", "grep", "search",
    # tau-bench airline
    "get_user_details", "get_reservation_details", "search_direct_flight",
    "search_onestop_flight", "list_all_airports", "calculate", "think",
)  # fmt: skip
KNOWN_READ_ONLY_TOOLS: dict[str, ToolEffect] = dict.fromkeys(_READ_ONLY_NAMES, "read_only")


class MessageTokens:
    """Exact per-message counts, each message counted once however often it is sent."""

    def __init__(self, tokenizer: str) -> None:
        self._tokenizer = get_tokenizer(tokenizer)
        self._count = message_counter(tokenizer)
        self._cache: dict[int, tuple[Message, int]] = {}

    def __call__(self, message: Message) -> int:
        hit = self._cache.get(id(message))
        if hit is not None and hit[0] is message:
            return hit[1]
        tokens = self._count(message)
        # Keep the message alive with its count so its id() is never reused.
        self._cache[id(message)] = (message, tokens)
        return tokens

    def fixed(self, fixed: FixedContext) -> int:
        """System prompt and tool schemas (sent as JSON) of every request."""
        tools = self._tokenizer.count(orjson.dumps(fixed.tools).decode()) if fixed.tools else 0
        return sum(self(m) for m in fixed.system) + tools


@dataclass(frozen=True)
class ReplayOptions:
    window: int
    policy: Policy = "cairn"
    tokenizer: str = "cl100k"
    config: CompactionConfig | None = None
    #: ``None``: the deterministic fallback.
    summarizer: Summarizer | None = None


async def replay_session(
    session: RecordedSession,
    options: ReplayOptions,
    transcript_path: Path,
    tokens: MessageTokens | None = None,
    on_request: Callable[[RequestMetrics], None] | None = None,
) -> SessionReport:
    """Replay one session, writing Cairn's transcript of it to ``transcript_path``."""
    config = options.config or CompactionConfig(context_window=options.window)
    budget = input_budget(options.window, config.max_output_tokens)
    count = tokens or MessageTokens(options.tokenizer)
    fixed = FixedContext(session.system, session.tools)
    fixed_true = count.fixed(fixed)
    line = config.compact_ratio * budget
    skipped = _window_too_small(session, fixed_true, line, budget, count)
    if skipped is not None:
        return SessionReport(session.name, options.policy, options.window, budget, skipped=skipped)
    transcript_path.parent.mkdir(parents=True, exist_ok=True)
    if transcript_path.exists():
        transcript_path.unlink()
    store = JsonlTranscriptStore.create(transcript_path, SessionRecord(session.name, "replay"))
    pipeline = ContextPipeline(
        store,
        config,
        workspace=transcript_path.parent,
        tool_effects=KNOWN_READ_ONLY_TOOLS,
        clock=lambda: 0.0,  # replays run in no time; micro compact needs real idle time
        summarizer=options.summarizer,
        artifacts_dir=transcript_path.with_suffix(""),
    )
    replay = _Replay(pipeline, options.policy, fixed, fixed_true, budget, count, on_request)
    try:
        pending: list[Message] = []
        for message in session.messages:
            if message.role == "assistant":
                await replay.request(pending, message)
                pending = []
            else:
                pending.append(message)
        replay.feed(pending)
        pipeline.end_turn()
    finally:
        pipeline.close()
    return SessionReport(
        session.name,
        options.policy,
        options.window,
        budget,
        tuple(replay.metrics),
        transcript=str(transcript_path),
    )


def _window_too_small(
    session: RecordedSession, fixed_true: int, line: float, budget: int, count: MessageTokens
) -> str | None:
    """Why no policy can run this session in the window, if none can.

    Every request carries the system prompt and tool schemas, and compaction
    must keep everything the user wrote (the active-task checkpoint): when
    those alone reach the compaction line, every request would need a
    compaction that cannot help, and the compact block pushes it over.
    """
    if fixed_true >= budget:
        return (
            f"window too small: the system prompt and tool schemas alone take "
            f"{fixed_true:,} tokens of the {budget:,}-token input budget"
        )
    typed = sum(count(m) for m in session.messages if m.role == "user" and not m.meta.synthetic)
    if fixed_true + typed >= line:
        return (
            f"window too small: the system prompt and tool schemas ({fixed_true:,} tokens) "
            f"and the user's own messages, which compaction must keep ({typed:,}), reach "
            f"the compaction line ({int(line):,} of the {budget:,}-token input budget)"
        )
    return None


class _Replay:
    """The state of one replay: the pipeline and the previous request."""

    def __init__(
        self,
        pipeline: ContextPipeline,
        policy: Policy,
        fixed: FixedContext,
        fixed_true: int,
        budget: int,
        count: MessageTokens,
        on_request: Callable[[RequestMetrics], None] | None,
    ) -> None:
        self.pipeline = pipeline
        self.policy = policy
        self.fixed = fixed
        self.fixed_true = fixed_true
        self.budget = budget
        self.count = count
        self.metrics: list[RequestMetrics] = []
        self._previous: Sequence[Message] = ()
        self._on_request = on_request

    def feed(self, messages: Sequence[Message]) -> None:
        """Append user input and tool results; Cairn budgets each round of results."""
        i = 0
        while i < len(messages):
            if messages[i].role != "tool":
                self.pipeline.add(messages[i])
                i += 1
                continue
            j = i
            while j < len(messages) and messages[j].role == "tool":
                j += 1
            if self.policy == "none":
                for result in messages[i:j]:
                    self.pipeline.add(result)
            else:
                self.pipeline.add_tool_results(messages[i:j])
            i = j

    async def request(self, pending: Sequence[Message], answer: Message) -> None:
        self.feed(pending)
        started = time.perf_counter()
        check: CheckResult | None = None
        if self.policy == "cairn":
            check = await self.pipeline.check_and_compact(self.fixed)
            projected = check.after
        else:
            projected = self.pipeline.project(self.fixed)
        elapsed = time.perf_counter() - started

        sent = list(self.pipeline.messages)
        true_tokens = self._request_tokens(sent)
        shared = self._shared_prefix_tokens(sent)
        self._previous = sent

        completion = self.count(answer)
        usage = Usage(true_tokens, completion, true_tokens + completion)
        self.pipeline.add(replace(answer, meta=replace(answer.meta, usage=usage)))

        outcome = check.compaction if check else None
        if self.policy == "post-response":
            # The old behaviour: judge the response's usage after it arrived.
            started = time.perf_counter()
            outcome = await self._compact_after(usage)
            elapsed += time.perf_counter() - started
        metrics = RequestMetrics(
            index=len(self.metrics),
            true_tokens=true_tokens,
            projected_tokens=projected.tokens,
            phase=projected.phase if check is None else check.before.phase,
            handoff=bool(check and check.handoff),
            snipped=check.edits if check else 0,
            compaction=outcome.strategy if outcome else None,
            pre_tokens=outcome.pre_tokens if outcome else None,
            post_tokens=outcome.post_tokens if outcome else None,
            overflow=true_tokens > self.budget,
            cache_eligible_tokens=shared,
            pipeline_seconds=elapsed,
        )
        self.metrics.append(metrics)
        if self._on_request is not None:
            self._on_request(metrics)

    async def _compact_after(self, usage: Usage) -> CompactionOutcome | None:
        config = self.pipeline.config
        if usage.context_tokens < config.compact_ratio * self.budget:
            return None
        return await self.pipeline.compact(self.fixed)

    def _request_tokens(self, messages: Sequence[Message]) -> int:
        return self.fixed_true + sum(self.count(m) for m in messages) + REPLY_PRIMING_TOKENS

    def _shared_prefix_tokens(self, messages: Sequence[Message]) -> int:
        if not self._previous:
            return 0
        shared = self.fixed_true
        for before, now in zip(self._previous, messages, strict=False):
            if before is not now and before != now:
                break
            shared += self.count(now)
        return shared


async def replay_sessions(
    sessions: Sequence[RecordedSession],
    options: ReplayOptions,
    transcripts: Path,
    on_request: Callable[[RequestMetrics], None] | None = None,
) -> list[SessionReport]:
    """Replay sessions one after another; transcripts go to ``transcripts/``.

    One session is written to ``transcript.jsonl``; several to
    ``transcript-<n>.jsonl`` in session order.
    """
    tokens = MessageTokens(options.tokenizer)
    reports = []
    for n, session in enumerate(sessions):
        name = "transcript.jsonl" if len(sessions) == 1 else f"transcript-{n}.jsonl"
        reports.append(
            await replay_session(session, options, transcripts / name, tokens, on_request)
        )
    return reports


def compaction_records(path: Path) -> list[CompactionRecord]:
    """The compaction records of a replayed transcript (to cross-check a report)."""
    from cairn.store.jsonl import read_transcript

    return [r for r in read_transcript(path).records if isinstance(r, CompactionRecord)]
