"""Which model to talk to, where, and with which generation parameters.

A ``ModelConfig`` is the provider half of DESIGN §11's model entry: the
endpoint (any OpenAI-compatible ``base_url``), the environment variable that
holds the API key, the model's window and response cap, and the generation
parameters sent with every request — the same ones for the main loop and the
compaction fork, so both share one cached prefix.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from cairn.messages import JSONValue

#: Body keys the request builder owns; a generation parameter may not set them.
RESERVED_PARAMS: frozenset[str] = frozenset(
    {"model", "messages", "tools", "stream", "stream_options"}
)

ENV_MODEL = "CAIRN_MODEL"
ENV_BASE_URL = "OPENAI_BASE_URL"
ENV_CONTEXT_WINDOW = "CAIRN_CONTEXT_WINDOW"
ENV_MAX_OUTPUT_TOKENS = "CAIRN_MAX_OUTPUT_TOKENS"


class ModelConfigError(ValueError):
    """A model setting (from code or the environment) has a bad value."""


@dataclass(frozen=True)
class ModelConfig:
    """One model endpoint.

    ``params`` are generation parameters sent with every request (for
    example ``{"temperature": 0.2}``); when ``max_output_tokens`` is set it
    goes out as ``max_tokens`` and wins over a ``max_tokens`` in ``params``.
    """

    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    context_window: int | None = None
    max_output_tokens: int | None = None
    params: Mapping[str, JSONValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.model:
            raise ModelConfigError("model must be a non-empty string")
        for name in ("context_window", "max_output_tokens"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or value < 1):
                raise ModelConfigError(f"{name} must be a positive integer, got {value!r}")
        reserved = sorted(RESERVED_PARAMS.intersection(self.params))
        if reserved:
            raise ModelConfigError(f"params may not set {', '.join(reserved)}")

    def request_params(self) -> dict[str, JSONValue]:
        """The generation parameters as they go out with every request."""
        out: dict[str, JSONValue] = dict(self.params)
        if self.max_output_tokens is not None:
            out["max_tokens"] = self.max_output_tokens
        return out


def model_from_env(environ: Mapping[str, str] = os.environ) -> ModelConfig | None:
    """The model named by ``CAIRN_MODEL``, or ``None`` when it is unset or empty.

    ``OPENAI_BASE_URL``, ``CAIRN_CONTEXT_WINDOW`` and
    ``CAIRN_MAX_OUTPUT_TOKENS`` are optional; a non-integer or non-positive
    number raises ``ModelConfigError`` naming the variable.
    """
    model = environ.get(ENV_MODEL, "").strip()
    if not model:
        return None
    base_url = environ.get(ENV_BASE_URL, "").strip() or None
    return ModelConfig(
        model=model,
        base_url=base_url,
        context_window=_env_int(environ, ENV_CONTEXT_WINDOW),
        max_output_tokens=_env_int(environ, ENV_MAX_OUTPUT_TOKENS),
    )


def _env_int(environ: Mapping[str, str], name: str) -> int | None:
    raw = environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw.replace("_", ""))
    except ValueError:
        raise ModelConfigError(f"{name} must be a positive integer, got {raw!r}") from None
    if value < 1:
        raise ModelConfigError(f"{name} must be a positive integer, got {raw!r}")
    return value
