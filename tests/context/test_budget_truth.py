"""Budget truth (issue 9): no request known to be over the input budget is ever sent.

One regression test per defect found on unseen real sessions: the anti-loop
floor, forced compaction and the refusal, compactions that would grow the
context, the fixed context's calibration, the anchor after a resume, and the
compaction fork's own size. Each failed on the code before its fix.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from cairn.agent.runtime import Runtime
from cairn.context import (
    CompactionConfig,
    ContextPipeline,
    FallbackSummarizer,
    FixedContext,
    Summary,
    SummaryRequest,
)
from cairn.context.calibration import (
    FixedCalibration,
    calibrated_tokens,
    measure,
    sharper,
)
from cairn.context.effects import ToolEffect
from cairn.context.llm_summarizer import (
    LLMSummarizer,
    check_gates,
    fit_fork_input,
    nothing_to_compact,
    shrink,
)
from cairn.context.pipeline import RequestTooLargeError
from cairn.messages import (
    Message,
    MessageMeta,
    ToolCall,
    Usage,
    assistant,
    find_orphans,
    system,
    tool_result,
    user,
)
from cairn.provider import ModelConfig, OpenAIProvider
from cairn.store import CompactionRecord, read_transcript
from cairn.tokens import estimate_message_tokens, estimate_tokens, get_tokenizer
from support.openai_server import (
    OpenAIServer,
    Reply,
)

WINDOW = 32_768  # reserve 8,192 → input budget 24,576
BUDGET = 24_576
LINE = 0.8 * BUDGET
SMALL = FixedContext((system("You are a careful coding agent."),))
T = TypeVar("T")
EFFECTS: dict[str, ToolEffect] = {"read_file": "read_only", "bash": "write", "write_file": "write"}
#: Schemas like real tool definitions: the seeds' ½-per-character rule over-counts them.
TOOLS: tuple[dict[str, Any], ...] = tuple(
    {
        "type": "function",
        "function": {
            "name": f"tool_{n}",
            "description": f"Does task number {n} on the files of the workspace and reports back.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "A path in the workspace."},
                    "limit": {"type": "integer", "description": "How many lines at most."},
                },
                "required": ["path"],
            },
        },
    }
    for n in range(40)
)
SCHEMAS = FixedContext((system("You are a careful coding agent."),), TOOLS)


def make(
    tmp_path: Path,
    *,
    window: int | None = WINDOW,
    max_output_tokens: int | None = None,
    summarizer: Any = None,
    session_id: str = "s1",
    **config: Any,
) -> ContextPipeline:
    return ContextPipeline.open(
        tmp_path / "ws",
        CompactionConfig.model_validate(config),
        model=ModelConfig(model="m", context_window=window, max_output_tokens=max_output_tokens),
        session_id=session_id,
        home=tmp_path / "home",
        tool_effects=EFFECTS,
        summarizer=summarizer,
        clock=lambda: 1_000_000.0,
    )


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def big_system(tokens: int) -> FixedContext:
    """A fixed context whose estimate is about ``tokens``."""
    return FixedContext((system("rule " * (tokens * 4 // 5)),))


def tool_round(p: ContextPipeline, text: str, name: str = "bash") -> None:
    call = ToolCall(f"call_{len(p.messages)}", name, '{"command": "make check"}')
    p.add(assistant(None, [call]))
    p.add(tool_result(call.id, text))


def respond(p: ContextPipeline, prompt: int, completion: int = 40, text: str = "ok") -> Message:
    message = assistant(text, usage=Usage(prompt, completion, prompt + completion))
    p.add(message)
    return message


def history(p: ContextPipeline, rounds: int = 8) -> None:
    """Ordinary work: a task, then tool rounds with mid-sized outputs."""
    p.add(user("Fix the failing CSV export; keep the public API."))
    for n in range(rounds):
        tool_round(p, f"line {n} of the build output, nothing unusual\n" * 60)


def talk(p: ContextPipeline, rounds: int, words: int = 300) -> None:
    """Exchanges of plain text: nothing snip could elide."""
    for n in range(rounds):
        p.add(user(f"question {n}: and what about module {n}?"))
        p.add(assistant(f"module {n} reads the rows and writes them out " * (words // 9)))


def transcript_bytes(p: ContextPipeline) -> bytes:
    return p.transcript_path.read_bytes()


# ---------------------------------------------------------------------------
# Item 2: the anti-loop floor, and no request over the budget whatever a guard says


def test_a_long_answer_after_a_compaction_does_not_block_the_next_one(tmp_path: Path) -> None:
    """Regression: the floor was prompt + completion, so one 16k-token answer looked
    like a compaction that failed and the next, needed, compaction was refused."""
    p = make(tmp_path)
    history(p)
    tool_round(p, "build log line\n" * 5_000)
    first = run(p.check_and_compact(SMALL))
    assert first.compaction is not None
    post = first.after.tokens or 0
    assert post < LINE
    # The provider: the compacted prompt is small; the answer (a big write_file) is
    # long enough that prompt + completion is over the line.
    respond(p, prompt=post, completion=int(LINE) - post + 1_000)
    tool_round(p, "written\n" * 500)  # a little more: within the old 10 % regrowth margin
    second = run(p.check_and_compact(SMALL))
    assert second.before.phase == "compaction_due"
    assert not any("could not get under" in w for w in second.warnings)
    assert second.compaction is not None


def test_a_request_over_the_budget_is_compacted_even_before_a_response(tmp_path: Path) -> None:
    """Regression: 'compaction already ran' let a request 25k over the budget go out."""
    p = make(tmp_path)
    history(p)
    tool_round(p, "build log line\n" * 5_000)
    assert run(p.check_and_compact(SMALL)).compaction is not None
    # The host adds more before any response (a library loop, tool results of a round).
    tool_round(p, "another huge log line\n" * 6_000)
    assert (p.project(SMALL).tokens or 0) > BUDGET
    second = run(p.check_and_compact(SMALL))
    assert any("compacting anyway" in w for w in second.warnings)
    assert second.compaction is not None
    assert (second.after.tokens or 0) <= BUDGET


def test_item1_a_compaction_that_cannot_get_under_the_line_says_so(tmp_path: Path) -> None:
    """Issue 25 item 1: the system prompt alone takes the context past the line; the
    compaction runs, helps, cannot get under the line — and says so, with the sizes."""
    fixed = big_system(int(LINE) + 300)
    p = make(tmp_path)
    history(p, rounds=4)
    result = run(p.check_and_compact(fixed))
    assert result.compaction is not None
    after = result.after.tokens or 0
    assert LINE <= after <= BUDGET, result
    said = [w for w in result.warnings if "still at or over the compaction line" in w]
    assert said and f"{after:,} tokens" in said[0], result.warnings


def test_a_request_that_cannot_fit_is_refused_with_the_sizes_and_nothing_is_lost(
    tmp_path: Path,
) -> None:
    """The fixed context alone leaves no room: the turn fails, the transcript stays."""
    fixed = big_system(BUDGET + 500)
    p = make(tmp_path)
    p.add(user("hello"))
    before = transcript_bytes(p)
    messages = list(p.messages)
    with pytest.raises(RequestTooLargeError) as caught:
        run(p.check_and_compact(fixed))
    error = caught.value
    assert error.budget == BUDGET and error.tokens > BUDGET
    assert error.fixed_tokens == fixed.tokens
    text = str(error)
    assert f"{BUDGET:,}-token input budget" in text and f"{fixed.tokens:,}" in text
    assert "nothing was lost" in text and "CAIRN_CONTEXT_WINDOW" in text
    assert transcript_bytes(p) == before and list(p.messages) == messages


def test_a_floor_just_under_the_budget_cannot_hold_back_a_request_over_it(
    tmp_path: Path,
) -> None:
    """Regression: after a compaction stuck at 23k, growth below the 10 % regrowth
    margin left the guard closed and a request over the budget went out."""
    fixed = big_system(21_500)
    p = make(tmp_path)
    history(p, rounds=4)
    tool_round(p, "build log line\n" * 1_500)
    first = run(p.check_and_compact(fixed))
    assert first.compaction is not None
    post = first.after.tokens or 0
    assert LINE <= post < BUDGET - 300
    respond(p, prompt=post)  # the provider confirms: still over the line
    # "and also " is 9 characters, about 2¼ estimated tokens: just over the budget.
    p.add(user("and also " * (4 * (BUDGET - post + 60) // 9 + 1)))
    projected = p.project(fixed).tokens or 0
    assert BUDGET < projected < post + 0.1 * BUDGET
    try:
        second = run(p.check_and_compact(fixed))
    except RequestTooLargeError as exc:
        assert exc.budget == BUDGET  # refused: not sent
    else:
        assert any("compacting anyway" in w for w in second.warnings)
        assert (second.after.tokens or 0) <= BUDGET


# ---------------------------------------------------------------------------
# Item 4: no compaction on the first request, none that grows the context


def test_the_first_request_in_an_8k_window_is_not_compacted_into_a_bigger_context(
    tmp_path: Path,
) -> None:
    """Regression: one user message at 8k was 'compacted' 4,236 → 4,500 and committed."""
    fixed = big_system(3_400)  # over the 3,276 compaction line of a 4,096 budget
    p = make(tmp_path, window=8_192)
    p.add(user("Add a --verbose flag to the CLI."))
    result = run(p.check_and_compact(fixed))
    assert result.before.phase == "compaction_due"
    assert result.compaction is None
    assert any("nothing to compact" in w for w in result.warnings)
    assert p.epoch == 0
    assert not [
        r for r in read_transcript(p.transcript_path).records if isinstance(r, CompactionRecord)
    ]


def test_a_compaction_whose_result_is_not_smaller_is_not_committed(tmp_path: Path) -> None:
    class Inflating:
        async def summarize(self, request: SummaryRequest) -> Summary:
            plan = await FallbackSummarizer().summarize(request)
            padding = user("padding " * 30_000)
            return Summary((*plan.replacement, padding), plan.summary, "llm")

    p = make(tmp_path, summarizer=Inflating())
    while (p.project(SMALL).tokens or 0) < LINE + 500:
        talk(p, rounds=1, words=500)
    respond(p, prompt=p.project(SMALL).tokens or 0)
    p.add(user("go on"))
    before = list(p.messages)
    result = run(p.check_and_compact(SMALL))
    assert result.compaction is None
    assert any("not smaller" in w for w in result.warnings), result.warnings
    assert list(p.messages) == before and p.epoch == 0


def test_nothing_to_compact_only_without_a_complete_round() -> None:
    """Issue 25 item 3/4: the kept tail shrinks instead (DESIGN §5.6)."""
    task = user("Fix it.")
    call = ToolCall("c1", "bash", "{}")
    rounds = [task, assistant(None, [call]), tool_result("c1", "ok")]
    assert not nothing_to_compact(rounds, on_demand=False)
    assert not nothing_to_compact([*rounds, assistant("done")], on_demand=False)
    assert not nothing_to_compact([user("paste " * 20_000)], on_demand=False)
    # A round still waiting for its results is no complete round.
    assert nothing_to_compact([assistant(None, [call])], on_demand=False)
    # The host's own messages are not conversation; a manual /compact re-summarizes them.
    block = Message("user", "the summary", meta=MessageMeta(synthetic=True))
    assert nothing_to_compact([block], on_demand=False)
    assert not nothing_to_compact([block], on_demand=True)
    assert nothing_to_compact([], on_demand=True)
    assert not nothing_to_compact([task], on_demand=True)


def test_the_gates_measure_the_whole_budget_not_what_the_fixed_context_leaves() -> None:
    """Regression: 'over half the window (0)' — the gate got the budget minus the fixed context."""
    assert check_gates(post=900, source=3_000, window=8_192, input_budget=4_096) is None
    failed = check_gates(post=2_500, source=3_000, window=8_192, input_budget=4_096)
    assert failed is not None and "(2,048)" in failed


def test_an_llm_summary_in_an_8k_window_passes_its_gate(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    model = ModelConfig(model="m", base_url=openai_server.base_url)
    summary = "<summary>\n## Objective and constraints\nAdd the flag.\n</summary>"
    openai_server.respond_with(lambda body: Reply(text=summary))
    p = make(tmp_path, window=8_192, summarizer=LLMSummarizer(OpenAIProvider(model), model))
    fixed = big_system(2_800)
    p.add(user("Add a --verbose flag to the CLI."))
    for n in range(3):
        tool_round(p, f"output {n}\n" * 60)
    result = run(p.check_and_compact(fixed))
    assert result.compaction is not None and result.compaction.strategy == "llm", result.warnings


# ---------------------------------------------------------------------------
# Item 5: the fixed context is calibrated from the provider and remembered


def test_calibration_rules() -> None:
    first = measure(prompt_tokens=2_300, message_tokens=50, fingerprint="a", estimate=4_200)
    assert first == FixedCalibration("a", 4_200, 2_250, 50)
    assert measure(0, 50, "a", 4_200) is None  # no prompt tokens reported: nothing learnt
    later = FixedCalibration("a", 4_200, 2_900, 9_000)  # measured over many messages
    assert sharper(first, later) is first
    assert sharper(later, first) is first
    other = FixedCalibration("b", 4_500, 2_400, 9_000)
    assert sharper(first, other) is other  # a new fixed context replaces the old one
    assert calibrated_tokens("a", 4_200, first) == 2_250
    assert calibrated_tokens("b", 4_500, first) == 4_500 - (4_200 - 2_250)
    assert calibrated_tokens("a", 4_200, None) == 4_200
    assert calibrated_tokens("c", 100, first) == 0
    assert FixedCalibration.from_json(first.to_json()) == first
    assert FixedCalibration.from_json({"fingerprint": "a", "estimate": -1}) is None


def true_fixed(fixed: FixedContext) -> int:
    """What a provider counts for the fixed context: the schemas with a real tokenizer."""
    tools = get_tokenizer("cl100k").count(json.dumps(list(fixed.tools)))
    return sum(estimate_message_tokens(m) for m in fixed.system) + tools


@pytest.mark.parametrize("tokenizer", ["cl100k", "qwen3", "deepseek-v4"])
def test_before_any_response_real_tool_schemas_are_estimated_close_and_never_under(
    tmp_path: Path, tokenizer: str
) -> None:
    """Regression: the ½-per-character JSON rule counted Cairn's schemas at 2.3× their size,
    so an 8k model's first request was refused or compacted for nothing."""
    model = ModelConfig(model="m", context_window=8_192)
    runtime = Runtime(tmp_path, model, OpenAIProvider(model), home=tmp_path / "home")
    try:
        fixed = runtime.new_session().fixed_context()
    finally:
        runtime.close()
    exact = get_tokenizer(tokenizer)
    true = sum(exact.count(m.text) for m in fixed.system)
    true += exact.count(json.dumps(list(fixed.tools), separators=(",", ":")))
    assert true <= fixed.tokens <= 1.3 * true


