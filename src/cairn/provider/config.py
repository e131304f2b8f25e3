"""Which model to talk to, where, how big its window is, and with which parameters.

``ModelConfig`` is the one model configuration (DESIGN §11): the endpoint
(any OpenAI-compatible ``base_url``), the environment variable that holds the
API key, the model's window and response cap — the single source of the
pipeline's input budget — and the generation parameters sent with every
request, the same for the main loop and the compaction fork so that both
share one cached prefix.

It is resolved from layers, each a ``ModelEntry`` naming any subset of the
fields: ``settings.json`` (user, then project), the environment, then the
command line; a later layer wins field by field (``resolve_model``).

It also holds the four deadlines of every request, in seconds (positive,
finite; ``settings.json`` key / environment variable):

- ``connect_timeout`` / ``CAIRN_CONNECT_TIMEOUT``, default 10: opening the
  TCP (and TLS) connection. A reachable host answers in milliseconds, a
  distant one in a second or two; after 10 s the host is down or filtered.
- ``first_byte_timeout`` / ``CAIRN_FIRST_BYTE_TIMEOUT``, default 120: from
  sending the request to the first stream chunk that carries data (keep-alive
  comments and empty deltas do not count). This covers the prompt evaluation,
  the slowest part on a CPU-only local server with a long uncached prompt —
  raise it there; hosted APIs answer within seconds.
- ``idle_timeout`` / ``CAIRN_IDLE_TIMEOUT``, default 60: the longest gap
  between two data-carrying chunks once the answer streams. A working server
  sends a token every fraction of a second; a minute of silence (or of
  keep-alive comments only) means it is stuck.
- ``request_timeout`` / ``CAIRN_REQUEST_TIMEOUT``, default 1800: the whole
  call, retries and their back-off included. It is a backstop for a server
  that trickles data forever, so it must exceed the longest legitimate
  answer: 16k output tokens at 10 tokens/s take 1,600 s.

A server that accepts the connection and never answers thus costs two
minutes, not the SDK's 3 × 600 s; a request that timed out is not retried.

``images`` (``settings.json`` key / ``CAIRN_IMAGES``, default false) says
whether the model takes image input. Off by default: an OpenAI-compatible
endpoint may serve a text-only model (the local servers Cairn targets
usually do), and an image sent to one fails the request — and every request
after it, since the image stays in the history. With it off, an attached
image reaches the model as a text placeholder and the user is told how to
turn it on; hosted vision models (GPT-4o, Claude, Gemini, Qwen-VL …) want it on.

The model registry (``cairn.provider.registry``) lies beneath every layer:
for a model it knows, it supplies ``context_window`` and ``images`` when no
layer sets them, so a known model needs no ``CAIRN_CONTEXT_WINDOW``; the
``models`` section of ``settings.json`` corrects or extends it. A model with
no window from anywhere runs without handoff and compaction, and
``window_notice`` is the one line every surface shows about it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from cairn.errors import CairnError
from cairn.messages import JSONValue
from cairn.provider.limits import MIN_CONTEXT_WINDOW as MIN_CONTEXT_WINDOW
from cairn.provider.limits import output_reserve
from cairn.provider.registry import ModelOverrides, lookup
from cairn.wire_apis import (
    ANTHROPIC_DEFAULT_MAX_TOKENS,
    API_KEY_ENV,
    BASE_URL_ENV,
    DEFAULT_API,
    WIRE_APIS,
    WireAPI,
    parse_api,
)

#: Body keys the request builder owns; a generation parameter may not set them.
RESERVED_PARAMS: frozenset[str] = frozenset(
    {"model", "messages", "tools", "stream", "stream_options"}
)

ENV_MODEL = "CAIRN_MODEL"
ENV_API = "CAIRN_API"
ENV_BASE_URL = BASE_URL_ENV["chat"]
ENV_CONTEXT_WINDOW = "CAIRN_CONTEXT_WINDOW"
ENV_MAX_OUTPUT_TOKENS = "CAIRN_MAX_OUTPUT_TOKENS"
ENV_CONNECT_TIMEOUT = "CAIRN_CONNECT_TIMEOUT"
ENV_FIRST_BYTE_TIMEOUT = "CAIRN_FIRST_BYTE_TIMEOUT"
ENV_IDLE_TIMEOUT = "CAIRN_IDLE_TIMEOUT"
ENV_REQUEST_TIMEOUT = "CAIRN_REQUEST_TIMEOUT"
ENV_IMAGES = "CAIRN_IMAGES"
DEFAULT_API_KEY_ENV = API_KEY_ENV[DEFAULT_API]
#: Deadline defaults in seconds; the module docstring says why these values.
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_FIRST_BYTE_TIMEOUT = 120.0
DEFAULT_IDLE_TIMEOUT = 60.0
DEFAULT_REQUEST_TIMEOUT = 1800.0
#: Each deadline's setting (the ``model`` key in settings.json) and its environment variable.
TIMEOUT_ENV: Mapping[str, str] = {
    "connect_timeout": ENV_CONNECT_TIMEOUT,
    "first_byte_timeout": ENV_FIRST_BYTE_TIMEOUT,
    "idle_timeout": ENV_IDLE_TIMEOUT,
    "request_timeout": ENV_REQUEST_TIMEOUT,
}
#: What every surface says, once, about a model whose window nobody gave: one
#: line, the same words everywhere (``window_notice``).
NO_WINDOW_NOTICE = (
    "no context window is known for model {model!r}: automatic compaction is off until one "
    "is set (CAIRN_CONTEXT_WINDOW, or model.context_window in settings.json)"
)


class ModelConfigError(CairnError, ValueError):
    """A model setting (from code or the environment) has a bad value."""


@dataclass(frozen=True)
class ModelConfig:
    """One model endpoint.

    ``params`` are generation parameters sent with every request (for
    example ``{"temperature": 0.2}``); when ``max_output_tokens`` is set it
    goes out as ``max_tokens`` and wins over a ``max_tokens`` in ``params``.
    The four ``*_timeout`` fields are the request deadlines in seconds (see
    the module docstring for what each one bounds and why its default).
    """

    model: str
    base_url: str | None = None
    api_key_env: str = DEFAULT_API_KEY_ENV
    #: The model's window in tokens; ``None`` when unknown (then only micro
    #: compact and snip run: no handoff, no compaction).
    context_window: int | None = None
    #: The response cap sent as ``max_tokens``; it is also the output reserve.
    #: Anthropic requires one: unset, it is the reserve the window implies
    #: (``output_reserve``), or ``ANTHROPIC_DEFAULT_MAX_TOKENS`` without a window.
    max_output_tokens: int | None = None
    params: Mapping[str, JSONValue] = field(default_factory=dict)
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    first_byte_timeout: float = DEFAULT_FIRST_BYTE_TIMEOUT
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    #: The model takes image input (``image_url`` parts); else images become placeholders.
    images: bool = False
    #: The wire API: chat completions, the Responses API or Anthropic Messages
    #: (``cairn.wire_apis``).
    api: WireAPI = DEFAULT_API

    def __post_init__(self) -> None:
        if not self.model:
            raise ModelConfigError("model must be a non-empty string")
        if self.api not in WIRE_APIS:
            raise ModelConfigError(f"api must be one of {', '.join(WIRE_APIS)}, got {self.api!r}")
        for name, low in (("context_window", MIN_CONTEXT_WINDOW), ("max_output_tokens", 1)):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < low
            ):
                raise ModelConfigError(f"{name} must be an integer ≥ {low:,}, got {value!r}")
        for name in TIMEOUT_ENV:
            value = getattr(self, name)
            if not _positive_seconds(value):
                raise ModelConfigError(
                    f"{name} must be a positive number of seconds, got {value!r}"
                )
        reserved = sorted(RESERVED_PARAMS.intersection(self.params))
        if reserved:
            raise ModelConfigError(f"params may not set {', '.join(reserved)}")
        if self.api == "anthropic" and self.max_output_tokens is None:
            # Anthropic requires max_tokens: send the reserve the pipeline keeps
            # free anyway, so a request within the budget always fits the window.
            cap = ANTHROPIC_DEFAULT_MAX_TOKENS
            if self.context_window is not None:
                cap = output_reserve(self.context_window)
            object.__setattr__(self, "max_output_tokens", cap)

    def request_params(self) -> dict[str, JSONValue]:
        """The generation parameters as they go out with every request."""
        out: dict[str, JSONValue] = dict(self.params)
        if self.max_output_tokens is not None:
            out["max_tokens"] = self.max_output_tokens
        return out


class ModelEntry(BaseModel):
    """One layer of the model configuration: any subset of ``ModelConfig``'s fields.

    This is the ``model`` object of ``settings.json`` as well as what the
    environment and the command line say; ``None`` means "this layer is silent".
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str | None = None
    #: Name of the environment variable that holds the API key (never the key itself).
    api_key_env: str | None = None
    model: str | None = None
    context_window: int | None = Field(default=None, ge=MIN_CONTEXT_WINDOW, strict=True)
    max_output_tokens: int | None = Field(default=None, ge=1, strict=True)
    #: Request deadlines in seconds (``ModelConfig``); a JSON number > 0.
    connect_timeout: float | None = Field(default=None, gt=0, allow_inf_nan=False, strict=True)
    first_byte_timeout: float | None = Field(default=None, gt=0, allow_inf_nan=False, strict=True)
    idle_timeout: float | None = Field(default=None, gt=0, allow_inf_nan=False, strict=True)
    request_timeout: float | None = Field(default=None, gt=0, allow_inf_nan=False, strict=True)
    #: Whether the model takes image input (``ModelConfig.images``).
    images: bool | None = Field(default=None, strict=True)
    #: The wire API (``ModelConfig.api``).
    api: WireAPI | None = None


