"""The pure rules of the ACP surface: deltas from accumulated text, tool calls in ACP
terms, the plan, the compaction updates, the replay order, the client's raw
capabilities and the prompt's text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from acp.schema import (
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    ResourceContentBlock,
    TextContentBlock,
    TextResourceContents,
)

from cairn.messages import (
    KIND_COMPACT_SUMMARY,
    ImagePart,
    Message,
    MessageMeta,
    TextPart,
    ToolCall,
    assistant,
    tool_result,
    user,
)
from cairn.surfaces.acp import updates
from cairn.surfaces.acp.server import (
    IMAGE_PLACEHOLDER,
    ClientFeatures,
    client_features,
    prompt_parts,
    prompt_text,
)

WS = Path("/work/project")


def test_streamed_text_sends_only_what_is_new_reasoning_first() -> None:
    streamed = updates.StreamedText()
    assert streamed.deltas("m1", "Hel", "") == [updates.agent_text("Hel")]
    assert streamed.deltas("m1", "Hello", "think") == [
        updates.agent_thought("think"),
        updates.agent_text("lo"),
    ]
    assert streamed.deltas("m1", "Hello", "think") == []
    final = Message(role="assistant", content="Hello there", id="m1", reasoning="think")
    assert streamed.finish(final) == [updates.agent_text(" there")]
    # A message that never streamed (a server without streaming) goes out whole.
    assert streamed.finish(Message(role="assistant", content="Whole", id="m2")) == [
        updates.agent_text("Whole")
    ]


def test_tool_calls_get_a_kind_a_readable_title_and_an_absolute_location() -> None:
    read = ToolCall("c1", "read_file", json.dumps({"path": "src/a.py", "offset": 40}))
    assert updates.tool_kind("read_file") == "read"
    assert updates.tool_kind("bash") == "execute"
    assert updates.tool_kind("something_new") == "other"
    assert updates.tool_title(read) == "read_file src/a.py"
    assert updates.tool_title(ToolCall("c2", "bash", json.dumps({"command": "pytest\n  -q"}))) == (
        "bash: pytest -q"
    )
    assert updates.tool_title(ToolCall("c3", "odd", "not json")) == "odd"
    started = updates.tool_started(read, WS)
    assert started["locations"] == [{"path": "/work/project/src/a.py", "line": 40}]
    assert started["rawInput"] == {"path": "src/a.py", "offset": 40}
    assert started["status"] == "in_progress"


def test_a_long_tool_result_is_cut_and_an_error_is_failed() -> None:
    long = tool_result("c1", "x" * 10_000, name="bash")
    update: Any = updates.tool_finished("c1", long)
    text = update["content"][0]["content"]["text"]
    assert text.startswith("x" * updates.RESULT_CHARS) and "6,000 more characters" in text
    failed = updates.tool_finished("c1", tool_result("c1", "boom", name="bash", error=True))
    assert failed["status"] == "failed"


def test_the_plan_follows_the_todo_list_and_ignores_other_calls() -> None:
    todos = [{"content": "a", "status": "completed"}, {"content": "b", "status": "weird"}]
    plan: Any = updates.plan(ToolCall("c1", "todo_write", json.dumps({"todos": todos})))
    assert plan is not None
    assert [(e["content"], e["status"]) for e in plan["entries"]] == [
        ("a", "completed"),
        ("b", "pending"),
    ]
    assert updates.plan(ToolCall("c2", "read_file", "{}")) is None


def test_compaction_updates_carry_an_error_only_when_failed() -> None:
    assert updates.compaction_update("k", "in_progress") == {
        "sessionUpdate": "compaction_update",
        "compactionId": "k",
        "status": "in_progress",
    }
    done = updates.compaction_update("k", "completed", summary="S", error="ignored")
    assert done["summary"] == [{"type": "text", "text": "S"}] and "error" not in done
    assert updates.compaction_update("k", "failed", error="why")["error"] == "why"
    assert updates.compaction_update("k", "cancelled", error="why").get("error") is None
    assert updates.compaction_summary_chunk("k", "more") == {
        "sessionUpdate": "compaction_summary_chunk",
        "compactionId": "k",
        "content": {"type": "text", "text": "more"},
    }


def test_history_replays_in_order_with_the_compact_block_where_it_happened() -> None:
    call = ToolCall("c1", "read_file", json.dumps({"path": "a.py"}))
    block = Message(
        role="user",
        content="the summary",
        meta=MessageMeta(
            kind=KIND_COMPACT_SUMMARY, extra={"pre_tokens": 41210, "post_tokens": 9830}
        ),
    )
    messages = [
        user("first"),
        assistant("", tool_calls=[call]),
        tool_result("c1", "1\tprint()", name="read_file"),
        assistant("answer one"),
        block,
        user("second"),
        assistant("answer two"),
    ]
    fallback: list[Any] = list(updates.history(messages, WS, standard_compaction=False))
    assert [u["sessionUpdate"] for u in fallback] == [
        "user_message_chunk",
        "tool_call",
        "tool_call_update",
        "agent_message_chunk",
        "tool_call",
        "tool_call_update",
        "user_message_chunk",
        "agent_message_chunk",
    ]
    assert fallback[4]["title"] == "Compacting conversation"
    assert fallback[5]["content"][0]["content"]["text"] == (
        "Conversation compacted · 41,210 → 9,830 tokens"
    )
    standard = list(updates.history(messages, WS, standard_compaction=True))
    assert standard[4] == updates.compaction_update(
        f"compaction-{block.id}", "completed", summary="the summary"
    )


def test_client_features_are_read_from_the_raw_initialize() -> None:
    assert client_features({}) == ClientFeatures()
    raw = {
        "clientCapabilities": {
            "fs": {"readTextFile": True, "writeTextFile": True},
            "terminal": True,
            "session": {"compaction": {}},
        }
    }
    assert client_features(raw) == ClientFeatures(True, True, True, True, False)
    # Cairn's own notifications only for a client that asks for them.
    raw["clientCapabilities"]["_meta"] = {"cairn": {"compaction": True}}
    assert client_features(raw).cairn_compaction is True
    raw["clientCapabilities"]["_meta"] = {"cairn": {"compaction": "yes"}}
    assert client_features(raw).cairn_compaction is False
    odd = {"clientCapabilities": {"fs": "yes", "terminal": 1, "session": {"compaction": True}}}
    assert client_features(odd) == ClientFeatures()


def test_the_prompt_text_keeps_text_and_attached_files() -> None:
    blocks = [
        TextContentBlock(type="text", text="Explain "),
        ResourceContentBlock(type="resource_link", name="a.py", uri="file:///w/a.py"),
        EmbeddedResourceContentBlock(
            type="resource",
            resource=TextResourceContents(uri="file:///w/b.py", text="print(1)"),
        ),
        ImageContentBlock(type="image", data="AAAA", mime_type="image/png"),
    ]
    text = prompt_text(blocks)  # type: ignore[arg-type]
    assert text.startswith("Explain [a.py](file:///w/a.py)")
    assert "file:///w/b.py:\n```\nprint(1)\n```" in text
    assert IMAGE_PLACEHOLDER in text
    assert prompt_text([TextContentBlock(type="text", text="/compact focus")]) == "/compact focus"


def test_prompt_parts_carry_an_image_as_a_data_url_only_for_a_model_that_takes_images() -> None:
    blocks = [
        TextContentBlock(type="text", text="What is wrong here?"),
        ImageContentBlock(type="image", data="iVBORw0KGgo=", mime_type="image/png"),
        TextContentBlock(type="text", text=" Thanks."),
    ]
    parts = prompt_parts(blocks, images=True)  # type: ignore[arg-type]
    assert parts == [
        TextPart("What is wrong here?"),
        ImagePart("data:image/png;base64,iVBORw0KGgo="),
        TextPart(" Thanks."),
    ]
    (only,) = prompt_parts(blocks, images=False)  # type: ignore[arg-type]
    assert isinstance(only, TextPart) and IMAGE_PLACEHOLDER in only.text
    assert "iVBORw0KGgo" not in only.text


def test_a_replayed_user_message_shows_its_images_as_the_editor_sent_them() -> None:
    shot = user([TextPart("see"), ImagePart("data:image/png;base64,AAAA")])
    remote = user([ImagePart("https://example.com/a.png")])
    replayed = list(updates.history([shot, remote], WS, standard_compaction=False))
    assert [u["content"] for u in replayed] == [
        {"type": "text", "text": "see"},
        {"type": "image", "data": "AAAA", "mimeType": "image/png"},
    ]
