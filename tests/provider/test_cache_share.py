"""What a long session costs on each API: the compaction fork reads its main request's cache.

The real agent runs a long coding session — reads, commands, snips, a
handoff, several LLM compactions — against the local server speaking
Anthropic Messages and the OpenAI Responses API as documented. The server
implements each API's prompt caching (Anthropic: a ``cache_control``
breakpoint caches the prefix up to it, a later request sharing that prefix
within 20 blocks of one of its own breakpoints reads it; OpenAI: the shared
prefix from 1,024 tokens, in steps of 128) and reports it in the API's own
usage fields. The properties:

- every Anthropic fork reads from the cache everything its main request
  cached — ``cache_read`` = that request's read + write — so only the
  messages appended since and the instruction are uncached;
- the pipeline never counts a cache field twice: each answer's stored
  ``prompt_tokens`` is the server's whole prompt (input + read + write), the
  same number chat completions reports for the same body;
- the share of input read from the cache, over the forks and over the
  session, is printed (and recorded as a JUnit property) for the README.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cairn.context import CompactionConfig
from cairn.messages import Usage
from cairn.provider.registry import TokenCounts, lookup, price
from cairn.store import CompactionRecord, read_transcript
from cairn.wire_apis import WireAPI
from support.fix_add_session import is_fork, play
from support.openai_server import (
    CacheStat,
    OpenAIServer,
    RecordedRequest,
)


def long_session(tmp_path: Path, server: OpenAIServer, api: WireAPI) -> list[Usage]:
    """``fix_add_session``'s session (``test_fork_prefix``'s), on ``api``; the usages
    the transcript stored."""
    # Blocking compactions: each fork follows the main request it extends. A fork
    # prepared in the background races that request to the cache (issue 28's benchmark).
    session = play(tmp_path, server, api, CompactionConfig(precompute=False))
    records = read_transcript(session.path).records
    assert sum(isinstance(r, CompactionRecord) for r in records) >= 2
    return [m.meta.usage for m in session.pipeline.messages if m.meta.usage is not None]


def share(stats: list[CacheStat]) -> float:
    prompt = sum(s.prompt_tokens for s in stats)
    return sum(s.cache_read for s in stats) / prompt


#: The model each API's session is priced as: a model people run on it.
PRICED_AS = {"anthropic": "claude-sonnet-4-5", "responses": "gpt-5.1-codex"}


def list_price_share(api: str, stats: list[CacheStat]) -> float:
    """What the input cost at the registry's prices, as a share of its price uncached
    (cache reads at the cached price, Anthropic's cache writes at theirs)."""
    info = lookup(PRICED_AS[api])
    assert info is not None and info.prices.input
    counts = [
        TokenCounts(s.prompt_tokens - s.cache_read, s.cache_read, 0, s.cache_creation)
        for s in stats
    ]
    billed = price(sum(counts, TokenCounts()), info)
    assert billed is not None
    return billed / (sum(s.prompt_tokens for s in stats) * info.prices.input / 1e6)


def report(
    api: str,
    stats: list[CacheStat],
    forks: list[CacheStat],
    record_property: Callable[[str, object], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    cost = list_price_share(api, stats)
    # The cache must make the session cheaper than its input uncached.
    assert cost < 1, cost
    record_property(f"{api}_cache_share_forks", round(share(forks), 4))
    record_property(f"{api}_cache_share_session", round(share(stats), 4))
    record_property(f"{api}_input_list_price_share", round(cost, 4))
    with capsys.disabled():
        print(
            f"\n{api}: {len(stats)} requests, {len(forks)} forks; input read from the cache: "
            f"forks {share(forks):.1%}, whole session {share(stats):.1%}; input billed at "
            f"{cost:.1%} of its uncached price ({PRICED_AS[api]})"
        )


def split(server: OpenAIServer) -> tuple[list[RecordedRequest], dict[int, CacheStat]]:
    requests = server.requests
    assert not [r.rejected for r in requests if r.rejected], "the server refused a request"
    return requests, {s.request: s for s in server.cache_stats}


def test_anthropic_forks_read_everything_their_main_request_cached(
    tmp_path: Path,
    openai_server: OpenAIServer,
    record_property: Callable[[str, object], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    usages = long_session(tmp_path, openai_server, "anthropic")
    requests, stats = split(openai_server)
    assert {r.api for r in requests} == {"anthropic"}
    forks = [i for i, r in enumerate(requests) if is_fork(r.body)]
    assert len(forks) >= 2
    for i in forks:
        main = max(j for j in range(i) if not is_fork(requests[j].body))
        fork, cached = stats[i], stats[main]
        # Everything the main request cached is read; the rest is what came after.
        assert fork.cache_read == cached.cache_read + cached.cache_creation > 0, (i, main)
        assert fork.input_tokens == 0 and fork.cache_creation > 0
        # The fork's native body extends its main request's, block for block.
        assert _blocks(requests[i].native)[: len(_blocks(requests[main].native))] == _blocks(
            requests[main].native
        )
    # A request that extends the one before it reads all of that one's cache too.
    mains = [i for i in range(len(requests)) if i not in forks]
    extended = [(a, b) for a, b in itertools.pairwise(mains) if _extends(requests[a], requests[b])]
    assert len(extended) >= len(mains) // 2
    for a, b in extended:
        assert stats[b].cache_read == stats[a].cache_read + stats[a].cache_creation
    _never_twice(usages, requests, stats)
    report("anthropic", list(stats.values()), [stats[i] for i in forks], record_property, capsys)


def test_responses_forks_are_read_from_the_automatic_cache(
    tmp_path: Path,
    openai_server: OpenAIServer,
    record_property: Callable[[str, object], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    usages = long_session(tmp_path, openai_server, "responses")
    requests, stats = split(openai_server)
    assert {r.api for r in requests} == {"responses"}
    forks = [i for i, r in enumerate(requests) if is_fork(r.body)]
    assert len(forks) >= 2
    for i in forks:
        main = max(j for j in range(i) if not is_fork(requests[j].body))
        # The whole main request is a prefix of the fork: all of it is cached, but for
        # OpenAI's 128-token steps.
        assert stats[main].prompt_tokens - 128 < stats[i].cache_read <= stats[main].prompt_tokens
        native_main, native_fork = requests[main].native, requests[i].native
        assert native_main is not None and native_fork is not None
        assert native_fork["input"][: len(native_main["input"])] == native_main["input"]
    _never_twice(usages, requests, stats)
    report("responses", list(stats.values()), [stats[i] for i in forks], record_property, capsys)


def _never_twice(
    usages: list[Usage], requests: list[RecordedRequest], stats: dict[int, CacheStat]
) -> None:
    """Each stored usage's prompt is the server's whole prompt, cache included once."""
    answered = {s.prompt_tokens for i, s in stats.items() if not is_fork(requests[i].body)}
    assert usages
    for usage in usages:
        read = usage.cache_read_input_tokens or usage.cached_tokens or 0
        written = usage.cache_creation_input_tokens or 0
        assert usage.prompt_tokens in answered
        assert read + written <= usage.prompt_tokens
        assert usage.context_tokens == usage.prompt_tokens + usage.completion_tokens


def _blocks(native: dict[str, Any] | None) -> list[Any]:
    """The body's content blocks in cache order, ``cache_control`` removed."""
    assert native is not None
    out: list[Any] = []
    for n, message in enumerate(native["messages"]):
        content = message["content"]
        for block in [content] if isinstance(content, str) else content:
            if isinstance(block, dict):
                block = {k: v for k, v in block.items() if k != "cache_control"}
            out.append((n, message["role"], block))
    return out


def _extends(before: RecordedRequest, after: RecordedRequest) -> bool:
    a, b = _blocks(before.native), _blocks(after.native)
    return b[: len(a)] == a
