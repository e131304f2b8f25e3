"""What a replay measures, per request and per session, and how sessions add up."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from cairn.messages import JSONObject, JSONValue
from cairn.replay.continuity import Continuity, total
from cairn.replay.fixed_context import FixedSource

Policy: TypeAlias = Literal["cairn", "none", "post-response"]
POLICIES: tuple[Policy, ...] = ("cairn", "none", "post-response")


@dataclass(frozen=True, slots=True)
class RequestMetrics:
    """One request the recorded agent made, as the policy sent it."""

    index: int
    #: The request's size counted with the exact tokenizer: what the provider bills.
    true_tokens: int
    #: The pipeline's projection of that size before sending (``None``: unknown).
    projected_tokens: int | None
    phase: str
    handoff: bool = False
    #: Tool results elided by snip or micro compact during this request's check.
    snipped: int = 0
    compaction: str | None = None
    pre_tokens: int | None = None
    post_tokens: int | None = None
    overflow: bool = False
    #: Tokens of the longest prefix shared with the previous request.
    cache_eligible_tokens: int = 0
    #: What each API's prompt cache would read (and Anthropic's write) of this
    #: request, by its documented rules (``cairn.replay.prompt_cache``).
    openai_cache_read: int = 0
    anthropic_cache_read: int = 0
    anthropic_cache_write: int = 0
    pipeline_seconds: float = 0.0
    #: On a compaction: the exact size of the request that triggered it (cairn:
    #: the context as it stood before the check; post-response: the answered
    #: request's prompt and completion, which the old check judged).
    trigger_tokens: int | None = None
    #: On a compaction: what the context right after it still held (``None``: no compaction).
    continuity: Continuity | None = None

    @property
    def error_pct(self) -> float | None:
        if self.projected_tokens is None or not self.true_tokens:
            return None
        return 100.0 * (self.projected_tokens - self.true_tokens) / self.true_tokens

    @property
    def true_over_projected(self) -> float | None:
        """Exact size ÷ projection: above 1, the projection under-counted by that factor."""
        if not self.projected_tokens:
            return None
        return self.true_tokens / self.projected_tokens


@dataclass(frozen=True, slots=True)
class ProjectionError:
    mean_abs_pct: float = 0.0
    #: The worst under-estimate, as a positive percentage of the true size.
    max_under_pct: float = 0.0
    max_over_pct: float = 0.0

    @classmethod
    def of(cls, requests: Sequence[RequestMetrics]) -> ProjectionError:
        errors = [e for r in requests if (e := r.error_pct) is not None]
        if not errors:
            return cls()
        return cls(
            mean_abs_pct=sum(abs(e) for e in errors) / len(errors),
            max_under_pct=max(0.0, -min(errors)),
            max_over_pct=max(0.0, max(errors)),
        )

    def to_dict(self) -> JSONObject:
        return {
            "mean_abs_pct": round(self.mean_abs_pct, 2),
            "max_under_pct": round(self.max_under_pct, 2),
            "max_over_pct": round(self.max_over_pct, 2),
        }


@dataclass(frozen=True, slots=True)
class UnderEstimate:
    """The request whose exact size most exceeded the pipeline's projection of it.

    The projection is ``RequestMetrics.projected_tokens`` — the one
    ``ProjectionError`` is measured on: under ``cairn`` the snapshot the
    request goes out with (``CheckResult.after``: what the check's snip,
    compaction and over-budget refusal were decided on, re-projected after a
    compaction); under the other policies ``ContextPipeline.project`` just
    before sending. ``ratio`` is exact ÷ projected, the worst over the
    requests; at most 1 means no request was under-counted.
    """

    ratio: float
    session: str
    #: 1-based, as the reports number requests.
    request: int
    true_tokens: int
    projected_tokens: int

    @classmethod
    def worst(cls, sessions: Iterable[SessionReport], prefix: str = "") -> UnderEstimate | None:
        """The worst over ``sessions`` (``None``: no request had a projection)."""
        found: UnderEstimate | None = None
        for session in sessions:
            for r in session.requests:
                ratio = r.true_over_projected
                if ratio is None or (found is not None and ratio <= found.ratio):
                    continue
                assert r.projected_tokens is not None
                found = cls(
                    ratio,
                    f"{prefix}{session.name}",
                    r.index + 1,
                    r.true_tokens,
                    r.projected_tokens,
                )
        return found

    def to_dict(self) -> JSONObject:
        return {
            "ratio": round(self.ratio, 4),
            "session": self.session,
            "request": self.request,
            "true_tokens": self.true_tokens,
            "projected_tokens": self.projected_tokens,
        }


@dataclass(frozen=True)
class SessionReport:
    name: str
    policy: Policy
    window: int
    input_budget: int
    requests: tuple[RequestMetrics, ...] = ()
    #: Why the session could not be replayed to its end (the window is too
    #: small for the fixed context, or a request could not be brought under
    #: the input budget), if it could not. A failed session is a failure in
    #: the totals and the exit code, never "0 overflows".
    failure: str | None = None
    #: Compaction records in the replayed transcript (cross-checked against the table).
    transcript: str | None = None
    warnings: tuple[str, ...] = field(default=())
    #: The exact size of the system prompt and tool schemas every request carried.
    fixed_tokens: int = 0
    #: Where that size came from (see ``cairn.replay.fixed_context``).
    fixed_source: FixedSource = "recorded"
    #: The exact size of the part the recording itself carries.
    recorded_fixed_tokens: int = 0
    #: ``compact_ratio`` × input budget: where compaction is due.
    compaction_line: int = 0
    #: The exact size of the request the pipeline refused to send (then the
    #: session failed there); over the input budget unless the refusal came
    #: from an over-estimate.
    refused_tokens: int | None = None

    @property
    def failed(self) -> bool:
        return self.failure is not None

    @property
    def overflows(self) -> int:
        return sum(r.overflow for r in self.requests)

    @property
    def peak_tokens(self) -> int:
        return max((r.true_tokens for r in self.requests), default=0)

    @property
    def compactions(self) -> int:
        return sum(r.compaction is not None for r in self.requests)

    @property
    def snips(self) -> int:
        return sum(r.snipped for r in self.requests)

    @property
    def handoffs(self) -> int:
        return sum(r.handoff for r in self.requests)

    @property
    def billed_prompt_tokens(self) -> int:
        return sum(r.true_tokens for r in self.requests)

    @property
    def cache_eligible_tokens(self) -> int:
        return sum(r.cache_eligible_tokens for r in self.requests)

    def prompt_cache(self) -> JSONObject:
        """Each API's cache reads over the session, as ``prompt_cache`` in the reports."""
        return prompt_cache_totals(self.requests)

    @property
    def pipeline_seconds(self) -> float:
        return sum(r.pipeline_seconds for r in self.requests)

    @property
    def continuity(self) -> Continuity:
        """Every compaction's continuity checks; failures name the request they came from."""
        return total(
            r.continuity.prefixed(f"request {r.index + 1}: ")
            for r in self.requests
            if r.continuity is not None
        )

    @property
    def worst_under_estimate(self) -> UnderEstimate | None:
        return UnderEstimate.worst((self,))

    @property
    def wasted_headroom(self) -> tuple[float, ...]:
        """Per compaction, the room it left unused: (line − trigger size) / budget, ≥ 0."""
        return tuple(
            wasted_headroom(self.compaction_line, r.trigger_tokens, self.input_budget)
            for r in self.requests
            if r.compaction is not None and r.trigger_tokens is not None
        )


