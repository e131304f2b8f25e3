"""The fixed context a replay gives every request, and sessions that cannot be replayed.

Claude Code and Codex do not record (all of) their system prompt and tool
schemas; the replay infers them from the recorded usage or uses the format's
default, and a session it cannot run to the end is a failure in the report
and the exit code.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from cairn.context.tracker import FixedContext
from cairn.messages import (
    JSONObject,
    Message,
    MessageMeta,
    ToolCall,
    Usage,
    assistant,
    message_to_wire,
    system,
    tool_result,
    user,
)
from cairn.replay.engine import MessageTokens, ReplayOptions, replay_session, window_too_small
from cairn.replay.fixed_context import (
    REPLY_PRIMING_TOKENS,
    UNRECORDED_TOKENS,
    USAGE_SAMPLE,
    FixedContextError,
    ResolvedFixedContext,
    filler_schema,
    resolve_fixed_context,
    usage_fixed_tokens,
    with_filler,
)
from cairn.replay.importers import import_sessions
from cairn.replay.metrics import Policy, ReplaySummary, SessionReport, wasted_headroom
from cairn.replay.session import RecordedSession

ROOT = Path(__file__).resolve().parents[2]
CLAUDE = ROOT / "tests" / "fixtures" / "sessions" / "formats" / "claude-code.jsonl"
CODEX = ROOT / "tests" / "fixtures" / "sessions" / "formats" / "codex-rollout.jsonl"
COUNT = MessageTokens("cl100k")
#: "Within a few tokens": the last filler schema is sized word by word.
CLOSE = 8


def answered(prompt: int) -> Message:
    return Message(
        role="assistant", content="ok", meta=MessageMeta(usage=Usage(prompt, 5, prompt + 5))
    )


def work(rounds: int = 6) -> list[Message]:
    """A small coding session: a request, then tool rounds."""
    messages: list[Message] = [user("Make the rounding tests pass; do not touch the API.")]
    for i in range(rounds):
        call = ToolCall(f"c{i}", "read_file", f'{{"path": "m{i}.py"}}')
        messages += [
            assistant(f"Reading m{i}.py.", [call]),
            tool_result(call.id, f"x = {i}\n" * 40),
        ]
    messages.append(assistant("Done."))
    return messages


def resolve(session: RecordedSession, requested: int | None = None) -> ResolvedFixedContext:
    return resolve_fixed_context(session, requested, COUNT, COUNT.fixed)


# ---------------------------------------------------------------------------
# Inferred from the recorded usage


def test_usage_gives_prompt_tokens_minus_what_was_sent_before_the_response() -> None:
    ask = user("Why does the test fail?")
    sent = COUNT(ask)
    assert usage_fixed_tokens([ask, answered(9_200)], COUNT) == 9_200 - sent - REPLY_PRIMING_TOKENS


def test_usage_takes_the_smallest_estimate_of_the_first_responses() -> None:
    ask, result = user("go"), tool_result("c1", "output " * 50)
    call = Message(
        role="assistant",
        tool_calls=(ToolCall("c1", "bash"),),
        meta=MessageMeta(usage=Usage(9_000, 5, 9_005)),
    )
    first = 9_000 - COUNT(ask) - REPLY_PRIMING_TOKENS
    # The second request's prompt holds only a little more than what was sent since.
    second_prompt = 9_000 + COUNT(call) + COUNT(result) - 40
    inferred = usage_fixed_tokens([ask, call, result, answered(second_prompt)], COUNT)
    assert inferred == first - 40


def test_usage_ignores_responses_after_the_recorded_agent_compacted() -> None:
    # 14k, 15k, then 6k: the recording compacted; the replay still sends everything.
    messages = [
        user("go"),
        answered(14_000),
        user("more"),
        answered(15_000),
        user("and"),
        answered(6_000),
    ]
    inferred = usage_fixed_tokens(messages, COUNT)
    assert inferred is not None and inferred > 13_000


def test_usage_looks_at_the_first_few_responses_only() -> None:
    messages: list[Message] = []
    for n in range(USAGE_SAMPLE):
        messages += [user(f"step {n}"), answered(10_000 + 100 * n)]
    # A later response whose figure would be much smaller is not looked at.
    messages += [user("x " * 2_000), answered(10_600)]
    inferred = usage_fixed_tokens(messages, COUNT)
    assert inferred is not None and inferred > 9_000


def test_usage_is_never_negative_and_none_without_usage() -> None:
    assert usage_fixed_tokens([user("long " * 500), answered(10)], COUNT) == 0
    assert usage_fixed_tokens(work(), COUNT) is None


# ---------------------------------------------------------------------------
# Resolution: usage, the format's default, what is recorded, the flag


def test_a_format_that_records_everything_replays_what_it_recorded() -> None:
    bash: JSONObject = {"type": "function", "function": {"name": "bash", "description": "Run."}}
    tools = (bash,)
    session = RecordedSession(
        "s", tuple(work()), (system("You are SWE-agent."),), tools, "swe-agent"
    )
    resolved = resolve(session)
    assert resolved.source == "recorded"
    assert resolved.context == FixedContext(session.system, session.tools)
    assert resolved.tokens == resolved.recorded_tokens == COUNT.fixed(resolved.context)


def test_claude_code_without_usage_gets_its_documented_default() -> None:
    session = RecordedSession("s", tuple(work()), format="claude-code")
    resolved = resolve(session)
    assert resolved.source == "default" and resolved.recorded_tokens == 0
    assert (
        UNRECORDED_TOKENS["claude-code"] - CLOSE
        <= resolved.tokens
        <= UNRECORDED_TOKENS["claude-code"]
    )
    assert resolved.tokens == COUNT.fixed(resolved.context)


def test_codex_default_adds_the_tool_schemas_to_the_recorded_instructions() -> None:
    base = system("You are Codex, a coding agent. " * 40)
    session = RecordedSession("s", tuple(work()), (base,), format="codex")
    resolved = resolve(session)
    assert resolved.source == "default"
    assert resolved.context.system == (base,)  # the recorded instructions stay as they are
    target = COUNT(base) + UNRECORDED_TOKENS["codex"]
    assert target - CLOSE <= resolved.tokens <= target


def test_the_recorded_claude_code_sample_infers_its_fixed_context_from_usage() -> None:
    session = import_sessions(CLAUDE).sessions[0]
    resolved = resolve(session)
    # First response: 3 + 9,800 + 4,100 prompt tokens, after one short user message.
    expected = 13_903 - COUNT(session.messages[0]) - REPLY_PRIMING_TOKENS
    assert resolved.source == "usage"
    assert expected - CLOSE <= resolved.tokens <= expected


def test_the_recorded_codex_sample_keeps_its_instructions_and_adds_the_rest() -> None:
    session = import_sessions(CODEX).sessions[0]
    resolved = resolve(session)
    assert resolved.source == "usage"
    assert resolved.context.system == session.system
    assert resolved.tokens > resolved.recorded_tokens + 5_000


def test_usage_below_what_is_recorded_keeps_the_recording() -> None:
    prompt = system("You are an agent with a long prompt. " * 100)
    session = RecordedSession("s", (user("hi"), answered(50)), (prompt,), format="openhands")
    resolved = resolve(session)
    assert (resolved.source, resolved.tokens) == ("recorded", COUNT(prompt))


def test_the_flag_forces_the_size_and_may_not_go_below_the_recording() -> None:
    prompt = system("Rules. " * 300)
    session = RecordedSession("rules", tuple(work()), (prompt,))
    resolved = resolve(session, 12_000)
    assert resolved.source == "flag" and 12_000 - CLOSE <= resolved.tokens <= 12_000
    with pytest.raises(FixedContextError) as error:
        resolve(session, 100)
    text = str(error.value)
    assert (
        "--fixed-tokens 100" in text and f"{COUNT(prompt):,} tokens" in text and "'rules'" in text
    )


# ---------------------------------------------------------------------------
# The host filler


@pytest.mark.parametrize("target", [150, 5_400, 20_000, 33_333])
def test_filler_reaches_the_target_within_a_few_tokens(target: int) -> None:
    base = FixedContext((system("You are an agent."),))
    filled = with_filler(base, target, COUNT.fixed)
    assert target - CLOSE <= COUNT.fixed(filled) <= target
    assert filled.system == base.system


def test_filler_is_deterministic_and_shaped_like_tool_schemas() -> None:
    first = with_filler(FixedContext(), 20_000, COUNT.fixed)
    assert first == with_filler(FixedContext(), 20_000, COUNT.fixed)
    names = set()
    for tool in first.tools:
        assert tool["type"] == "function"
        function = tool["function"]
        assert isinstance(function, dict)
        names.add(function["name"])
        assert isinstance(function["description"], str) and len(function["description"]) > 20
        parameters = function["parameters"]
        assert isinstance(parameters, dict) and parameters["type"] == "object"
        assert isinstance(parameters["properties"], dict) and parameters["properties"]
    assert len(names) == len(first.tools) > 10


def test_filler_names_never_clash_with_recorded_tools() -> None:
    read: JSONObject = {"type": "function", "function": {"name": "read_file", "description": "R"}}
    filled = with_filler(FixedContext((), (read,)), 3_000, COUNT.fixed)
    names = [str(t["function"]["name"]) for t in filled.tools if isinstance(t["function"], dict)]
    assert names[0] == "read_file" and len(names) == len(set(names)) > 1
    assert "host_read_file" in names


def test_the_estimate_over_counts_filler_as_it_over_counts_real_schemas() -> None:
    # Tool schemas are estimated at the prose rate: real ones come out 7–15 % over
    # their true size; the filler must too (a repeated word would not), so that
    # the replay exercises the calibration the way a real agent's tools do.
    filled = with_filler(FixedContext(), 10_000, COUNT.fixed)
    ratio = filled.tokens / COUNT.fixed(filled)
    assert 1.0 < ratio < 1.3
    assert filler_schema(3, 40) != filler_schema(4, 40)


# ---------------------------------------------------------------------------
# The replay


def replay(
    session: RecordedSession,
    tmp_path: Path,
    window: int,
    fixed: int | None = None,
    policy: Policy = "cairn",
) -> SessionReport:
    options = ReplayOptions(window=window, policy=policy, fixed_tokens=fixed)
    return asyncio.run(replay_session(session, options, tmp_path / f"{policy}.jsonl"))


def test_every_request_carries_the_fixed_context(tmp_path: Path) -> None:
    session = RecordedSession("s", tuple(work()), format="claude-code")
    report = replay(session, tmp_path, 131_072, policy="none")
    assert report.failure is None and report.fixed_source == "default"
    first = session.messages[0]
    assert (
        report.requests[0].true_tokens == report.fixed_tokens + COUNT(first) + REPLY_PRIMING_TOKENS
    )
    bare = replay(RecordedSession("s", tuple(work())), tmp_path, 131_072, policy="none")
    assert bare.fixed_tokens == 0
    for with_fixed, without in zip(report.requests, bare.requests, strict=True):
        assert with_fixed.true_tokens - without.true_tokens == report.fixed_tokens


def test_the_flag_reaches_the_replay(tmp_path: Path) -> None:
    report = replay(RecordedSession("s", tuple(work())), tmp_path, 32_768, fixed=3_000)
    assert report.fixed_source == "flag" and 3_000 - CLOSE <= report.fixed_tokens <= 3_000


def test_a_fixed_context_that_fills_the_budget_fails_the_session(tmp_path: Path) -> None:
    session = RecordedSession("cc", tuple(work()), format="claude-code")
    report = replay(session, tmp_path, 16_384)  # input budget 8,192 < ~20k
    assert report.failed and report.requests == ()
    assert report.failure == window_too_small(report.fixed_tokens, "default", 8_192)
    assert report.failure is not None and "the format's default" in report.failure


def test_window_too_small_is_only_about_the_fixed_context() -> None:
    assert window_too_small(8_191, "usage", 8_192) is None
    reason = window_too_small(8_192, "usage", 8_192)
    assert reason == (
        "window too small: the system prompt and tool schemas alone take 8,192 tokens "
        "(inferred from the recorded usage) of the 8,192-token input budget"
    )


def test_many_typed_messages_no_longer_count_as_a_window_too_small(tmp_path: Path) -> None:
    # The old rule added up every typed message and skipped the session.
    messages: list[Message] = []
    for i in range(30):
        messages += [
            user(f"Request {i}: " + "please keep the API stable. " * 30),
            assistant(f"ok {i}"),
        ]
    report = replay(
        RecordedSession("talk", tuple(messages), (system("Be brief."),)), tmp_path, 8_192
    )
    assert report.failure is None or not report.failure.startswith("window too small")
    assert report.requests


def big_request() -> RecordedSession:
    """A system prompt a few dozen tokens under the 8,192-token budget, then a big paste.

    Whatever compaction keeps of the paste (a checkpoint of its head and
    tail, the compact block) no longer fits next to the system prompt.
    """
    rules = system("Follow the house rules for every change you make to this repository. " * 625)
    log = "error: missing symbol in module\n" * 500
    paste = user(f"Here is the log of the failing build:\n{log}")
    return RecordedSession("too-big", (paste, assistant("Looking.")), (rules,))


def test_a_request_the_pipeline_cannot_bring_under_the_budget_fails_the_session(
    tmp_path: Path,
) -> None:
    session = big_request()
    fixed = COUNT.fixed(FixedContext(session.system))
    assert 8_192 - 100 < fixed < 8_192 < fixed + COUNT(session.messages[0])  # the setup
    report = replay(session, tmp_path, 16_384)
    assert report.failed and report.failure is not None
    assert report.failure.startswith("request 1 not sent (exact size ")
    assert "input budget 8,192" in report.failure
    assert report.refused_tokens is not None and report.refused_tokens > 8_192
    assert report.requests == () and report.overflows == 0
    summary = ReplaySummary("x", "openai", 16_384, "cl100k", "cairn", (report,)).to_dict()
    assert summary["failed_sessions"] == 1
    assert summary["failures"] == [{"name": "too-big", "reason": report.failure, "requests": 0}]


def test_wasted_headroom_is_the_unused_share_of_the_budget() -> None:
    assert wasted_headroom(800, 600, 1_000) == pytest.approx(0.2)
    assert wasted_headroom(800, 900, 1_000) == 0.0
    assert wasted_headroom(800, 600, 0) == 0.0


def test_compactions_record_the_size_that_triggered_them(tmp_path: Path) -> None:
    session = RecordedSession("s", tuple(work(rounds=40)), (system("Be careful."),))
    report = replay(session, tmp_path, 8_192)
    compacted = [r for r in report.requests if r.compaction]
    assert compacted and all(r.trigger_tokens is not None for r in compacted)
    assert all(r.trigger_tokens is None for r in report.requests if not r.compaction)
    assert len(report.wasted_headroom) == len(compacted)
    summary = ReplaySummary("x", "openai", 8_192, "cl100k", "cairn", (report,)).to_dict()
    assert summary["compactions_per_100_requests"] == round(
        100 * len(compacted) / len(report.requests), 2
    )
    headroom = summary["wasted_headroom"]
    assert isinstance(headroom, dict) and headroom["compactions"] == len(compacted)


# ---------------------------------------------------------------------------
# The command


def cairn(*args: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "CAIRN_MODEL"}
    return subprocess.run(
        [sys.executable, "-m", "cairn", *args], capture_output=True, text=True, env=environ
    )


def write_openai(path: Path, session: RecordedSession) -> Path:
    wire = [message_to_wire(m) for m in (*session.system, *session.messages)]
    path.write_bytes(orjson.dumps(wire))
    return path


def test_a_failed_session_exits_1_and_says_why(tmp_path: Path) -> None:
    path = write_openai(tmp_path / "big.json", big_request())
    done = cairn("replay", str(path), "--window", "16384", "--report", str(tmp_path / "r"))
    assert done.returncode == 1, done.stderr
    assert "FAILED" in done.stdout and "not sent" in done.stdout
    assert "1 session replay failed" in done.stderr
    report = orjson.loads((tmp_path / "r" / "report.json").read_bytes())
    assert report["failed_sessions"] == 1 and report["failures"][0]["name"]
    session = report["details"][0]["sessions"][0]
    assert session["failed"] is True and session["refused_tokens"] > 8_192


def test_json_output_of_a_failed_session_also_exits_1(tmp_path: Path) -> None:
    path = write_openai(tmp_path / "big.json", big_request())
    done = cairn("replay", str(path), "--window", "16384", "--compare", "--json")
    assert done.returncode == 1
    data = orjson.loads(done.stdout)
    assert data["policies"]["cairn"]["failed_sessions"] == 1


def test_the_claude_code_sample_reports_its_fixed_context(tmp_path: Path) -> None:
    done = cairn("replay", str(CLAUDE), "--window", "131072", "--report", str(tmp_path / "r"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(usage)" in done.stdout
    session = orjson.loads((tmp_path / "r" / "report.json").read_bytes())["details"][0]["sessions"][
        0
    ]
    assert session["fixed_source"] == "usage" and session["fixed_tokens"] > 13_000
    assert session["recorded_fixed_tokens"] == 0


def test_fixed_tokens_flag(tmp_path: Path) -> None:
    done = cairn("replay", str(CLAUDE), "--window", "131072", "--fixed-tokens", "20000", "--json")
    assert done.returncode == 0, done.stderr
    fixed = orjson.loads(done.stdout)["fixed_context"]
    assert fixed["sources"] == {"flag": 1} and 20_000 - CLOSE <= fixed["max_tokens"] <= 20_000


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (
            "lots",
            "--fixed-tokens must be 'auto' or a whole number of tokens (0 or more), got 'lots'",
        ),
        ("-5", "got '-5'"),
        ("10", "--fixed-tokens 10 is smaller than what the recording itself carries"),
    ],
)
def test_fixed_tokens_usage_errors_are_one_line(tmp_path: Path, value: str, says: str) -> None:
    session = RecordedSession("s", tuple(work(2)), (system("You are careful. " * 20),))
    path = write_openai(tmp_path / "chat.json", session)
    done = cairn("replay", str(path), "--window", "16384", "--fixed-tokens", value)
    assert done.returncode == 2
    assert says in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
