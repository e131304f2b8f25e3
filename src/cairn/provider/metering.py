"""What a session was billed: every response's usage, main requests and forks alike.

The transcript keeps the usage of the main loop's answers, but a compaction
fork's answer is not a message of the conversation and a background task has
a transcript of its own; all of them are billed. ``MeteredProvider`` sits
between a session and its provider and adds up the usage of every response
that passes through it, so ``/cost`` reports what the provider reported.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from cairn.messages import Message, Usage
from cairn.provider.events import StreamEvent, UsageEvent
from cairn.provider.protocol import ChatProvider
from cairn.provider.registry import TokenCounts
from cairn.provider.request import ChatRequest


@dataclass
class Bill:
    """The usage billed so far, by price class."""

    tokens: TokenCounts = field(default_factory=TokenCounts)
    #: Responses that reported usage.
    responses: int = 0
    #: Responses that reported none (some local servers never do): not in ``tokens``.
    unmetered: int = 0

    def add(self, usage: Usage | None) -> None:
        if usage is None:
            self.unmetered += 1
            return
        self.tokens = self.tokens + TokenCounts.from_usage(usage)
        self.responses += 1


class MeteredProvider:
    """A ``ChatProvider`` that adds every response's usage to ``bill``."""

    def __init__(self, provider: ChatProvider, bill: Bill | None = None) -> None:
        self.provider = provider
        self.bill = bill if bill is not None else Bill()

    async def stream(
        self, request: ChatRequest, *, max_retries: int | None = None
    ) -> AsyncIterator[StreamEvent]:
        usage: Usage | None = None
        finished = False
        try:
            async for event in self.provider.stream(request, max_retries=max_retries):
                if isinstance(event, UsageEvent):
                    usage = event.usage
                yield event
            finished = True
        finally:
            # A refused or cancelled request that reported usage was billed all
            # the same; one that reported none and did not finish was not.
            if usage is not None or finished:
                self.bill.add(usage)

    async def complete(self, request: ChatRequest, *, max_retries: int | None = None) -> Message:
        message = await self.provider.complete(request, max_retries=max_retries)
        self.bill.add(message.meta.usage)
        return message