def resolve_model(
    *layers: ModelEntry | None,
    params: Mapping[str, JSONValue] | None = None,
    models: ModelOverrides | None = None,
) -> ModelConfig | None:
    """The model configuration the layers add up to; later layers win field by field.

    ``None`` when no layer names a model. Pass the layers in precedence
    order: settings, environment, command line. Beneath them all, the model
    registry with the settings' ``models`` laid over it gives the window and
    image support of a model it knows (``cairn.provider.registry.lookup``),
    and its wire API when no layer names one nor any endpoint (a model named
    with an endpoint of one's own is spoken to in chat completions).

    Per API: the key's variable defaults to ``OPENAI_API_KEY`` or
    ``ANTHROPIC_API_KEY``; Anthropic, which requires ``max_tokens``, gets the
    output reserve as its cap when no layer sets ``max_output_tokens``
    (``ModelConfig``), at most the model's own limit when the registry knows it.
    """
    merged: dict[str, object] = {}
    for layer in layers:
        if layer is not None:
            merged.update(layer.model_dump(exclude_none=True))
    model = merged.pop("model", None)
    if not isinstance(model, str) or not model.strip():
        return None
    known = lookup(model.strip(), models)
    if known is not None:
        # Defaults only: any layer that names a value wins. The registry's output
        # limit is not among them (it would go out as max_tokens; see registry).
        merged.setdefault("context_window", known.context_window)
        merged.setdefault("images", known.images)
        if known.api is not None and merged.get("base_url") is None:
            merged.setdefault("api", known.api)
    api = _api(merged.get("api"))
    max_output = _optional_int(merged.get("max_output_tokens"))
    window = _optional_int(merged.get("context_window"))
    if api == "anthropic" and max_output is None and known and known.max_output_tokens:
        # The cap Anthropic requires (ModelConfig), at most the model's own limit.
        reserve = output_reserve(window) if window else ANTHROPIC_DEFAULT_MAX_TOKENS
        max_output = min(reserve, known.max_output_tokens)
    return ModelConfig(
        model=model.strip(),
        base_url=_optional_str(merged.get("base_url")),
        api_key_env=_optional_str(merged.get("api_key_env")) or API_KEY_ENV[api],
        context_window=window,
        max_output_tokens=max_output,
        params=dict(params or {}),
        connect_timeout=_seconds(merged.get("connect_timeout"), DEFAULT_CONNECT_TIMEOUT),
        first_byte_timeout=_seconds(merged.get("first_byte_timeout"), DEFAULT_FIRST_BYTE_TIMEOUT),
        idle_timeout=_seconds(merged.get("idle_timeout"), DEFAULT_IDLE_TIMEOUT),
        request_timeout=_seconds(merged.get("request_timeout"), DEFAULT_REQUEST_TIMEOUT),
        images=merged.get("images") is True,
        api=api,
    )