def wasted_headroom(line: int, trigger_tokens: int, budget: int) -> float:
    """How early a compaction came, as a share of the input budget (0: at or over the line).

    A compaction triggered by a request whose exact size was already at the
    compaction line wasted nothing; one triggered at 60 % of the budget
    under an 80 % line threw away 20 % of the budget it could still have used.
    """
    if budget <= 0:
        return 0.0
    return max(0.0, (line - trigger_tokens) / budget)


@dataclass(frozen=True)
class ReplaySummary:
    """All sessions of one source under one policy."""

    source: str
    format: str
    window: int
    tokenizer: str
    policy: Policy
    sessions: tuple[SessionReport, ...]

    @property
    def requests(self) -> tuple[RequestMetrics, ...]:
        return tuple(r for s in self.sessions for r in s.requests)

    @property
    def continuity(self) -> Continuity:
        """Every session's continuity checks; failures name the session they came from."""
        return total(s.continuity.prefixed(f"{s.name}: ") for s in self.sessions)

    def to_dict(self) -> JSONObject:
        sessions = self.sessions
        requests = self.requests
        billed = sum(s.billed_prompt_tokens for s in sessions)
        cached = sum(s.cache_eligible_tokens for s in sessions)
        compactions = sum(s.compactions for s in sessions)
        wasted = [w for s in sessions for w in s.wasted_headroom]
        return {
            "source": self.source,
            "format": self.format,
            "window": self.window,
            "input_budget": sessions[0].input_budget if sessions else 0,
            "tokenizer": self.tokenizer,
            "policy": self.policy,
            "sessions": len(sessions),
            "failed_sessions": sum(s.failed for s in sessions),
            "failures": [
                {"name": s.name, "reason": s.failure, "requests": len(s.requests)}
                for s in sessions
                if s.failure is not None
            ],
            "fixed_context": _fixed_context(sessions),
            "requests": len(requests),
            "overflows": sum(s.overflows for s in sessions),
            "peak_tokens": max((s.peak_tokens for s in sessions), default=0),
            "compactions": compactions,
            "compactions_per_100_requests": (
                round(100 * compactions / len(requests), 2) if requests else 0.0
            ),
            "wasted_headroom": _headroom(wasted),
            "continuity": self.continuity.to_dict(),
            "snips": sum(s.snips for s in sessions),
            "handoffs": sum(s.handoffs for s in sessions),
            "billed_prompt_tokens": billed,
            "cache_eligible_tokens": cached,
            "cache_eligible_share": round(cached / billed, 4) if billed else 0.0,
            "prompt_cache": prompt_cache_totals(requests),
            "projection_error": ProjectionError.of(requests).to_dict(),
            "worst_under_estimate": _optional(UnderEstimate.worst(sessions)),
            "pipeline_seconds": round(sum(s.pipeline_seconds for s in sessions), 6),
        }


