"""The wire APIs Cairn speaks, and what each one defaults to (DESIGN §9).

``chat`` is OpenAI chat completions (any OpenAI-compatible endpoint),
``responses`` the OpenAI Responses API used statelessly, ``anthropic``
Anthropic Messages. The name is ``model.api`` in ``settings.json``,
``CAIRN_API`` in the environment and ``--api`` on the command line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, TypeAlias, get_args

WireAPI: TypeAlias = Literal["chat", "responses", "anthropic"]
WIRE_APIS: tuple[WireAPI, ...] = get_args(WireAPI)
DEFAULT_API: WireAPI = "chat"
#: How reports name each API.
API_NAMES: Mapping[WireAPI, str] = {
    "chat": "chat completions",
    "responses": "OpenAI Responses (stateless)",
    "anthropic": "Anthropic Messages",
}

#: The environment variable holding the key, when ``model.api_key_env`` is not set.
API_KEY_ENV: Mapping[WireAPI, str] = {
    "chat": "OPENAI_API_KEY",
    "responses": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
}
#: The SDK's own variable for the endpoint, when no ``model.base_url`` is set.
BASE_URL_ENV: Mapping[WireAPI, str] = {
    "chat": "OPENAI_BASE_URL",
    "responses": "OPENAI_BASE_URL",
    "anthropic": "ANTHROPIC_BASE_URL",
}
#: Anthropic requires ``max_tokens`` on every request; this is sent (and reserved
#: as the output share of the window) when ``model.max_output_tokens`` is unset.
ANTHROPIC_DEFAULT_MAX_TOKENS = 8192


def parse_api(raw: str) -> WireAPI | None:
    """``raw`` as a ``WireAPI`` (case-insensitive, spaces trimmed); ``None`` if it is none."""
    value = raw.strip().lower()
    for api in WIRE_APIS:
        if value == api:
            return api
    return None
