"""The dense variant: tool results replaced by dense content, and its benchmark column."""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace
from pathlib import Path

import pytest

from cairn.messages import (
    ImagePart,
    Message,
    TextPart,
    ToolCall,
    assistant,
    find_orphans,
    system,
    tool_result,
    user,
)
from cairn.replay.dense import (
    DENSE_KINDS,
    DenseColumn,
    DenseKind,
    dense_kind,
    dense_text,
    densify_session,
    densify_sessions,
    tool_result_chars,
)
from cairn.replay.engine import ReplayOptions, replay_sessions
from cairn.replay.importers import import_sessions
from cairn.replay.metrics import ReplaySummary, RequestMetrics, SessionReport, UnderEstimate
from cairn.replay.session import RecordedSession
from cairn.tokens import count_cjk, estimate_tokens, get_tokenizer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sessions"
SWE_AGENT = FIXTURES / "swe-agent" / "marshmallow-1867-function-calling.traj"
#: Its fixed context (13,878 tokens, from the recorded usage) cannot fit an 8k window.
CLAUDE_CODE = FIXTURES / "formats" / "claude-code.jsonl"


def coding_session(rounds: int = 9) -> RecordedSession:
    messages: list[Message] = [user("Find why the checksum differs. 请检查缓存。")]
    for i in range(rounds):
        calls = [ToolCall(f"c{i}a", "bash", f'{{"command": "sha256sum dist/{i}"}}')]
        if i % 3 == 0:
            calls.append(ToolCall(f"c{i}b", "read_file", f'{{"path": "src/m{i}.py"}}'))
        messages.append(assistant(f"Step {i}.", calls))
        for call in calls:
            body = f"line {i} of {call.name} output\n" * (20 + 7 * i)
            messages.append(tool_result(call.id, body, name=call.name, error=i == 4))
    messages.append(assistant("Done."))
    return RecordedSession("coding", tuple(messages), (system("You are careful."),))


def seeds_estimate(text: str) -> int:
    """The seeds' formula as a tool result gets it: JSON at ½ if it starts as JSON, else text."""
    return estimate_tokens(text, "json" if text.lstrip()[:1] in ("{", "[") else "text")


# ---------------------------------------------------------------------------
# The content


def test_every_tool_result_keeps_its_length_and_nothing_else_changes() -> None:
    session = coding_session()
    dense = densify_session(session)
    assert dense.name == session.name and dense.system == session.system
    assert dense.tools == session.tools and dense.format == session.format
    assert len(dense.messages) == len(session.messages)
    changed = 0
    for before, after in zip(session.messages, dense.messages, strict=True):
        if before.role != "tool":
            assert after == before
            continue
        assert len(after.text) == len(before.text)
        assert after.text != before.text
        # Only the content: id, call id, name and metadata (the error flag) as recorded.
        assert replace(after, content=before.content) == before
        changed += 1
    assert changed == tool_result_chars([session])[0] == 12
    assert tool_result_chars([dense]) == tool_result_chars([session])


def test_pairing_is_unchanged() -> None:
    session = coding_session()
    dense = densify_session(session)

    def pairing(s: RecordedSession) -> list[tuple[str, ...]]:
        return [(c.id, c.name, c.arguments) for m in s.messages for c in m.tool_calls] + [
            (m.tool_call_id or "",) for m in s.messages if m.role == "tool"
        ]

    assert pairing(dense) == pairing(session)
    assert not find_orphans(list(dense.messages))


def test_densify_is_deterministic_and_seeded_per_message() -> None:
    session = coding_session()
    assert densify_session(session) == densify_session(session)
    assert densify_sessions([session]) == (densify_session(session),)
    renamed = densify_session(replace(session, name="other"))
    assert [m.text for m in renamed.messages] != [m.text for m in densify_session(session).messages]
    assert dense_text(500, "base64", "x") == dense_text(500, "base64", "x")
    assert dense_text(500, "base64", "x") != dense_text(500, "base64", "y")


