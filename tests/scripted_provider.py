"""An in-process ``ChatProvider`` for fast agent tests: scripted answers, no socket.

The real local server (``openai_server.py``) stays the test of the wire — the
SDK, SSE, HTTP errors. This one is for tests of what the runtime does with
answers: it plays ``Answer`` objects as the stream events the real client
yields, records every ``ChatRequest`` it gets, and reports usage counted
from the request so the pipeline's projection has a provider baseline.

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
    """Plays its answers in order (``then`` decides once they run out)."""

    answers: list[Answer] = field(default_factory=list)
    #: What to answer once the script is used up (or for every request when set alone).
    then: Callable[[ChatRequest], Answer] = lambda request: Answer("Done.")
    requests: list[ChatRequest] = field(default_factory=list)

    def __init__(self, *answers: Answer, then: Callable[[ChatRequest], Answer] | None = None):
        self.answers = list(answers)
        self.requests = []
        if then is not None:
            self.then = then

    async def stream(
        self, request: ChatRequest, *, max_retries: int | None = None
    ) -> AsyncIterator[StreamEvent]:
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
        turn = TurnAccumulator()
        async for event in self.stream(request, max_retries=max_retries):
            turn.add(event)
        return turn.message()


def _conforms(provider: ScriptedProvider) -> ChatProvider:
    return provider
