"""The words every surface uses for the same thing, from one place so they agree.

The terminal's compact block, the editor's compaction tool call and the
browser's block all read ``Conversation compacted · 41,210 → 9,830 tokens ·
llm``, built from the block's meta by ``compact_label``.
"""

from __future__ import annotations

from cairn.messages import Message

__all__ = ["compact_label"]


def compact_label(block: Message) -> str:
    """``Conversation compacted · 41,210 → 9,830 tokens · llm`` from a compact block's meta."""
    extra = block.meta.extra
    pre, post, strategy = extra.get("pre_tokens"), extra.get("post_tokens"), extra.get("strategy")
    parts = ["Conversation compacted"]
    if isinstance(pre, int) and isinstance(post, int):
        parts.append(f"{pre:,} → {post:,} tokens")
    if isinstance(strategy, str) and strategy:
        parts.append(strategy)
    return " · ".join(parts)
