"""The context index against a from-scratch recomputation, after every step (issue 17).

``check_and_compact`` asks ``ContextIndex`` instead of walking the history;
a stale index would silently change what is snipped, projected and sent.
Random sessions — user messages, tool rounds of random sizes (some parallel,
some answered late, some failing), responses with usage, checks, idle gaps
that trigger micro compact, ``/compact``, reactive compaction and resumes —
run through a pipeline whose index checks each of its answers against the
pure rules (``cairn.context.snip``) at the moment the check uses it. After
every step, the whole index is compared with the rules on the current view,
the projection with the tracker counting every message itself, the view with
the one the transcript rebuilds, and no round may be split.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cairn.context import (
    CompactionConfig,
    ContextPipeline,
    FallbackSummarizer,
    FixedContext,
    Summarizer,
    Summary,
    SummaryRequest,
)
from cairn.context.effects import ToolEffect
from cairn.context.index import ContextIndex
from cairn.context.pipeline import (
    CompactionFailedError,
    ContextWindowExceededError,
    RequestTooLargeError,
)
from cairn.context.snip import (
    apply_edits,
    micro_compact_edits,
    snip_edits,
    tokens_saved,
    tool_turns,
)
from cairn.messages import (
    Message,
    ToolCall,
    Usage,
    assistant,
    find_orphans,
    system,
    tool_result,
    user,
)
from cairn.provider import ContextLimitError, ModelConfig
from cairn.store import read_transcript
from cairn.store.records import ContentEdit, ContextEditRecord

EFFECTS: dict[str, ToolEffect] = {"read_file": "read_only", "grep": "read_only", "bash": "write"}
TOOLS = ("read_file", "grep", "bash", "edit_file")  # edit_file: undeclared, counts as writing
FIXED = FixedContext((system("You are a coding agent."),))
#: Excess values every step plans a snip for: one token, some, everything.
EXCESSES = (1, 700, 5_000, 10**9)


class CheckedIndex(ContextIndex):
    """The pipeline's index, each answer compared with the rules on the same view."""

    def __init__(
        self, source: Callable[[], Sequence[Message]], count: Callable[[Message], int]
    ) -> None:
        super().__init__(source, count, EFFECTS)
        self.source = source
        self.count = count
        #: How many answers were compared so far.
        self.answers = 0

    def tokens_from(self, start: int) -> int:
        got = super().tokens_from(start)
        assert got == sum(self.count(m) for m in self.source()[max(start, 0) :])
        self.answers += 1
        return got

    def tokens_saved(self, edits: Sequence[ContentEdit]) -> int:
        got = super().tokens_saved(edits)
        assert got == tokens_saved(self.source(), edits, self.count)
        self.answers += 1
        return got

    def micro_compact_edits(self, keep_turns: int = 3) -> list[ContentEdit]:
        got = super().micro_compact_edits(keep_turns)
        assert got == micro_compact_edits(self.source(), keep_turns)
        self.answers += 1
        return got

    def snip_edits(
        self, *, excess: int, after: Sequence[ContentEdit] = (), keep_turns: int = 3
    ) -> tuple[list[ContentEdit], int]:
        got = super().snip_edits(excess=excess, after=after, keep_turns=keep_turns)
        view = apply_edits(self.source(), after)
        expected = snip_edits(
            view, excess=excess, effects=EFFECTS, count=self.count, keep_turns=keep_turns
        )
        assert got == expected
        self.answers += 1
        return got


class ScriptedModel:
    """Stands for an LLM summarizer (so a snip may replace its compaction); deterministic."""

    async def summarize(self, request: SummaryRequest) -> Summary:
        return await FallbackSummarizer().summarize(request)


# ---------------------------------------------------------------------------
# What the session does


@dataclass(frozen=True)
class Say:
    chars: int


@dataclass(frozen=True)
class Act:
    """A tool round: its calls (tool, result size, failed); late: answered after a look."""

    calls: tuple[tuple[str, int, bool], ...]
    late: bool


@dataclass(frozen=True)
class Respond:
    completion: int
    tool_call: bool


@dataclass(frozen=True)
class Check:
    pass


@dataclass(frozen=True)
class Idle:
    seconds: float


@dataclass(frozen=True)
class Manual:
    pass


@dataclass(frozen=True)
class Reactive:
    pass


@dataclass(frozen=True)
class Resume:
    pass


def weighted(*choices: tuple[int, st.SearchStrategy[object]]) -> st.SearchStrategy[object]:
    """One of the strategies, each as often as its weight."""
    table = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.integers(0, len(table) - 1).flatmap(lambda i: table[i])


sizes = st.sampled_from([0, 30, 300, 1_500, 6_000, 20_000, 60_000])
act = st.builds(
    Act,
    st.lists(
        st.tuples(st.sampled_from(TOOLS), sizes, st.integers(0, 5).map(lambda n: n == 0)),
        min_size=1,
        max_size=3,
    ).map(tuple),
    st.booleans(),
)
step = weighted(
    (2, st.builds(Say, st.sampled_from([5, 200, 2_000, 12_000]))),
    (6, act),
    (3, st.builds(Respond, st.integers(1, 500), st.booleans())),
    (5, st.just(Check())),
    (2, st.builds(Idle, st.sampled_from([5.0, 61.0, 3_600.0]))),
    (1, st.just(Manual())),
    (1, st.just(Reactive())),
    (1, st.just(Resume())),
)


