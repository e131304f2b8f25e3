"""Run one agent turn with Cairn as a library, against any OpenAI-compatible endpoint.

    OPENAI_BASE_URL=http://127.0.0.1:11434/v1 CAIRN_MODEL=qwen2.5-coder:7b \\
        python examples/agent_library.py "What does this project do?"

The agent works in the current directory with Cairn's tools; it may read and
search, but every write and command is refused (permission mode ``ask`` with
nobody to ask). ``OPENAI_API_KEY`` is sent if set. The session is recorded
under ``CAIRN_HOME`` (default ``~/.cairn``); the script prints the answer,
then the transcript's path (read it back with ``cairn inspect PATH``).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import cairn


async def ask(prompt: str, model: cairn.ModelConfig) -> int:
    async with cairn.OpenAIProvider(model) as provider:
        runtime = cairn.Runtime(Path.cwd(), model, provider)
        try:
            session = runtime.new_session()
            result = await cairn.run_turn(session, prompt)
            print(result.text)
            print(f"transcript: {session.pipeline.transcript_path}")
        except cairn.CairnError as exc:  # every error Cairn raises on purpose
            print(f"agent_library.py: {exc}", file=sys.stderr)
            return 1
        finally:
            runtime.close()  # the transcript is synced and its lock released
    return 0


def main(argv: list[str]) -> int:
    name = os.environ.get("CAIRN_MODEL", "").strip()
    if len(argv) != 1 or not name:
        print(
            "usage: CAIRN_MODEL=NAME [OPENAI_BASE_URL=URL] agent_library.py PROMPT", file=sys.stderr
        )
        return 2
    model = cairn.ModelConfig(model=name, base_url=os.environ.get("OPENAI_BASE_URL") or None)
    return asyncio.run(ask(argv[0], model))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
