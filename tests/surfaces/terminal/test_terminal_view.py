"""The terminal app's pure rules: the render limit, labels, the meter, the hint line,
which commands are refused, command and ``@path`` completion, the transcript entries
(and earlier pages put before them, and ``!command`` blocks), the queued lines, the
"earlier messages" line and the input history."""

from __future__ import annotations

from rich.cells import cell_len

from cairn.agent.commands import COMMANDS, HELP
from cairn.agent.events import QueuedPrompt
from cairn.agent.facade import SessionUsage
from cairn.agent.shell import ShellOutcome, shell_message
from cairn.messages import Message, MessageMeta, ToolCall, assistant, tool_result, user
from cairn.surfaces.labels import compact_label
from cairn.surfaces.tail import compaction_hint, stream_tail
from cairn.surfaces.terminal.transcript import Transcript, earlier_messages, more_label, window
from cairn.surfaces.terminal.view import (
    CONTEXT_FULL,
    RESULT_CHARS,
    History,
    Submission,
    age_text,
    classify,
    complete,
    completion,
    completion_hint,
    earlier_text,
    hint_text,
    mention_prefix,
    meter_text,
    one_line,
    path_completion,
    paths_hint,
    queued_text,
    refusal,
    render_limit,
    session_line,
    visible,
)


def test_only_the_latest_30_messages_render_10_when_expanded() -> None:
    items = list(range(45))
    assert render_limit(expanded=False) == 30 and render_limit(expanded=True) == 10
    assert visible(items, expanded=False) == items[-30:]
    assert visible(items, expanded=True) == items[-10:]
    assert visible(items[:7], expanded=True) == items[:7]
    assert visible(items[:30], expanded=False) == items[:30]
    assert visible([], expanded=False) == []
    assert len(items) == 45  # the list itself keeps everything


def block(**extra: object) -> Message:
    return Message(
        role="user",
        content="the summary",
        meta=MessageMeta(kind="compact_summary", synthetic=True, extra=extra),  # type: ignore[arg-type]
    )


def test_the_compact_block_label() -> None:
    label = compact_label(block(pre_tokens=41210, post_tokens=9830, strategy="llm"))
    assert label == "Conversation compacted · 41,210 → 9,830 tokens · llm"
    assert compact_label(block(strategy="fallback")) == "Conversation compacted · fallback"
    assert compact_label(block()) == "Conversation compacted"


def usage(
    tokens: int | None, budget: int | None, compactions: int, estimate: int | None = None
) -> SessionUsage:
    return SessionUsage(tokens, None, budget, compactions, estimate)


def test_the_meter() -> None:
    assert meter_text(usage(1234, 24576, 0)) == "context 1,234 / 24,576 tokens (5%) · 0 compactions"
    assert meter_text(usage(None, 24576, 1)) == "context – / 24,576 tokens · 1 compaction"
    assert meter_text(usage(500, None, 2)) == "context 500 tokens · 2 compactions"
    # No usage from the server: the estimate, marked as one; a count always wins.
    assert (
        meter_text(usage(None, 4096, 0, estimate=1501))
        == "context ~1,501 / 4,096 tokens (36%) · 0 compactions"
    )
    assert meter_text(usage(1600, 4096, 0, estimate=1501)).startswith("context 1,600 / 4,096")
    # The summary prepared in the background: a quiet last word, never the hint.
    assert meter_text(usage(500, None, 2), prepared="preparing").endswith(" · preparing summary")
    assert meter_text(usage(500, None, 2), prepared="ready").endswith(
        "2 compactions · summary ready"
    )
    assert meter_text(usage(500, None, 2), prepared=None) == "context 500 tokens · 2 compactions"


def test_the_meter_never_shows_a_number_over_the_budget() -> None:
    """Issue 29: ``~4,297 / 4,096 (104%)`` and ``~36,401 / 4,096`` were requests never
    sent — the next one compacts first, and the meter says so."""
    full = f"{CONTEXT_FULL} · 0 compactions"
    assert meter_text(usage(None, 4096, 0, estimate=4297)) == full
    assert meter_text(usage(None, 4096, 0, estimate=36_401)) == full
    assert meter_text(usage(5000, 4096, 1)) == f"{CONTEXT_FULL} · 1 compaction"
    # A count under the budget with an estimate over it: the next request still compacts.
    assert meter_text(usage(3000, 4096, 0, estimate=4200)) == full
    assert meter_text(usage(4096, 4096, 0)).startswith("context 4,096 / 4,096 tokens (100%)")


