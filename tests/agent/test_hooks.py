"""Hooks as real subprocesses: seed 004 "PreCompact 和 PostCompact 钩子事件", scenarios 1–5.

Every hook here is a real script written into ``tmp_path`` and run through
``/bin/sh``; nothing about the subprocess path is mocked.
"""

from __future__ import annotations

import asyncio
import json
import stat
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from cairn.agent.hooks import (
    DRAIN_GRACE_S,
    MAX_NOTICE_CHARS,
    MAX_STDOUT_BYTES,
    HookRunner,
)
from cairn.agent.settings import HooksSettings, load_settings
from cairn.context.hooks import (
    KIND_SESSION_START,
    MAX_REMINDER_CHARS,
    CompactionHooks,
    HookOutcome,
    cap_reminder,
    session_start_reminder,
)

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def script(directory: Path, name: str, body: str) -> str:
    """An executable bash script; returns the command that runs it."""
    path = directory / name
    path.write_text("#!/usr/bin/env bash\n" + body, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


def hooks_of(
    events: dict[str, list[tuple[str | None, list[str | tuple[str, float]]]]],
) -> HooksSettings:
    """``{event: [(matcher, [command or (command, timeout), …]), …]}`` as settings."""
    raw: dict[str, list[dict[str, Any]]] = {}
    for event, groups in events.items():
        raw[event] = []
        for matcher, commands in groups:
            entries = []
            for c in commands:
                command, timeout = (c, 60.0) if isinstance(c, str) else c
                entries.append({"type": "command", "command": command, "timeout": timeout})
            group: dict[str, Any] = {"hooks": entries}
            if matcher is not None:
                group["matcher"] = matcher
            raw[event].append(group)
    return HooksSettings.model_validate(raw)


def runner(settings: HooksSettings, ws: Path) -> HookRunner:
    return HookRunner(
        settings,
        session_id="s-123",
        transcript_path=ws / "transcript.jsonl",
        cwd=ws,
    )


def test_hook_runner_implements_the_protocol(ws: Path) -> None:
    hooks: CompactionHooks = runner(HooksSettings(), ws)
    assert run(hooks.pre_compact("auto", None)) == HookOutcome()


# --- scenario 1 --------------------------------------------------------------


def test_scenario_1_pre_compact_receives_instructions_and_trigger_and_stdout_is_merged(
    ws: Path, bin_dir: Path
) -> None:
    first = script(
        bin_dir,
        "pre1.sh",
        'cat > "$CAIRN_PROJECT_DIR/pre-input.json"\n'
        'pwd > "$CAIRN_PROJECT_DIR/pre-cwd.txt"\n'
        'echo "Keep the list of failing tests."\n',
    )
    second = script(bin_dir, "pre2.sh", 'printf "Keep every file path.\\n\\n"\n')
    silent = script(bin_dir, "pre3.sh", "cat > /dev/null\n")
    hooks = runner(hooks_of({"PreCompact": [(None, [first, silent, second])]}), ws)

    outcome = run(hooks.pre_compact("manual", "focus on the parser"))

    received = json.loads((ws / "pre-input.json").read_text())
    assert received == {
        "session_id": "s-123",
        "transcript_path": str(ws / "transcript.jsonl"),
        "cwd": str(ws),
        "hook_event_name": "PreCompact",
        "trigger": "manual",
        "compact_instructions": "focus on the parser",
        "custom_instructions": "focus on the parser",
    }
    assert Path((ws / "pre-cwd.txt").read_text().strip()).resolve() == ws.resolve()
    # stdout of each hook, stripped, joined by a blank line; empty output adds nothing
    assert outcome.output == "Keep the list of failing tests.\n\nKeep every file path."
    assert outcome.notices == ()
    assert outcome.blocked is None


def test_scenario_1_without_custom_instructions_the_field_is_empty(ws: Path, bin_dir: Path) -> None:
    hook = script(bin_dir, "pre.sh", 'cat > "$CAIRN_PROJECT_DIR/pre-input.json"\n')
    run(runner(hooks_of({"PreCompact": [(None, [hook])]}), ws).pre_compact("auto", None))
    received = json.loads((ws / "pre-input.json").read_text())
    assert received["trigger"] == "auto"
    assert received["compact_instructions"] == ""


# --- scenario 2 --------------------------------------------------------------


def test_scenario_2_post_compact_receives_the_compact_summary(ws: Path, bin_dir: Path) -> None:
    hook = script(bin_dir, "post.sh", 'cat > "$CAIRN_PROJECT_DIR/post-input.json"\n')
    summary = "## Primary request\nFix the parser — 修复解析器.\n"
    outcome = run(
        runner(hooks_of({"PostCompact": [(None, [hook])]}), ws).post_compact("auto", summary)
    )
    received = json.loads((ws / "post-input.json").read_text(encoding="utf-8"))
    assert received["hook_event_name"] == "PostCompact"
    assert received["trigger"] == "auto"
    assert received["compact_summary"] == summary
    assert received["session_id"] == "s-123"
    assert outcome == HookOutcome()


# --- scenarios 3 and 4 -------------------------------------------------------


def test_scenario_3_pre_compact_exit_2_shows_stderr_and_does_not_block(
    ws: Path, bin_dir: Path
) -> None:
    failing = script(bin_dir, "fail.sh", 'echo "notes directory is missing" >&2\nexit 2\n')
    after = script(bin_dir, "after.sh", 'echo "Keep the plan."\n')
    hooks = runner(hooks_of({"PreCompact": [(None, [failing, after])]}), ws)

    outcome = run(hooks.pre_compact("manual", None))

    assert outcome.blocked is None
    assert len(outcome.notices) == 1
    assert "PreCompact" in outcome.notices[0]
    assert "fail.sh" in outcome.notices[0]
    assert "notes directory is missing" in outcome.notices[0]
    # the next hook still ran and its instructions are used
    assert outcome.output == "Keep the plan."


def test_scenario_4_post_compact_exit_2_shows_stderr_and_goes_on(ws: Path, bin_dir: Path) -> None:
    failing = script(bin_dir, "fail.sh", 'echo "could not upload summary" >&2\nexit 2\n')
    after = script(bin_dir, "after.sh", 'touch "$CAIRN_PROJECT_DIR/after-ran"\n')
    hooks = runner(hooks_of({"PostCompact": [(None, [failing, after])]}), ws)

    outcome = run(hooks.post_compact("auto", "summary"))

    assert outcome.blocked is None
    assert len(outcome.notices) == 1
    assert "PostCompact" in outcome.notices[0]
    assert "could not upload summary" in outcome.notices[0]
    assert (ws / "after-ran").exists()


def test_other_exit_codes_are_notices_with_code_and_stderr(ws: Path, bin_dir: Path) -> None:
    crash = script(bin_dir, "crash.sh", 'echo "Traceback: boom" >&2\nexit 3\n')
    missing = str(bin_dir / "does-not-exist.sh")
    hooks = runner(hooks_of({"PreCompact": [(None, [crash, missing])]}), ws)

    outcome = run(hooks.pre_compact("auto", None))

    assert outcome.blocked is None
    assert outcome.output == ""
    assert len(outcome.notices) == 2
    assert "exit code 3" in outcome.notices[0]
    assert "Traceback: boom" in outcome.notices[0]
    assert "exit code 127" in outcome.notices[1]


def test_a_huge_stderr_is_cut_in_the_notice(ws: Path, bin_dir: Path) -> None:
    noisy = script(bin_dir, "noisy.sh", "head -c 100000 /dev/zero | tr '\\0' x >&2\nexit 2\n")
    outcome = run(runner(hooks_of({"PostCompact": [(None, [noisy])]}), ws).post_compact("auto", ""))
    assert len(outcome.notices) == 1
    assert MAX_NOTICE_CHARS < len(outcome.notices[0]) < MAX_NOTICE_CHARS + 200


def test_a_hook_that_does_not_read_stdin_is_fine(ws: Path, bin_dir: Path) -> None:
    quiet = script(bin_dir, "quiet.sh", "exit 0\n")
    big_summary = "x" * 2_000_000
    outcome = run(
        runner(hooks_of({"PostCompact": [(None, [quiet])]}), ws).post_compact("auto", big_summary)
    )
    assert outcome == HookOutcome()


def test_a_hook_that_cannot_start_is_a_notice(tmp_path: Path, bin_dir: Path) -> None:
    hook = script(bin_dir, "ok.sh", "exit 0\n")
    gone = tmp_path / "no-such-workspace"
    outcome = run(
        runner(hooks_of({"PreCompact": [(None, [hook])]}), gone).pre_compact("auto", None)
    )
    assert len(outcome.notices) == 1
    assert "could not start" in outcome.notices[0]


# --- block decision ----------------------------------------------------------


def test_a_block_decision_blocks_pre_compact_and_stops_later_hooks(ws: Path, bin_dir: Path) -> None:
    before = script(bin_dir, "before.sh", 'echo "Keep the plan."\n')
    blocker = script(
        bin_dir,
        "block.sh",
        'echo \'{"decision": "block", "reason": "a release is in progress"}\'\n',
    )
    later = script(bin_dir, "later.sh", 'touch "$CAIRN_PROJECT_DIR/later-ran"\n')
    hooks = runner(hooks_of({"PreCompact": [(None, [before, blocker, later])]}), ws)

    outcome = run(hooks.pre_compact("auto", None))

    assert outcome.blocked == "a release is in progress"
    # the decision is not instructions
    assert "decision" not in outcome.output
    assert not (ws / "later-ran").exists()


def test_exit_2_never_blocks_even_with_a_block_decision(ws: Path, bin_dir: Path) -> None:
    hook = script(
        bin_dir, "b.sh", 'echo \'{"decision": "block", "reason": "no"}\'\necho oops >&2\nexit 2\n'
    )
    outcome = run(runner(hooks_of({"PreCompact": [(None, [hook])]}), ws).pre_compact("auto", None))
    assert outcome.blocked is None
    assert outcome.notices and "oops" in outcome.notices[0]


def test_a_block_decision_elsewhere_is_ignored_with_a_notice(ws: Path, bin_dir: Path) -> None:
    blocker = script(bin_dir, "block.sh", 'echo \'{"decision": "block", "reason": "no"}\'\n')
    later = script(bin_dir, "later.sh", 'touch "$CAIRN_PROJECT_DIR/later-ran"\n')
    hooks = runner(
        hooks_of(
            {
                "PostCompact": [(None, [blocker, later])],
                "SessionStart": [(None, [blocker])],
            }
        ),
        ws,
    )
    post = run(hooks.post_compact("manual", "s"))
    start = run(hooks.session_start("compact"))
    for outcome in (post, start):
        assert outcome.blocked is None
        assert outcome.output == ""
        assert len(outcome.notices) == 1
        assert "only PreCompact can be blocked" in outcome.notices[0]
    assert (ws / "later-ran").exists()


def test_json_without_a_decision_is_plain_text(ws: Path, bin_dir: Path) -> None:
    hook = script(bin_dir, "j.sh", 'echo \'{"keep": ["a.py"]}\'\n')
    outcome = run(runner(hooks_of({"PreCompact": [(None, [hook])]}), ws).pre_compact("auto", None))
    assert outcome.output == '{"keep": ["a.py"]}'


# --- matchers ----------------------------------------------------------------


def test_matcher_manual_does_not_run_on_auto(ws: Path, bin_dir: Path) -> None:
    manual = script(bin_dir, "manual.sh", 'echo manual >> "$CAIRN_PROJECT_DIR/log"\n')
    any_ = script(bin_dir, "any.sh", 'echo any >> "$CAIRN_PROJECT_DIR/log"\n')
    both = script(bin_dir, "both.sh", 'echo auto-or-reactive >> "$CAIRN_PROJECT_DIR/log"\n')
    hooks = runner(
        hooks_of(
            {
                "PreCompact": [
                    ("manual", [manual]),
                    ("*", [any_]),
                    ("auto|reactive", [both]),
                ]
            }
        ),
        ws,
    )
    run(hooks.pre_compact("auto", None))
    assert (ws / "log").read_text().split() == ["any", "auto-or-reactive"]
    (ws / "log").unlink()
    run(hooks.pre_compact("manual", "x"))
    assert (ws / "log").read_text().split() == ["manual", "any"]


# --- timeout -----------------------------------------------------------------


def gone(pid: int) -> bool:
    """Dead: no such process, or a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:  # noqa: PTH123
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def test_a_hook_past_its_timeout_is_killed_with_its_children_and_reported(
    ws: Path, bin_dir: Path
) -> None:
    slow = script(
        bin_dir,
        "slow.sh",
        'echo $$ > "$CAIRN_PROJECT_DIR/hook.pid"\n'
        "sleep 300 &\n"
        'echo $! > "$CAIRN_PROJECT_DIR/child.pid"\n'
        "wait\n",
    )
    after = script(bin_dir, "after.sh", 'echo "still ran"\n')
    hooks = runner(hooks_of({"PreCompact": [(None, [(slow, 0.5), after])]}), ws)

    outcome = run(hooks.pre_compact("auto", None))

    assert outcome.blocked is None
    assert len(outcome.notices) == 1
    assert "slow.sh" in outcome.notices[0]
    assert "timed out after 0.5 s" in outcome.notices[0]
    assert outcome.output == "still ran"
    pids = [int((ws / name).read_text()) for name in ("hook.pid", "child.pid")]
    # SIGKILL was sent to the whole group before the runner returned; allow the
    # kernel a moment to finish tearing the processes down (not a timing check).
    deadline = time.monotonic() + 10
    while not all(gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(gone(pid) for pid in pids)


def test_a_cancelled_event_kills_the_running_hook(ws: Path, bin_dir: Path) -> None:
    slow = script(bin_dir, "slow.sh", 'echo $$ > "$CAIRN_PROJECT_DIR/hook.pid"\nexec sleep 300\n')
    hooks = runner(hooks_of({"PostCompact": [(None, [slow])]}), ws)

    async def cancel_midway() -> None:
        task = asyncio.create_task(hooks.post_compact("auto", "s"))
        while not (ws / "hook.pid").exists() or not (ws / "hook.pid").read_text():
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(cancel_midway())
    pid = int((ws / "hook.pid").read_text())
    deadline = time.monotonic() + 10
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(pid)


# --- ordering (scenario 5) ---------------------------------------------------


def test_three_hooks_of_one_event_run_in_order(ws: Path, bin_dir: Path) -> None:
    # The first is the slowest: run in parallel, it would finish last.
    one = script(bin_dir, "one.sh", 'sleep 0.3\necho one >> "$CAIRN_PROJECT_DIR/log"\n')
    two = script(bin_dir, "two.sh", 'echo two >> "$CAIRN_PROJECT_DIR/log"\n')
    three = script(bin_dir, "three.sh", 'echo three >> "$CAIRN_PROJECT_DIR/log"\n')
    hooks = runner(hooks_of({"PreCompact": [(None, [one, two]), ("auto", [three])]}), ws)
    run(hooks.pre_compact("auto", None))
    assert (ws / "log").read_text() == "one\ntwo\nthree\n"


def test_scenario_5_pre_then_session_start_then_post_each_when_called(
    ws: Path, bin_dir: Path
) -> None:
    log = 'cat > /dev/null\necho "$0" >> "$CAIRN_PROJECT_DIR/log"\n'
    pre = script(bin_dir, "pre.sh", log)
    start = script(bin_dir, "start.sh", log)
    post = script(bin_dir, "post.sh", log)
    hooks = runner(
        hooks_of(
            {
                "PreCompact": [(None, [pre])],
                "SessionStart": [("compact", [start])],
                "PostCompact": [(None, [post])],
            }
        ),
        ws,
    )

    async def compaction() -> None:
        await hooks.pre_compact("manual", None)
        assert [Path(p).name for p in (ws / "log").read_text().split()] == ["pre.sh"]
        # … the compaction happens here …
        await hooks.session_start("compact")
        await hooks.post_compact("manual", "summary")

    run(compaction())
    assert [Path(p).name for p in (ws / "log").read_text().split()] == [
        "pre.sh",
        "start.sh",
        "post.sh",
    ]


# --- SessionStart ------------------------------------------------------------


def test_session_start_with_source_compact(ws: Path, bin_dir: Path) -> None:
    on_compact = script(
        bin_dir,
        "compact.sh",
        'cat > "$CAIRN_PROJECT_DIR/start-input.json"\necho "Re-read NOTES.md first."\n',
    )
    on_startup = script(bin_dir, "startup.sh", 'touch "$CAIRN_PROJECT_DIR/startup-ran"\n')
    hooks = runner(
        hooks_of({"SessionStart": [("startup|resume", [on_startup]), ("compact", [on_compact])]}),
        ws,
    )

    outcome = run(hooks.session_start("compact"))

    received = json.loads((ws / "start-input.json").read_text())
    assert received["hook_event_name"] == "SessionStart"
    assert received["source"] == "compact"
    assert received["cwd"] == str(ws)
    assert outcome.output == "Re-read NOTES.md first."
    assert not (ws / "startup-ran").exists()


# --- from settings.json to a running hook ------------------------------------


def test_hooks_from_settings_files_run(ws: Path, tmp_path: Path, bin_dir: Path) -> None:
    home = tmp_path / "home"
    user_hook = script(bin_dir, "user.sh", 'echo "from user"\n')
    project_hook = script(bin_dir, "project.sh", 'echo "from project"\n')
    for path, command in (
        (home / "settings.json", user_hook),
        (ws / ".cairn" / "settings.json", project_hook),
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                {
                    "hooks": {
                        "PreCompact": [
                            {
                                "matcher": "manual",
                                "hooks": [{"type": "command", "command": command}],
                            }
                        ]
                    }
                }
            ),
            encoding="utf-8",
        )
    settings = load_settings(ws, home)
    hooks = HookRunner(settings.hooks, session_id="s", transcript_path=ws / "t.jsonl", cwd=ws)
    assert run(hooks.pre_compact("manual", None)).output == "from user\n\nfrom project"
    assert run(hooks.pre_compact("auto", None)).output == ""


# --- bounded output ----------------------------------------------------------

TEN_MB = 10 * 1024 * 1024


def test_a_10_mb_stdout_is_capped_and_a_notice_says_how_much_was_dropped(
    ws: Path, bin_dir: Path
) -> None:
    flood = script(bin_dir, "flood.sh", f"head -c {TEN_MB} /dev/zero | tr '\\0' x\n")
    after = script(bin_dir, "after.sh", 'echo "Keep the plan."\n')
    hooks = runner(hooks_of({"PreCompact": [(None, [flood, after])]}), ws)

    outcome = run(hooks.pre_compact("auto", None))

    # The flood did not become 10 MB of compaction instructions, and the next hook ran.
    assert len(outcome.output) < 2 * MAX_STDOUT_BYTES
    assert outcome.output == "x" * MAX_STDOUT_BYTES + "\n\nKeep the plan."
    assert len(outcome.notices) == 1
    assert "flood.sh" in outcome.notices[0]
    assert f"dropped {TEN_MB - MAX_STDOUT_BYTES:,}" in outcome.notices[0]


def test_a_cut_in_a_utf8_character_does_not_garble_the_kept_output(ws: Path, bin_dir: Path) -> None:
    # One ASCII byte, then two-byte characters: the cap falls inside one of them.
    hook = script(
        bin_dir,
        "utf8.sh",
        "printf a\nfor i in $(seq 400); do printf '%0.sé' $(seq 100); done\n",
    )
    outcome = run(runner(hooks_of({"PostCompact": [(None, [hook])]}), ws).post_compact("auto", ""))
    assert outcome.output == "a" + "é" * ((MAX_STDOUT_BYTES - 1) // 2)
    assert "\ufffd" not in outcome.output


def test_session_start_text_is_capped_for_the_model_with_a_notice(ws: Path, bin_dir: Path) -> None:
    hook = script(bin_dir, "long.sh", "head -c 30000 /dev/zero | tr '\\0' n\n")
    outcome = run(runner(hooks_of({"SessionStart": [(None, [hook])]}), ws).session_start("startup"))
    assert len(outcome.output) <= MAX_REMINDER_CHARS
    assert outcome.output.startswith("n" * 9_000)
    assert outcome.output.endswith("more characters dropped]")
    assert len(outcome.notices) == 1
    assert "10,000-character cap" in outcome.notices[0]


def test_the_reminder_is_hidden_synthetic_and_capped_once() -> None:
    assert session_start_reminder("  \n", "startup") is None
    reminder = session_start_reminder("Use pnpm, not npm.", "resume")
    assert reminder is not None
    assert reminder.role == "user"
    assert reminder.meta.hidden and reminder.meta.synthetic
    assert reminder.meta.kind == KIND_SESSION_START
    assert "Use pnpm, not npm." in reminder.text and "source: resume" in reminder.text
    capped, dropped = cap_reminder("y" * 50_000)
    assert dropped > 0 and len(capped) <= MAX_REMINDER_CHARS
    assert cap_reminder(capped) == (capped, 0)


def test_claude_code_json_output_gives_context_and_a_message(ws: Path, bin_dir: Path) -> None:
    hook = script(
        bin_dir,
        "json.sh",
        "cat <<'EOF'\n"
        '{"hookSpecificOutput": {"hookEventName": "SessionStart",'
        ' "additionalContext": "The build uses pnpm."},'
        ' "systemMessage": "loaded project notes"}\n'
        "EOF\n",
    )
    outcome = run(runner(hooks_of({"SessionStart": [(None, [hook])]}), ws).session_start("startup"))
    assert outcome.output == "The build uses pnpm."
    assert len(outcome.notices) == 1 and "loaded project notes" in outcome.notices[0]


# --- processes that outlive the hook -----------------------------------------


def wait_gone(pids: list[int]) -> bool:
    """Whether all ``pids`` are dead, allowing the kernel a moment (not a timing check)."""
    deadline = time.monotonic() + 10
    while not all(gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return all(gone(pid) for pid in pids)


def session_of(stat: str) -> int:
    """The session id in the text of ``/proc/<pid>/stat``."""
    return int(stat.rsplit(")", 1)[1].split()[3])


#: Starts ``sleep 300`` in a session of its own (out of the hook's process group),
#: holding the hook's stdout and stderr, and waits until it runs there.
ESCAPE = (
    "setsid sh -c 'echo $$ > \"$CAIRN_PROJECT_DIR/child.pid\"; exec sleep 300' &\n"
    'while [ ! -s "$CAIRN_PROJECT_DIR/child.pid" ]; do sleep 0.02; done\n'
    'cp "$CAIRN_PROJECT_DIR/child.pid" "$CAIRN_PROJECT_DIR/escaped.pid"\n'
)


def escaped_child(ws: Path) -> int:
    return int((ws / "escaped.pid").read_text())


def test_a_setsid_child_holding_stdout_does_not_hang_the_hook_and_is_killed(
    ws: Path, bin_dir: Path
) -> None:
    hook = script(
        bin_dir,
        "escape.sh",
        ESCAPE
        + 'cat /proc/$(cat "$CAIRN_PROJECT_DIR/child.pid")/stat > "$CAIRN_PROJECT_DIR/stat"\n'
        'echo "notes loaded"\n',
    )
    # The timeout is shorter than the child's sleep: waiting for its EOF would time out.
    hooks = runner(hooks_of({"SessionStart": [(None, [(hook, 20.0)])]}), ws)

    outcome = run(hooks.session_start("startup"))

    pid = escaped_child(ws)
    stat = (ws / "stat").read_text()
    # The child really left the hook's session (it leads its own).
    assert session_of(stat) == pid
    # The hook finished on its own: its output is kept, no timeout.
    assert outcome.output == "notes loaded"
    assert len(outcome.notices) == 1
    assert "left 1 process(es) holding its output open" in outcome.notices[0]
    assert f"after {DRAIN_GRACE_S:g} s" in outcome.notices[0]
    assert wait_gone([pid])


def test_a_hook_that_times_out_with_a_setsid_child_leaves_no_process(
    ws: Path, bin_dir: Path
) -> None:
    hook = script(
        bin_dir, "stuck.sh", ESCAPE + 'echo $$ > "$CAIRN_PROJECT_DIR/hook.pid"\nsleep 30\n'
    )
    hooks = runner(hooks_of({"PostCompact": [(None, [(hook, 1.0)])]}), ws)

    outcome = run(hooks.post_compact("auto", "s"))

    assert len(outcome.notices) == 1 and "timed out after 1 s" in outcome.notices[0]
    assert wait_gone([escaped_child(ws), int((ws / "hook.pid").read_text())])


def test_a_background_child_in_the_group_is_killed_when_the_hook_exits(
    ws: Path, bin_dir: Path
) -> None:
    hook = script(
        bin_dir,
        "nohup.sh",
        'nohup sleep 30 > /dev/null 2>&1 &\necho $! > "$CAIRN_PROJECT_DIR/child.pid"\necho ok\n',
    )
    outcome = run(runner(hooks_of({"PreCompact": [(None, [hook])]}), ws).pre_compact("auto", None))
    assert outcome.output == "ok" and outcome.notices == ()
    assert wait_gone([int((ws / "child.pid").read_text())])