def test_after_one_response_the_fixed_context_is_projected_at_its_true_size(
    tmp_path: Path,
) -> None:
    """Regression: the ½-per-character estimate of the schemas was used forever, so every
    compaction and every restart projected the tools at twice their size."""
    assert SCHEMAS.tokens != true_fixed(SCHEMAS)
    p = make(tmp_path)
    p.add(user("Fix the failing CSV export."))
    first = run(p.check_and_compact(SCHEMAS))
    assert first.before.source == "estimate"
    assert first.before.tokens is not None
    messages = first.before.tokens - SCHEMAS.tokens
    respond(p, prompt=true_fixed(SCHEMAS) + messages)
    assert p.calibration is not None and p.calibration.tokens == true_fixed(SCHEMAS)
    assert p.fixed_tokens(SCHEMAS) == true_fixed(SCHEMAS)
    # A full estimate (here after a compaction) now counts the true fixed context.
    tool_round(p, "build log line\n" * 5_500)
    result = run(p.check_and_compact(SCHEMAS))
    assert result.compaction is not None
    full = true_fixed(SCHEMAS) + sum(estimate_message_tokens(m) for m in p.messages)
    assert result.after.tokens == full


def test_the_calibration_survives_a_restart_and_a_changed_fixed_context(
    tmp_path: Path,
) -> None:
    p = make(tmp_path)
    p.add(user("Fix the failing CSV export."))
    first = run(p.check_and_compact(SCHEMAS))
    assert first.before.tokens is not None
    messages = first.before.tokens - SCHEMAS.tokens
    respond(p, prompt=true_fixed(SCHEMAS) + messages)
    calibration = p.calibration
    p.close()
    again = make(tmp_path)
    assert again.calibration == calibration
    assert again.fixed_tokens(SCHEMAS) == true_fixed(SCHEMAS)
    grown = FixedContext(SCHEMAS.system, (*SCHEMAS.tools, *TOOLS[:5]))
    discount = SCHEMAS.tokens - true_fixed(SCHEMAS)
    assert again.fixed_tokens(grown) == grown.tokens - discount


