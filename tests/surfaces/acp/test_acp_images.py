"""Images in prompts: an ACP image block reaches a model that takes images as a ``data:``
URL part of the user message; a model configured without image input gets a
placeholder, and the editor is told once. The compaction fork never carries
the image data, only a placeholder (seed 004: images are stripped before the
compaction request)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cairn.context.llm_summarizer import IMAGE_PLACEHOLDER as FORK_PLACEHOLDER
from cairn.surfaces.acp.server import IMAGE_PLACEHOLDER, IMAGES_OFF_NOTICE
from support.acp_client import Editor, answering, connected, converse, is_fork, make_setup
from support.openai_server import (
    OpenAIServer,
    Reply,
)

#: A 1×1 PNG.
PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9aw"
    "AAAABJRU5ErkJggg=="
)


async def ask_with_image(editor: Editor, session_id: str, text: str) -> str:
    response = await editor.conn.prompt(
        session_id=session_id,
        prompt=[
            {"type": "text", "text": text},  # type: ignore[list-item]
            {"type": "image", "data": PNG, "mimeType": "image/png"},  # type: ignore[list-item]
        ],
    )
    return response.stop_reason


def user_contents(body: dict[str, Any]) -> list[Any]:
    return [m.get("content") for m in body["messages"] if m["role"] == "user"]


async def test_an_image_reaches_a_model_that_takes_images_and_never_the_compaction_fork(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    answering(openai_server)

    setup = make_setup(tmp_path, openai_server, images=True)
    async with connected(setup, tmp_path / "ws") as editor:
        initialized = next(m for m in editor.client.wire if m.get("id") == 0)["result"]
        assert initialized["agentCapabilities"]["promptCapabilities"]["image"] is True
        sid = await editor.new()
        assert await ask_with_image(editor, sid, "What does this screenshot show?") == ("end_turn")
        await converse(editor, sid, 2)
        result = await editor.conn.ext_method("cairn/compact", {"sessionId": sid})
        assert result["status"] == "completed"
        assert IMAGES_OFF_NOTICE not in editor.client.agent_text(sid)

    first = user_contents(openai_server.bodies[0])[-1]
    assert first == [
        {"type": "text", "text": "What does this screenshot show?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
    ]
    (fork,) = [b for b in openai_server.bodies if is_fork(b)]
    sent = str(fork["messages"])
    assert PNG not in sent and "base64" not in sent
    assert FORK_PLACEHOLDER in sent


async def test_a_model_without_image_input_gets_a_placeholder_and_the_editor_is_told_once(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    openai_server.respond_with(lambda body: Reply(text="I cannot see images."))

    setup = make_setup(tmp_path, openai_server)  # images off: the default
    async with connected(setup, tmp_path / "ws") as editor:
        sid = await editor.new()
        assert await ask_with_image(editor, sid, "Look at this") == "end_turn"
        assert await ask_with_image(editor, sid, "And this") == "end_turn"
        assert editor.client.agent_text(sid).count(IMAGES_OFF_NOTICE) == 1

    for body in openai_server.bodies:
        sent = str(body["messages"])
        assert PNG not in sent and "image_url" not in sent
        assert IMAGE_PLACEHOLDER in str(user_contents(body)[-1])
