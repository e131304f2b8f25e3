"""The bounds every model figure is checked against, wherever it comes from.

A module of its own because both the model configuration (``config``) and the
model registry (``registry``, beneath it) check windows against the same
floor, and the registry must not import the configuration it feeds. The
output reserve is here too: the pipeline's input budget subtracts it from
the window, and the Anthropic configuration, which must send a cap, sends it.
"""

from __future__ import annotations

#: The smallest window accepted anywhere: below it no request has room to work.
MIN_CONTEXT_WINDOW = 1_024

MIN_RESERVE = 8_192
MAX_RESERVE = 32_768


def output_reserve(window: int, max_output_tokens: int | None = None) -> int:
    """Tokens kept free for the response: the configured cap, else 10 % clamped to 8k–32k.

    Never more than half the window, so a small model still has room to read.
    """
    if max_output_tokens is not None:
        reserve = max_output_tokens
    else:
        reserve = min(max(window // 10, MIN_RESERVE), MAX_RESERVE)
    return min(reserve, window // 2)
