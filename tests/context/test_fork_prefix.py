"""The compaction fork extends the request the provider cached, byte for byte (issue 11).

A long agent session on the local SSE server — reads, commands, edits, with
snips, a handoff and several compactions — and the recorded JSON bodies:
every fork's messages begin with exactly the messages of the main request
before it, and every other field of the body is the same.
"""

from __future__ import annotations

import json
from pathlib import Path

from cairn.context import CompactionConfig
from cairn.store import CompactionRecord, ContextEditRecord, HandoffRecord, read_transcript
from support.fix_add_session import is_fork, play
from support.openai_server import (  # noqa: F401  (the fixture registers itself by import)
    OpenAIServer,
    every_api_server_fixture,
)


def test_every_fork_extends_its_main_request_byte_for_byte(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    # Blocking compactions: each fork is sent at the line and makes its compaction
    # (the forks prepared in the background: tests/context/test_precompute.py).
    session = play(tmp_path, openai_server, compaction=CompactionConfig(precompute=False))

    records = read_transcript(session.path).records
    assert sum(isinstance(r, CompactionRecord) for r in records) >= 2
    assert any(isinstance(r, ContextEditRecord) for r in records)  # snips happened
    assert any(isinstance(r, HandoffRecord) for r in records)  # and a handoff
    bodies = openai_server.bodies
    forks = [i for i, b in enumerate(bodies) if is_fork(b)]
    assert len(forks) >= 2
    # Each fork answered at once: the k-th fork made the k-th compaction.
    compactions = [r for r in records if isinstance(r, CompactionRecord)]
    assert [r.strategy for r in compactions] == ["llm"] * len(forks)
    extended = 0
    for i, record in zip(forks, compactions, strict=True):
        main = next(b for b in reversed(bodies[:i]) if not is_fork(b))
        fork = bodies[i]
        sent = main["messages"]
        # Byte for byte, unless it would not fit the budget: then the record
        # names what was left out (issue 25 item 6), and nothing else differs.
        same = json.dumps(fork["messages"][: len(sent)]) == json.dumps(sent)
        assert same == (not record.fork_elisions), (i, record.fork_elisions)
        extended += same
        assert {k: v for k, v in fork.items() if k != "messages"} == {
            k: v for k, v in main.items() if k != "messages"
        }
        handoffs = [m for m in sent if "token-budget-handoff" in str(m.get("content"))]
        assert all(m in fork["messages"] for m in handoffs)
    assert extended >= 1