def test_an_anchored_request_does_not_recalibrate(tmp_path: Path) -> None:
    p = make(tmp_path)
    p.add(user("Fix the failing CSV export."))
    first = run(p.check_and_compact(SCHEMAS))
    assert first.before.tokens is not None
    messages = first.before.tokens - SCHEMAS.tokens
    respond(p, prompt=true_fixed(SCHEMAS) + messages)
    calibration = p.calibration
    p.add(user("and the JSON export"))
    assert run(p.check_and_compact(SCHEMAS)).before.source == "anchored"
    respond(p, prompt=99_999)  # whatever it says, an anchored request measures nothing
    assert p.calibration == calibration


# ---------------------------------------------------------------------------
# Item 6: a resume keeps the usage anchor and the per-boundary state


def test_a_resumed_session_projects_from_the_last_usage_and_does_not_compact(
    tmp_path: Path,
) -> None:
    """Regression: the first check after a restart was a full estimate and compacted a
    context the provider had just measured under the line."""
    fixed = FixedContext((system("You are a careful coding agent."),), TOOLS * 3)
    p = make(tmp_path)
    history(p)
    tool_round(p, "x = 1\n" * 9_000)
    # The provider's count is well under the line; the seeds' estimate is over it.
    respond(p, prompt=15_000)
    p.add(user("go on"))
    live = p.project(fixed)
    assert live.source == "anchored" and live.phase != "compaction_due"
    assert (fixed.tokens + sum(estimate_message_tokens(m) for m in p.messages)) >= LINE
    p.close()
    again = make(tmp_path)
    resumed = again.project(fixed)
    assert resumed == live
    result = run(again.check_and_compact(fixed))
    assert result.compaction is None and again.epoch == 0


