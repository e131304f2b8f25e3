"""Cairn: keep a long-running LLM agent session inside its context window, durably.

What a library user needs is here: the messages and their constructors
(``user``, ``assistant``, ``system``, ``tool_result``), the transcript store,
the context pipeline (``ContextPipeline``, ``CompactionConfig``,
``FixedContext``), the provider (``ModelConfig``, ``OpenAIProvider``), the
agent runtime (``Runtime``, ``run_turn``) and the errors, all ``CairnError``.

The pipeline, the provider and the agent import the OpenAI SDK, which takes
most of a second to load; ``cairn`` loads them on first use (PEP 562), so
``import cairn`` (and the ``cairn`` command, which imports it) stays quick.
"""

# The standard modules go under private names: every public name here is Cairn's.
import typing as _typing

from cairn.errors import CairnError
from cairn.lazy import lazy_exports as _lazy_exports
from cairn.messages import (
    ImagePart,
    Message,
    MessageMeta,
    Round,
    TextPart,
    ToolCall,
    Usage,
    assistant,
    find_orphans,
    group_rounds,
    system,
    to_wire,
    tool_result,
    user,
)
from cairn.store import JsonlTranscriptStore, StoreError, TranscriptStore, read_transcript
from cairn.tokens import Tokenizer, estimate_message_tokens, estimate_tokens, get_tokenizer

if _typing.TYPE_CHECKING:
    from cairn.agent.facade import AgentSession, SessionBusyError
    from cairn.agent.loop import TurnError, run_turn
    from cairn.agent.runtime import Runtime
    from cairn.agent.settings import SettingsError
    from cairn.context import CompactionConfig, ContextPipeline, FixedContext
    from cairn.context.pipeline import CompactionFailedError, RequestTooLargeError
    from cairn.provider import (
        ContextLimitError,
        ModelConfig,
        ModelConfigError,
        OpenAIProvider,
        ProviderError,
    )

__version__ = "0.1.0"

#: The names loaded on first use, and the module each comes from.
_LAZY: _typing.Final[dict[str, str]] = {
    "AgentSession": "cairn.agent.facade",
    "SessionBusyError": "cairn.agent.facade",
    "CompactionConfig": "cairn.context",
    "CompactionFailedError": "cairn.context.pipeline",
    "ContextLimitError": "cairn.provider",
    "ContextPipeline": "cairn.context",
    "FixedContext": "cairn.context",
    "ModelConfig": "cairn.provider",
    "ModelConfigError": "cairn.provider",
    "OpenAIProvider": "cairn.provider",
    "ProviderError": "cairn.provider",
    "RequestTooLargeError": "cairn.context.pipeline",
    "Runtime": "cairn.agent.runtime",
    "SettingsError": "cairn.agent.settings",
    "TurnError": "cairn.agent.loop",
    "run_turn": "cairn.agent.loop",
}


# Hidden from type checkers, which see the imports above instead: with a
# module ``__getattr__`` in view they would take ``cairn.AnyTypo`` for an object.
if not _typing.TYPE_CHECKING:
    __getattr__, __dir__ = _lazy_exports(__name__, _LAZY)


__all__ = [
    "AgentSession",
    "CairnError",
    "CompactionConfig",
    "CompactionFailedError",
    "ContextLimitError",
    "ContextPipeline",
    "FixedContext",
    "ImagePart",
    "JsonlTranscriptStore",
    "Message",
    "MessageMeta",
    "ModelConfig",
    "ModelConfigError",
    "OpenAIProvider",
    "ProviderError",
    "RequestTooLargeError",
    "Round",
    "Runtime",
    "SessionBusyError",
    "SettingsError",
    "StoreError",
    "TextPart",
    "Tokenizer",
    "ToolCall",
    "TranscriptStore",
    "TurnError",
    "Usage",
    "__version__",
    "assistant",
    "estimate_message_tokens",
    "estimate_tokens",
    "find_orphans",
    "get_tokenizer",
    "group_rounds",
    "read_transcript",
    "run_turn",
    "system",
    "to_wire",
    "tool_result",
    "user",
]
