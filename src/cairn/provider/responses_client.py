"""The OpenAI Responses API client (``model.api = "responses"``, DESIGN §9).

Stateless: every request carries the whole input with ``store: false`` (so
compaction and resume work exactly as with chat completions), reasoning
items come back with their encrypted content and go out again verbatim
(``cairn.provider.responses_request``). Streams through the official ``openai``
SDK; deadlines, retries and errors are ``cairn.provider.streaming``'s.
"""

from __future__ import annotations

import re
from typing import Any

from openai import AsyncOpenAI

from cairn.provider.client import OpenAIClientBase
from cairn.provider.request import ChatRequest
from cairn.provider.responses_request import responses_body
from cairn.provider.responses_stream import ResponsesStream

#: The model families that reason (o-series, GPT-5 but its chat snapshots, Codex): only
#: these take ``include: ["reasoning.encrypted_content"]``; the others refuse it with
#: a 400 ("Encrypted content is not supported with this model").
_REASONING = re.compile(r"^(?:o\d|gpt-5(?!.*-chat)|codex|.*-codex)")


def reasons(model: str) -> bool:
    """Whether ``model`` (a host prefix aside) returns reasoning items to carry over."""
    return _REASONING.match(model.strip().lower().rpartition("/")[2]) is not None


class ResponsesProvider(OpenAIClientBase):
    """Streams the OpenAI Responses API from one endpoint, statelessly."""

    def _parser(self) -> ResponsesStream:
        return ResponsesStream()

    def _create(self, client: AsyncOpenAI, request: ChatRequest, attempt: int) -> Any:
        body = responses_body(request, encrypted_reasoning=reasons(request.model))
        return client.responses.create(
            model=str(body["model"]),
            input=body["input"],  # type: ignore[arg-type]
            stream=True,
            extra_body={k: v for k, v in body.items() if k not in _PASSED} or None,
            # The SDK numbers its own retries; these are ours.
            extra_headers={"x-stainless-retry-count": str(attempt)},
        )


#: Body keys given to the SDK by name; the rest of the body goes as ``extra_body``.
_PASSED = frozenset({"model", "input", "stream"})
