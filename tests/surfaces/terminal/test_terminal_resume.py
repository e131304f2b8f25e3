"""Seed 004 CLI story 加载历史会话: a resumed session of 10,000 messages renders only the latest."""

from __future__ import annotations

import asyncio
from pathlib import Path

from cairn import AgentSession
from cairn.agent.session import Runtime
from cairn.agent.settings import Settings
from cairn.provider import ModelConfig, OpenAIProvider
from cairn.surfaces.terminal import CairnApp
from cairn.surfaces.terminal.widgets import MessageList
from long_session import LONG, write_long_session

PAIRS = 5_000


def test_a_resumed_session_of_10000_messages_renders_the_latest_30_and_keeps_all(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    home = tmp_path / "home"
    write_long_session(home, workspace, PAIRS)
    model = ModelConfig(model="test-model", base_url="http://127.0.0.1:9/v1", context_window=32_768)
    rt = Runtime(workspace, model, OpenAIProvider(model), settings=Settings(), home=home)
    agent = AgentSession.resume(rt, LONG)
    app = CairnApp(rt, agent)
    seen: dict[str, object] = {}

    async def scenario() -> None:
        async with app.run_test() as pilot:
            await pilot.pause()
            shown = app.query_one(MessageList).mounted()
            seen["rendered"] = len(shown)
            seen["entries"] = len(app.transcript.entries)
            seen["last"] = shown[-1].entry_id == app.transcript.entries[-1].id
            kinds = [e.kind for e in app.transcript.entries]
            seen["blocks"] = kinds.count("compact")

    asyncio.run(scenario())
    rt.close()
    # Every message before and after the compaction is kept, and the block between them.
    assert seen["entries"] == 2 * PAIRS + 1 and seen["blocks"] == 1
    assert seen["rendered"] == 30 and seen["last"] is True
    assert len(agent.ui_messages()) == 2 * PAIRS + 1
