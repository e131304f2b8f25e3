"""The replay's per-API prompt-cache simulation (issue 27): the documented rules, directly."""

from __future__ import annotations

from cairn.messages import Message, ToolCall, assistant, tool_result, user
from cairn.replay.prompt_cache import (
    ANTHROPIC_LOOKBACK,
    anthropic_breakpoints,
    anthropic_cache_use,
    openai_cache_read,
)


def test_openai_reads_from_1024_tokens_in_steps_of_128() -> None:
    assert openai_cache_read(0) == 0
    assert openai_cache_read(1_023) == 0
    assert openai_cache_read(1_024) == 1_024
    assert openai_cache_read(1_151) == 1_024
    assert openai_cache_read(1_152) == 1_152
    assert openai_cache_read(50_000) == 49_920


def call_round(n: int) -> list[Message]:
    call = ToolCall(f"c{n}", "read", "{}")
    return [assistant(None, tool_calls=(call,)), tool_result(f"c{n}", f"result {n}")]


def test_breakpoints_are_the_fixed_context_the_last_message_and_the_previous_end() -> None:
    messages = [user("task"), *call_round(1), *call_round(2)]
    # The previous request ended with the result of call 1 (index 3 = 3 messages).
    assert anthropic_breakpoints(messages) == (0, 3, 5)
    assert anthropic_breakpoints([user("hi")]) == (0, 1)


def sizes(messages: list[Message], fixed: int = 2_000, each: int = 100) -> list[int]:
    return [fixed + each * n for n in range(len(messages) + 1)]


def test_the_next_request_reads_everything_the_previous_one_sent() -> None:
    before = [user("task"), *call_round(1)]
    after = [*before, *call_round(2)]
    use = anthropic_cache_use(
        anthropic_breakpoints(before), len(before), after, sizes(after).__getitem__
    )
    assert use.read == sizes(after)[len(before)]  # the whole previous request
    assert use.written == sizes(after)[len(after)] - use.read  # the new messages


def test_the_fork_reads_its_main_request_and_writes_only_the_instruction() -> None:
    main = [user("task"), *call_round(1), *call_round(2)]
    fork = [*main, user("summarize")]
    prefix = sizes(fork)
    use = anthropic_cache_use(anthropic_breakpoints(main), len(main), fork, prefix.__getitem__)
    assert use.read == prefix[len(main)]
    assert use.written == prefix[len(fork)] - prefix[len(main)]


def test_a_rewritten_history_reads_only_the_fixed_context() -> None:
    before = [user("task"), *call_round(1)]
    after = [user("summary of the task"), *call_round(2)]
    prefix = sizes(after)
    use = anthropic_cache_use(anthropic_breakpoints(before), 0, after, prefix.__getitem__)
    assert use.read == prefix[0]


def test_an_entry_more_than_twenty_blocks_back_is_not_found() -> None:
    before = [user("task")]
    rounds = [m for n in range(ANTHROPIC_LOOKBACK) for m in call_round(n)]
    after = [*before, *rounds]
    prefix = sizes(after)
    use = anthropic_cache_use(anthropic_breakpoints(before), 1, after, prefix.__getitem__)
    # The breakpoint before the last assistant message looks back 20 blocks: not to 1.
    assert use.read == prefix[0]


def test_nothing_is_cached_below_the_minimum() -> None:
    before = [user("a")]
    after = [*before, user("b")]
    tiny = [10, 20, 30]
    use = anthropic_cache_use(anthropic_breakpoints(before), 1, after, tiny.__getitem__)
    assert use.read == 0 and use.written == 0
