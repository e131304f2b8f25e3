"""What each wire API's prompt cache reads of a request, by its documented rules (issue 27).

The replay knows every request exactly but no provider answers it, so the
cache share each API would bill is simulated from the providers' documented
rules, message by message:

- **OpenAI** (chat completions and the Responses API) caches automatically:
  the prefix a request shares with an earlier one is read from the cache
  once it is at least ``OPENAI_MIN_CACHED`` tokens, in steps of
  ``OPENAI_CACHE_STEP``.
- **Anthropic** caches only up to ``cache_control`` breakpoints. Cairn puts
  them on the fixed context (tools and system), on the last message and on
  the message that ended the previous request (``anthropic_breakpoints``);
  a breakpoint reads the longest cached prefix that ends at an earlier
  request's breakpoint at most ``ANTHROPIC_LOOKBACK`` content blocks before
  it, and writes its own prefix — from ``ANTHROPIC_MIN_CACHED`` tokens.

The replay's requests carry the whole history, so "an earlier request" is
the previous one: what an older one cached and the previous one did not
re-read has no bearing on the next.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cairn.messages import Message

OPENAI_MIN_CACHED = 1_024
OPENAI_CACHE_STEP = 128
ANTHROPIC_MIN_CACHED = 1_024
#: How many content blocks before a breakpoint the API looks for an earlier entry.
ANTHROPIC_LOOKBACK = 20


def openai_cache_read(shared_tokens: int) -> int:
    """Tokens OpenAI reads from its cache when ``shared_tokens`` match an earlier request."""
    if shared_tokens < OPENAI_MIN_CACHED:
        return 0
    return shared_tokens - (shared_tokens - OPENAI_MIN_CACHED) % OPENAI_CACHE_STEP


def blocks(message: Message) -> int:
    """The content blocks ``message`` becomes on the Anthropic wire (text, one per call)."""
    return 1 + len(message.tool_calls)


def anthropic_breakpoints(messages: Sequence[Message]) -> tuple[int, ...]:
    """Where Cairn's breakpoints end, as message counts: 0 is the fixed context alone.

    The fixed context, the last message, and the message before the last
    assistant message (where the previous request ended) — as
    ``cairn.provider.anthropic_request`` places them.
    """
    points = {0, len(messages)}
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "assistant":
            if index > 0:
                points.add(index)
            break
    return tuple(sorted(points))


@dataclass(frozen=True, slots=True)
class CacheUse:
    """One request's prompt as the cache saw it: read, written, and the rest."""

    read: int = 0
    written: int = 0


def anthropic_cache_use(
    previous: Sequence[int],
    shared_messages: int,
    messages: Sequence[Message],
    prefix_tokens: Callable[[int], int],
) -> CacheUse:
    """The read and the write of a request whose first ``shared_messages`` messages match
    the previous request's, given the previous request's breakpoints ``previous``.

    ``prefix_tokens(n)`` is the size of the fixed context plus the first ``n``
    messages. A previous breakpoint is read when its prefix is shared and a
    current breakpoint lies at most ``ANTHROPIC_LOOKBACK`` blocks after it.
    """
    current = anthropic_breakpoints(messages)
    cached = [
        p for p in previous if p <= shared_messages and prefix_tokens(p) >= ANTHROPIC_MIN_CACHED
    ]
    read_at: int | None = None
    for point in sorted(cached, reverse=True):
        if any(c >= point and _blocks(messages, point, c) <= ANTHROPIC_LOOKBACK for c in current):
            read_at = point
            break
    read = prefix_tokens(read_at) if read_at is not None else 0
    last = current[-1]
    end = prefix_tokens(last)
    written = end - read if end >= ANTHROPIC_MIN_CACHED and last != read_at else 0
    return CacheUse(read=read, written=max(0, written))


def _blocks(messages: Sequence[Message], start: int, end: int) -> int:
    return sum(blocks(m) for m in messages[start:end])
