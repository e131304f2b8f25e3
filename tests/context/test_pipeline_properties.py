"""Property tests over random sessions run through check_and_compact."""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cairn.context import CompactionConfig, ContextPipeline, FixedContext
from cairn.context.budget import input_budget
from cairn.context.checkpoint import ACTIVE_TASK_KEY, CheckpointEntry
from cairn.context.effects import ToolEffect
from cairn.messages import (
    KIND_COMPACT_SUMMARY,
    ImagePart,
    Message,
    TextPart,
    ToolCall,
    Usage,
    assistant,
    find_orphans,
    system,
    tool_result,
    user,
)
from cairn.provider import ModelConfig
from cairn.store import read_transcript
from cairn.tokens import estimate_message_tokens

EFFECTS: dict[str, ToolEffect] = {
    "read_file": "read_only",
    "grep": "read_only",
    "edit_file": "write",
}
FIXED = FixedContext((system("You are a coding agent."),))

prose = st.text(
    st.sampled_from("abcdefghij klmnop 修复错误测试文件 コード 코드\n{}"), min_size=1, max_size=300
)


@dataclass(frozen=True)
class UserTurn:
    text: str
    image: bool


@dataclass(frozen=True)
class ToolTurn:
    tools: tuple[str, ...]
    sizes: tuple[int, ...]
    error: bool


@dataclass(frozen=True)
class Respond:
    completion: int


steps = st.lists(
    st.one_of(
        st.builds(UserTurn, prose, st.booleans()),
        st.builds(
            ToolTurn,
            st.lists(st.sampled_from(sorted(EFFECTS)), min_size=1, max_size=3).map(tuple),
            st.lists(st.sampled_from([10, 400, 4_000, 40_000, 40_000]), min_size=3, max_size=3).map(
                tuple
            ),
            st.booleans(),
        ),
        st.builds(Respond, st.integers(1, 400)),
    ),
    min_size=6,
    max_size=30,
)


def apply(p: ContextPipeline, step: object, n: int) -> Message | None:
    match step:
        case UserTurn(text=text, image=image):
            message = (
                user([TextPart(text), ImagePart("data:image/png;base64,AAAA")])
                if image
                else user(text)
            )
            p.add(message)
            return message
        case ToolTurn(tools=tools, sizes=sizes, error=error):
            calls = [
                ToolCall(f"c{n}_{i}", name, f'{{"path": "f{n}.py"}}')
                for i, name in enumerate(tools)
            ]
            p.add(assistant("working", calls))
            for i, call in enumerate(calls):
                body = f"result {call.id} " + "x" * sizes[i]
                p.add(tool_result(call.id, body, error=error and i == 0))
        case Respond(completion=completion):
            # The provider counts what it was sent: here, our own projection.
            prompt = p.project(FIXED).tokens or 0
            p.add(assistant("ok", usage=Usage(prompt, completion, prompt + completion)))
    return None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, st.sampled_from([16_384, 32_768, 131_072]))
def test_random_sessions_keep_every_invariant(session: list[object], window: int) -> None:
    budget = input_budget(window)
    with tempfile.TemporaryDirectory() as tmp:
        p = ContextPipeline.open(
            Path(tmp) / "ws",
            CompactionConfig(),
            model=ModelConfig(model="m", context_window=window),
            session_id="s",
            home=Path(tmp) / "home",
            tool_effects=EFFECTS,
        )
        typed: list[str] = []
        for n, step in enumerate(session):
            added = apply(p, step, n)
            if added is not None and added.text.strip():
                typed.append(added.text)
            result = asyncio.run(p.check_and_compact(FIXED))
            messages = list(p.messages)

            # No round is ever split.
            assert not find_orphans(messages)
            # The file rebuilds exactly the context in memory.
            assert read_transcript(p.transcript_path).api().messages == messages
            if result.compaction is not None:
                event("compacted")
                block = messages[0]
                assert block.meta.kind == KIND_COMPACT_SUMMARY
                # The replacement fits half the input budget, unless the user's own
                # words (the mandatory checkpoint) needed more.
                size = sum(estimate_message_tokens(m) for m in messages)
                assert size <= max(budget // 2, estimate_message_tokens(block))
            # The first and the latest thing the user wrote are never lost; what the
            # bounded checkpoint leaves out of the middle it says it left out.
            blocks = [m for m in messages if m.meta.kind == KIND_COMPACT_SUMMARY]
            visible = {m.text for m in messages if m.role == "user"}
            if blocks:
                raw = blocks[0].meta.extra.get(ACTIVE_TASK_KEY, [])
                assert isinstance(raw, list)
                entries = [CheckpointEntry.from_json(r, n) for n, r in enumerate(raw, 1)]
                shown = {e.text for e in entries if e is not None and e.text is not None}
                assert all(t in blocks[0].text for t in shown)
                for i, text in enumerate(typed):
                    if text in visible or text in shown:
                        continue
                    assert 0 < i < len(typed) - 1, (i, len(typed))
                    assert "earlier user message(s) left out here" in blocks[0].text
        p.close()
