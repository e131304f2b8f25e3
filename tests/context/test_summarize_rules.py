"""The LLM summarizer's pure rules: instruction, extraction, ledger, records, shrink, gates."""

from __future__ import annotations

import pytest

from cairn.context.effects import ToolEffect
from cairn.context.ledger import (
    LEDGER_HEADINGS,
    MAX_EXACT_RECORDS,
    exact_records,
    normalize_ledger,
    place_exact_records,
    place_host_facts,
)
from cairn.context.llm_summarizer import (
    FILE_ELIDED,
    IMAGE_PLACEHOLDER,
    check_gates,
    compaction_instruction,
    extract_summary,
    kept_tail,
    prepare_fork_input,
    shrink,
    strip_images,
)
from cairn.messages import (
    KIND_HANDOFF,
    ImagePart,
    Message,
    MessageMeta,
    TextPart,
    ToolCall,
    assistant,
    find_orphans,
    tool_result,
    user,
)
from cairn.tokens import estimate_message_tokens

LEDGER = "\n\n".join(f"## {h}\n- item for {h.lower()}" for h in LEDGER_HEADINGS)


# ---------------------------------------------------------------------------
# Seed 004 "压缩 fork 代理循环" #5: the instruction's mandatory statement


def test_instruction_opens_and_closes_with_the_text_only_rule() -> None:
    text = compaction_instruction(None)
    first, last = text.splitlines()[0], text.splitlines()[-1]
    for line in (first, last):
        assert "TEXT ONLY" in line
        assert "tool" in line.lower()
    assert "rejected" in first and "fail" in first
    for heading in LEDGER_HEADINGS:
        assert f"## {heading}" in text


def test_custom_instructions_are_included() -> None:
    text = compaction_instruction("focus on the API design")
    assert "focus on the API design" in text
    assert text.splitlines()[-1].startswith("REMINDER")


# ---------------------------------------------------------------------------
# Seed 004 "压缩摘要格式提取"


def test_extraction_drops_analysis_and_keeps_the_summary_inside() -> None:
    raw = "<analysis>scratch notes\nmore</analysis>\n<summary>\nthe real summary\n</summary>"
    assert extract_summary(raw) == "the real summary"


def test_extraction_passes_raw_text_through_without_a_summary_tag() -> None:
    raw = "Just a plain summary, no tags.\nSecond line."
    assert extract_summary(raw) == raw


def test_extraction_collapses_blank_line_runs_and_trims() -> None:
    raw = "<summary>\n\n  first\n\n\n\nsecond\n \n\t\nthird  \n\n</summary>"
    assert extract_summary(raw) == "first\n\nsecond\n\nthird"


def test_extraction_survives_an_unclosed_summary() -> None:
    assert extract_summary("<analysis>x</analysis><summary>cut off mid") == "cut off mid"


# ---------------------------------------------------------------------------
# Ledger normalization and exact continuation records


def test_ledger_normalization_orders_the_seven_headings_and_fills_gaps() -> None:
    model = (
        "### 7. Exact next action\nrun pytest\n"
        "# Objective and constraints:\nfix the bug\n"
        "## **Workspace mutations**\n- edited a.py"
    )
    ledger = normalize_ledger(model)
    headings = [line[3:] for line in ledger.splitlines() if line.startswith("## ")]
    assert headings == list(LEDGER_HEADINGS)
    assert "fix the bug" in ledger and "run pytest" in ledger and "- edited a.py" in ledger
    assert ledger.count("(none)") == 4


def test_text_without_any_heading_is_passed_through() -> None:
    assert normalize_ledger("free-form summary") == "free-form summary"


def test_exact_records_are_found_deduplicated_and_limited() -> None:
    line = "EXACT CONTINUATION RECORD [Exact next action] :: run `make test` then commit"
    messages = [
        user(f"{line}\nsome text"),
        assistant(line),
        user("EXACT CONTINUATION RECORD [Not a heading] :: ignored"),
        user("EXACT CONTINUATION RECORD [objective and constraints] :: keep the API"),
    ]
    assert exact_records(messages) == [
        ("Exact next action", "run `make test` then commit"),
        ("Objective and constraints", "keep the API"),
    ]
    many = [
        user(f"EXACT CONTINUATION RECORD [Open risks or blockers] :: risk {i}") for i in range(50)
    ]
    assert len(exact_records(many)) == MAX_EXACT_RECORDS
    huge = [
        user(f"EXACT CONTINUATION RECORD [Open risks or blockers] :: {i} {'x' * 6_000}")
        for i in range(5)
    ]
    assert len(exact_records(huge)) == 2  # 16,384 characters in all


def test_exact_records_are_placed_verbatim_under_their_heading() -> None:
    records = [
        ("Exact next action", "run `make test` :: then commit"),
        ("Decisions and rationale", "use orjson"),
    ]
    placed = place_exact_records(LEDGER, records)
    sections = placed.split("## ")
    decisions = next(s for s in sections if s.startswith("Decisions and rationale"))
    next_action = next(s for s in sections if s.startswith("Exact next action"))
    assert "EXACT CONTINUATION RECORD [Decisions and rationale] :: use orjson" in decisions
    assert next_action.rstrip().endswith(
        "EXACT CONTINUATION RECORD [Exact next action] :: run `make test` :: then commit"
    )
    # The model's own text stays first in each section.
    assert next_action.index("item for") < next_action.index("EXACT")


