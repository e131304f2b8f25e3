"""Cairn: keep a long-running LLM agent session inside its context window, durably."""

from cairn.messages import (
    ImagePart,
    Message,
    MessageMeta,
    Round,
    TextPart,
    ToolCall,
    Usage,
    find_orphans,
    group_rounds,
    to_wire,
)
from cairn.tokens import Tokenizer, estimate_message_tokens, estimate_tokens, get_tokenizer

__version__ = "0.1.0"

__all__ = [
    "ImagePart",
    "Message",
    "MessageMeta",
    "Round",
    "TextPart",
    "Tokenizer",
    "ToolCall",
    "Usage",
    "__version__",
    "estimate_message_tokens",
    "estimate_tokens",
    "find_orphans",
    "get_tokenizer",
    "group_rounds",
    "to_wire",
]