def test_an_at_path_completes_to_the_paths_common_start_then_the_first() -> None:
    assert mention_prefix("look at @src/ca") == "src/ca"
    assert mention_prefix("@") == ""
    assert mention_prefix("mail me@example.com") is None  # not at a word's start
    assert mention_prefix("@src/a.py and then") is None  # the cursor left the mention
    # Several: their common start when it adds something, else the first.
    assert path_completion("src/ca", ["src/cairn/", "src/cairn.egg-info/"]) == "src/cairn"
    assert path_completion("src/cairn", ["src/cairn/", "src/cairn.egg-info/"]) == "src/cairn/"
    # One folder: it keeps completing (no space); one file: done, a space after it.
    assert path_completion("sr", ["src/"]) == "src/"
    assert path_completion("src/a", ["src/app.py"]) == "src/app.py "
    assert path_completion("nothing", []) is None
    assert paths_hint(["src/", "a.py"]) == "@src/   @a.py"
    assert paths_hint([f"f{n}" for n in range(15)]).endswith("@f11   … 3 more")


def test_queued_lines_show_one_row_each_and_how_to_take_them_back() -> None:
    assert queued_text([]) == ""
    assert queued_text([QueuedPrompt("1", "first\nsecond"), QueuedPrompt("2", "then")]) == (
        "queued › first ⏎ second\nqueued › then   (Esc edits)"
    )


def test_a_shell_message_is_the_commands_block_not_a_prompt() -> None:
    transcript = Transcript()
    ran = shell_message(ShellOutcome("ls", "a.py\nb.py", True))
    failed = shell_message(ShellOutcome("false", "exit 1", False))
    transcript.add(user("list them"), 0)
    transcript.add(ran, 1)
    transcript.add(failed, 2)
    transcript.add(ran, 1)  # a repeat (a page read again) is one entry
    assert [e.kind for e in transcript.entries] == ["user", "shell", "shell"]
    block = transcript.entries[1]
    assert (block.text, block.detail, block.full, block.failed) == (
        "ls",
        "a.py ⏎ b.py",
        "a.py\nb.py",
        False,
    )
    assert transcript.entries[2].failed and transcript.entries[2].detail == "exit 1"


def test_the_hint_prefers_the_compaction_and_uses_the_shared_tail() -> None:
    long = "line one\nline two of the response that goes on"
    compacting = hint_text(compacting=True, compaction_text=long, status="streaming", streamed="x")
    assert compacting == compaction_hint(long)
    assert hint_text(compacting=True, compaction_text="", status="idle", streamed="") == (
        "✻ Compacting"
    )
    streaming = hint_text(compacting=False, compaction_text="", status="streaming", streamed=long)
    assert streaming == f"⠋ {stream_tail(long)}"
    assert hint_text(compacting=False, compaction_text="", status="idle", streamed=long) == ""
    assert hint_text(compacting=False, compaction_text="", status="tools", streamed="", frame=1)


def test_input_is_a_prompt_a_command_or_an_unknown_command() -> None:
    assert classify("  ") == Submission("empty", "")
    assert classify("/compact focus on the API ") == Submission(
        "command", "/compact focus on the API", "/compact", "focus on the API"
    )
    assert classify("/resume").command == "/resume"
    assert classify("/frobnicate now").kind == "unknown"
    assert classify("/etc/hosts is odd").kind == "prompt"
    assert classify("fix the bug").kind == "prompt"
    # A multi-line prompt: a command still ends at any whitespace, a prompt stays whole.
    assert classify("/compact\nfocus on\nthe API") == Submission(
        "command", "/compact\nfocus on\nthe API", "/compact", "focus on\nthe API"
    )
    assert classify("/status\n") == Submission("command", "/status", "/status")
    assert classify("  line one\n\tline two \n") == Submission(
        "prompt", "  line one\n\tline two \n"
    )


