"""A test double for code built on Cairn: a ``ChatProvider`` that plays scripted answers.

As ``httpx.MockTransport`` stands in for a server, ``ScriptedProvider`` stands in
for a model: it plays ``Answer`` objects as the stream events a real client
yields, records every ``ChatRequest`` it gets (``provider.requests``), and
reports usage counted from the request, so the context pipeline has a
provider baseline. No socket, no server, no SDK: a test of what an agent does
with answers runs in-process and fast. (Cairn's own wire tests still use a
real local server for the SDK, SSE and HTTP errors.)

    provider = ScriptedProvider(Answer(calls=[("read_file", '{"path": "a"}')]), Answer("Done."))
    runtime = Runtime(workspace, model, provider)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

import orjson

from cairn.messages import Message, Usage
from cairn.provider import ChatProvider, ChatRequest
from cairn.provider.errors import ProviderError
from cairn.provider.events import (
    ContentDelta,
    Finish,
    StreamEvent,
    ToolCallDelta,
    TurnAccumulator,
    UsageEvent,
)

__all__ = ["Answer", "ScriptedProvider"]


@dataclass(frozen=True)
class Answer:
    """One scripted response: text, tool calls ``(name, arguments JSON)``, or an error."""

    text: str = ""
    calls: Sequence[tuple[str, str]] = ()
    error: ProviderError | None = None
    #: The text arrives in pieces of this many characters (streaming deltas).
    piece: int = 16


@dataclass
class ScriptedProvider:
    """A ``ChatProvider`` that plays its answers in order (``then`` decides once they run out).

    Each request takes the next answer; ``requests`` keeps every request it got,
    in order, for a test to read what the agent sent.
    """

    #: The answers not played yet.
    answers: list[Answer] = field(default_factory=list)
    #: What to answer once the script is used up (or for every request when set alone).
    then: Callable[[ChatRequest], Answer] = lambda request: Answer("Done.")
    #: Every request received, oldest first.
    requests: list[ChatRequest] = field(default_factory=list)

    def __init__(self, *answers: Answer, then: Callable[[ChatRequest], Answer] | None = None):
        self.answers = list(answers)
        self.requests = []
        if then is not None:
            self.then = then

    async def stream(
        self, request: ChatRequest, *, max_retries: int | None = None
    ) -> AsyncIterator[StreamEvent]:
        """Record ``request`` and stream the next answer (raise its ``error``, if it has one)."""
        self.requests.append(request)
        answer = self.answers.pop(0) if self.answers else self.then(request)
        if answer.error is not None:
            raise answer.error
        for start in range(0, len(answer.text), answer.piece):
            yield ContentDelta(answer.text[start : start + answer.piece])
        for index, (name, arguments) in enumerate(answer.calls):
            call_id = f"call_{len(self.requests)}_{index}"
            yield ToolCallDelta(index, call_id, name, arguments)
        prompt = len(orjson.dumps(request.body())) // 4  # a provider-like count
        completion = max(1, (len(answer.text) + sum(len(a) for _, a in answer.calls)) // 4)
        yield UsageEvent(Usage(prompt, completion, prompt + completion))
        yield Finish("tool_calls" if answer.calls else "stop")

    async def complete(self, request: ChatRequest, *, max_retries: int | None = None) -> Message:
        """The next answer as one assistant message (streamed and accumulated)."""
        turn = TurnAccumulator()
        async for event in self.stream(request, max_retries=max_retries):
            turn.add(event)
        return turn.message()


def _conforms(provider: ScriptedProvider) -> ChatProvider:
    """Type-checked only: mypy proves the double satisfies the ``ChatProvider`` protocol."""
    return provider