@pytest.mark.parametrize("kind", DENSE_KINDS)
@pytest.mark.parametrize("length", [0, 1, 7, 75, 76, 77, 1_000, 12_345])
def test_dense_text_is_exactly_the_length_asked(kind: DenseKind, length: int) -> None:
    assert len(dense_text(length, kind, f"{kind}-{length}")) == length


def test_every_kind_occurs_in_turn() -> None:
    dense = densify_session(coding_session())
    results = [m.text for m in dense.messages if m.role == "tool"]
    kinds = [dense_kind(n) for n in range(len(results))]
    assert set(kinds) == set(DENSE_KINDS)
    shapes: dict[DenseKind, re.Pattern[str]] = {
        "sha256": re.compile(r"^[0-9a-f]{64}  \S+$", re.MULTILINE),
        "base64": re.compile(r"^[A-Za-z0-9+/]{76}$", re.MULTILINE),
        "json": re.compile(r'\{"id":"[0-9a-f]{16}","sha256":"[A-Za-z0-9+/]{43}=","size":\d+'),
        "cjk-code": re.compile(r"[\u4e00-\u9fff]{2}"),
    }
    for kind, text in zip(kinds, results, strict=True):
        assert shapes[kind].search(text), (kind, text[:200])


def test_image_parts_stay_and_each_text_part_keeps_its_length() -> None:
    image = ImagePart("data:image/png;base64,AAAA")
    parts = (TextPart("a screenshot of the failing page:"), image, TextPart("done"))
    result = Message(role="tool", content=parts, tool_call_id="c1")
    call = assistant(None, [ToolCall("c1", "screenshot")])
    session = RecordedSession("img", (user("look"), call, result, assistant("ok")))
    dense = densify_session(session).messages[2]
    assert isinstance(dense.content, tuple)
    assert dense.content[1] == image
    assert [len(p.text) for p in dense.content if isinstance(p, TextPart)] == [33, 4]


def test_dense_content_costs_clearly_more_than_the_seeds_estimate() -> None:
    """Per kind and over a real session: cl100k counts more tokens than the seeds' formula."""
    cl100k = get_tokenizer("cl100k")
    floors: dict[DenseKind, float] = {"sha256": 1.8, "base64": 2.5, "json": 1.2, "cjk-code": 1.3}
    for kind in DENSE_KINDS:
        texts = [dense_text(8_000, kind, f"seed-{n}") for n in range(8)]
        exact = sum(cl100k.count(t) for t in texts)
        estimate = sum(seeds_estimate(t) for t in texts)
        assert exact >= floors[kind] * estimate, (kind, exact, estimate)
    assert any(count_cjk(t) for t in [dense_text(2_000, "cjk-code", "c")])

    imported = import_sessions(SWE_AGENT).sessions
    results = [m.text for s in densify_sessions(imported) for m in s.messages if m.role == "tool"]
    originals = [m.text for s in imported for m in s.messages if m.role == "tool"]
    exact = sum(cl100k.count(t) for t in results)
    assert exact >= 1.5 * sum(seeds_estimate(t) for t in results)
    # The recorded output is about what the formula expects; the dense one is not.
    assert exact >= 1.5 * sum(cl100k.count(t) for t in originals)


# ---------------------------------------------------------------------------
# The worst under-estimate and the benchmark's column


def metrics(index: int, true: int, projected: int | None) -> RequestMetrics:
    return RequestMetrics(index, true, projected, "normal")


