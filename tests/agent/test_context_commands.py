"""``/context``, ``/cost`` and ``/model`` (issue 26 item 4).

Acceptance: ``/context`` sums to the projection the pipeline decides on;
``/cost`` matches the usage the provider reported (main requests and
compaction forks); ``/model`` switches the model from the next request on
and, when the new window is smaller, the next request is compacted first.
Driven through a real ``Runtime`` against the local SSE server.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cairn.agent.commands import COMMANDS, HELP, run_command
from cairn.agent.loop import run_turn
from cairn.agent.runtime import Runtime
from cairn.agent.settings import Settings
from cairn.context.breakdown import (
    CONVERSATION,
    KEPT,
    RESTORED,
    SINCE,
    SUMMARY,
    apportion,
    breakdown,
    conversation_parts,
)
from cairn.messages import (
    KIND_COMPACT_SUMMARY,
    KIND_RESTORATION,
    Message,
    MessageMeta,
    Usage,
    assistant,
    user,
)
from cairn.provider import ModelConfig, OpenAIProvider
from cairn.provider.metering import Bill, MeteredProvider
from cairn.provider.registry import ModelOverride, TokenCounts
from cairn.store import CompactionRecord, read_transcript
from cairn.surfaces.acp.updates import COMMANDS as ACP_COMMANDS
from cairn.surfaces.terminal.view import complete
from support.cli_run import cairn_p
from support.openai_server import (
    OpenAIServer,
    Reply,
    ToolCallSpec,
    UsageSpec,
)

SUMMARY_TEXT = "<summary>\n## Objective and constraints\nRead the modules.\n</summary>"


def is_fork(body: dict[str, Any]) -> bool:
    last = body["messages"][-1]
    return last["role"] == "user" and "TEXT ONLY" in str(last.get("content"))


def read(path: str) -> Reply:
    return Reply(tool_calls=[ToolCallSpec("read_file", json.dumps({"path": path}))])


def workspace_with_modules(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    for n in range(8):
        text = "".join(f"module {n} line {i}: value = compute({i})\n" for i in range(60))
        (ws / f"m{n}.py").write_text(text)
    (ws / "AGENTS.md").write_text("Run the tests with `make test` before you answer.\n")
    return ws


def open_runtime(
    ws: Path, home: Path, server: OpenAIServer, window: int, settings: Settings | None = None
) -> Runtime:
    config = ModelConfig(model="m", base_url=server.base_url, context_window=window)
    return Runtime(
        ws,
        config,
        OpenAIProvider(config),
        settings=settings or Settings(),
        home=home,
        permission_mode="bypass",
    )


def rows(report: str) -> dict[str, int]:
    """The ``/context`` rows (label → tokens), ``free`` left out."""
    found: dict[str, int] = {}
    for line in report.splitlines():
        match = re.match(r"  (\S.*?)\s{2,}([\d,-]+)\s", line + " ")
        if match and match.group(1) != "free":
            found[match.group(1)] = int(match.group(2).replace(",", ""))
    return found


def command(runtime: Runtime, name: str, argument: str = "") -> str:
    return asyncio.run(run_command(runtime, name, argument)).text


# ---------------------------------------------------------------------------
# /context


def test_context_sums_to_the_projection_before_and_after_a_compaction(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    ws = workspace_with_modules(tmp_path)
    plan = [
        *(read(f"m{n}.py") for n in range(4)),
        Reply(text="done"),
        *(read(f"m{n}.py") for n in range(4, 6)),
        Reply(text="done too"),
    ]

    def model(body: dict[str, Any]) -> Reply:
        return Reply(text=SUMMARY_TEXT) if is_fork(body) else (plan.pop(0) if plan else Reply("ok"))

    openai_server.respond_with(model)
    runtime = open_runtime(ws, tmp_path / "home", openai_server, 16_384)
    session = runtime.new_session()
    asyncio.run(session.start())
    try:
        first = command(runtime, "/context")
        assert set(rows(first)) == {
            "system prompt",
            "instructions AGENTS.md",
            f"tools (Cairn, {len(session.tools.schemas())})",
            CONVERSATION,
        }
        asyncio.run(run_turn(session, "read four modules"))
        assert command(runtime, "/compact").startswith("compacted (llm)")
        asyncio.run(run_turn(session, "read two more"))
        report = command(runtime, "/context")
    finally:
        runtime.close()
    found = rows(report)
    projection = session.pipeline.project(session.fixed_context()).tokens
    assert projection is not None
    assert sum(found.values()) == projection
    assert f"context      {projection:,} of {session.pipeline.input_budget:,} tokens" in report
    assert {SUMMARY, RESTORED, KEPT, SINCE} <= set(found)
    assert found[SUMMARY] > 0 and found[SINCE] > 0
    fixed = sum(found[k] for k in found if k.startswith(("system", "instructions", "tools")))
    assert fixed == session.pipeline.fixed_tokens(session.fixed_context())
    assert "handoff above" in report and "compaction at" in report
    assert "the fixed context measured at" in report  # the responses calibrated it


def test_conversation_parts_tell_the_checkpoint_from_what_came_after() -> None:
    summary = Message("user", "the summary", meta=MessageMeta(kind=KIND_COMPACT_SUMMARY))
    restored = Message("user", "a file", meta=MessageMeta(kind=KIND_RESTORATION))
    kept, since = assistant("kept"), user("a new question")
    messages = [summary, restored, kept, since]

    def size(m: Message) -> int:
        return len(m.text)

    assert conversation_parts(messages, 3, size) == [
        (SUMMARY, 11),
        (RESTORED, 6),
        (KEPT, 4),
        (SINCE, 14),
    ]
    assert conversation_parts(messages, 0, size) == [(CONVERSATION, 35)]


@given(
    st.integers(0, 10**7),
    st.lists(st.integers(0, 10**6), min_size=1, max_size=12),
)
def test_apportion_adds_up_and_stays_within_a_token_of_each_share(
    total: int, weights: list[int]
) -> None:
    parts = apportion(total, weights)
    assert sum(parts) == total and len(parts) == len(weights)
    weight = sum(weights) or len(weights)
    for part, w in zip(parts, weights if sum(weights) else [1] * len(weights), strict=True):
        assert abs(part - total * w / weight) < 1


def test_a_breakdown_scales_each_side_to_its_measured_total() -> None:
    parts = breakdown(
        [("system prompt", 100), ("tools", 300)], 200, [("conversation", 50)], 900, 1000
    )
    assert [(r.label, r.tokens, r.fixed) for r in parts.rows] == [
        ("system prompt", 50, True),
        ("tools", 150, True),
        ("conversation", 700, False),
    ]
    assert parts.total == 900 and parts.share(250) == 0.25
    unknown = breakdown([("system prompt", 10)], 10, [("conversation", 5)], None, None)
    assert unknown.total == 15 and unknown.share(5) is None


# ---------------------------------------------------------------------------
# /cost


def test_cost_matches_the_usage_the_provider_reported_forks_included(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    ws = workspace_with_modules(tmp_path)
    plan = [read("m0.py"), read("m1.py"), Reply(text="done")]
    reported: list[UsageSpec] = []

    def model(body: dict[str, Any]) -> Reply:
        n = len(reported) + 1
        usage = UsageSpec(1_000 * n, 10 * n, cached_tokens=500 * n)
        reported.append(usage)
        if is_fork(body):
            return Reply(text=SUMMARY_TEXT, usage=usage)
        reply = plan.pop(0) if plan else Reply("ok")
        reply.usage = usage
        return reply

    openai_server.respond_with(model)
    prices = ModelOverride(input_price=2.0, cached_input_price=0.5, output_price=8.0)
    settings = Settings(models={"m": prices})
    runtime = open_runtime(ws, tmp_path / "home", openai_server, 64_000, settings)
    session = runtime.new_session()
    try:
        asyncio.run(run_turn(session, "read two modules"))
        assert command(runtime, "/compact").startswith("compacted (llm)")
        report = command(runtime, "/cost")
    finally:
        runtime.close()
    assert len(reported) == 4  # three main requests and one fork
    prompt = sum(u.prompt_tokens for u in reported)
    cached = sum(u.cached_tokens or 0 for u in reported)
    output = sum(u.completion_tokens for u in reported)
    assert f"input        {prompt:,} tokens, {cached:,} of them from the cache" in report
    assert f"output       {output:,} tokens" in report
    assert "responses    4" in report
    dollars = ((prompt - cached) * 2.0 + cached * 0.5 + output * 8.0) / 1_000_000
    assert f"${dollars:,.4f} at the prices of m" in report


def test_cost_says_when_the_prices_are_unknown(tmp_path: Path, openai_server: OpenAIServer) -> None:
    openai_server.respond_with(lambda body: Reply("hi", usage=UsageSpec(100, 5)))
    runtime = open_runtime(
        workspace_with_modules(tmp_path), tmp_path / "home", openai_server, 64_000
    )
    session = runtime.new_session()
    try:
        asyncio.run(run_turn(session, "hello"))
        report = command(runtime, "/cost")
    finally:
        runtime.close()
    assert report.splitlines()[0].startswith("cost         unknown: no prices for 'm'")
    assert "input        100 tokens, 0 of them from the cache" in report


class _Answer:
    """A provider whose one answer streams nothing but a usage report."""

    def __init__(self, usage: Usage | None) -> None:
        self.usage = usage

    async def stream(self, request: Any, *, max_retries: int | None = None) -> Any:
        from cairn.provider.events import Finish, UsageEvent

        if self.usage is not None:
            yield UsageEvent(self.usage)
        yield Finish("stop")

    async def complete(self, request: Any, *, max_retries: int | None = None) -> Message:
        return assistant("x", usage=self.usage)


def test_the_meter_adds_streams_and_completions_and_counts_answers_without_usage() -> None:
    bill = Bill()
    metered = MeteredProvider(_Answer(Usage(100, 10, 110, cached_tokens=40)), bill)

    async def drain() -> None:
        async for _ in metered.stream(None):  # type: ignore[arg-type]
            pass
        await metered.complete(None)  # type: ignore[arg-type]

    asyncio.run(drain())
    assert bill.tokens == TokenCounts(120, 80, 20) and bill.responses == 2
    asyncio.run(MeteredProvider(_Answer(None), bill).complete(None))  # type: ignore[arg-type]
    assert bill.unmetered == 1 and bill.responses == 2


# ---------------------------------------------------------------------------
# /model


def test_model_switches_and_a_smaller_window_compacts_the_next_request_first(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    ws = workspace_with_modules(tmp_path)
    plan = [*(read(f"m{n}.py") for n in range(6)), Reply(text="read"), Reply(text="small now")]

    def model(body: dict[str, Any]) -> Reply:
        return Reply(text=SUMMARY_TEXT) if is_fork(body) else (plan.pop(0) if plan else Reply("ok"))

    openai_server.respond_with(model)
    settings = Settings(models={"small-model": ModelOverride(context_window=8_192)})
    runtime = open_runtime(ws, tmp_path / "home", openai_server, 64_000, settings)
    session = runtime.new_session()
    try:
        asyncio.run(run_turn(session, "read six modules"))
        assert not any(
            isinstance(r, CompactionRecord) for r in read_transcript(session.path).records
        )
        assert session.pipeline.calibration is not None
        shown = command(runtime, "/model")
        assert shown.startswith("model        m\nwindow       64,000")
        switched = command(runtime, "/model", "small-model")
        assert "window       8,192 (was 64,000)" in switched
        assert "the next request compacts first" in switched
        assert session.pipeline.calibration is None  # measured again by the new model
        sent_before = len(openai_server.bodies)
        asyncio.run(run_turn(session, "and now?"))
        records = read_transcript(session.path).records
    finally:
        runtime.close()
    bodies = openai_server.bodies[sent_before:]
    assert is_fork(bodies[0]) and not is_fork(bodies[1])  # compacted, then the request
    assert all(b["model"] == "small-model" for b in bodies)
    assert any(isinstance(r, CompactionRecord) and r.trigger == "auto" for r in records)


def test_an_unlisted_model_keeps_the_configured_window(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(lambda body: Reply("hi"))
    runtime = open_runtime(
        workspace_with_modules(tmp_path), tmp_path / "home", openai_server, 50_000
    )
    runtime.new_session()
    try:
        switched = command(runtime, "/model", "nobody-knows-this-model")
    finally:
        runtime.close()
    assert "window       50,000" in switched
    assert "not listed: the window is the one configured" in switched
    assert runtime.model.model == "nobody-knows-this-model"


# ---------------------------------------------------------------------------
# Every surface


def test_every_surface_offers_the_three_commands_with_the_same_words(tmp_path: Path) -> None:
    for name in ("/context", "/cost", "/model"):
        assert name in COMMANDS and name in HELP
        assert complete(name) == [name]
        acp = {f"/{c[0]}": c[1] for c in ACP_COMMANDS}
        help_line = next(line for line in HELP.splitlines() if line.strip().startswith(name))
        assert acp[name].lower() == help_line.split("  ")[-1].strip().lower()


@pytest.mark.parametrize("name", ["/context", "/cost", "/model"])
def test_cairn_p_runs_them_as_slash_prompts(
    tmp_path: Path, openai_server: OpenAIServer, name: str
) -> None:
    ws = workspace_with_modules(tmp_path)
    env = {
        "CAIRN_HOME": str(tmp_path / "home"),
        "OPENAI_BASE_URL": openai_server.base_url,
        "OPENAI_API_KEY": "k",
        "CAIRN_MODEL": "m",
        "CAIRN_CONTEXT_WINDOW": "32000",
    }
    done = cairn_p("-p", name, cwd=ws, env=env)
    assert done.returncode == 0, done.stderr
    first = {"/context": "context ", "/cost": "cost ", "/model": "model "}[name]
    assert done.stdout.startswith(first), done.stdout
    assert openai_server.bodies == []  # never sent to the model
