"""The summary prepared in the background (DESIGN §5.5a), apart from the compactor's run.

What one background summary was prepared from (``PreparedSummary``), how
its finished task is read, how its replacement joins the rounds that came
after its snapshot, and the session's tally of them (``PrecomputeStats``).
``Compactor.prepare`` starts one; ``Compactor.run`` commits it at the line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from cairn.context.events import CompactionListener
from cairn.context.summarizer import Summary
from cairn.messages import Message, group_rounds


@dataclass
class PrecomputeStats:
    """What the background summaries came to in one session (for the benchmark)."""

    started: int = 0
    #: Committed at the line without a model call.
    committed: int = 0
    #: The line came before the summary: the request waited for it.
    waited: int = 0
    #: Dropped unused: stale (a compaction, an edit or a switch came first),
    #: cancelled, or replaced by a manual or reactive compaction.
    discarded: int = 0
    #: It failed (or a hook blocked it): today's path ran at the line.
    failed: int = 0
    #: With the rounds since it was prepared it failed the gates: today's path ran.
    rejected: int = 0


@dataclass(eq=False)
class PreparedSummary:
    """One summary prepared in the background, and what it was prepared from."""

    session: str
    epoch: int
    #: The API view up to the round boundary ``P``, as the fork sent it.
    view: tuple[Message, ...]
    listener: CompactionListener
    task: asyncio.Task[Summary | None] = field(init=False)
    notices: list[str] = field(default_factory=list)
    #: What its forks left out of the main request, as each went out (kept when
    #: it fails or is dropped mid-flight): no record of its own names them, so
    #: the compaction at the line does (DESIGN §5.5a, the fork's promise).
    elisions: tuple[str, ...] = ()
    text: str = ""
    #: Set once a request waits for it: its tail is shown from then on.
    waiting: bool = False

    def elided(self, elisions: tuple[str, ...]) -> None:
        self.elisions = elisions

    def streamed(self, text: str) -> None:
        self.text = text
        if self.waiting:
            self.listener.compaction_content_updated(text)

    def watched(self) -> None:
        self.waiting = True
        if self.text:
            self.listener.compaction_content_updated(self.text)


def summary_outcome(task: asyncio.Task[Summary | None]) -> tuple[Summary | None, str | None]:
    """A finished background summary: it, or ``None`` and why (cancelled: no why).

    Any error ends there: the line then takes today's path, which meets a
    lasting fault again and reports it as today.
    """
    if task.cancelled():
        return None, None
    error = task.exception()
    if error is not None:
        return None, f"the summary prepared in the background failed: {error}"
    return task.result(), None


async def settled(task: asyncio.Task[Summary | None]) -> None:
    """Wait for ``task`` to end, whatever its outcome (read it afterwards)."""
    await asyncio.wait({task})


def join_rounds_after(
    replacement: Sequence[Message],
    kept_ids: Collection[str],
    after: Sequence[Message],
    gate: Callable[[Sequence[Message]], str | None],
) -> tuple[tuple[Message, ...] | None, str | None]:
    """A prepared replacement with the rounds that came after its snapshot, verbatim.

    ``kept_ids``: the snapshot's messages, so the replacement's tail (the
    rounds it kept verbatim at ``P``) is told from its block and restoration.
    While ``gate`` finds the result too big, that tail yields from its oldest
    round — the summary covered it too — but the rounds after ``P`` never do.
    Returns ``(replacement, None)``, or ``(None, why)`` when even without a
    tail it fails.
    """
    tail_start = len(replacement)
    while tail_start > 0 and replacement[tail_start - 1].id in kept_ids:
        tail_start -= 1
    head, tail = tuple(replacement[:tail_start]), tuple(replacement[tail_start:])
    while True:
        joined = (*head, *tail, *after)
        failed = gate(joined)
        if failed is None:
            return joined, None
        rounds = group_rounds(tail)
        if not rounds:
            return None, failed
        tail = tail[rounds[0].end :]
