"""Tests for the deterministic compaction fallback (DESIGN §5.6)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cairn.context.budget import input_budget
from cairn.context.checkpoint import ACTIVE_TASK_KEY, CheckpointEntry, active_task_of
from cairn.context.effects import ToolEffects
from cairn.context.fallback import (
    BOUNDARY_MIN_TEXT_TOKENS,
    FALLBACK_MAX_TOKENS,
    FALLBACK_MIN_TOKENS,
    IMAGE_PLACEHOLDER,
    FallbackPlan,
    fallback_target,
    plan_fallback,
)
from cairn.context.ledger import (
    FILES_SECTION_TOKENS,
    LEDGER_HEADINGS,
    TODO_SECTION_TOKENS,
    build_compact_block,
    files_section,
    render_ledger,
    todo_items,
    todo_section,
)
from cairn.messages import (
    KIND_COMPACT_SUMMARY,
    KIND_HANDOFF,
    KIND_RESTORATION,
    ImagePart,
    Message,
    MessageMeta,
    TextPart,
    ToolCall,
    assistant,
    find_orphans,
    group_rounds,
    new_id,
    tool_result,
    user,
)
from cairn.tokens import estimate_message_tokens, estimate_tokens

EFFECTS: ToolEffects = {
    "read_file": "read_only",
    "grep": "read_only",
    "edit_file": "write",
    "write_file": "write",
    "bash": "write",
    "todo_write": "write",
}
MARKER = re.compile(r"\n\[… ([\d,]+) characters omitted …\]\n")


# ---------------------------------------------------------------------------
# Helpers


def plan(
    messages: Sequence[Message],
    window: int = 32_768,
    count: Callable[[Message], int] = estimate_message_tokens,
) -> FallbackPlan:
    return plan_fallback(
        messages,
        window=window,
        input_budget=input_budget(window),
        tool_effects=EFFECTS,
        count=count,
    )


def tool_turn(
    name: str,
    arguments: str,
    result: str,
    *,
    text: str | None = None,
    error: bool = False,
    reasoning: str | None = None,
) -> list[Message]:
    call = ToolCall(new_id("call"), name, arguments)
    return [
        assistant(text, [call], reasoning=reasoning),
        tool_result(call.id, result, error=error),
    ]


def numbered(n_lines: int, tag: str = "") -> str:
    """A text whose every part is distinct, so head and tail can be located."""
    return "".join(f"{tag}line {i:06d}\n" for i in range(n_lines))


def block_of(texts: Sequence[str]) -> Message:
    """A compact block carrying ``texts`` as its checkpoint, as a previous compaction would."""
    task = active_task_of([user(t) for t in texts], cap_tokens=None, input_budget=24_576)
    return build_compact_block(render_ledger({}), task)


def carried(block: Message) -> list[CheckpointEntry]:
    raw = block.meta.extra[ACTIVE_TASK_KEY]
    assert isinstance(raw, list)
    entries = [CheckpointEntry.from_json(r, n) for n, r in enumerate(raw, 1)]
    assert all(e is not None for e in entries)
    return [e for e in entries if e is not None]


def tail_of(p: FallbackPlan) -> tuple[Message, ...]:
    return p.replacement[1:]


def ids(messages: Sequence[Message]) -> list[str]:
    return [m.id for m in messages]


def section(summary: str, heading: str) -> str:
    after = summary.split(f"## {heading}\n", 1)[1]
    return after.split("\n\n## ", 1)[0]


def long_session(rounds: int = 30, result_chars: int = 4_000) -> list[Message]:
    history = [user("Refactor the storage layer; keep the on-disk format unchanged.")]
    for i in range(rounds):
        history += tool_turn(
            "read_file", f'{{"path": "src/m{i}.py"}}', numbered(result_chars // 12, f"m{i} ")
        )
    return history


# ---------------------------------------------------------------------------
# The target


@pytest.mark.parametrize(
    ("source", "window", "expected"),
    [
        # 8k window: the input budget is 4,096, half of it binds.
        (100_000, 8_192, 2_048),
        (1_000, 8_192, 2_048),
        # 32k window: input budget 24,576; half of it (12,288) is below half the window.
        (100_000, 32_768, 12_288),
        # 1M window: the 50k ceiling binds.
        (10_000_000, 1_000_000, FALLBACK_MAX_TOKENS),
        # A small source: the 5k floor binds.
        (1_000, 200_000, FALLBACK_MIN_TOKENS),
        (0, 200_000, FALLBACK_MIN_TOKENS),
        # A middle-sized source: 80 % of it binds, floored.
        (20_000, 200_000, 16_000),
        (12_346, 200_000, 9_876),
    ],
)
def test_target_formula(source: int, window: int, expected: int) -> None:
    assert fallback_target(source, window, input_budget(window)) == expected


def test_target_half_window_binds_when_the_input_budget_is_the_window() -> None:
    assert fallback_target(100_000, 20_000, 20_000) == 10_000
    assert fallback_target(100_000, 20_001, 30_000) == 10_000


def test_target_is_an_int_and_never_above_half_the_input_budget() -> None:
    for window in (8_192, 16_000, 32_768, 128_000, 200_000, 1_000_000):
        for source in (0, 4_999, 6_251, 40_000, 10**7):
            target = fallback_target(source, window, input_budget(window))
            assert isinstance(target, int)
            assert target <= input_budget(window) / 2
            assert target <= FALLBACK_MAX_TOKENS


def test_target_brings_the_whole_next_request_back_to_half_the_budget() -> None:
    """Regression: the target was half of what the fixed context leaves, so with tools
    and a system prompt a third of an 8k budget a compaction landed at 65 %, just under
    the handoff line, and the next one came a few requests later."""
    budget, fixed = 4_096, 1_256
    share = budget - fixed
    target = fallback_target(100_000, 8_192, share, fixed)
    assert fixed + target == budget // 2
    # No fixed context: half the share, as before.
    assert fallback_target(100_000, 8_192, share) == share // 2
    # A fixed context that takes most of the budget still leaves the replacement a quarter.
    assert fallback_target(100_000, 8_192, 1_000, 3_096) == 1_000 // 4


@given(
    budget=st.integers(1_024, 200_000),
    fixed_share=st.floats(0.0, 0.59),
    source=st.integers(0, 10**6),
)
def test_a_finished_fallback_compaction_lands_below_the_handoff_line(
    budget: int, fixed_share: float, source: int
) -> None:
    """Whatever the fixed context, up to 60 % of the budget: fixed + target < 70 %."""
    fixed = int(fixed_share * budget)
    target = fallback_target(source, 2 * budget, budget - fixed, fixed)
    assert fixed + target < 0.7 * budget
    assert target <= max((budget - fixed) // 2, 0)


# ---------------------------------------------------------------------------
# The kept tail


def test_whole_rounds_are_kept_from_the_newest_end() -> None:
    history = long_session()
    p = plan(history)
    rounds = group_rounds(history)
    tail = tail_of(p)
    assert len(tail) >= 4
    # The tail is a suffix of the history, round-aligned at its start.
    assert ids(tail) == ids(history[-len(tail) :])
    assert any(r.start == len(history) - len(tail) for r in rounds)
    # All rounds but the oldest kept one are byte-identical to the input.
    whole = tail[2:] if p.truncated_round else tail
    assert list(whole) == history[len(history) - len(whole) :]
    if not p.truncated_round:
        # The next older round would not have fit.
        older = history[len(history) - len(whole) - 2 : len(history) - len(whole)]
        assert p.post_tokens + sum(estimate_message_tokens(m) for m in older) > p.target


def test_rounds_that_fit_are_kept_whole_and_the_next_one_does_not_fit() -> None:
    # Rounds of one size, too small to be cut (a cut keeps at least
    # BOUNDARY_MIN_TEXT_TOKENS of text), and far more than fit: the count is exact.
    history = [user("goal")]
    for i in range(400):
        history += tool_turn("read_file", f'{{"path": "f{i:03}"}}', "r" * 200)
    round_cost = sum(estimate_message_tokens(m) for m in history[1:3])
    # Less room than a round leaves less text room than a cut needs.
    assert round_cost - estimate_message_tokens(history[1]) < BOUNDARY_MIN_TEXT_TOKENS
    p = plan(history)
    assert not p.truncated_round
    kept_rounds = len(tail_of(p)) // 2
    assert 0 < kept_rounds < 400
    block_cost = estimate_message_tokens(p.replacement[0])
    assert block_cost + kept_rounds * round_cost <= p.target
    assert block_cost + (kept_rounds + 1) * round_cost > p.target


def test_boundary_round_is_cut_head_75_tail_25_keeping_all_its_messages() -> None:
    goal = user("Find why the importer is slow.")
    calls = [
        ToolCall(new_id("call"), "bash", '{"command": "python -m cProfile importer.py"}'),
        ToolCall(new_id("call"), "read_file", '{"path": "importer.py"}'),
    ]
    big = [numbered(20_000, "a "), numbered(20_000, "b ")]
    head = assistant("Profiling and reading.", calls, reasoning="long thoughts " * 100)
    results = [tool_result(c.id, text) for c, text in zip(calls, big, strict=True)]
    last = assistant("The importer parses every file twice.")
    history = [goal, head, *results, last]

    p = plan(history)

    assert p.truncated_round
    tail = tail_of(p)
    # Every message of the boundary round is there, in order, the calls unchanged.
    assert ids(tail) == ids([head, *results, last])
    assert tail[0].tool_calls == head.tool_calls
    assert tail[0].reasoning is None
    assert not find_orphans(p.replacement)
    for original, cut in zip(results, tail[1:3], strict=True):
        match = MARKER.search(cut.text)
        assert match is not None
        kept_head, kept_tail = cut.text[: match.start()], cut.text[match.end() :]
        omitted = int(match.group(1).replace(",", ""))
        assert original.text.startswith(kept_head)
        assert original.text.endswith(kept_tail)
        assert len(kept_head) + omitted + len(kept_tail) == len(original.text)
        kept = len(kept_head) + len(kept_tail)
        assert kept_head and kept_tail
        assert len(kept_head) == kept * 3 // 4
    assert p.post_tokens <= p.target


def test_boundary_round_is_dropped_when_only_its_overhead_would_fit() -> None:
    history = [user("goal")]
    # A round whose un-truncatable part (huge arguments) can never fit.
    history += tool_turn("write_file", '{"path": "a", "data": "' + "z" * 200_000 + '"}', "ok")
    history.append(assistant("done"))
    p = plan(history)
    assert not p.truncated_round
    assert ids(tail_of(p)) == [history[-1].id]


def _boundary_case(filler_chars: int) -> list[Message]:
    call = ToolCall("c1", "bash", '{"command": "x"}')
    return [
        user("goal"),
        assistant("run", [call]),
        tool_result("c1", "y" * 100_000),
        assistant("z" * filler_chars),
    ]


@pytest.mark.parametrize("spare", [BOUNDARY_MIN_TEXT_TOKENS - 1, BOUNDARY_MIN_TEXT_TOKENS])
def test_boundary_round_is_cut_only_if_enough_of_its_text_fits(spare: int) -> None:
    # The ledger sees only a bounded prefix of the filler, so the block's size
    # does not depend on the filler's length; the target is half the input budget.
    probe = plan(_boundary_case(4_000))
    block_tokens = estimate_message_tokens(probe.replacement[0])
    floors = estimate_message_tokens(assistant("", [ToolCall("c1", "bash", '{"command": "x"}')]))
    floors += estimate_message_tokens(tool_result("c1", ""))
    filler_tokens = probe.target - block_tokens - floors - spare
    filler = filler_tokens - estimate_message_tokens(assistant(""))
    history = _boundary_case(filler * 4)
    p = plan(history)
    assert p.target == probe.target and not p.raised
    assert estimate_message_tokens(p.replacement[0]) == block_tokens
    if spare < BOUNDARY_MIN_TEXT_TOKENS:
        assert not p.truncated_round
        assert ids(tail_of(p)) == [history[-1].id]
    else:
        assert p.truncated_round
        assert ids(tail_of(p)) == ids(history[1:])
        assert p.post_tokens <= p.target


def test_no_round_is_ever_split() -> None:
    history = [user("go")]
    for i in range(25):
        calls = [
            ToolCall(new_id("call"), "bash", f'{{"command": "step {i}.{k}"}}') for k in range(3)
        ]
        history.append(assistant(None, calls))
        history += [
            tool_result(c.id, numbered(100 * (k + 1) * (i % 5 + 1))) for k, c in enumerate(calls)
        ]
    for window in (8_192, 16_384, 32_768, 65_536, 200_000):
        p = plan(history, window)
        assert not find_orphans(p.replacement), window


def test_reasoning_is_dropped_from_kept_messages() -> None:
    history = [user("go"), *tool_turn("bash", '{"command": "ls"}', "a b", reasoning="secret")]
    history.append(assistant("listed", reasoning="more secret"))
    p = plan(history)
    assert len(tail_of(p)) == 3
    assert all(m.reasoning is None for m in p.replacement)
    # Nothing else changed.
    assert [m.text for m in tail_of(p)] == [m.text for m in history[1:]]


def test_images_are_replaced_by_a_text_placeholder() -> None:
    image = ImagePart("data:image/png;base64," + "A" * 10_000)
    shot = user([TextPart("the screenshot: "), image, TextPart(" see?")])
    history = [shot, assistant("I see a red button."), user("make it blue")]
    p = plan(history)
    kept = {m.id: m for m in tail_of(p)}
    assert shot.id in kept
    assert kept[shot.id].content == (
        TextPart("the screenshot: "),
        TextPart(IMAGE_PLACEHOLDER),
        TextPart(" see?"),
    )
    assert not any(m.images for m in p.replacement)


def test_mandatory_checkpoint_raises_the_target() -> None:
    # A window whose input budget the fixed context has nearly used up: the
    # target (half the budget) is smaller than the bounded checkpoint's floor.
    rules = "\n".join(f"Never rename public name number {i}." for i in range(20))
    later = "\n".join(f"Always keep option --flag-{i} working." for i in range(20))
    history = [
        user(rules),
        *tool_turn("bash", '{"command": "make"}', "ok"),
        assistant("built"),
        user(later),
    ]
    p = plan_fallback(history, window=8_192, input_budget=1_200, tool_effects=EFFECTS)
    assert p.raised
    assert p.target > fallback_target(p.source_tokens, 8_192, 1_200)
    assert p.target == estimate_message_tokens(p.replacement[0])
    # The user's rules are kept verbatim rather than dropped to meet the target.
    assert rules in p.replacement[0].text and later in p.replacement[0].text
    assert p.post_tokens <= p.target


def test_a_huge_message_no_longer_raises_the_target() -> None:
    # Before the checkpoint had a bound, this raised the target to ~180k tokens.
    huge = "Constraint: keep every public name. " * 20_000
    history = [user(huge), *tool_turn("bash", '{"command": "make"}', "ok"), assistant("built")]
    p = plan(history, 32_768)
    assert not p.raised
    assert p.post_tokens <= input_budget(32_768) // 2
    block = p.replacement[0].text
    assert huge not in block and huge[:200] in block and huge[-100:] in block
    assert "Constraint: keep every public name." in block


def test_target_not_raised_when_the_block_fits() -> None:
    p = plan(long_session(), 200_000)
    assert not p.raised
    assert p.target == fallback_target(p.source_tokens, 200_000, input_budget(200_000))


def test_last_user_message_is_not_repeated_when_the_checkpoint_holds_it() -> None:
    first = user("Write a CSV exporter.")
    last = user("Also add a --delimiter option.")
    history = [first, *tool_turn("write_file", '{"path": "csv.py"}', "ok"), last]
    p = plan(history)
    block = p.replacement[0]
    assert last.text in block.text
    assert last.id not in ids(tail_of(p))
    # Only the last one is de-duplicated; the earlier request stays in the tail.
    assert first.id in ids(tail_of(p))
    assert [m.text for m in p.replacement].count(last.text) == 0


def test_last_user_message_with_only_an_image_is_kept() -> None:
    # No text means no checkpoint entry, so nothing to de-duplicate against.
    shot = user([ImagePart("https://example.com/a.png")])
    p = plan([user("look"), assistant("ok"), shot])
    assert shot.id in ids(tail_of(p))


def test_recursive_compaction_carries_the_previous_checkpoint() -> None:
    first = [
        user("Port the CLI to click."),
        *tool_turn("todo_write", '{"todos": ["port cli", "fix --verbose"]}', "saved"),
        *tool_turn("edit_file", '{"path": "cli.py"}', "edited"),
        user("Keep --verbose working."),
        assistant("Will do."),
    ]
    block1 = plan(first).replacement[0]
    second = [
        block1,
        assistant("Continuing the port."),
        *tool_turn("bash", '{"command": "pytest"}', "2 passed"),
        *tool_turn("write_file", '{"path": "NOTES.md"}', "written"),
        user("Now update the README."),
    ]
    p = plan(second)
    block2 = p.replacement[0]
    expected = ["Port the CLI to click.", "Keep --verbose working.", "Now update the README."]
    assert [e.text for e in carried(block2)] == expected
    # Numbered across compactions, never reset.
    assert [e.number for e in carried(block2)] == [1, 2, 3]
    for entry in expected:
        assert entry in block2.text
    # The old block is replaced, never kept.
    assert block1.id not in ids(p.replacement)
    assert sum(m.meta.kind == KIND_COMPACT_SUMMARY for m in p.replacement) == 1
    # Files written before the previous compaction are still listed, oldest first.
    assert section(p.summary, "Workspace mutations") == "- cli.py\n- NOTES.md"
    assert p.files == ("NOTES.md",)
    # A section the new history says nothing about keeps the previous one's text.
    tasks = section(p.summary, "Active tasks and background work")
    assert tasks.startswith("(from the previous compaction)\n`todo_write`")
    assert "fix --verbose" in tasks


def test_only_a_compact_block_gives_a_valid_plan() -> None:
    block = block_of(["do the thing"])
    p = plan([block])
    assert len(p.replacement) == 1
    assert p.replacement[0].meta.kind == KIND_COMPACT_SUMMARY
    assert [e.text for e in carried(p.replacement[0])] == ["do the thing"]
    assert p.replacement[0].id != block.id


def test_empty_input_gives_a_block_only_plan() -> None:
    p = plan([])
    assert len(p.replacement) == 1
    assert p.source_tokens == 0
    assert p.post_tokens == estimate_message_tokens(p.replacement[0])
    assert p.post_tokens <= p.target
    assert not p.truncated_round and p.files == ()


def test_broken_input_rounds_are_skipped() -> None:
    goal = user("go")
    older = tool_turn("bash", '{"command": "a"}', "A")
    dangling = assistant("calling", [ToolCall("lost", "bash", '{"command": "b"}')])
    orphan = tool_result("nobody", "orphan result")
    newer = tool_turn("bash", '{"command": "c"}', "C")
    history = [goal, *older, dangling, orphan, *newer, assistant("end")]
    assert find_orphans(history)
    p = plan(history)
    kept = ids(tail_of(p))
    assert dangling.id not in kept and orphan.id not in kept
    assert set(ids(older + newer)) <= set(kept)
    assert not find_orphans(p.replacement)


def test_synthetic_handoff_and_system_messages_are_never_kept() -> None:
    handoff = Message(
        role="user",
        content="<token-budget-handoff>secret frontier</token-budget-handoff>",
        meta=MessageMeta(kind=KIND_HANDOFF, hidden=True, synthetic=True),
    )
    restoration = Message(
        role="user",
        content="restored file a.py",
        meta=MessageMeta(kind=KIND_RESTORATION, synthetic=True),
    )
    sys_msg = Message(role="system", content="be brief")
    history = [sys_msg, user("go"), restoration, assistant("a"), handoff, assistant("b")]
    p = plan(history)
    kept = ids(tail_of(p))
    assert handoff.id not in kept and restoration.id not in kept and sys_msg.id not in kept
    assert "secret frontier" not in p.replacement[0].text
    assert "be brief" not in p.replacement[0].text


def test_post_tokens_counted_with_the_given_counter() -> None:
    def double(m: Message) -> int:
        return 2 * estimate_message_tokens(m)

    p = plan(long_session(), 65_536, count=double)
    assert p.post_tokens == sum(double(m) for m in p.replacement)
    assert p.source_tokens == sum(double(m) for m in long_session())
    assert p.post_tokens <= p.target


@pytest.mark.parametrize("window", [8_192, 16_384, 32_768, 128_000, 200_000, 1_000_000])
def test_post_tokens_within_target_and_below_half_the_input_budget(window: int) -> None:
    history = long_session(60, 8_000)
    p = plan(history, window)
    assert p.post_tokens == sum(estimate_message_tokens(m) for m in p.replacement)
    assert p.post_tokens <= p.target
    if not p.raised:
        assert p.post_tokens <= input_budget(window) / 2
        assert p.target == fallback_target(p.source_tokens, window, input_budget(window))


def test_small_window_keeps_a_tail_rather_than_raising() -> None:
    # The ledger shrinks for small targets, so an 8k window still has room.
    p = plan(long_session(30, 400), 8_192)
    assert not p.raised
    assert len(tail_of(p)) >= 2


# ---------------------------------------------------------------------------
# The ledger


def ledger_session() -> list[Message]:
    return [
        user("Migrate the settings module to pydantic v2. Do not change env var names."),
        *tool_turn("read_file", '{"path": "settings.py"}', "class Settings: ..."),
        assistant("Plan: replace validators with field_validator, keep names."),
        *tool_turn("edit_file", '{"path": "settings.py", "old": "a", "new": "b"}', "ok"),
        *tool_turn("write_file", '{"file_path": "tests/test_settings.py"}', "ok"),
        *tool_turn(
            "todo_write",
            '{"todos": [{"content": "update docs", "status": "pending"}]}',
            "saved",
        ),
        *tool_turn("bash", '{"command": "pytest -q"}', "...\n12 passed in 0.4s"),
        *tool_turn("edit_file", '{"path": "README.md"}', "old text not found", error=True),
        *tool_turn("grep", '{"pattern": "x"}', "permission denied", error=True),
        user("Then bump the version."),
        assistant("Next I will retry the README edit."),
    ]


def test_ledger_has_exactly_the_seven_headings_in_order() -> None:
    summary = plan(ledger_session()).summary
    headings = [line[3:] for line in summary.split("\n") if line.startswith("## ")]
    assert tuple(headings) == LEDGER_HEADINGS


def test_ledger_lists_the_files_written() -> None:
    p = plan(ledger_session())
    assert p.files == ("settings.py", "tests/test_settings.py", "README.md")
    mutations = section(p.summary, "Workspace mutations")
    for path in p.files:
        assert f"- {path}" in mutations


def test_ledger_lists_the_last_errors() -> None:
    risks = section(plan(ledger_session()).summary, "Open risks or blockers")
    assert "permission denied" in risks
    assert "old text not found" in risks
    assert risks.index("old text not found") < risks.index("permission denied")


def test_ledger_keeps_only_the_last_three_errors() -> None:
    history = [user("go")]
    for i in range(6):
        history += tool_turn("bash", f'{{"command": "try {i}"}}', f"failure number {i}", error=True)
    risks = section(plan(history).summary, "Open risks or blockers")
    assert [f"failure number {i}" in risks for i in range(6)] == [False] * 3 + [True] * 3


def test_ledger_verification_evidence_is_the_last_command_output() -> None:
    evidence = section(plan(ledger_session()).summary, "Verification evidence")
    # bash names no file: a command. The later edits and reads are not evidence.
    assert evidence.startswith('`bash` {"command": "pytest -q"} (ok)')
    assert evidence.endswith("12 passed in 0.4s")


def test_ledger_verification_evidence_keeps_the_tail_of_long_output() -> None:
    output = numbered(5_000) + "FAILED tests/test_x.py::test_y"
    history = [user("go"), *tool_turn("bash", '{"command": "pytest"}', output, error=True)]
    evidence = section(plan(history).summary, "Verification evidence")
    assert "(failed)" in evidence
    assert evidence.endswith("FAILED tests/test_x.py::test_y")
    assert "line 000000" not in evidence
    assert len(evidence) < 1_600


def test_ledger_active_tasks_from_the_last_todo_call() -> None:
    tasks = section(plan(ledger_session()).summary, "Active tasks and background work")
    assert tasks.startswith("Todo list (`todo_write`):")
    assert "update docs" in tasks
    no_todo = section(plan([user("hi")]).summary, "Active tasks and background work")
    assert no_todo == "(none)"


def test_ledger_objective_and_next_action() -> None:
    summary = plan(ledger_session()).summary
    objective = section(summary, "Objective and constraints")
    assert objective.startswith("Migrate the settings module to pydantic v2.")
    assert "1 later user message" in objective
    next_action = section(summary, "Exact next action")
    assert "Last user request: Then bump the version." in next_action
    assert "Last assistant message: Next I will retry the README edit." in next_action
    decisions = section(summary, "Decisions and rationale")
    assert "- Plan: replace validators with field_validator, keep names." in decisions


def test_ledger_is_deterministic() -> None:
    first = plan(ledger_session())
    second = plan(ledger_session())
    assert first.summary == second.summary
    assert first.replacement[0].text == second.replacement[0].text


def test_ledger_stays_small_whatever_the_history() -> None:
    cjk = "测试数据很长" * 20_000
    history: list[Message] = [user(cjk)]
    for i in range(200):
        history += tool_turn(
            "todo_write" if i % 7 == 0 else "bash",
            '{"command": "' + cjk[:5_000] + f'{i}"}}',
            cjk,
            text=cjk,
            error=i % 2 == 0,
        )
        history += tool_turn("edit_file", f'{{"path": "{"深" * 300}{i}.py"}}', "ok")
        history.append(user(cjk + str(i)))
    p = plan(history, 1_000_000)
    # The detail stays under ~2,000 tokens; the files written and the todo list have
    # budgets of their own (whole items, never cut).
    assert estimate_tokens(p.summary) <= 2_000 + FILES_SECTION_TOKENS + TODO_SECTION_TOKENS


# ---------------------------------------------------------------------------
# Scale


def test_large_history_is_fast_and_counts_each_message_at_most_twice() -> None:
    history: list[Message] = [user("start")]
    while len(history) < 4_096:
        history += tool_turn("bash", '{"command": "cat big.log"}', numbered(690), text="reading")
    assert sum(len(m.text) for m in history) > 16 * 2**20 * 0.95
    counted = 0

    def counting(m: Message) -> int:
        nonlocal counted
        counted += 1
        return estimate_message_tokens(m)

    started = time.perf_counter()
    p = plan(history, 1_000_000, count=counting)
    elapsed = time.perf_counter() - started
    assert counted <= 2 * len(history) + 16
    assert elapsed < 2.0
    assert p.post_tokens <= p.target == FALLBACK_MAX_TOKENS


# ---------------------------------------------------------------------------
# Property: random sessions × random windows

CHUNKS = ["word ", "测试中文", "ページ", "x", "\n", '{"k": 1}, ', "한국어 "]
TOOLS = ["bash", "edit_file", "read_file", "todo_write", "mystery"]


@st.composite
def texts(draw: st.DrawFn, max_repeat: int = 50) -> str:
    chunk = draw(st.sampled_from(CHUNKS))
    return draw(st.text(max_size=12)) + chunk * draw(st.integers(0, max_repeat))


@st.composite
def sessions(draw: st.DrawFn) -> list[Message]:
    history: list[Message] = []
    if draw(st.booleans()):
        entries = [t for t in draw(st.lists(texts(), max_size=3)) if t.strip()]
        history.append(block_of(entries))
    for _ in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(["user", "assistant", "tools", "tools"]))
        if kind == "user":
            text = draw(texts(400))
            if draw(st.booleans()):
                image = ImagePart("data:image/png;base64,AAAA")
                parts: list[TextPart | ImagePart] = [TextPart(text), image]
                if draw(st.booleans()):
                    parts.reverse()
                history.append(user(parts))
            else:
                history.append(user(text))
        elif kind == "assistant":
            history.append(assistant(draw(texts()), reasoning=draw(st.none() | texts())))
        else:
            calls = [
                ToolCall(
                    new_id("call"),
                    draw(st.sampled_from(TOOLS)),
                    draw(st.sampled_from(['{"path": "a.py"}', '{"command": "make"}', "{}", "[1]"])),
                )
                for _ in range(draw(st.integers(0, 3)))
            ]
            history.append(assistant(draw(st.none() | texts()), calls, reasoning="r"))
            for c in calls:
                huge = draw(st.integers(0, 9)) == 0
                body = draw(texts(20_000 if huge else 60))
                history.append(tool_result(c.id, body, error=draw(st.booleans())))
    return history


def coarse_count(m: Message) -> int:
    """Another counter, like an exact tokenizer: not the estimate's ratios."""
    return 7 + len(m.text) // 3 + sum(20 + len(c.arguments) for c in m.tool_calls)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example],
)
@given(
    history=sessions(),
    window=st.integers(8_192, 1_000_000),
    count=st.sampled_from([estimate_message_tokens, coarse_count]),
)
def test_property_random_sessions_give_sound_bounded_plans(
    history: list[Message], window: int, count: Callable[[Message], int]
) -> None:
    p = plan(history, window, count)
    block, tail = p.replacement[0], p.replacement[1:]
    assert block.meta.kind == KIND_COMPACT_SUMMARY and block.role == "user"
    assert not find_orphans(p.replacement)
    assert p.post_tokens == sum(count(m) for m in p.replacement)
    assert p.post_tokens <= p.target
    if not p.raised:
        assert p.post_tokens <= input_budget(window) / 2
    # The checkpoint: its entries are what the block shows, and the latest
    # thing the user wrote is its last entry.
    for entry in carried(block):
        assert entry.text is None or entry.text in block.text
    typed = [m for m in history if m.role == "user" and not m.meta.synthetic and m.text.strip()]
    if typed:
        latest = carried(block)[-1]
        assert latest.id == typed[-1].id
        assert latest.oversized or latest.text == typed[-1].text
    # The tail: original messages, in order, sanitized; only the oldest round cut.
    originals = {m.id: m for m in history}
    positions = [ids(history).index(m.id) for m in tail]
    assert positions == sorted(positions)
    for m in tail:
        assert m.reasoning is None and not m.images and not m.meta.synthetic
    cut = [
        i
        for i, m in enumerate(tail)
        if MARKER.search(m.text) and not MARKER.search(originals[m.id].text)
    ]
    if cut:
        assert p.truncated_round
        first_round = group_rounds(tail)[0]
        assert all(i < first_round.end for i in cut)