def test_a_typed_slash_prefix_completes_to_the_commands_it_can_become() -> None:
    assert complete("/") == list(COMMANDS)
    assert complete("/c") == ["/compact", "/clear", "/context", "/cost"]
    assert complete("/co") == ["/compact", "/context", "/cost"]
    assert completion("/m") == "/model "  # it takes a name
    assert complete("/cl") == ["/clear"]
    assert complete("/compact") == ["/compact"]
    assert complete("/RES") == []
    for typed in ("", "c", "compact", "/x", "/compact ", "/compact now", "/c\n", "x /c"):
        assert complete(typed) == [], typed
    # Tab: the unique or the first match; a command taking an argument gets a space.
    assert completion("/c") == "/compact "
    assert completion("/cl") == "/clear"
    assert completion("/r") == "/resume "
    assert completion("/h") == "/help"
    assert completion("/x") is None and completion("hello") is None


def test_the_completion_line_comes_from_the_help_text() -> None:
    for name in COMMANDS:
        (hint,) = [line for line in HELP.splitlines() if line.strip().startswith(name + " ")]
        usage, description = completion_hint(name).split("  ", 1)
        assert usage.startswith(name) and f"  {usage}" in hint and hint.endswith(description)
    assert completion_hint("/com") == (
        "/compact [instructions]  summarize the conversation now (instructions focus the summary)"
    )
    assert completion_hint("/c") == "/compact [instructions]   /clear   /context   /cost"
    assert completion_hint("/").split("   ") == [
        "/compact [instructions]",
        "/clear",
        "/resume [id]",
        "/fork",
        "/rewind [n] [files]",
        "/status",
        "/context",
        "/cost",
        "/model [name]",
        "/mcp",
        "/help",
    ]
    assert completion_hint("/compact now") == "" and completion_hint("hi") == ""


def test_leaving_the_session_is_refused_while_it_works() -> None:
    for command in ("/clear", "/resume", "/fork", "/rewind"):
        assert refusal(command, "idle", busy=False) is None
        for status in ("streaming", "tools", "compacting"):
            reason = refusal(command, status, busy=False)
            assert reason is not None and status in reason and command in reason
        assert refusal(command, "idle", busy=True) is not None
    # The runtime judges /compact itself (ignored while streaming, skipped when running).
    assert refusal("/compact", "streaming", busy=True) is None


def test_a_streamed_response_becomes_one_entry_and_tool_calls_get_results() -> None:
    t = Transcript()
    t.add(user("read a.py"))
    call = ToolCall("call_1", "read_file", '{"path": "a.py"}')
    head = assistant("", [call])
    t.streamed(head.id, "")  # reasoning only: nothing to show yet
    assert [e.kind for e in t.entries] == ["user"]
    t.add(head)
    t.add(tool_result("call_1", "line 1\nline 2"))
    tool = t.entries[-1]
    assert tool.kind == "tool" and tool.detail == "line 1 ⏎ line 2"
    assert tool.text == 'read_file {"path": "a.py"}'
    answer = assistant("It has two lines.")
    t.streamed(answer.id, "It has")
    t.streamed(answer.id, "It has two")
    version = t.entries[-1].version
    t.add(answer)
    final = t.entries[-1]
    assert final.text == "It has two lines." and not final.streaming and final.version > version
    assert [e.kind for e in t.entries] == ["user", "tool", "assistant"]


def test_a_tool_result_keeps_its_whole_text_when_the_short_form_leaves_some_out() -> None:
    t = Transcript()
    long = "\n".join(f"{n:6}\tthe ledger balances  " for n in range(1, 41)) + "\n"
    for call_id, text in (("a", long), ("b", "one line"), ("c", ""), ("d", "x" * 200)):
        t.tool_started(ToolCall(call_id, "read_file", "{}"))
        t.tool_result(call_id, tool_result(call_id, text))
    full, single, empty, wide = t.entries
    assert full.detail == one_line(long) and full.detail.endswith("…")
    assert full.full == long.rstrip() and full.full.splitlines()[39].endswith(
        "40\tthe ledger balances"
    )
    assert (single.detail, single.full) == ("one line", "")
    assert (empty.detail, empty.full) == ("(no output)", "")
    assert len(wide.detail) == 120 and wide.full == "x" * 200
    assert more_label(full.full) == "full result · 40 lines"
    assert more_label(wide.full) == "full result · 200 characters"
    version = full.version
    t.tool_result("a", tool_result("a", long))  # the same result again: no redraw
    assert full.version == version