def test_worst_under_estimate_is_the_largest_exact_over_projected() -> None:
    a = SessionReport(
        "a", "cairn", 8_192, 4_096, requests=(metrics(0, 100, 100), metrics(1, 150, 100))
    )
    b = SessionReport(
        "b", "cairn", 8_192, 4_096, requests=(metrics(0, 90, None), metrics(1, 80, 100))
    )
    worst = UnderEstimate.worst([a, b], "f: ")
    assert worst == UnderEstimate(1.5, "f: a", 2, 150, 100)
    assert b.worst_under_estimate == UnderEstimate(0.8, "b", 2, 80, 100)  # never under
    assert UnderEstimate.worst([SessionReport("c", "none", 8_192, 4_096)]) is None
    summary = ReplaySummary("f", "openai", 8_192, "cl100k", "cairn", (a, b)).to_dict()
    assert summary["worst_under_estimate"] == {
        "ratio": 1.5,
        "session": "a",
        "request": 2,
        "true_tokens": 150,
        "projected_tokens": 100,
    }


def test_over_budget_is_a_bare_count_only_when_every_session_ran() -> None:
    assert DenseColumn(8_192, sessions=3, overflows=0).over_budget_cell == "0"
    failed = DenseColumn(8_192, sessions=3, overflows=0, failures=(("f: s", "window too small"),))
    assert failed.over_budget_cell == "0 + 1 failed"
    assert failed.to_dict()["over_budget"] == "0 + 1 failed"


def test_a_densified_fixture_replays_through_the_engine_into_the_dense_column(
    tmp_path: Path,
) -> None:
    """One fixture session densified at 8k, and one that cannot run there (counted, named)."""
    window = 8_192
    options = ReplayOptions(window, "cairn")
    runs: list[tuple[str, list[SessionReport]]] = []
    for path in (SWE_AGENT, CLAUDE_CODE):
        recorded = import_sessions(path).sessions
        reports = asyncio.run(
            replay_sessions(
                densify_sessions(recorded), options, tmp_path / path.stem, fixed_from=recorded
            )
        )
        runs.append((f"{path.parent.name}/{path.name}", reports))
    (_, ran), (_, skipped) = runs

    # The dense session keeps the fixed context its recording had.
    recorded_run = asyncio.run(
        replay_sessions(import_sessions(SWE_AGENT).sessions, options, tmp_path / "recorded")
    )
    assert [r.fixed_tokens for r in ran] == [r.fixed_tokens for r in recorded_run]
    assert ran[0].failure is None and len(ran[0].requests) == 13
    # Denser than what it replaces, in the exact count of its tool results (the requests'
    # own sizes depend on where each run compacted).
    cl100k = get_tokenizer("cl100k")

    def results_tokens(sessions: tuple[RecordedSession, ...]) -> int:
        return sum(cl100k.count(m.text) for s in sessions for m in s.messages if m.role == "tool")

    recorded = import_sessions(SWE_AGENT).sessions
    assert results_tokens(densify_sessions(recorded)) > results_tokens(recorded)
    assert skipped[0].failure is not None and skipped[0].failure.startswith("window too small")

    column = DenseColumn.of(window, runs).to_dict()
    assert set(column) == {
        "window", "policy", "sessions", "failed_sessions", "failures", "requests",
        "overflows", "over_budget", "compactions", "worst_under_estimate",
    }  # fmt: skip
    assert column["window"] == window and column["policy"] == "cairn"
    assert column["sessions"] == 2 and column["requests"] == 13
    # The session that could not run is a failure with its name and reason, not "0".
    assert column["failed_sessions"] == 1
    assert column["failures"] == [
        {
            "session": f"formats/claude-code.jsonl: {skipped[0].name}",
            "reason": skipped[0].failure,
        }
    ]
    assert column["over_budget"] == f"{ran[0].overflows} + 1 failed"
    assert column["overflows"] == ran[0].overflows
    assert column["compactions"] == ran[0].compactions
    worst = column["worst_under_estimate"]
    assert isinstance(worst, dict)
    assert worst["session"] == f"swe-agent/{SWE_AGENT.name}: {ran[0].name}"
    ratios = [r.true_tokens / r.projected_tokens for r in ran[0].requests if r.projected_tokens]
    assert worst["ratio"] == round(max(ratios), 4)