# ---------------------------------------------------------------------------
# One ledger for both paths (issue 11): what the host promised survives a fallback


def test_the_fallback_places_every_exact_record_verbatim_under_its_heading() -> None:
    """Regression: the fallback clipped records to 'EXACT CONTINUA…' (47 of 49 lost)."""
    records = [
        ("Exact next action", "run `pytest tests/test_export.py -k unicode` exactly"),
        ("Workspace mutations", "src/export.py: rows are encoded as UTF-8 before writing"),
        ("Objective and constraints", "never change the CSV column order"),
    ]
    history = long_session(rounds=40)
    for n, (heading, payload) in enumerate(records):
        history.insert(3 + 4 * n, user(f"EXACT CONTINUATION RECORD [{heading}] :: {payload}"))
    summary = plan(history, window=8_192).summary
    for heading, payload in records:
        line = f"EXACT CONTINUATION RECORD [{heading}] :: {payload}"
        assert summary.count(line) == 1
        assert line in section(summary, heading)


def test_the_fallback_keeps_the_todo_list_whole() -> None:
    """Regression: the todo list's JSON was clipped to 200 characters (51 of 78 items lost)."""
    todos = [
        {"content": f"step {n}: migrate validator number {n} to field_validator", "status": s}
        for n, s in zip(range(78), ["pending", "in_progress", "completed"] * 26, strict=True)
    ]
    history = [
        *long_session(rounds=30),
        *tool_turn("todo_write", json.dumps({"todos": todos}), "Todo list updated."),
    ]
    tasks = section(plan(history, window=8_192).summary, "Active tasks and background work")
    for todo in todos:
        assert f"- [{todo['status']}] {todo['content']}" in tasks