# ---------------------------------------------------------------------------
# Fork input and shrinking


def test_fork_input_is_the_main_requests_messages_with_images_as_placeholders() -> None:
    """Regression: the fork stripped the handoff from the middle of the history, so its
    prefix was not the cached one. Images alone become placeholders (both requirement
    documents: no image data in a compaction request)."""
    handoff = Message(
        role="user", content="frontier", meta=MessageMeta(kind=KIND_HANDOFF, hidden=True)
    )
    pic = user([TextPart("see"), ImagePart("data:image/png;base64,AAAA")])
    thinking = assistant("answer", reasoning="secret chain of thought")
    sent = prepare_fork_input([handoff, pic, thinking])
    assert sent[0] is handoff and sent[2] is thinking
    assert sent[1].content == (TextPart("see"), TextPart(IMAGE_PLACEHOLDER))
    assert strip_images([pic]) == [sent[1]]


def history() -> list[Message]:
    out: list[Message] = [user("task")]
    for i in range(4):
        call = ToolCall(f"c{i}", "read_file" if i % 2 == 0 else "bash", "{}")
        out += [assistant(f"step {i}", [call]), tool_result(call.id, chr(ord("a") + i) * 3_000)]
    return out


def size(messages: list[Message]) -> int:
    return sum(len(m.text) for m in messages)


def test_shrink_order_is_files_then_oldest_round_then_halving_each_strictly_smaller() -> None:
    effects: dict[str, ToolEffect] = {"read_file": "read_only"}
    messages = history()
    first = shrink(messages, 0, effects)
    assert [m.text for m in first if m.role == "tool"] == [
        FILE_ELIDED,
        "b" * 3_000,
        FILE_ELIDED,
        "d" * 3_000,
    ]
    second = shrink(first, 1, effects)
    assert len(second) == len(first) - 1 and second[0].text == "step 0"
    third = shrink(second, 2, effects)
    assert max(len(m.text) for m in third) < max(len(m.text) for m in second)
    for before, after in ((messages, first), (first, second), (second, third)):
        assert size(after) < size(before)
        assert not find_orphans(after)


def test_shrink_falls_through_to_a_rule_that_still_removes_something() -> None:
    # Nothing re-readable: step 0 drops the oldest round instead.
    messages = [user("a"), assistant("b" * 100), user("c" * 100)]
    assert shrink(messages, 0, {}) == messages[1:]


# ---------------------------------------------------------------------------
# Kept tail and effect gates


def test_kept_tail_is_the_last_rounds_trimmed_to_20_percent() -> None:
    messages = history()
    tail = kept_tail(messages, 2, budget=100_000, count=estimate_message_tokens)
    assert tail == messages[-4:]
    small = kept_tail(messages, 2, budget=5_000, count=estimate_message_tokens)
    assert small == messages[-2:]  # one round of ~760 tokens fits 1,000; two do not
    assert kept_tail(messages, 0, budget=100_000, count=estimate_message_tokens) == []
    assert not find_orphans(small)


@pytest.mark.parametrize(
    ("post", "source", "window", "budget", "fails"),
    [
        (9_000, 10_000, 200_000, 180_000, "over 80 % of a large source"),
        (5_000, 5_500, 200_000, 180_000, None),  # a small source may stay near its size
        (100_000, 1_000_000, 200_000, 180_000, "over half the window"),
        (51_000, 1_000_000, 1_000_000, 900_000, "over 50,000"),
        (40_000, 1_000_000, 1_000_000, 900_000, None),
    ],
)
def test_effect_gates(post: int, source: int, window: int, budget: int, fails: str | None) -> None:
    verdict = check_gates(post, source, window, budget)
    if fails is None:
        assert verdict is None
    else:
        assert verdict is not None and fails in verdict


# ---------------------------------------------------------------------------
# One ledger for both paths: the host places its own facts in the model's summary


def test_the_host_places_the_todo_list_and_the_files_the_summary_left_out() -> None:
    todos = '{"todos": [{"content": "fix the parser", "status": "in_progress"}]}'
    history = [
        user("Fix the parser."),
        assistant(None, [ToolCall("t1", "todo_write", todos)]),
        tool_result("t1", "ok"),
        assistant(None, [ToolCall("e1", "edit_file", '{"path": "src/parser.py"}')]),
        tool_result("e1", "ok"),
    ]
    effects: dict[str, ToolEffect] = {"edit_file": "write", "todo_write": "write"}
    model_wrote = normalize_ledger("## Objective and constraints\nFix the parser.")
    ledger = place_host_facts(model_wrote, history, effects)
    active = ledger.split("## Active tasks and background work\n", 1)[1].split("\n## ", 1)[0]
    assert "- [in_progress] fix the parser" in active and "(none)" not in active
    mutations = ledger.split("## Workspace mutations\n", 1)[1].split("\n## ", 1)[0]
    assert "- src/parser.py" in mutations
    assert place_host_facts(ledger, history, effects) == ledger  # placed once, never twice
    assert [h for h in LEDGER_HEADINGS if f"## {h}" in ledger] == list(LEDGER_HEADINGS)