def resolve_with_env(
    settings: ModelEntry | None,
    flags: ModelEntry | None = None,
    *,
    params: Mapping[str, JSONValue] | None = None,
    models: ModelOverrides | None = None,
    environ: Mapping[str, str] = os.environ,
) -> ModelConfig | None:
    """``settings``, then the environment, then ``flags``, as every command resolves them.

    The endpoint variable the environment contributes is the API's own:
    ``OPENAI_BASE_URL`` for chat completions and the Responses API,
    ``ANTHROPIC_BASE_URL`` for Anthropic — so the API is settled first, with
    the OpenAI variable (the endpoint Cairn always read), then the layers are
    resolved again with the variable that API's SDK reads.
    """
    first = resolve_model(settings, env_entry(environ), flags, params=params, models=models)
    if first is None or BASE_URL_ENV[first.api] == ENV_BASE_URL:
        return first
    env = env_entry(environ, api=first.api).model_copy(update={"api": first.api})
    return resolve_model(settings, env, flags, params=params, models=models)


def env_entry(environ: Mapping[str, str] = os.environ, *, api: WireAPI = DEFAULT_API) -> ModelEntry:
    """What the environment says: the model, API, base URL, window, cap and deadlines.

    The base URL is the variable of ``api``'s SDK (``BASE_URL_ENV``:
    ``OPENAI_BASE_URL``, or ``ANTHROPIC_BASE_URL`` for Anthropic);
    ``CAIRN_API`` is ``chat``, ``responses`` or ``anthropic``.

    Each variable counts on its own (``CAIRN_CONTEXT_WINDOW`` applies to a model
    named in ``settings.json`` too); an unset or empty one is silent. A bad
    number raises ``ModelConfigError`` naming the variable and the range.
    The deadlines are ``CAIRN_CONNECT_TIMEOUT``, ``CAIRN_FIRST_BYTE_TIMEOUT``,
    ``CAIRN_IDLE_TIMEOUT`` and ``CAIRN_REQUEST_TIMEOUT``, in seconds;
    ``CAIRN_IMAGES`` is ``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off``.
    """
    return ModelEntry(
        model=environ.get(ENV_MODEL, "").strip() or None,
        api=_env_api(environ),
        base_url=environ.get(BASE_URL_ENV[api], "").strip() or None,
        context_window=_env_int(environ, ENV_CONTEXT_WINDOW, MIN_CONTEXT_WINDOW),
        max_output_tokens=_env_int(environ, ENV_MAX_OUTPUT_TOKENS, 1),
        connect_timeout=_env_seconds(environ, ENV_CONNECT_TIMEOUT),
        first_byte_timeout=_env_seconds(environ, ENV_FIRST_BYTE_TIMEOUT),
        idle_timeout=_env_seconds(environ, ENV_IDLE_TIMEOUT),
        request_timeout=_env_seconds(environ, ENV_REQUEST_TIMEOUT),
        images=_env_flag(environ, ENV_IMAGES),
    )