def test_a_wide_character_result_is_cut_by_terminal_cells_not_characters() -> None:
    """Issue 29 (b): 120 Chinese characters are 240 cells, and wrapped under the result."""
    t = Transcript()
    wide = "账本平衡" * 60  # 240 characters, 480 cells
    t.tool_started(ToolCall("w", "read_file", "{}"))
    t.tool_result("w", tool_result("w", wide))
    entry = t.entries[-1]
    # 59 of them (118 cells) and the ellipsis: a 60th would pass the limit.
    assert entry.detail == wide[:59] + "…" and cell_len(entry.detail) == RESULT_CHARS - 1
    assert entry.full == wide
    # A wide character that would straddle the limit is left out whole.
    assert one_line("a" + "中" * 10, 10) == "a中中中中…" and cell_len("a中中中中…") == 10
    assert one_line("中" * 10, 10) == "中中中中…"  # 9 cells: the fifth would make 11
    assert one_line("中" * 5, 10) == "中" * 5  # exactly the limit: whole
    assert one_line("x" * 200) == "x" * 119 + "…"  # narrow text as before


def test_a_streamed_text_that_ends_in_calls_only_goes_away() -> None:
    t = Transcript()
    message = assistant("", [ToolCall("c", "bash", "{}")])
    t.streamed(message.id, "let me")
    t.add(message)
    assert [e.kind for e in t.entries] == ["tool"]


def test_an_earlier_page_goes_first_and_a_call_split_from_its_result_is_one_entry() -> None:
    call = ToolCall("c1", "bash", '{"command": "ls"}')
    page = [user("list them"), assistant("", [call]), tool_result("c1", "a.py", name="bash")]
    page += [assistant("One file."), user("thanks")]
    t = Transcript()
    # The later page begins at the call's result (position 2): it knows only the name.
    assert t.prepend(page[2:], 2) == 3
    assert [(e.kind, e.text, e.position) for e in t.entries] == [
        ("tool", "bash", 2),
        ("assistant", "One file.", 3),
        ("user", "thanks", 4),
    ]
    tool = t.entries[0]
    assert t.prepend(page[:2], 0) == 1  # the call's entry is the one already held
    assert [(e.kind, e.text, e.position) for e in t.entries] == [
        ("user", "list them", 0),
        ("tool", 'bash {"command": "ls"}', 1),
        ("assistant", "One file.", 3),
        ("user", "thanks", 4),
    ]
    assert t.entries[1] is tool and tool.detail == "a.py"  # the result it had stays
    assert t.get(page[0].id) is t.entries[0]


def test_the_earlier_line_counts_the_sessions_messages_before_the_first_entry_shown() -> None:
    t = Transcript()
    t.prepend([user(f"q{n}") if n % 2 else assistant(f"a{n}") for n in range(40, 50)], 40)
    t.notice("resumed session long")
    for n in (50, 51):
        t.add(user(f"live {n}"), n)
    entries = t.entries
    assert window(entries, expanded=False, top=None) == entries  # 13: all fit
    assert earlier_messages(window(entries, expanded=True, top=None), 52) == 43
    assert earlier_messages(window(entries, expanded=False, top=5), 52) == 45
    assert window(entries, expanded=True, top=5) == entries[5:]  # went up: from there on
    assert earlier_messages(entries[10:11], 52) == 52  # the app's own line: all before it
    assert earlier_text(9_971) == "9,971 earlier messages — scroll up to load (Ctrl+Home)"
    assert earlier_text(1) == "1 earlier message — scroll up to load (Ctrl+Home)"
    assert earlier_text(0) == "more above — scroll up to show (Ctrl+Home)"


def test_history_goes_back_and_returns_to_the_draft() -> None:
    h = History()
    assert h.back("draft") == "draft"
    for line in ("one", "two", "two", ""):
        h.add(line)
    assert h.back("draft") == "two"
    assert h.back("two") == "one"
    assert h.back("one") == "one"
    assert h.forward("one") == "two"
    assert h.forward("two") == "draft"
    assert h.forward("draft") == "draft"


def test_a_session_in_the_picker() -> None:
    assert session_line("fix the\nbug", 4, 30) == "fix the ⏎ bug · 4 messages · just now"
    assert session_line("", 1, 7200) == "(no prompt yet) · 1 message · 2 h ago"
    assert age_text(300) == "5 min ago" and age_text(86400) == "1 day ago"
    assert age_text(3 * 86400) == "3 days ago"
