"""The replay engine, its policies, metrics and report, on sessions made here."""

from __future__ import annotations

import asyncio
import csv
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from cairn.messages import (
    Message,
    ToolCall,
    assistant,
    find_orphans,
    message_to_wire,
    system,
    tool_result,
    user,
)
from cairn.replay.engine import ReplayOptions, compaction_records, replay_session, replay_sessions
from cairn.replay.metrics import Policy, ReplaySummary, SessionReport
from cairn.replay.report import summary_json, write_report
from cairn.replay.session import RecordedSession
from cairn.store import ApiView, MessageRecord, read_transcript
from support.openai_server import (
    OpenAIServer,
    Reply,
)


def long_session(rounds: int = 40, output_lines: int = 120) -> RecordedSession:
    """A coding session that outgrows small windows: many tool rounds with real output."""
    messages: list[Message] = [
        user("The CSV export drops rows with unicode names. Fix it; keep the API.")
    ]
    for i in range(rounds):
        call = ToolCall(f"call_{i}", "bash" if i % 3 else "read_file", f'{{"path": "src/m{i}.py"}}')
        messages.append(assistant(f"Step {i}: checking module {i}.", [call]))
        body = "\n".join(
            f"{i}:{j} def handler_{j}(row): return row['name'].encode()"
            for j in range(output_lines)
        )
        messages.append(tool_result(call.id, body))
        if i % 10 == 9:
            messages.append(user(f"Status after step {i}? Remember: keep the API."))
    messages.append(assistant("Done: rows with unicode names are exported."))
    return RecordedSession("long", tuple(messages), (system("You are a careful coding agent."),))


def replay(
    session: RecordedSession, tmp_path: Path, window: int, policy: Policy = "cairn"
) -> SessionReport:
    options = ReplayOptions(window=window, policy=policy)
    return asyncio.run(replay_session(session, options, tmp_path / f"{policy}-{window}.jsonl"))


def requests_in_transcript(path: Path) -> list[list[Message]]:
    """The API context each request was built from, rebuilt from the written transcript."""
    view = ApiView()
    sent = []
    for record in read_transcript(path).records:
        if isinstance(record, MessageRecord) and record.message.role == "assistant":
            sent.append(list(view.messages))
        view.apply(record)
    return sent


@pytest.mark.parametrize("window", [8_192, 16_384, 32_768])
def test_cairn_never_overflows_and_never_splits_a_round(tmp_path: Path, window: int) -> None:
    report = replay(long_session(), tmp_path, window)
    assert report.failure is None
    assert len(report.requests) == 41
    assert report.overflows == 0
    assert report.peak_tokens <= report.input_budget
    assert report.compactions + report.snips >= 1  # it had to act to stay inside
    for context in requests_in_transcript(Path(report.transcript or "")):
        assert not find_orphans(context)


def test_none_policy_overflows_on_a_session_longer_than_the_window(tmp_path: Path) -> None:
    report = replay(long_session(), tmp_path, 16_384, "none")
    assert report.overflows > 0
    assert report.compactions == 0
    assert report.peak_tokens > report.input_budget


def test_post_response_compacts_later_than_cairn(tmp_path: Path) -> None:
    cairn = replay(long_session(), tmp_path, 16_384, "cairn")
    late = replay(long_session(), tmp_path, 16_384, "post-response")
    assert late.compactions >= 1
    assert late.peak_tokens > cairn.peak_tokens


def test_report_numbers_add_up_with_the_transcript(tmp_path: Path) -> None:
    report = replay(long_session(), tmp_path, 8_192)
    records = compaction_records(Path(report.transcript or ""))
    assert len(records) == report.compactions
    compacted = [r for r in report.requests if r.compaction]
    assert [(r.pre_tokens, r.post_tokens) for r in compacted] == [
        (c.pre_tokens, c.post_tokens) for c in records
    ]
    assert report.billed_prompt_tokens == sum(r.true_tokens for r in report.requests)
    assert all(r.cache_eligible_tokens <= r.true_tokens for r in report.requests)


def test_cache_eligible_prefix_grows_between_compactions(tmp_path: Path) -> None:
    """Between compactions each request shares all of the previous one; a compaction
    resets the shared prefix to the fixed context (the policy really compacts here)."""
    report = replay(long_session(), tmp_path, 32_768, "cairn")
    compacted = [r.index for r in report.requests if r.compaction is not None]
    assert compacted and len(compacted) < len(report.requests) - 1
    for previous, current in zip(report.requests, report.requests[1:], strict=False):
        if current.compaction is not None:
            assert current.cache_eligible_tokens == report.fixed_tokens
        elif current.snipped == 0 and not current.handoff:
            assert current.cache_eligible_tokens >= previous.true_tokens - 10
    grown = [r for r in report.requests[1:] if r.compaction is None and r.snipped == 0]
    assert len(grown) >= len(report.requests) // 2


def test_projection_error_is_measured_against_the_exact_count(tmp_path: Path) -> None:
    report = replay(long_session(), tmp_path, 32_768)
    errors = [r.error_pct for r in report.requests if r.error_pct is not None]
    assert errors and all(abs(e) < 50 for e in errors)
    # The first request has no usage anchor: a pure estimate; later ones are anchored.
    assert report.requests[0].projected_tokens is not None


def test_a_window_too_small_for_the_system_prompt_is_a_failure(tmp_path: Path) -> None:
    huge = RecordedSession(
        "big-prompt", (user("hi"), assistant("hello")), (system("rule " * 20_000),)
    )
    report = replay(huge, tmp_path, 8_192)
    assert report.failed and report.failure is not None
    assert report.failure.startswith("window too small")
    assert f"{report.fixed_tokens:,} tokens (as recorded)" in report.failure
    assert report.requests == ()


