"""The replay engine: a recorded session, request by request, as if it happened live.

For every request the recorded agent made (one per recorded assistant
message): append what the user or the tools produced since the previous
request, let the policy act (Cairn's ``check_and_compact`` before the
request, nothing, or the old after-the-response check), build the exact
request, count it with an exact tokenizer, simulate the provider's usage
from that count and append the recorded answer. Every policy runs on the
same engine, tokenizer and window, so their numbers compare.

Every request carries the fixed context the recorded agent really had
(``cairn.replay.fixed_context``). A session the replay cannot run to its
end fails, with the reason: the fixed context alone fills the input budget,
or the pipeline refused a request it could not bring under the budget
(``RequestTooLargeError``); the session stops there.

After every compaction the context the model gets next is checked for
continuity (``cairn.replay.continuity``) against everything the session
added to the pipeline so far; the result goes with that request's metrics.
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
from cairn.context.pipeline import (
    CheckResult,
    CompactionFailedError,
    CompactionOutcome,
    ContextPipeline,
    RequestTooLargeError,
)
from cairn.context.summarizer import Summarizer
from cairn.context.tracker import FixedContext
from cairn.messages import Message, Usage
from cairn.provider.config import ModelConfig
from cairn.replay.continuity import Continuity, SessionSoFar, check_continuity
from cairn.replay.fixed_context import (
    REPLY_PRIMING_TOKENS,
    FixedSource,
    ResolvedFixedContext,
    resolve_fixed_context,
)
from cairn.replay.metrics import Policy, RequestMetrics, SessionReport
from cairn.replay.prompt_cache import (
    CacheUse,
    anthropic_breakpoints,
    anthropic_cache_use,
    openai_cache_read,
)
from cairn.replay.session import RecordedSession
from cairn.store.jsonl.writer import JsonlTranscriptStore
from cairn.store.records import CompactionRecord, SessionRecord
from cairn.tokens import get_tokenizer, message_counter

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
    #: The fixed context's exact size (``--fixed-tokens N``); ``None``: ``auto``.
    fixed_tokens: int | None = None
    #: The replayed model's response cap (the output reserve); ``None``: the default.
    max_output_tokens: int | None = None


async def replay_session(
    session: RecordedSession,
    options: ReplayOptions,
    transcript_path: Path,
    tokens: MessageTokens | None = None,
    on_request: Callable[[RequestMetrics], None] | None = None,
    fixed_from: RecordedSession | None = None,
) -> SessionReport:
    """Replay one session, writing Cairn's transcript of it to ``transcript_path``.

    ``fixed_from``: the recording ``session`` was derived from (the dense
    variant, ``cairn.replay.dense``), whose fixed context it keeps: its
    recorded usage describes that recording's messages, so the fixed context
    is inferred from them, not from the derived ones.
    """
    config = options.config or CompactionConfig()
    model = ModelConfig(
        model="replay", context_window=options.window, max_output_tokens=options.max_output_tokens
    )
    budget = input_budget(options.window, model.max_output_tokens)
    count = tokens or MessageTokens(options.tokenizer)
    resolved = resolve_fixed_context(
        fixed_from or session, options.fixed_tokens, count, count.fixed
    )
    report = SessionReport(
        session.name,
        options.policy,
        options.window,
        budget,
        fixed_tokens=resolved.tokens,
        fixed_source=resolved.source,
        recorded_fixed_tokens=resolved.recorded_tokens,
        compaction_line=int(config.compact_ratio * budget),
        # Why the fixed context is what it is, when that needs saying (a
        # compaction sub-agent's transcript): report.json and the table show it.
        warnings=(resolved.note,) if resolved.note else (),
    )
    too_small = window_too_small(resolved.tokens, resolved.source, budget)
    if too_small is not None:
        return replace(report, failure=too_small)
    transcript_path.parent.mkdir(parents=True, exist_ok=True)
    if transcript_path.exists():
        transcript_path.unlink()
    store = JsonlTranscriptStore.create(transcript_path, SessionRecord(session.name, "replay"))
    pipeline = ContextPipeline(
        store,
        config,
        model=model,
        workspace=transcript_path.parent,
        tool_effects=KNOWN_READ_ONLY_TOOLS,
        clock=lambda: 0.0,  # replays run in no time; micro compact needs real idle time
        summarizer=options.summarizer,
        artifacts_dir=transcript_path.with_suffix(""),
    )
    replay = _Replay(pipeline, options.policy, resolved, budget, count, on_request)
    try:
        failure = await replay.run(session.messages)
        pipeline.end_turn()
    finally:
        pipeline.close()
    return replace(
        report,
        requests=tuple(replay.metrics),
        failure=failure,
        refused_tokens=replay.refused_tokens,
        transcript=str(transcript_path),
    )


_SOURCE_WORDS: dict[FixedSource, str] = {
    "recorded": "as recorded",
    "usage": "inferred from the recorded usage",
    "default": "the format's default",
    "flag": "set by --fixed-tokens",
}


def window_too_small(fixed_tokens: int, source: FixedSource, budget: int) -> str | None:
    """Why no request of the session can be sent in the window, if none can.

    Every request carries the system prompt and tool schemas, and no
    compaction can shrink them: when they alone reach the input budget,
    nothing fits. Anything smaller is for the pipeline to handle (or refuse).
    """
    if fixed_tokens < budget:
        return None
    return (
        f"window too small: the system prompt and tool schemas alone take "
        f"{fixed_tokens:,} tokens ({_SOURCE_WORDS[source]}) of the {budget:,}-token input budget"
    )


class _Replay:
    """The state of one replay: the pipeline and the previous request."""

    def __init__(
        self,
        pipeline: ContextPipeline,
        policy: Policy,
        fixed: ResolvedFixedContext,
        budget: int,
        count: MessageTokens,
        on_request: Callable[[RequestMetrics], None] | None,
    ) -> None:
        self.pipeline = pipeline
        self.policy = policy
        self.fixed: FixedContext = fixed.context
        self.fixed_true = fixed.tokens
        self.budget = budget
        self.count = count
        self.metrics: list[RequestMetrics] = []
        #: The exact size of the request the pipeline refused to send, if it refused one.
        self.refused_tokens: int | None = None
        self._previous: Sequence[Message] = ()
        self._on_request = on_request
        #: What the session established so far, for the continuity checks.
        self.so_far = SessionSoFar(KNOWN_READ_ONLY_TOOLS)

    def add(self, message: Message) -> None:
        self.pipeline.add(message)
        self.so_far.add(message)

    async def run(self, messages: Sequence[Message]) -> str | None:
        """Replay ``messages`` in order; the reason it stopped early, if it did."""
        pending: list[Message] = []
        for message in messages:
            if message.role != "assistant":
                pending.append(message)
                continue
            try:
                await self.request(pending, message)
            except RequestTooLargeError as exc:
                # The pipeline refused to send it, so the session cannot go on. Its
                # exact size tells a real "too large" from an over-estimate.
                self.refused_tokens = self._request_tokens(self.pipeline.messages)
                return (
                    f"request {len(self.metrics) + 1} not sent (exact size "
                    f"{self.refused_tokens:,} tokens, input budget {self.budget:,}): {exc}"
                )
            pending = []
        self.feed(pending)
        return None

    def feed(self, messages: Sequence[Message]) -> None:
        """Append user input and tool results; Cairn budgets each round of results."""
        i = 0
        while i < len(messages):
            if messages[i].role != "tool":
                self.add(messages[i])
                i += 1
                continue
            j = i
            while j < len(messages) and messages[j].role == "tool":
                j += 1
            if self.policy == "none":
                for result in messages[i:j]:
                    self.add(result)
            else:
                # As budgeted: what the model saw of them is what must survive.
                for result in self.pipeline.add_tool_results(messages[i:j]):
                    self.so_far.add(result)
            i = j

    async def request(self, pending: Sequence[Message], answer: Message) -> None:
        self.feed(pending)
        started = time.perf_counter()
        check: CheckResult | None = None
        unchecked: int | None = None
        if self.policy == "cairn":
            unchecked = self._request_tokens(self.pipeline.messages)
            check = await self.pipeline.check_and_compact(self.fixed)
            # The projection the request goes out with: the one the check's snip,
            # compaction and over-budget refusal were decided on (re-projected
            # after a compaction). Its error against ``true_tokens`` is the
            # report's projection error and worst under-estimate.
            projected = check.after
        else:
            projected = self.pipeline.project(self.fixed)
        elapsed = time.perf_counter() - started

        sent = list(self.pipeline.messages)
        true_tokens = self._request_tokens(sent)
        shared, anthropic = self._prompt_cache(sent)
        self._previous = sent

        # Before the answer joins: the context right after the check's compaction.
        continuity = self._continuity(sent) if check and check.compaction else None
        completion = self.count(answer)
        usage = Usage(true_tokens, completion, true_tokens + completion)
        self.add(replace(answer, meta=replace(answer.meta, usage=usage)))

        outcome = check.compaction if check else None
        trigger = unchecked
        if self.policy == "post-response":
            # The old behaviour: judge the response's usage after it arrived.
            started = time.perf_counter()
            outcome = await self._compact_after(usage)
            elapsed += time.perf_counter() - started
            trigger = usage.context_tokens
            if outcome is not None:
                # The answer's calls get their results only after this compaction.
                awaiting = [c.id for c in answer.tool_calls]
                continuity = self._continuity(self.pipeline.messages, awaiting)
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
            openai_cache_read=openai_cache_read(shared),
            anthropic_cache_read=anthropic.read,
            anthropic_cache_write=anthropic.written,
            pipeline_seconds=elapsed,
            trigger_tokens=trigger if outcome else None,
            continuity=continuity,
        )
        self.metrics.append(metrics)
        if self._on_request is not None:
            self._on_request(metrics)

    async def _compact_after(self, usage: Usage) -> CompactionOutcome | None:
        config = self.pipeline.config
        if usage.context_tokens < config.compact_ratio * self.budget:
            return None
        try:
            return await self.pipeline.compact(self.fixed)
        except CompactionFailedError:
            # Nothing it could compact yet: the old check simply went on.
            return None

    def _continuity(self, context: Sequence[Message], awaiting: Sequence[str] = ()) -> Continuity:
        return check_continuity(context, self.so_far.expected(awaiting), read_saved)

    def _request_tokens(self, messages: Sequence[Message]) -> int:
        return self.fixed_true + sum(self.count(m) for m in messages) + REPLY_PRIMING_TOKENS

    def _prompt_cache(self, messages: Sequence[Message]) -> tuple[int, CacheUse]:
        """The prefix shared with the previous request, in tokens (0 for the first), and
        what Anthropic's cache reads and writes of this one (``prompt_cache``)."""
        sizes = [self.fixed_true]
        for message in messages:
            sizes.append(sizes[-1] + self.count(message))
        if not self._previous:
            return 0, anthropic_cache_use((), 0, messages, sizes.__getitem__)
        shared = 0
        for before, now in zip(self._previous, messages, strict=False):
            if before is not now and before != now:
                break
            shared += 1
        previous = anthropic_breakpoints(self._previous)
        return sizes[shared], anthropic_cache_use(previous, shared, messages, sizes.__getitem__)