def test_the_todo_budget_drops_completed_items_first_and_never_cuts_one() -> None:
    todos = [
        {"content": f"item {n} " + "detail " * 60, "status": "completed" if n % 2 else "pending"}
        for n in range(60)
    ]
    call = ToolCall("t1", "TodoWrite", json.dumps({"todos": todos}))
    text = todo_section([assistant(None, [call])])
    listed = [line for line in text.splitlines() if line.startswith("- [")]
    assert all(line.startswith("- [pending]") for line in listed)
    assert all(line.rstrip().endswith("detail") for line in listed)  # whole items only
    assert "item(s) not listed" in text
    assert todo_items('{"todos": [{"content": "a", "status": "pending"}]}') == [("pending", "a")]
    assert todo_items("not json") is None


def test_every_written_path_is_listed_whole() -> None:
    """Regression: paths were cut to ~50 characters at small targets ('…/packages/cli/c…'),
    so the compacted context named no file (9 continuity losses at 16k)."""
    paths = [
        f"/workspace/ponylang__ponyc__0.1/packages/cli/module_{n}/command_parser.pony"
        for n in range(12)
    ]
    history: list[Message] = [user("Fix the CLI parser.")]
    for path in paths:
        history += tool_turn("edit_file", json.dumps({"path": path}), "ok")
    history += long_session(rounds=20)
    mutations = section(plan(history, window=8_192).summary, "Workspace mutations")
    for path in paths:
        assert f"- {path}" in mutations


def test_todo_items_and_paths_are_listed_verbatim_on_one_line() -> None:
    """Regression: whitespace was collapsed, so 'meeting  notes.md' became another file
    and a todo item with a tab or a line break no longer read as the user wrote it."""
    call = ToolCall(
        "t1",
        "todo_write",
        json.dumps({"todos": [{"content": "fix  the\texport\nthen test", "status": "pending"}]}),
    )
    section = todo_section([assistant(None, [call]), tool_result("t1", "ok")])
    assert "fix  the\\texport\\nthen test" in section
    assert len(section.splitlines()) == 2
    listed = files_section("", ["notes/meeting  notes.md", "notes/odd\nname.py"])
    assert listed.splitlines() == ["- notes/meeting  notes.md", "- notes/odd\\nname.py"]
    # Carried over from a previous block, a path is neither re-escaped nor duplicated.
    assert files_section(listed, ["notes/odd\nname.py"]) == listed


def test_todo_arguments_nested_a_thousand_deep_are_not_a_todo_list() -> None:
    """Regression: json.loads raised RecursionError on a recording's deep arguments."""
    assert todo_items("[" * 1_200 + "]" * 1_200) is None
