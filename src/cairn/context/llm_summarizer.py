"""LLM compaction: a fork of the main conversation that writes the continuation ledger.

The fork request is the main request plus one final user message — same
model, system prompt, tool schemas and generation parameters, built by the
same ``chat_request`` — so the provider serves everything before that
message from its prompt cache. The model may not escape into tool calls:
each is answered with a rejection and the loop goes on, three rounds at
most. What comes back is cleaned up by small pure functions (extraction,
ledger normalization, exact continuation records) and checked against the
effect gates before the pipeline may use it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import replace

from cairn.context.budget import cautious
from cairn.context.checkpoint import active_task_of
from cairn.context.effects import ToolEffects, effect_of
from cairn.context.ledger import (
    build_compact_block,
    exact_records,
    normalize_ledger,
    place_exact_records,
    place_host_facts,
)
from cairn.context.summarizer import (
    RESULT_SHARE,
    Summarizer,
    SummarizerError,
    Summary,
    SummaryRequest,
)
from cairn.messages import (
    KIND_COMPACT_SUMMARY,
    ImagePart,
    Message,
    Round,
    TextPart,
    group_rounds,
    tool_result,
    user,
)
from cairn.prompts import load_prompt
from cairn.provider import (
    ChatProvider,
    ContentDelta,
    ContextLimitError,
    ModelConfig,
    ProviderError,
    ProviderTimeoutError,
    TurnAccumulator,
    chat_request,
)

MAX_FORK_ROUNDS = 3
MAX_ATTEMPTS = 3
#: The gate "≤ 80 % of the source" only means something for a large source.
LARGE_SOURCE_TOKENS = 8_000
LARGE_SOURCE_SHARE = 0.8
MAX_SUMMARY_TOKENS = 50_000
#: The kept tail is trimmed from its oldest round while above this share of the budget.
TAIL_BUDGET_SHARE = 0.20

TOOL_REJECTION = (
    "Tool calls are not allowed during compaction; this call was not run. "
    "Reply with text only: the <analysis> block, then the <summary> block."
)
IMAGE_PLACEHOLDER = "[image omitted for compaction]"
FILE_ELIDED = "[file contents elided for compaction; the file can be read again]"

_ANALYSIS = re.compile(r"<analysis>.*?(?:</analysis>|\Z)", re.S)
_SUMMARY = re.compile(r"<summary>(.*?)(?:</summary>|\Z)", re.S)
_BLANK_RUNS = re.compile(r"\n[ \t]*(?:\n[ \t]*)+")


# ---------------------------------------------------------------------------
# Pure rules


def compaction_instruction(custom: str | None) -> str:
    """The final user message of the fork; the text-only rule opens and closes it."""
    extra = f"\nAdditional instructions:\n{custom.strip()}\n" if custom and custom.strip() else ""
    return load_prompt("compact_instruction").format(custom_instructions=extra)


def extract_summary(text: str) -> str:
    """Drop ``<analysis>``, take the inside of ``<summary>`` (else the raw text), tidy blanks."""
    without_analysis = _ANALYSIS.sub("", text)
    match = _SUMMARY.search(without_analysis)
    body = match.group(1) if match else text
    return _BLANK_RUNS.sub("\n\n", body).strip()


def prepare_fork_input(messages: Sequence[Message]) -> list[Message]:
    """The history the fork sends: the main request's messages as they went out, with
    each image replaced by a fixed placeholder.

    Nothing else is taken out or rewritten — not the hidden handoff (the
    instruction says it is a control message), not a snip this check only
    planned — so the provider serves the prefix from its prompt cache. Images
    are the exception both requirement documents make (seed 000: multimodal
    compaction sends text and a fixed image placeholder, never the data URL or
    remote image again; seed 004: images are stripped before the compaction
    call): the cached prefix then ends at the first image, a price paid only by
    sessions that hold one. The wire form is built by the same
    ``chat_request``; reasoning goes out only where the main request sent it
    too. Shrinking, when the fork cannot fit, changes it further.
    """
    return strip_images(messages)


def strip_images(messages: Sequence[Message]) -> list[Message]:
    """Images replaced by a fixed placeholder: a shrink step, never the first send."""
    out = []
    for message in messages:
        content = message.content
        if isinstance(content, tuple) and any(isinstance(p, ImagePart) for p in content):
            content = tuple(
                TextPart(IMAGE_PLACEHOLDER) if isinstance(p, ImagePart) else p for p in content
            )
            message = replace(message, content=content)
        out.append(message)
    return out


def shrink(
    messages: Sequence[Message], step: int, effects: ToolEffects | None = None
) -> list[Message]:
    """One strictly smaller fork input, by the ``step``-th rule that still removes something.

    1. elide the contents of re-readable files (results of read-only tools);
    2. drop the oldest complete round;
    3. halve the per-message character cap.
    Returns the input unchanged only when nothing can be removed.
    """
    rules: tuple[Callable[[Sequence[Message]], list[Message]], ...] = (
        lambda ms: _elide_file_contents(strip_images(ms), effects or {}),
        _drop_oldest_round,
        _halve_longest,
    )
    for rule in rules[min(step, len(rules) - 1) :]:
        smaller = rule(messages)
        if _size(smaller) < _size(messages):
            return smaller
    return list(messages)


def _size(messages: Sequence[Message]) -> int:
    return sum(len(m.text) + sum(len(c.arguments) for c in m.tool_calls) for m in messages)


def _elide_file_contents(messages: Sequence[Message], effects: ToolEffects) -> list[Message]:
    calls = {c.id: c for m in messages for c in m.tool_calls}
    out = []
    for message in messages:
        call = calls.get(message.tool_call_id or "") if message.role == "tool" else None
        if (
            call is not None
            and effect_of(call.name, effects) == "read_only"
            and len(message.text) > len(FILE_ELIDED)
        ):
            message = message.with_content(FILE_ELIDED)
        out.append(message)
    return out


def _drop_oldest_round(messages: Sequence[Message]) -> list[Message]:
    """Without the oldest conversation round; the host's messages (a previous compact
    block, its restoration) stay, since they hold what came before it."""
    rounds = group_rounds(messages)
    for r in rounds[:-1]:
        if not messages[r.start].meta.synthetic:
            return [*messages[: r.start], *messages[r.end :]]
    return list(messages)


#: The marker a halving leaves; its count is of original characters, so that a
#: text halved again still says how much of the original is left out.
_OMITTED = re.compile(r"\n\[… ([\d,]+) characters omitted …\]\n")


def _cut_middle(text: str, head: int, tail: int) -> str:
    """``text``'s first ``head`` and last ``tail`` characters around one marker.

    The marker counts the original characters left out: an earlier marker
    inside the cut (a text halved before) adds its own count instead of its
    length, and one the cut would split is cut whole.
    """
    start, end = head, len(text) - tail
    earlier = 0
    for match in _OMITTED.finditer(text):
        if match.end() <= start or match.start() >= end:
            continue
        start, end = min(start, match.start()), max(end, match.end())
    for match in _OMITTED.finditer(text, start, end):
        earlier += int(match.group(1).replace(",", "")) - len(match.group(0))
    omitted = end - start + earlier
    return f"{text[:start]}\n[… {omitted:,} characters omitted …]\n{text[end:]}"


def _halve_longest(messages: Sequence[Message]) -> list[Message]:
    longest = max((len(m.text) for m in messages), default=0)
    cap = longest // 2
    if cap <= 0:
        return list(messages)
    out = []
    for message in messages:
        text = message.text
        if len(text) > cap and isinstance(message.content, str):
            head = cap * 3 // 4
            message = message.with_content(_cut_middle(text, head, cap - head))
        out.append(message)
    return out


#: The most halvings ``fit_fork_input`` tries: each halves the longest text,
#: so this bounds the work whatever the sizes.
_MAX_HALVINGS = 32


def fit_fork_input(
    messages: Sequence[Message],
    room: int,
    count: Callable[[Message], int],
    effects: ToolEffects | None = None,
) -> list[Message] | None:
    """The fork's history, shrunk by the ``shrink`` steps until its estimate fits ``room``.

    The fork is projected before it is sent, so the provider's rejection is
    the rare case: elide re-readable file contents, then drop the oldest
    conversation rounds (as few as needed; the previous compact block stays),
    then halve the longest texts. ``None`` when even that cannot fit.
    """
    current = list(messages)
    if sum(count(m) for m in current) <= room:
        return current
    current = _elide_file_contents(current, effects or {})
    costs = [count(m) for m in current]
    size = sum(costs)
    if size <= room:
        return current
    rounds = group_rounds(current)
    dropped: set[int] = set()
    for r in rounds[:-1]:
        if size <= room:
            break
        if current[r.start].meta.synthetic or current[r.start].meta.kind == KIND_COMPACT_SUMMARY:
            continue
        dropped.update(range(r.start, r.end))
        size -= sum(costs[r.start : r.end])
    current = [m for i, m in enumerate(current) if i not in dropped]
    for _ in range(_MAX_HALVINGS):
        if size <= room:
            return current
        smaller = _halve_longest(current)
        if _size(smaller) >= _size(current):
            return None
        current = smaller
        size = sum(count(m) for m in current)
    return current if size <= room else None


def elisions_of(sent: Sequence[Message], fork: Sequence[Message]) -> tuple[str, ...]:
    """What ``fork`` (the fork's history) left out of ``sent`` (the main request and
    what followed it), one line per kind; empty when it is ``sent`` unchanged."""
    kept = {m.id: m for m in fork}
    dropped = sum(1 for m in sent if m.id not in kept)
    images = shortened = 0
    for m in sent:
        other = kept.get(m.id)
        if other is None or other == m:
            continue
        if len(other.images) < len(m.images):
            images += 1
        if other.text != m.text:
            shortened += 1
    lines = []
    if images:
        lines.append(f"{images} message(s) with images sent with a placeholder instead")
    if shortened:
        lines.append(f"{shortened} message(s) sent shortened (file contents elided or cut)")
    if dropped:
        lines.append(f"{dropped} message(s) of the oldest rounds left out")
    return tuple(lines)


def nothing_to_compact(messages: Sequence[Message], *, on_demand: bool) -> bool:
    """Whether a compaction has nothing to work on (DESIGN §5.6).

    One asked for — a manual ``/compact``, or a reactive one after the
    provider refused the request — compacts whenever the conversation holds
    a message, an earlier summary included, which is re-summarized whole
    (seed 004). An automatic one needs a complete conversation round. On
    the very first request that round is the user's message: compacting it
    helps only when it is oversized (saved to a file, head and tail kept);
    otherwise the result is not smaller and is never committed.
    """
    if on_demand:
        return not messages
    return not _conversation_rounds(messages)


def _conversation_rounds(messages: Sequence[Message]) -> list[Round]:
    """The complete rounds the user and the model wrote (not the host's: a previous
    compact block, a restoration, a handoff)."""
    return [
        r for r in group_rounds(messages) if r.complete and not messages[r.start].meta.synthetic
    ]


def kept_tail(
    messages: Sequence[Message],
    keep_rounds: int,
    budget: int,
    count: Callable[[Message], int],
    room: float | None = None,
) -> list[Message]:
    """The last ``keep_rounds`` complete rounds, trimmed from the oldest while over 20 %
    of ``budget`` or over ``room``.

    At least one conversation round always comes before the tail — the kept
    tail shrinks, down to none, until something is summarized — so a short
    conversation or one just compacted can still be compacted (seed 004).
    The fork summarized the tail too, so trimming it loses no fact.
    """
    rounds = _conversation_rounds(messages)
    rounds = rounds[len(rounds) - min(keep_rounds, max(len(rounds) - 1, 0)) :]
    limit = TAIL_BUDGET_SHARE * budget if room is None else min(TAIL_BUDGET_SHARE * budget, room)
    while rounds and sum(count(m) for r in rounds for m in messages[r.start : r.end]) > limit:
        rounds = rounds[1:]
    return [m for r in rounds for m in messages[r.start : r.end]]


def check_gates(post: int, source: int, window: int, input_budget: int) -> str | None:
    """Why the replacement is not small enough, or ``None`` when it passes every gate."""
    if source >= LARGE_SOURCE_TOKENS and post > LARGE_SOURCE_SHARE * source:
        return f"the summary keeps {post:,} of {source:,} tokens (over 80 % of a large source)"
    half = min(window, input_budget) // 2
    if post > half:
        return f"the replacement takes {post:,} tokens, over half the window ({half:,})"
    if post > MAX_SUMMARY_TOKENS:
        return f"the replacement takes {post:,} tokens, over {MAX_SUMMARY_TOKENS:,}"
    return None


def _counted_rate(request: SummaryRequest, sent: Sequence[Message]) -> float:
    """How many tokens the provider counted per estimated one in the part of ``sent``
    its last usage covered (1.0 when unknown): the fork is shrunk at that rate, as
    the estimate of content the session has not seen at that density may be low."""
    if request.projected is None:
        return 1.0
    counted = request.projected - request.projected_estimated - request.fixed_tokens
    estimated = sum(request.count(m) for m in sent) - request.projected_estimated
    if counted <= 0 or estimated <= 0:
        return 1.0
    return counted / estimated


def _fit_at(
    request: SummaryRequest,
    budget: int,
    history: Sequence[Message],
    instruction: Message,
    rate: float,
) -> list[Message] | None:
    """``fit_fork_input`` into ``budget`` with every estimate (margin included) times
    ``rate`` (at least 1): the rate the provider was seen to count at."""
    rate = max(rate, 1.0)

    def count(message: Message) -> int:
        estimated = request.count(message)
        return math.ceil(rate * cautious(estimated, estimated))

    room = budget - request.fixed_tokens - math.ceil(rate * request.count(instruction))
    return fit_fork_input(history, room, count, request.tool_effects)


# ---------------------------------------------------------------------------
# The fork loop


class LLMSummarizer:
    """Summarizes with the main model through a cache-sharing fork of the conversation."""

    def __init__(self, provider: ChatProvider, model: ModelConfig) -> None:
        self._provider = provider
        #: The model the fork asks: the session's, followed when ``/model`` switches it.
        self.model = model

    async def summarize(self, request: SummaryRequest) -> Summary:
        sent = list(request.sent or request.messages)
        instruction = user(compaction_instruction(request.instructions))
        fork_input = self._fitted(request, prepare_fork_input(sent), sent, instruction)
        failures: list[str] = []
        # What the last fork sent left out (each retry leaves out more): the record names it.
        elided = elisions_of(sent, fork_input)
        for attempt in range(MAX_ATTEMPTS):
            if elided and request.on_elided is not None:
                request.on_elided(elided)
            try:
                base = self._size(request, fork_input, sent)
                text = await self._fork(request, fork_input, instruction, base)
                summary = self._replacement(request, text)
            except ContextLimitError as exc:
                # At the rate the provider said it counted, when it said; else (or
                # when that removes nothing) by the next rule that still removes something.
                smaller = None
                if exc.prompt_tokens is not None and request.request_budget is not None:
                    rate = exc.prompt_tokens / max(base + request.count(instruction), 1)
                    smaller = _fit_at(
                        request, request.request_budget, fork_input, instruction, rate
                    )
                if smaller is None or _size(smaller) >= _size(fork_input):
                    smaller = shrink(fork_input, attempt, request.tool_effects)
                if len(smaller) == len(fork_input) and _size(smaller) >= _size(fork_input):
                    raise SummarizerError(
                        f"the fork overflowed and cannot shrink: {exc}", elided
                    ) from exc
                failures.append(f"attempt {attempt + 1}: context limit, input shrunk")
                fork_input = smaller
                elided = elisions_of(sent, fork_input)
                continue
            except ProviderTimeoutError as exc:
                # A deadline already waited its full length: three more would keep
                # the user waiting minutes for a summary the fallback can give now.
                raise SummarizerError(f"attempt {attempt + 1}: {exc}", elided) from exc
            except ProviderError as exc:
                failures.append(f"attempt {attempt + 1}: {exc}")
                continue
            except SummarizerError as exc:
                raise SummarizerError(str(exc), elided) from exc
            return replace(summary, elisions=elided)
        raise SummarizerError("the summarizer failed 3 attempts: " + "; ".join(failures), elided)

    def _size(
        self, request: SummaryRequest, history: Sequence[Message], sent: Sequence[Message]
    ) -> int:
        """The cautious size of a request carrying ``history``: the pipeline's projection
        while it is the main request unchanged (the provider counted most of it), else
        the fixed context plus every message's estimate, with the margin on it."""
        if request.projected is not None and list(history) == list(sent):
            return cautious(request.projected, request.projected_estimated)
        estimated = sum(request.count(m) for m in history)
        return request.fixed_tokens + cautious(estimated, estimated)

    def _fitted(
        self,
        request: SummaryRequest,
        history: Sequence[Message],
        sent: Sequence[Message],
        instruction: Message,
    ) -> list[Message]:
        """The history as sent when the fork fits the input budget, else shrunk until
        its cautious estimate fits (DESIGN §5.5: elide only when it would not fit)."""
        budget = request.request_budget
        if budget is None:
            return list(history)
        # The instruction is the host's own prose, always the same: its estimate
        # (at the session's density) needs no margin.
        added = request.count(instruction)
        if self._size(request, history, sent) + added <= budget:
            return list(history)
        fitted = _fit_at(request, budget, history, instruction, _counted_rate(request, sent))
        if fitted is None:
            room = budget - request.fixed_tokens - added
            raise SummarizerError(
                f"the compaction request cannot fit the {budget:,}-token input "
                f"budget: the system prompt and tools take {request.fixed_tokens:,} tokens "
                f"and the conversation cannot shrink to the {max(room, 0):,} left"
            )
        return fitted

    async def _fork(
        self, request: SummaryRequest, history: Sequence[Message], instruction: Message, base: int
    ) -> str:
        """``base``: the cautious size of a request carrying ``history`` (``_size``)."""
        conversation: list[Message] = [*history, instruction]
        for _ in range(MAX_FORK_ROUNDS):
            budget = request.request_budget
            # The instruction needs no margin (``_fitted``); rejected calls do.
            added = request.count(instruction)
            grown = sum(request.count(m) for m in conversation[len(history) + 1 :])
            if budget is not None and (size := base + added + cautious(grown, grown)) > budget:
                # The rejected tool calls made it grow; never send what cannot fit.
                raise SummarizerError(
                    f"the compaction request grew to {size:,} tokens with rejected tool "
                    f"calls, over the {budget:,}-token input budget"
                )
            chat = chat_request(self.model, request.fixed.system, request.fixed.tools, conversation)
            turn = TurnAccumulator()
            streamed = ""
            async for event in self._provider.stream(chat, max_retries=0):
                turn.add(event)
                if isinstance(event, ContentDelta) and request.on_text is not None:
                    streamed += event.text
                    request.on_text(streamed)
            answer = turn.message()
            if answer.text.strip():
                return answer.text
            if not answer.tool_calls:
                break
            # Never run them: reject each call and ask again.
            rejections = [tool_result(c.id, TOOL_REJECTION, error=True) for c in answer.tool_calls]
            conversation = [*conversation, answer, *rejections]
        raise SummarizerError(f"the model wrote no summary text in {MAX_FORK_ROUNDS} rounds")

    def _replacement(self, request: SummaryRequest, text: str) -> Summary:
        ledger = normalize_ledger(extract_summary(text))
        ledger = place_exact_records(ledger, exact_records(request.messages))
        if not ledger.strip():
            raise SummarizerError("the model's summary was empty")
        # One ledger for both paths: the host's facts, whole, whatever the model wrote.
        ledger = place_host_facts(ledger, request.messages, request.tool_effects)
        if not ledger.strip():
            raise SummarizerError("the model's summary was empty")
        active_task = active_task_of(
            request.messages,
            cap_tokens=request.checkpoint_tokens,
            input_budget=request.input_budget,
            artifacts_dir=request.artifacts_dir,
        )
        block = build_compact_block(ledger, active_task)
        source = sum(request.count(m) for m in request.messages)
        # A short conversation keeps less verbatim: the replacement must come out
        # smaller, and a large one must pass its gate.
        share = LARGE_SOURCE_SHARE if source >= LARGE_SOURCE_TOKENS else RESULT_SHARE
        room = share * source - request.count(block)
        tail = kept_tail(
            request.messages, request.keep_rounds, request.input_budget, request.count, room
        )
        replacement = (block, *tail)
        post = sum(request.count(m) for m in replacement)
        failed = check_gates(post, source, request.window, request.input_budget)
        if failed is not None:
            raise SummarizerError(f"effect gate: {failed}")
        return Summary(replacement, ledger, "llm")


def _conforms(summarizer: LLMSummarizer) -> Summarizer:
    return summarizer
