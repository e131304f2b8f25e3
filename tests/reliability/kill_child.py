"""The child of the kill campaign: one session written through the library, forever.

``python kill_child.py HOME SESSION_ID SEED`` opens (or resumes) the session
and appends user messages, answers with usage, tool calls and their results,
running ``check_and_compact`` before every "request" — so compactions and
context edits happen — and prints ``ACK <id>`` once each message's record was
written (what a SIGKILL can no longer lose). ``READY`` comes first.
"""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path

from cairn.context import CompactionConfig, ContextPipeline, FixedContext
from cairn.context.pipeline import RequestTooLargeError
from cairn.messages import ToolCall, Usage, assistant, system, tool_result, user
from cairn.provider import ModelConfig

TOOLS = ("read_file", "bash", "grep")
SIZES = (40, 400, 2_000, 9_000)


def ack(message_id: str) -> None:
    sys.stdout.write(f"ACK {message_id}\n")
    sys.stdout.flush()


async def main(home: Path, session_id: str, seed: int) -> None:
    rng = random.Random(seed)
    pipeline = ContextPipeline.open(
        home / "ws",
        CompactionConfig(),
        model=ModelConfig(model="m", context_window=8_192),
        session_id=session_id,
        home=home,
        tool_effects={"read_file": "read_only", "grep": "read_only", "bash": "write"},
    )
    fixed = FixedContext((system("You are a coding agent."),))
    print("READY", flush=True)
    turn = 0
    while True:
        turn += 1
        prompt = user(f"turn {seed}-{turn}: " + "please continue " * rng.randint(1, 40))
        pipeline.add(prompt)
        ack(prompt.id)
        for step in range(rng.randint(1, 4)):
            try:
                check = await pipeline.check_and_compact(fixed)
            except RequestTooLargeError:
                break  # not sent, nothing changed: the next turn goes on
            size = check.after.tokens or 0
            calls = [
                ToolCall(f"c{seed}_{turn}_{step}_{i}", rng.choice(TOOLS), '{"path": "a.py"}')
                for i in range(rng.randint(0, 3))
            ]
            answer = assistant("working on it", calls, usage=Usage(size, 30, size + 30))
            pipeline.add(answer)
            ack(answer.id)
            if not calls:
                break
            results = [tool_result(c.id, "x " * rng.choice(SIZES)) for c in calls]
            for stored in pipeline.add_tool_results(results):
                ack(stored.id)
        pipeline.end_turn()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])))