def test_a_resume_rebuilds_the_floor_and_the_compacted_flag(tmp_path: Path) -> None:
    fixed = big_system(19_000)
    p = make(tmp_path)
    history(p, rounds=4)
    tool_round(p, "build log line\n" * 2_000)
    first = run(p.check_and_compact(fixed))
    assert first.compaction is not None
    p.close()
    # Compacted, no response yet: a resumed session does not compact again.
    again = make(tmp_path)
    second = run(again.check_and_compact(fixed))
    assert second.compaction is None
    assert any("already ran" in w for w in second.warnings)
    post = second.after.tokens or 0
    assert post >= LINE
    respond(again, prompt=post)
    again.add(user("next"))
    again.close()
    # The provider said it stayed over the line: the floor holds after a restart too.
    third = make(tmp_path)
    result = run(third.check_and_compact(fixed))
    assert result.compaction is None
    assert any("could not get under the compaction line" in w for w in result.warnings)


# ---------------------------------------------------------------------------
# Item 7: the fork is projected before it is sent


def test_fit_fork_input_shrinks_in_order_and_keeps_whole_rounds() -> None:
    def count(m: Message) -> int:
        return estimate_message_tokens(m)

    messages: list[Message] = [user("task")]
    for n in range(6):
        call = ToolCall(f"c{n}", "read_file", '{"path": "a.py"}')
        messages += [assistant(f"step {n}", [call]), tool_result(f"c{n}", "code line\n" * 400)]
    total = sum(count(m) for m in messages)
    assert fit_fork_input(messages, total, count, EFFECTS) == messages
    elided = fit_fork_input(messages, total // 2, count, EFFECTS)
    assert elided is not None and len(elided) == len(messages)  # file contents went first
    dropped = fit_fork_input(
        [m.with_content("bash output\n" * 400) if m.role == "tool" else m for m in messages],
        total // 3,
        count,
        {},
    )
    assert dropped is not None and len(dropped) < len(messages) and not find_orphans(dropped)
    assert sum(count(m) for m in dropped) <= total // 3
    assert fit_fork_input([user("x " * 40_000)], 1_000, count) is not None
    assert fit_fork_input([user("x")], 1, count) is None


def test_a_paste_halved_several_times_counts_every_character_left_out() -> None:
    """Issue 29 defect 14: the summarizer's copy of a 111,000-character paste said
    "3,464 characters omitted" — the last halving's count, not the ~108,000 left out."""

    def count(m: Message) -> int:
        return estimate_message_tokens(m)

    paste = "".join(f"line {n:06d} of the pasted log\n" for n in range(3_700))
    fitted = fit_fork_input([user("summarize"), user(paste)], 1_500, count)
    assert fitted is not None
    shown = fitted[-1].text
    markers = re.findall(r"\[… ([\d,]+) characters omitted …\]", shown)
    assert len(markers) == 1
    omitted = int(markers[0].replace(",", ""))
    kept = len(shown) - len(f"\n[… {markers[0]} characters omitted …]\n")
    assert omitted == len(paste) - kept
    assert omitted > 100_000
    assert shown.startswith("line 000000") and shown.endswith("line 003699 of the pasted log\n")
    # The retry path halves the fork input again on each overflow: the same count.
    again = [user(paste)]
    for _ in range(6):
        again = shrink(again, 2)
    text = again[0].text
    (said,) = re.findall(r"\[… ([\d,]+) characters omitted …\]", text)
    kept = len(text) - len(f"\n[… {said} characters omitted …]\n")
    assert int(said.replace(",", "")) == len(paste) - kept


def test_a_fork_that_would_not_fit_is_shrunk_before_it_is_sent(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """Regression: the fork (the whole conversation plus the instruction) went out over the
    window and was rejected before it was shrunk; 5 of 16 forks at 32k."""

    seen: list[int] = []

    def provider(body: dict[str, Any]) -> Reply:
        tokens = sum(
            4
            + estimate_tokens(m.get("content") or "")
            + (len(json.dumps(m["tool_calls"])) // 2 if m.get("tool_calls") else 0)
            for m in body["messages"]
        )
        seen.append(tokens)
        if tokens > BUDGET:
            return Reply.http_error(
                400,
                "This model's maximum context length is exceeded",
                code="context_length_exceeded",
            )
        return Reply(text="<summary>\n## Objective and constraints\nFix it.\n</summary>")

    openai_server.respond_with(provider)
    model = ModelConfig(model="m", base_url=openai_server.base_url)
    p = make(tmp_path, summarizer=LLMSummarizer(OpenAIProvider(model), model))
    while (p.project(SMALL).tokens or 0) < BUDGET - 250:
        talk(p, rounds=1, words=180)
    assert (p.project(SMALL).tokens or 0) <= BUDGET
    result = run(p.check_and_compact(SMALL))
    assert result.compaction is not None and result.compaction.strategy == "llm", (
        result.warnings,
        seen,
    )
    assert len(openai_server.requests) == 1