def test_report_folder_holds_json_csv_plot_and_a_loadable_transcript(tmp_path: Path) -> None:
    session = long_session(rounds=20)
    summaries = []
    for policy in ("cairn", "none"):
        reports = asyncio.run(
            replay_sessions([session], ReplayOptions(16_384, policy), tmp_path / "out" / policy)
        )
        summaries.append(
            ReplaySummary("s.json", "openai", 16_384, "cl100k", policy, tuple(reports))
        )
    written = write_report(tmp_path / "out", summaries, handoff_ratio=0.7, compact_ratio=0.8)
    report = orjson.loads((tmp_path / "out" / "report.json").read_bytes())
    assert set(report["policies"]) == {"cairn", "none"}
    rows = list(csv.DictReader((tmp_path / "out" / "requests.csv").open()))
    assert len(rows) == 2 * 21
    assert (tmp_path / "out" / "context.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(written) == 3
    transcript = tmp_path / "out" / "cairn" / "transcript.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "cairn", "inspect", str(transcript), "--json"],
        capture_output=True,
    )
    assert done.returncode == 0
    inspected = orjson.loads(done.stdout)
    assert inspected["checkpoints"]["valid"] == summaries[0].to_dict()["compactions"]


def test_summary_json_has_every_documented_key(tmp_path: Path) -> None:
    reports = asyncio.run(replay_sessions([long_session(10)], ReplayOptions(32_768), tmp_path))
    data = summary_json([ReplaySummary("x", "openai", 32_768, "cl100k", "cairn", tuple(reports))])
    for key in (
        "source", "format", "window", "tokenizer", "policy", "sessions", "requests", "overflows",
        "peak_tokens", "compactions", "snips", "handoffs", "billed_prompt_tokens",
        "cache_eligible_tokens", "projection_error", "pipeline_seconds", "failed_sessions",
        "failures", "fixed_context", "compactions_per_100_requests", "wasted_headroom",
        "continuity",
    ):  # fmt: skip
        assert key in data
    assert set(data["projection_error"]) == {"mean_abs_pct", "max_under_pct", "max_over_pct"}  # type: ignore[arg-type]
    assert set(data["continuity"]) == {"compactions", "checks", "passed", "pct", "failures"}  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# The command


def write_openai(path: Path, session: RecordedSession) -> Path:
    wire = [message_to_wire(m) for m in (*session.system, *session.messages)]
    path.write_bytes(orjson.dumps(wire))
    return path


def cairn(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "CAIRN_MODEL"}
    return subprocess.run(
        [sys.executable, "-m", "cairn", *args],
        capture_output=True,
        text=True,
        env={**environ, **(env or {})},
    )


def test_cairn_replay_json_on_an_openai_chat_file(tmp_path: Path) -> None:
    path = write_openai(tmp_path / "chat.json", long_session())
    done = cairn("replay", str(path), "--window", "16384", "--json")
    assert done.returncode == 0, done.stderr
    data = orjson.loads(done.stdout)
    assert (data["format"], data["policy"], data["requests"], data["overflows"]) == (
        "openai",
        "cairn",
        41,
        0,
    )


def test_cairn_replay_compare_and_report(tmp_path: Path) -> None:
    path = write_openai(tmp_path / "chat.json", long_session())
    done = cairn(
        "replay", str(path), "--window", "16384", "--compare", "--report", str(tmp_path / "r")
    )
    assert done.returncode == 0, done.stderr
    assert "same work, three policies" in done.stdout
    for name in ("report.json", "requests.csv", "context.png"):
        assert (tmp_path / "r" / name).exists()
    for policy in ("cairn", "none", "post-response"):
        assert (tmp_path / "r" / policy / "transcript.jsonl").exists()
    data = orjson.loads((tmp_path / "r" / "report.json").read_bytes())
    assert data["policies"]["none"]["overflows"] > 0
    assert data["policies"]["cairn"]["overflows"] == 0


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["missing.json", "--window", "16384"], "missing.json"),
        (["{path}", "--window", "100"], "--window must be at least 1024"),
        (["{path}", "--window", "16384", "--tokenizer", "gpt-9"], "unknown tokenizer 'gpt-9'"),
        (["{path}", "--window", "16384", "--summarizer", "llm"], "set CAIRN_MODEL"),
        (["{path}", "--window", "16384", "--summarizer", "gpt"], "unknown summarizer 'gpt'"),
    ],
)
def test_cairn_replay_errors_are_one_line(tmp_path: Path, args: list[str], says: str) -> None:
    path = write_openai(tmp_path / "chat.json", long_session(3))
    done = cairn("replay", *(a.format(path=path) for a in args))
    assert done.returncode == 2
    assert says in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr


def test_cairn_replay_with_the_llm_summarizer_uses_the_configured_endpoint(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    path = write_openai(tmp_path / "chat.json", long_session())
    summary = "<summary>\n## Objective and constraints\nFix the CSV export.\n</summary>"
    openai_server.script(*(Reply(text=summary) for _ in range(20)))
    env = {"CAIRN_MODEL": "test-model", "OPENAI_BASE_URL": openai_server.base_url}
    report = str(tmp_path / "r")
    args = ["replay", str(path), "--window", "8192", "--summarizer", "llm", "--report", report]
    done = cairn(*args, env=env)
    assert done.returncode == 0, done.stderr
    records = compaction_records(tmp_path / "r" / "transcript.jsonl")
    assert records and all(r.strategy == "llm" for r in records)
    assert len(openai_server.requests) == len(records)
    assert all(b["model"] == "test-model" for b in openai_server.bodies)
