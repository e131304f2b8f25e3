"""The fixed context (system prompt + tool schemas) fits small local models (issue 9 item 8).

Every request carries it, so an 8,192-token model must have room left to
work. Counted with the exact cl100k tokenizer, the tools as the JSON that is
sent (``orjson.dumps(list(schemas))``).
"""

from __future__ import annotations

from pathlib import Path

import orjson

from cairn.agent.runtime import Runtime
from cairn.provider import ModelConfig, OpenAIProvider
from cairn.tokens import get_tokenizer

#: The ceiling for system prompt + tool schemas together (no skills installed).
FIXED_CONTEXT_CEILING = 2_000
#: What they take now, with room for small additions (it was 1,930 before issue 9):
#: under a fifth of an 8,192-token window.
FIXED_CONTEXT_TARGET = 1_500


def test_system_prompt_and_tool_schemas_fit_a_small_model(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    model = ModelConfig(model="m", base_url="http://127.0.0.1:9/v1", context_window=8_192)
    runtime = Runtime(workspace, model, OpenAIProvider(model), home=tmp_path / "home")
    session = runtime.new_session()
    try:
        fixed = session.fixed_context()
        names = session.tools.names()
    finally:
        session.close()
    tokenizer = get_tokenizer("cl100k")
    system_tokens = sum(tokenizer.count(m.text) for m in fixed.system)
    tool_tokens = tokenizer.count(orjson.dumps(list(fixed.tools)).decode())
    # Every tool is still offered.
    assert len(fixed.tools) == len(names) == 13
    assert system_tokens + tool_tokens <= FIXED_CONTEXT_CEILING, (system_tokens, tool_tokens)
    assert system_tokens + tool_tokens <= FIXED_CONTEXT_TARGET, (system_tokens, tool_tokens)
