"""The budget promise as a property over long generated sessions (issue 9).

Sessions of every shape — windows from 8k to 128k, a fixed context with real
tool-schema JSON (which the estimate over-counts), hundreds of rounds, short
messages, pastes bigger than the window, huge tool outputs, long answers and
huge tool-call arguments, a summarizer that fails now and then under both
failure policies — are played against the pipeline with a provider that
counts every request with an exact tokenizer. Whatever happens:

- no request whose projection or whose exact size is over the input budget
  is ever sent (the pipeline refuses it instead, and the context stays);
- every compaction's replacement fits half the input budget;
- no tool call is ever separated from its results.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cairn.context import (
    CompactionConfig,
    ContextPipeline,
    FallbackSummarizer,
    FixedContext,
    OnFailure,
    Summary,
    SummaryRequest,
)
from cairn.context.budget import input_budget
from cairn.context.effects import ToolEffect
from cairn.context.pipeline import RequestTooLargeError
from cairn.context.summarizer import SummarizerError
from cairn.messages import Message, ToolCall, Usage, assistant, find_orphans, system, user
from cairn.messages import tool_result as result_of
from cairn.provider import ModelConfig
from cairn.tokens import get_tokenizer, message_counter

EFFECTS: dict[str, ToolEffect] = {
    "read_file": "read_only",
    "grep": "read_only",
    "write_file": "write",
    "bash": "write",
}
WORDS = [
    "the",
    "export",
    "drops",
    "rows",
    "with",
    "unicode",
    "names",
    "so",
    "we",
    "encode",
    "them",
    "before",
    "writing",
    "and",
    "check",
    "the",
    "test",
    "suite",
    "again",
    "after",
    "each",
    "change",
    "to",
    "the",
    "parser",
    "module",
]
CODE = [
    "def parse(row):",
    "    return row['name'].strip()",
    "for i, item in enumerate(items):",
    "    total += item.price * item.quantity",
    "if not path.exists(): raise FileNotFoundError(path)",
]
CJK = "修复导出时丢失的行并运行测试检查结果"

exact_count = message_counter("cl100k")
cl100k = get_tokenizer("cl100k")


def text(rng: random.Random, tokens: int, kind: str) -> str:
    """About ``tokens`` tokens of prose, code or Chinese."""
    if kind == "code":
        return "\n".join(rng.choice(CODE) for _ in range(max(1, tokens // 9)))
    if kind == "cjk":
        return "".join(rng.choice(CJK) for _ in range(max(1, tokens)))
    return " ".join(rng.choice(WORDS) for _ in range(max(1, tokens * 3 // 4)))


def tool_schemas(count: int) -> tuple[dict[str, Any], ...]:
    return tuple(
        {
            "type": "function",
            "function": {
                "name": f"tool_{n}",
                "description": f"Run step {n} of the build on a file of the workspace.",
                "parameters": {
                    "type": "object",
                    "properties": {"path": {"type": "string", "description": "A file path."}},
                    "required": ["path"],
                },
            },
        }
        for n in range(count)
    )


class FlakySummarizer:
    """The model-free planner behind a model that fails on a fixed schedule."""

    def __init__(self, failures: frozenset[int]) -> None:
        self.failures = failures
        self.calls = 0

    async def summarize(self, request: SummaryRequest) -> Summary:
        self.calls += 1
        if self.calls in self.failures:
            raise SummarizerError("the model wrote no summary")
        return await FallbackSummarizer().summarize(request)


@dataclass(frozen=True)
class Shape:
    window: int
    max_output_tokens: int | None
    tools: int
    rounds: int
    on_failure: OnFailure
    failures: frozenset[int]
    seed: int
    #: The system prompt's share of the input budget (0: a short one). Agents'
    #: own prompts and tools take a third of an 8k budget or more.
    system_share: float = 0.0


shapes = st.builds(
    Shape,
    window=st.sampled_from([8_192, 12_288, 16_384, 32_768, 65_536, 131_072]),
    max_output_tokens=st.sampled_from([None, 1_024, 2_048]),
    tools=st.integers(0, 12),
    rounds=st.integers(60, 240),
    on_failure=st.sampled_from(["fallback", "skip"]),
    failures=st.frozensets(st.integers(1, 12), max_size=6),
    seed=st.integers(0, 2**32 - 1),
    system_share=st.sampled_from([0.0, 0.0, 0.2, 0.33, 0.45, 0.55]),
)


class Provider:
    """Counts each request as a provider would: exactly, fixed context included."""

    def __init__(self, fixed: FixedContext) -> None:
        tools = cl100k.count(orjson.dumps(list(fixed.tools)).decode()) if fixed.tools else 0
        self.fixed = sum(exact_count(m) for m in fixed.system) + tools
        self._counts: dict[str, int] = {}

    def size(self, messages: list[Message]) -> int:
        total = self.fixed
        for m in messages:
            # A message's content never changes under the same id, except by snip,
            # which only shortens it: re-count what changed.
            key = f"{m.id}:{len(m.text)}"
            if key not in self._counts:
                self._counts[key] = exact_count(m)
            total += self._counts[key]
        return total


def play(shape: Shape, home: Path) -> dict[str, int]:
    rng = random.Random(shape.seed)
    window = shape.window
    budget = input_budget(window, shape.max_output_tokens)
    prompt_tokens = max(150, int(shape.system_share * budget))
    fixed = FixedContext(
        (system("You are a coding agent. " + text(rng, prompt_tokens, "prose")),),
        tool_schemas(shape.tools),
    )
    p = ContextPipeline.open(
        home / "ws",
        CompactionConfig(on_failure=shape.on_failure),
        model=ModelConfig(
            model="m", context_window=window, max_output_tokens=shape.max_output_tokens
        ),
        session_id="s",
        home=home,
        tool_effects=EFFECTS,
        summarizer=FlakySummarizer(shape.failures),
        clock=lambda: 0.0,
    )
    provider = Provider(fixed)
    stats = {"requests": 0, "refused": 0, "compactions": 0}
    try:
        for n in range(shape.rounds):
            roll = rng.random()
            if roll < 0.04:
                paste = text(rng, rng.randint(budget // 2, 2 * budget), rng.choice(["code", "cjk"]))
                p.add(user("Here is the spec:\n" + paste))
            else:
                kind = rng.choice(["prose", "prose", "code", "cjk"])
                p.add(user(text(rng, rng.randint(5, 150), kind)))
            for step in range(rng.randint(1, 3)):
                messages_before = list(p.messages)
                try:
                    check = asyncio.run(p.check_and_compact(fixed))
                except RequestTooLargeError as refused:
                    # Not sent, and nothing changed: the turn fails with the sizes.
                    assert refused.tokens > refused.budget == budget
                    assert list(p.messages) == messages_before
                    stats["refused"] += 1
                    break
                sent = list(p.messages)
                assert not find_orphans(sent)
                projected = check.after.tokens or 0
                exact = provider.size(sent)
                # The promise: never a request known, or truly, over the budget.
                assert projected <= budget, (n, step, projected, budget)
                assert exact <= budget, (n, step, exact, projected, budget)
                stats["requests"] += 1
                if check.compaction is not None:
                    stats["compactions"] += 1
                    fixed_tokens = p.fixed_tokens(fixed)
                    replacement = check.compaction.post_tokens - fixed_tokens
                    assert replacement <= budget // 2, (replacement, budget)
                    share = budget - fixed_tokens
                    room = max((share - fixed_tokens) // 2, share // 4)
                    if fixed_tokens < 0.6 * budget and replacement <= room:
                        # Within its target it lands below the handoff line: no
                        # compaction loop, and no handoff right after it. (Only a
                        # mandatory block bigger than the target — the user's
                        # latest message and constraints, never dropped — raises it.)
                        assert check.compaction.post_tokens < 0.7 * budget, (
                            check.compaction.post_tokens,
                            fixed_tokens,
                            budget,
                        )
                        assert check.after.phase == "below_handoff"
                answer = respond(p, rng, budget, n, step)
                p.add(
                    answer_with_usage(answer, exact, exact_count(answer)),
                )
                if answer.tool_calls:
                    results = [
                        result_of(
                            c.id,
                            text(
                                rng,
                                rng.choice([20, 300, 3_000, budget]),
                                rng.choice(["code", "prose"]),
                            ),
                        )
                        for c in answer.tool_calls
                    ]
                    p.add_tool_results(results)
                else:
                    break
            assert not find_orphans(list(p.messages))
    finally:
        p.close()
    return stats


def respond(p: ContextPipeline, rng: random.Random, budget: int, n: int, step: int) -> Message:
    roll = rng.random()
    if roll < 0.05:
        # A long answer: a whole file written in one call.
        body = text(rng, rng.randint(budget // 8, budget // 4), "code")
        args = orjson.dumps({"path": f"src/m{n}.py", "content": body}).decode()
        return assistant("Writing the module.", [ToolCall(f"w{n}_{step}", "write_file", args)])
    if roll < 0.55:
        calls = [
            ToolCall(f"c{n}_{step}_{i}", rng.choice(sorted(EFFECTS)), f'{{"path": "f{i}.py"}}')
            for i in range(rng.randint(1, 3))
        ]
        return assistant(text(rng, rng.randint(5, 60), "prose"), calls)
    return assistant(text(rng, rng.randint(20, 400), "prose"))


def answer_with_usage(answer: Message, prompt: int, completion: int) -> Message:
    return Message(
        role=answer.role,
        content=answer.content,
        id=answer.id,
        tool_calls=answer.tool_calls,
        meta=type(answer.meta)(usage=Usage(prompt, completion, prompt + completion)),
    )


@settings(
    max_examples=24,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(shapes)
def test_no_request_over_the_budget_ever_in_long_generated_sessions(shape: Shape) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        stats = play(shape, Path(tmp))
    # A huge opening paste with every summary failing under on_failure="skip" is
    # refused at every request (each refusal checked above): that is a run too.
    assert stats["requests"] + stats["refused"] > 0
    event(f"window {shape.window}")
    if stats["compactions"]:
        event("compacted")
    if stats["refused"]:
        event("refused")


def test_a_session_of_hundreds_of_rounds_at_8k_compacts_and_never_overflows() -> None:
    """One long shape pinned down, so a regression cannot hide behind the examples drawn."""
    with tempfile.TemporaryDirectory() as tmp:
        shape = Shape(8_192, None, 8, 300, "fallback", frozenset({2, 5}), seed=7)
        stats = play(shape, Path(tmp))
    assert stats["requests"] >= 300 and stats["compactions"] >= 5