def window_notice(model: ModelConfig) -> str | None:
    """The one line about a model without a window (``NO_WINDOW_NOTICE``); else ``None``."""
    if model.context_window is not None:
        return None
    return NO_WINDOW_NOTICE.format(model=model.model)


def model_from_env(environ: Mapping[str, str] = os.environ) -> ModelConfig | None:
    """The model the environment alone configures (``None`` without ``CAIRN_MODEL``)."""
    return resolve_with_env(None, environ=environ)


def _env_api(environ: Mapping[str, str]) -> WireAPI | None:
    raw = environ.get(ENV_API, "").strip()
    if not raw:
        return None
    api = parse_api(raw)
    if api is None:
        raise ModelConfigError(f"{ENV_API} must be one of {', '.join(WIRE_APIS)}, got {raw!r}")
    return api


def _api(value: object) -> WireAPI:
    api = parse_api(value) if isinstance(value, str) else None
    return api or DEFAULT_API


def _env_int(environ: Mapping[str, str], name: str, low: int) -> int | None:
    raw = environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw.replace("_", ""))
    except ValueError:
        raise ModelConfigError(f"{name} must be an integer ≥ {low:,}, got {raw!r}") from None
    if value < low:
        raise ModelConfigError(f"{name} must be an integer ≥ {low:,}, got {raw!r}")
    return value


def _env_flag(environ: Mapping[str, str], name: str) -> bool | None:
    raw = environ.get(name, "").strip().lower()
    if not raw:
        return None
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ModelConfigError(f"{name} must be 1 or 0 (true/false, yes/no, on/off), got {raw!r}")


def _env_seconds(environ: Mapping[str, str], name: str) -> float | None:
    raw = environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw.replace("_", ""))
    except ValueError:
        value = math.nan
    if not _positive_seconds(value):
        raise ModelConfigError(f"{name} must be a positive number of seconds, got {raw!r}")
    return value


def _positive_seconds(value: object) -> bool:
    """A finite number of seconds above zero (``bool`` is not a number here)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _seconds(value: object, default: float) -> float:
    return float(value) if isinstance(value, int | float) and _positive_seconds(value) else default


def _optional_str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _optional_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