def read_saved(path: str) -> str | None:
    """The text of a file the checkpoint saved an oversized user message to, if readable."""
    try:
        # Written with ``surrogatepass``: read back the same way, byte for byte.
        return Path(path).read_bytes().decode("utf-8", "surrogatepass")
    except (OSError, UnicodeDecodeError):
        return None


async def replay_sessions(
    sessions: Sequence[RecordedSession],
    options: ReplayOptions,
    transcripts: Path,
    on_request: Callable[[RequestMetrics], None] | None = None,
    fixed_from: Sequence[RecordedSession] | None = None,
) -> list[SessionReport]:
    """Replay sessions one after another; transcripts go to ``transcripts/``.

    One session is written to ``transcript.jsonl``; several to
    ``transcript-<n>.jsonl`` in session order. ``fixed_from``: the recordings
    the sessions were derived from, in the same order (see ``replay_session``).
    """
    if fixed_from is not None and len(fixed_from) != len(sessions):
        raise ValueError("fixed_from needs one recording per replayed session")
    tokens = MessageTokens(options.tokenizer)
    reports = []
    for n, session in enumerate(sessions):
        name = "transcript.jsonl" if len(sessions) == 1 else f"transcript-{n}.jsonl"
        origin = fixed_from[n] if fixed_from is not None else None
        reports.append(
            await replay_session(session, options, transcripts / name, tokens, on_request, origin)
        )
    return reports


def compaction_records(path: Path) -> list[CompactionRecord]:
    """The compaction records of a replayed transcript (to cross-check a report)."""
    from cairn.store.jsonl.reader import read_transcript

    return [r for r in read_transcript(path).records if isinstance(r, CompactionRecord)]
