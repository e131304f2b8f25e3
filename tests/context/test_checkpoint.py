"""The bounded active-task checkpoint (DESIGN §1, §5.6; issue 9 item 3).

The user's words survive a compaction within a bound: first and latest
message and the constraints verbatim, older messages newest first within the
cap, oversized ones saved to a file in the session folder and kept as head +
tail + path. Real files, real fsync; the LLM path through a real local server.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cairn.context.budget import input_budget
from cairn.context.checkpoint import (
    ACTIVE_TASK_KEY,
    CONSTRAINT_LINE_TOKENS,
    MAX_CHECKPOINT_TOKENS,
    MIN_CHECKPOINT_TOKENS,
    USER_MESSAGES_SUBDIR,
    ActiveTask,
    CheckpointEntry,
    active_task_of,
    checkpoint_cap,
    constraint_lines,
    is_constraint_line,
    is_oversized,
    saved_message_path,
    stub_text,
)
from cairn.context.effects import ToolEffects
from cairn.context.fallback import plan_fallback
from cairn.context.ledger import build_compact_block, render_ledger
from cairn.context.llm_summarizer import LLMSummarizer
from cairn.context.summarizer import SummaryRequest
from cairn.context.tracker import FixedContext
from cairn.messages import (
    KIND_COMPACT_SUMMARY,
    Message,
    MessageMeta,
    ToolCall,
    assistant,
    new_id,
    system,
    tool_result,
    user,
)
from cairn.provider import ModelConfig, OpenAIProvider
from cairn.tokens import estimate_message_tokens, estimate_tokens
from support.openai_server import (
    OpenAIServer,
    Reply,
)

EFFECTS: ToolEffects = {"read_file": "read_only", "bash": "write", "edit_file": "write"}
WINDOW = 32_768
BUDGET = input_budget(WINDOW)  # 24,576
CAP = checkpoint_cap(None, BUDGET)  # 15 %: 3,686


def task_of(
    messages: list[Message], cap: int | None = None, artifacts: Path | None = None
) -> ActiveTask:
    return active_task_of(messages, cap_tokens=cap, input_budget=BUDGET, artifacts_dir=artifacts)


def words(tokens: int, tag: str) -> str:
    """About ``tokens`` estimated tokens of distinct ASCII words."""
    out: list[str] = []
    i = 0
    while estimate_tokens(" ".join(out)) < tokens:
        out.append(f"{tag}{i}")
        i += 1
    return " ".join(out)


def spec(tokens: int) -> str:
    """A pasted document: numbered lines, mixed ASCII and CJK, about ``tokens`` long."""
    lines: list[str] = []
    i = 0
    while estimate_tokens("\n".join(lines)) < tokens:
        lines.append(f"§{i:05d} the exporter writes column {i} as UTF-8 文本字段 {i}")
        i += 1
    return "\n".join(lines) + "\n"


def carried(block: Message) -> list[CheckpointEntry]:
    raw = block.meta.extra[ACTIVE_TASK_KEY]
    assert isinstance(raw, list)
    entries = [CheckpointEntry.from_json(r, n) for n, r in enumerate(raw, 1)]
    return [e for e in entries if e is not None]


# ---------------------------------------------------------------------------
# The rules


@pytest.mark.parametrize(
    "line",
    [
        "You must keep the public API.",
        "Never push to main.",
        "Always run the tests first",
        "Don't touch the migrations",
        "don’t rename files",
        "Do not add dependencies.",
        "Only change src/exporter.py",
        "Fix it without new imports",
        "KEEP the CSV header as is",
        "必须保持接口不变",
        "不要修改测试",
        "禁止提交到主分支",
        "不能删除旧的配置",
        "只修改 exporter 模块",
    ],
)
def test_lines_that_state_a_rule_are_constraints(line: str) -> None:
    assert is_constraint_line(line)


@pytest.mark.parametrize(
    "line",
    [
        "Fix the CSV export.",
        "The exporter writes rows.",
        "Mustard is a colour",  # a whole word only
        "这只是一个例子",  # 只是: "merely", not "only"
        "请修复导出功能",
        "",
    ],
)
def test_other_lines_are_not(line: str) -> None:
    assert not is_constraint_line(line)


def test_constraint_lines_are_lines_not_messages() -> None:
    text = (
        "Please fix the exporter.\n"
        "  Never change the file format.  \n"
        "It writes CSV.\n"
        "不要修改测试。\n"
        "Never change the file format.\n"  # said twice, kept once
    )
    assert constraint_lines(text) == ["Never change the file format.", "不要修改测试。"]


def test_a_long_line_is_split_into_its_sentences() -> None:
    filler = "The exporter in src/export.py has many parts and history. " * 30
    text = filler + "You must keep export.py small. " + filler + "只修改导出模块。" + filler
    assert constraint_lines(text) == ["You must keep export.py small.", "只修改导出模块。"]


def test_a_sentence_too_long_for_a_rule_is_cut() -> None:
    sentence = "You must keep " + "every single column name " * 100 + "unchanged."
    [line] = constraint_lines(sentence)
    assert line.startswith("You must keep every single column name")
    assert line.endswith("…")
    assert estimate_tokens(line) <= CONSTRAINT_LINE_TOKENS


def test_checkpoint_cap_is_a_share_of_the_input_budget_clamped() -> None:
    assert checkpoint_cap(None, 24_576) == 3_686  # 15 %
    assert checkpoint_cap(2_000, 24_576) == 2_000  # what the pipeline asks for
    assert checkpoint_cap(None, 1_000) == MIN_CHECKPOINT_TOKENS
    assert checkpoint_cap(None, 1_000_000) == MAX_CHECKPOINT_TOKENS


def test_oversized_is_more_than_a_quarter_of_the_cap() -> None:
    assert not is_oversized("x" * 4 * 1_000, 4_000)  # 1,000 tokens = a quarter
    assert is_oversized("x" * (4 * 1_000 + 1), 4_000)
    assert is_oversized("测" * 1_001, 4_000)  # CJK counts one token a character


def test_saved_message_path_is_deterministic_and_safe(tmp_path: Path) -> None:
    plain = saved_message_path(tmp_path, "msg_0123abcd")
    assert plain == (tmp_path / USER_MESSAGES_SUBDIR / "msg_0123abcd.txt").absolute()
    assert saved_message_path(tmp_path, "msg_0123abcd") == plain
    odd = saved_message_path(tmp_path, "../../etc/passwd")
    assert odd.parent == plain.parent and not odd.name.startswith(".")
    # Two ids that sanitize alike still get distinct files.
    assert saved_message_path(tmp_path, "a/b") != saved_message_path(tmp_path, "a_b")
    assert saved_message_path(tmp_path, "a/b") != saved_message_path(tmp_path, "a:b")


def test_stub_keeps_head_and_tail_and_says_where_the_rest_is(tmp_path: Path) -> None:
    text = spec(6_000)
    path = tmp_path / "m.txt"
    stub = stub_text(text, 4_000, path)
    assert text.startswith(stub.split("\n[…", 1)[0])
    assert text.endswith(stub.rsplit("…]\n", 1)[1])
    assert str(path) in stub and "read_file" in stub
    assert estimate_tokens(stub) < 4_000 // 4
    without = stub_text(text, 4_000, None)
    assert "session transcript" in without and "read_file" not in without
    assert len(without) < len(stub)


def test_stub_of_cjk_text_is_bounded_in_tokens() -> None:
    text = "中文内容没有换行" * 5_000
    stub = stub_text(text, 4_000, None)
    assert estimate_tokens(stub) <= 4_000 // 8 + 60


# ---------------------------------------------------------------------------
# What the checkpoint keeps


def test_first_latest_and_constraints_verbatim_whatever_the_history(tmp_path: Path) -> None:
    first = user("Port the exporter to the new storage API.")
    rule = user("Never change the on-disk format.\nAlso, tidy up the imports please.")
    history = [first, rule]
    history += [user(words(150, f"r{i}_")) for i in range(200)]
    last = user("Now update the README and stop.")
    history.append(last)
    task = task_of(history, artifacts=tmp_path)
    text = task.render()
    assert task.entries[0].id == first.id and first.text in text
    assert task.entries[-1].id == last.id and last.text in text
    # The rule's message is left out, its rule is not.
    assert rule.text not in text
    assert "\nNever change the on-disk format.\n" in text
    assert task.tokens() <= CAP
    assert task.left_out > 150


def test_older_messages_newest_first_within_the_cap_in_order() -> None:
    history = [user(words(100, f"m{i}_")) for i in range(100)]
    task = task_of(history)
    numbers = [e.number for e in task.entries]
    assert numbers == sorted(numbers)  # chronological in the block
    # First, then one unbroken run up to the latest: the newest ones win.
    assert numbers[0] == 1 and numbers[-1] == 100
    run = numbers[1:]
    assert run == list(range(run[0], 101))
    assert task.left_out == run[0] - 2 > 0
    assert task.tokens() <= CAP
    text = task.render()
    line = f"[{task.left_out} earlier user message(s) left out here; the full session transcript"
    assert text.count(line) == 1
    # The line stands where the messages are missing: after the first.
    assert text.index(history[0].text) < text.index(line) < text.index(history[run[0] - 1].text)


def test_everything_fits_then_nothing_is_left_out() -> None:
    history = [user(f"step {i}") for i in range(10)]
    task = task_of(history)
    assert [e.text for e in task.entries] == [m.text for m in history]
    assert task.left_out == 0 and "left out" not in task.render()


def test_constraints_have_a_total_cap() -> None:
    history = [user("Start.")]
    history += [user(f"Never rename module number {i} in the package.") for i in range(600)]
    history.append(user("Go."))
    task = task_of(history)
    assert task.tokens() <= CAP
    kept = [line for e in task.entries for line in e.constraints]
    shown = [e for e in task.entries if e.text is not None]
    assert kept and task.dropped_constraints > 0
    assert len(kept) + len(shown) - 2 + task.dropped_constraints == 600
    assert "constraint line(s) that did not fit" in task.render()


def test_typed_constraints_outrank_lines_of_a_paste() -> None:
    paste = "\n".join(f"Rows must be sorted by column {i}." for i in range(2_000))
    history = [user("Start.")]
    history += [user(f"Never break the CLI flag --opt-{i}.") for i in range(5)]
    history += [user(words(200, f"o{i}_")) for i in range(40)]
    history += [user(paste), user("Go on.")]
    task = task_of(history)
    text = task.render()
    for i in range(5):
        assert f"Never break the CLI flag --opt-{i}." in text
    pasted = [line for e in task.entries if e.oversized for line in e.constraints]
    # One paste gives at most a sixteenth of the cap.
    assert estimate_tokens("\n".join(pasted)) <= CAP // 16


def test_latest_message_verbatim_unless_oversized() -> None:
    latest = user(words(CAP // 4 - 10, "l"))
    assert task_of([user("a"), latest]).entries[-1].text == latest.text
    huge = user(words(CAP, "h"))
    entry = task_of([user("a"), huge]).entries[-1]
    assert entry.oversized and entry.text != huge.text


def test_an_oversized_last_message_stays_in_the_tail() -> None:
    # The checkpoint holds only its stub, so the fallback does not drop it from the tail.
    last = user(words(3_000, "z"))
    history = [user("go"), assistant("ok"), last]
    plan = plan_fallback(history, window=200_000, input_budget=168_000, tool_effects=EFFECTS)
    assert carried(plan.replacement[0])[-1].oversized
    assert last.id in [m.id for m in plan.replacement[1:]]


# ---------------------------------------------------------------------------
# Oversized messages: saved in full, once


def test_a_19k_paste_is_saved_and_fits_a_32k_window(tmp_path: Path) -> None:
    paste = spec(19_000)
    assert 18_500 < estimate_tokens(paste) < 19_500
    selection = user("Implement this spec. Don't change the public API.\n" + paste)
    history: list[Message] = [user("We are building the exporter."), selection]
    call = ToolCall(new_id("call"), "bash", '{"command": "pytest"}')
    history += [assistant("Running the tests.", [call]), tool_result(call.id, "3 passed")]
    plan = plan_fallback(
        history, window=WINDOW, input_budget=BUDGET, tool_effects=EFFECTS, artifacts_dir=tmp_path
    )
    path = saved_message_path(tmp_path, selection.id)
    assert path.read_bytes() == selection.text.encode("utf-8")  # byte for byte
    block = plan.replacement[0].text
    assert str(path) in block and "read_file" in block
    assert selection.text[:300] in block  # the head
    assert paste.rstrip("\n").rsplit("\n", 1)[1] in block  # the tail
    assert "Don't change the public API." in block
    assert not plan.raised
    assert plan.post_tokens <= BUDGET // 2


def test_a_saved_message_is_never_saved_again(tmp_path: Path) -> None:
    paste = user(spec(8_000))
    first = plan_fallback(
        [user("go"), paste, assistant("ok")],
        window=WINDOW,
        input_budget=BUDGET,
        tool_effects=EFFECTS,
        artifacts_dir=tmp_path,
    )
    path = saved_message_path(tmp_path, paste.id)
    assert path.read_text() == paste.text
    # Mark the file: a rewrite would replace the mark.
    path.write_text("marked")
    block = first.replacement[0]
    again = [block, paste, user("next")]  # the raw paste still in a kept tail
    second = plan_fallback(
        again, window=WINDOW, input_budget=BUDGET, tool_effects=EFFECTS, artifacts_dir=tmp_path
    )
    assert path.read_text() == "marked"
    entries = carried(second.replacement[0])
    assert [e.id for e in entries].count(paste.id) == 1
    assert next(e for e in entries if e.id == paste.id).text == carried(block)[1].text
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_without_a_session_folder_the_stub_points_to_the_transcript() -> None:
    paste = user(spec(8_000))
    task = task_of([user("go"), paste])
    entry = task.entries[-1]
    assert entry.oversized and entry.saved is None
    assert "session transcript" in (entry.text or "")


def test_a_failed_save_points_to_the_transcript(tmp_path: Path) -> None:
    blocker = tmp_path / "session"
    blocker.write_text("a file where the folder should be")
    paste = user(spec(8_000))
    task = task_of([user("go"), paste], artifacts=blocker)
    entry = task.entries[-1]
    assert entry.oversized and entry.saved is None
    assert "session transcript" in (entry.text or "") and str(blocker) not in (entry.text or "")


def test_an_old_block_with_plain_strings_is_carried_and_bounded(tmp_path: Path) -> None:
    huge = spec(10_000)
    old = Message(
        role="user",
        content="(an old compact block)",
        meta=MessageMeta(
            kind=KIND_COMPACT_SUMMARY, synthetic=True, extra={ACTIVE_TASK_KEY: ["Goal.", huge]}
        ),
    )
    task = task_of([old, user("Continue.")], artifacts=tmp_path)
    assert [e.number for e in task.entries] == [1, 2, 3]
    assert task.entries[0].text == "Goal."
    assert task.entries[1].oversized and task.entries[1].saved is not None
    assert Path(task.entries[1].saved).read_text() == huge
    assert task.tokens() <= CAP


# ---------------------------------------------------------------------------
# Determinism and carry-over


def test_same_input_same_block_byte_for_byte(tmp_path: Path) -> None:
    history = [user("Goal: a CSV exporter. 必须保持接口不变。"), user(spec(9_000))]
    history += [user(words(300, f"x{i}_")) for i in range(30)]
    one = task_of(history, artifacts=tmp_path)
    two = task_of(history, artifacts=tmp_path)
    assert one == two
    ledger = render_ledger({})
    assert build_compact_block(ledger, one).text == build_compact_block(ledger, two).text
    assert one.to_json() == two.to_json()


def test_carried_entries_are_the_bounded_ones(tmp_path: Path) -> None:
    history: list[Message] = [user("The goal.")]
    sizes = []
    for round_ in range(12):
        history += [user(words(250, f"c{round_}_{i}_")) for i in range(20)]
        task = task_of(history, artifacts=tmp_path)
        block = build_compact_block(render_ledger({}), task)
        # The next compaction sees the block first, then what came since.
        history = [block]
        sizes.append(task.tokens())
        assert carried(block) == list(task.entries)
        assert task.entries[0].text == "The goal."
    assert max(sizes) <= CAP
    assert max(sizes) - min(sizes[2:]) < CAP // 4  # no growth round after round
    assert task.total == 1 + 12 * 20


def test_a_message_in_the_kept_tail_is_not_added_twice() -> None:
    a, b = user("first ask"), user("second ask")
    block = build_compact_block(render_ledger({}), task_of([a, b]))
    task = task_of([block, b, assistant("ok"), user("third ask")])
    assert [e.text for e in task.entries] == ["first ask", "second ask", "third ask"]


# ---------------------------------------------------------------------------
# The regression: the checkpoint no longer grows without limit


def test_four_hundred_rounds_at_32k_keep_the_block_bounded(tmp_path: Path) -> None:
    """400 rounds of 100-token user messages at a 32k window.

    Before the bound, the checkpoint held every user message: the replacement
    passed half the input budget within ~120 rounds and kept growing.
    Bound stated here: the block is at most the ledger's ~2,000 tokens plus
    the checkpoint cap plus 300 for the preface and tags.
    """
    line = BUDGET * 8 // 10
    cap = int(BUDGET * 0.15)
    bound = 2_000 + cap + 300
    first = user("Objective: migrate the storage layer. Never change the on-disk format.")
    history: list[Message] = [first]
    compactions = 0
    last: Message = first
    for r in range(400):
        last = user(f"round {r}: " + words(95, f"w{r}_"))
        call = ToolCall(new_id("call"), "bash", f'{{"command": "make step{r}"}}')
        history += [
            last,
            assistant(f"Working on round {r}.", [call]),
            tool_result(call.id, words(300, f"out{r}_")),
            assistant(f"Round {r} done."),
        ]
        if sum(estimate_message_tokens(m) for m in history) <= line:
            continue
        plan = plan_fallback(
            history,
            window=WINDOW,
            input_budget=BUDGET,
            tool_effects=EFFECTS,
            checkpoint_tokens=cap,
            artifacts_dir=tmp_path,
        )
        compactions += 1
        block = plan.replacement[0]
        assert plan.post_tokens <= BUDGET // 2
        assert estimate_message_tokens(block) <= bound
        assert first.text in block.text and last.text in block.text
        history = list(plan.replacement)
    assert compactions >= 15


# ---------------------------------------------------------------------------
# The LLM path uses the same checkpoint


SUMMARY = (
    "<summary>\n## Objective and constraints\nShip the exporter.\n"
    "## Decisions and rationale\n(none)\n## Workspace mutations\n(none)\n"
    "## Verification evidence\n(none)\n## Active tasks and background work\n(none)\n"
    "## Open risks or blockers\n(none)\n## Exact next action\nRun the tests.\n</summary>"
)


def test_the_llm_summary_carries_the_bounded_checkpoint(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    model = ModelConfig(model="m", base_url=openai_server.base_url, context_window=WINDOW)
    paste = user("Use this log:\n" + spec(12_000))
    history: list[Message] = [user("Find the crash. Do not touch the tests.")]
    history += [user(words(200, f"q{i}_")) for i in range(60)]
    history += [paste, assistant("Looking."), user("Go.")]
    openai_server.script(Reply(text=SUMMARY))
    request = SummaryRequest(
        messages=tuple(history),
        fixed=FixedContext((system("You are a coding agent."),)),
        window=WINDOW,
        input_budget=BUDGET,
        trigger="manual",
        checkpoint_tokens=2_000,
        artifacts_dir=tmp_path,
    )
    summary = asyncio.run(LLMSummarizer(OpenAIProvider(model), model).summarize(request))
    block = summary.replacement[0]
    task = ActiveTask(tuple(carried(block)), total=carried(block)[-1].number)
    assert task.render() in block.text
    assert task.tokens() <= 2_000
    assert "Find the crash. Do not touch the tests." in block.text and "\nGo.\n" in block.text
    assert saved_message_path(tmp_path, paste.id).read_text() == paste.text


# ---------------------------------------------------------------------------
# Property: any history of user messages gives a checkpoint within its cap

CHUNKS = ["word ", "测试中文", "ページ ", "line\n", "must keep it\n", "不要修改\n", '{"k": 1} ']


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    messages: list[Message] = []
    for i in range(draw(st.integers(1, 12))):
        tokens = draw(st.one_of(st.integers(1, 400), st.integers(1, 30_000)))
        chunk = draw(st.sampled_from(CHUNKS))
        text = f"m{i} " + chunk * max(1, tokens // max(1, estimate_tokens(chunk)))
        messages.append(user(text))
        if draw(st.booleans()):
            messages.append(assistant("ok"))
    return messages


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    history=histories(),
    cap=st.integers(MIN_CHECKPOINT_TOKENS, 8_000),
    save=st.booleans(),
    recompact=st.booleans(),
)
def test_property_the_checkpoint_is_within_its_cap(
    history: list[Message], cap: int, save: bool, recompact: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        artifacts = Path(tmp) if save else None
        task = task_of(history, cap, artifacts)
        if recompact:
            block = build_compact_block(render_ledger({}), task)
            task = task_of([block, user("one more")], cap, artifacts)
        assert task.tokens() <= cap
        numbers = [e.number for e in task.entries]
        assert numbers == sorted(set(numbers))
        typed = [m for m in history if m.role == "user"]
        assert task.entries[0].id == typed[0].id
        if recompact:
            assert task.entries[-1].text == "one more"
        else:
            assert task.entries[-1].id == typed[-1].id
        for entry in task.entries:
            if entry.saved is not None:
                original = next(m for m in typed if m.id == entry.id)
                assert Path(entry.saved).read_text() == original.text
            elif entry.verbatim and not recompact:
                assert entry.text == next(m for m in typed if m.id == entry.id).text