def _fixed_context(sessions: Sequence[SessionReport]) -> JSONObject:
    """The fixed context's exact size over the sessions, and how often each source gave it."""
    sizes = [s.fixed_tokens for s in sessions]
    sources: dict[str, int] = {}
    for s in sessions:
        sources[s.fixed_source] = sources.get(s.fixed_source, 0) + 1
    return {
        "min_tokens": min(sizes, default=0),
        "max_tokens": max(sizes, default=0),
        "sources": dict(sorted(sources.items())),
    }


def _headroom(wasted: Sequence[float]) -> JSONObject:
    return {
        "compactions": len(wasted),
        "mean": round(sum(wasted) / len(wasted), 4) if wasted else 0.0,
        "max": round(max(wasted), 4) if wasted else 0.0,
    }


def _optional(value: UnderEstimate | None) -> JSONValue:
    return None if value is None else value.to_dict()


def prompt_cache_totals(requests: Sequence[RequestMetrics]) -> JSONObject:
    """Per API family, the prompt tokens read from the cache, their share, and the rest.

    ``openai`` is chat completions and the Responses API (automatic prefix
    caching); ``anthropic`` is Messages with Cairn's breakpoints, whose cache
    writes are counted apart (billed above the input price).
    """
    billed = sum(r.true_tokens for r in requests)
    read_openai = sum(r.openai_cache_read for r in requests)
    read_anthropic = sum(r.anthropic_cache_read for r in requests)
    written = sum(r.anthropic_cache_write for r in requests)

    def share(tokens: int) -> float:
        return round(tokens / billed, 4) if billed else 0.0

    return {
        "openai": {
            "read": read_openai,
            "uncached": billed - read_openai,
            "read_share": share(read_openai),
        },
        "anthropic": {
            "read": read_anthropic,
            "written": written,
            "uncached": billed - read_anthropic,
            "read_share": share(read_anthropic),
        },
    }