def text(chars: int, seed: int) -> str:
    line = f"line {seed}: the loader reads every record and checks its shape\n"
    return (line * (chars // len(line) + 1))[:chars]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Session:
    tmp: Path
    window: int
    summarizer: Summarizer
    clock: Clock

    def open(self) -> ContextPipeline:
        p = ContextPipeline.open(
            self.tmp / "ws",
            CompactionConfig(),
            model=ModelConfig(model="m", context_window=self.window),
            session_id="s",
            home=self.tmp / "home",
            tool_effects=EFFECTS,
            summarizer=self.summarizer,
            clock=self.clock,
        )
        # The index under test replaces the pipeline's own, before any check.
        p._index = CheckedIndex(lambda: p._store.api_view.messages, p._count)
        return p


def run_step(p: ContextPipeline, session: Session, action: object, n: int) -> ContextPipeline:
    match action:
        case Say(chars=chars):
            p.add(user(text(chars, n) or "go on"))
        case Act(calls=calls, late=late):
            tool_calls = [
                ToolCall(f"c{n}_{i}", name, f'{{"path": "src/m{n}_{i}.py"}}')
                for i, (name, _, _) in enumerate(calls)
            ]
            p.add(assistant("looking", tool_calls))
            results = [
                tool_result(call.id, text(size, n), name=call.name, error=error)
                for call, (_, size, error) in zip(tool_calls, calls, strict=True)
            ]
            if late:
                # A look at the context while the round waits for its results.
                p.add_tool_results(results[:-1])
                p.project(FIXED)
                p.answer_open_calls("[cancelled]")
            else:
                p.add_tool_results(results)
        case Respond(completion=completion, tool_call=tool_call):
            prompt = p.project(FIXED).tokens or 0
            usage = Usage(prompt, completion, prompt + completion)
            if tool_call:
                call = ToolCall(f"r{n}", "read_file", f'{{"path": "src/r{n}.py"}}')
                p.add(assistant("reading", [call], usage=usage))
                p.add_tool_results([tool_result(call.id, text(900, n), name=call.name)])
            else:
                p.add(assistant("ok", usage=usage))
        case Check():
            index = p._index
            assert isinstance(index, CheckedIndex)
            answers = index.answers
            try:
                result = asyncio.run(p.check_and_compact(FIXED))
            except RequestTooLargeError:
                event("refused")
            else:
                # The check asked the index under test (and each answer was compared).
                assert index.answers > answers
                if result.compaction is not None:
                    event("auto compaction")
                elif result.edits:
                    records = read_transcript(p.transcript_path).records
                    edit = next(r for r in reversed(records) if isinstance(r, ContextEditRecord))
                    for reason in sorted({e.reason for e in edit.edits}):
                        event(f"edits: {reason}")
        case Idle(seconds=seconds):
            session.clock.now += seconds
        case Manual():
            try:
                if asyncio.run(p.compact(FIXED)) is not None:
                    event("manual compaction")
            except CompactionFailedError:
                pass
        case Reactive():
            try:
                asyncio.run(p.recover_from_context_limit(ContextLimitError("too long"), FIXED))
                event("reactive compaction")
            except (ContextWindowExceededError, RequestTooLargeError):
                pass
        case Resume():
            p.close()
            return session.open()
    return p


def assert_matches_scratch(p: ContextPipeline) -> None:
    index = p._index
    messages = list(p.messages)
    count = p._count
    assert index.counts() == [count(m) for m in messages]
    assert index.total == sum(count(m) for m in messages)
    assert index.tool_turns() == tool_turns(messages)
    micro = micro_compact_edits(messages)
    assert index.micro_compact_edits() == micro
    assert index.tokens_saved(micro) == tokens_saved(messages, micro, count)
    for excess in EXCESSES:
        assert index.snip_edits(excess=excess) == snip_edits(
            messages, excess=excess, effects=EFFECTS, count=count
        )
        assert index.snip_edits(excess=excess, after=micro) == snip_edits(
            apply_edits(messages, micro), excess=excess, effects=EFFECTS, count=count
        )
    # The projection as the tracker computes it counting every message itself.
    tracker = p._tracker
    fixed_tokens = p.fixed_tokens(FIXED)
    assert p.project(FIXED) == tracker.project(messages, fixed_tokens, p._revision)
    # What the next request sends is what the transcript rebuilds.
    assert read_transcript(p.transcript_path).api().messages == messages
    assert not find_orphans(messages)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(step, min_size=25, max_size=80),
    # Small windows more often: there the checks snip and compact most.
    st.one_of(st.integers(8_192, 32_768), st.integers(8_192, 131_072)),
    st.booleans(),
)
def test_the_index_always_equals_a_recomputation(
    actions: list[object], window: int, model: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        summarizer: Summarizer = ScriptedModel() if model else FallbackSummarizer()
        session = Session(Path(tmp), window, summarizer, Clock())
        p = session.open()
        p.add(user("fix the loader"))
        for n, action in enumerate(actions):
            p = run_step(p, session, action, n)
            assert_matches_scratch(p)
        p.close()
