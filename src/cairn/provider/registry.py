"""The model registry: what Cairn knows of the models people run (DESIGN §9, issue 26).

For each model, named exactly or matched by a name pattern: its context
window, its maximum output, whether it takes images, and its prices in USD
per million input, cached-input and output tokens, with the date the figures
were read. The data is ``models.json`` beside this module, shipped in the
package; ``lookup`` answers with a ``ModelInfo`` and ``price`` turns token
counts into dollars.

**Best-effort.** The figures are copied from the providers' public pages,
which change without notice; a price that could not be confirmed is left out
(``null``) rather than guessed, and ``price`` then answers ``None`` instead of
a wrong sum. A price is what the model's own provider charges: a host
reselling it (a name with a prefix such as ``openrouter/…``) may charge
another. Patterns (local GGUF models, families) give a conservative window —
the model's native one, or a family's smallest — and no prices. The
``models`` section of ``settings.json`` overrides any figure and adds models
the file lacks (``ModelOverride``).

Lookup, first hit wins:

1. the name, case-insensitive, against every entry's name and aliases; then
   the same without a host prefix (``openai/gpt-5``, ``anthropic/…``, a path
   to a ``.gguf`` file, Bedrock's ``anthropic.``), then also without a
   snapshot suffix (``-20250929``, ``-2025-04-14``, ``@20250929``, ``-v1:0``,
   ``-latest``) — each time also with ``.`` and ``_`` read as ``-``, so
   ``claude-sonnet-4.5`` is ``claude-sonnet-4-5``;
2. the patterns (``fnmatch``: ``*``, ``?``, ``[…]``), case-insensitive, in
   file order — the file lists the specific ones before the general.

The settings' entries are looked up the same way (a key holding ``*``, ``?``
or ``[`` is a pattern) and laid over the registry's match field by field.

How the configuration uses it (``resolve_model``): the window and image
support are defaults beneath ``settings.json``, the environment and the
flags. The maximum output is information only — it is never sent as
``max_tokens`` nor taken as the output reserve, which stay what the user
sets (``model.max_output_tokens``): some APIs refuse ``max_tokens`` (OpenAI's
reasoning models want ``max_completion_tokens``), and a reserve of a 128k
cap would take half of many windows for answers that are rarely that long.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date
from importlib.resources import files
from typing import Annotated, Self, TypeAlias, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from cairn.errors import CairnError
from cairn.messages import Usage
from cairn.provider.limits import MIN_CONTEXT_WINDOW
from cairn.wire_apis import WireAPI

#: The data file, in this package.
REGISTRY_FILE = "models.json"
#: Prices are per this many tokens.
PER_TOKENS = 1_000_000
_PATTERN_CHARS = frozenset("*?[")
#: A snapshot's suffix: a date (``-20250929``, ``@20250929``, ``-2025-04-14``),
#: Bedrock's version (``-v1:0``) or ``-latest``; stripped one at a time from the end.
_SNAPSHOT_SUFFIX = re.compile(r"(?:[-@]\d{8}|-\d{4}-\d{2}-\d{2}|-v\d+:\d+|-latest)$")
#: Bedrock's and Vertex's vendor prefix (``us.anthropic.claude-…``).
_VENDOR_PREFIX = re.compile(r"^(?:[a-z]+\.)?anthropic\.")

_T = TypeVar("_T")
_Price = Annotated[float | None, Field(default=None, ge=0, allow_inf_nan=False, strict=True)]


class RegistryError(CairnError, ValueError):
    """The shipped ``models.json`` is malformed (a packaging bug, not a user error)."""


class ModelOverride(BaseModel):
    """``models.<name>`` in ``settings.json``: any figure of one model, or of a new one.

    Each field set here wins over the registry's; the others keep its value.
    ``max_output_tokens`` is the model's limit as a fact (``ModelInfo``); the
    cap Cairn sends is ``model.max_output_tokens``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    context_window: int | None = Field(default=None, ge=MIN_CONTEXT_WINDOW, strict=True)
    max_output_tokens: int | None = Field(default=None, ge=1, strict=True)
    images: bool | None = Field(default=None, strict=True)
    #: The wire API the model is reached with by default (``model.api`` wins).
    api: WireAPI | None = None
    #: USD per million tokens: uncached input, cache hits, output, cache writes.
    input_price: _Price = None
    cached_input_price: _Price = None
    output_price: _Price = None
    cache_write_price: _Price = None


def _model_name(name: str) -> str:
    if not name.strip():
        raise ValueError("a model name must not be blank")
    return name


#: A key of ``models`` in ``settings.json``: a model's name or a pattern, not blank.
ModelName: TypeAlias = Annotated[str, AfterValidator(_model_name)]
#: ``models`` in ``settings.json``: model name (or pattern) → its override.
ModelOverrides: TypeAlias = Mapping[str, ModelOverride]


@dataclass(frozen=True, slots=True)
class Prices:
    """USD per million tokens; ``None``: not known."""

    input: float | None = None
    #: Input tokens read from the provider's prompt cache.
    cached_input: float | None = None
    output: float | None = None
    #: Input tokens written to the cache, where the provider bills them apart
    #: (Anthropic: 1.25 × input for the 5-minute cache).
    cache_write: float | None = None


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What the registry and the settings say about one model."""

    #: The entry that matched: the registry's name or pattern, else the settings key.
    name: str
    #: Tokens a request may hold, input and output; ``None``: not known.
    context_window: int | None
    #: The longest answer the model gives (information; see the module docstring).
    max_output_tokens: int | None
    images: bool
    prices: Prices
    #: When the registry's figures were read; ``None`` for a model only the settings define.
    read: date | None
    #: What the figures mean where it is not obvious (a capped input, tiered prices …).
    note: str | None = None
    #: The wire API its provider serves it on natively (``None``: chat completions).
    api: WireAPI | None = None


@dataclass(frozen=True, slots=True)
class TokenCounts:
    """Tokens billed, by price: what ``price`` multiplies.

    ``input`` is the prompt minus its cache hits, ``cached_input`` the cache
    hits, ``output`` the completion, reasoning included; ``cache_write`` is
    the part of ``input`` the provider reported writing to its cache.
    """

    input: int = 0
    cached_input: int = 0
    output: int = 0
    cache_write: int = 0

    @classmethod
    def from_usage(cls, usage: Usage) -> TokenCounts:
        """One response's counts. ``prompt_tokens`` includes the cache hits and
        writes (the chat-completions convention, and how Cairn maps Anthropic's
        usage), so no cache field is counted twice."""
        cached = usage.cached_tokens
        if cached is None:
            cached = usage.cache_read_input_tokens or 0
        cached = min(cached, usage.prompt_tokens)
        uncached = usage.prompt_tokens - cached
        written = min(usage.cache_creation_input_tokens or 0, uncached)
        return cls(uncached, cached, usage.completion_tokens, written)

    def __add__(self, other: TokenCounts) -> TokenCounts:
        return TokenCounts(
            self.input + other.input,
            self.cached_input + other.cached_input,
            self.output + other.output,
            self.cache_write + other.cache_write,
        )


def price(counts: TokenCounts, info: ModelInfo) -> float | None:
    """What ``counts`` cost in USD at ``info``'s prices.

    ``None`` when a kind of token was used whose price is not known: a
    partial sum would read as the whole bill.
    """
    total = 0.0
    for tokens, rate in (
        (counts.input - counts.cache_write, info.prices.input),
        (counts.cache_write, info.prices.cache_write),
        (counts.cached_input, info.prices.cached_input),
        (counts.output, info.prices.output),
    ):
        if tokens:
            if rate is None:
                return None
            total += tokens * rate
    return total / PER_TOKENS


def lookup(name: str, overrides: ModelOverrides | None = None) -> ModelInfo | None:
    """The registry's entry for ``name`` with the settings' ``overrides`` laid over it.

    ``None`` when neither knows the model. See the module docstring for how
    names are matched.
    """
    entry = _registry().match(name)
    key, override = _match_override(name, overrides or {})
    if entry is None and override is None:
        return None
    if entry is None:
        assert key is not None and override is not None
        return ModelInfo(
            name=key,
            context_window=override.context_window,
            max_output_tokens=override.max_output_tokens,
            images=override.images is True,
            prices=Prices(
                override.input_price,
                override.cached_input_price,
                override.output_price,
                override.cache_write_price,
            ),
            read=None,
            api=override.api,
        )
    info = entry.info
    if override is None:
        return info
    prices = info.prices
    return ModelInfo(
        name=info.name,
        context_window=_first(override.context_window, info.context_window),
        max_output_tokens=_first(override.max_output_tokens, info.max_output_tokens),
        images=info.images if override.images is None else override.images,
        prices=Prices(
            _first(override.input_price, prices.input),
            _first(override.cached_input_price, prices.cached_input),
            _first(override.output_price, prices.output),
            _first(override.cache_write_price, prices.cache_write),
        ),
        read=info.read,
        note=info.note,
        api=_first(override.api, info.api),
    )


def known_models() -> tuple[ModelInfo, ...]:
    """Every entry of the shipped registry, in file order (patterns by their pattern)."""
    return tuple(entry.info for entry in _registry().entries)


# -- matching ----------------------------------------------------------------


def canonical(name: str) -> str:
    """``name`` lower-cased, with ``.`` and ``_`` as ``-``: the form names are compared in."""
    return name.strip().lower().replace(".", "-").replace("_", "-")


def is_pattern(name: str) -> bool:
    return not _PATTERN_CHARS.isdisjoint(name)


def name_variants(name: str) -> tuple[str, ...]:
    """The forms of ``name`` tried in turn: as given, without a host prefix, without a
    snapshot suffix (all lower-case); duplicates dropped, order kept."""
    given = name.strip().lower()
    bare = _VENDOR_PREFIX.sub("", given.rstrip("/").rpartition("/")[2])
    stripped = bare
    while (shorter := _SNAPSHOT_SUFFIX.sub("", stripped)) != stripped and shorter:
        stripped = shorter
    return tuple(dict.fromkeys((given, bare, stripped)))


def _name_matches(variants: Iterable[str], names: Iterable[str]) -> bool:
    wanted = {canonical(n) for n in names}
    return any(canonical(v) in wanted for v in variants)


def _pattern_matches(variants: Iterable[str], pattern: str) -> bool:
    plain, canon = pattern.lower(), canonical(pattern)
    return any(
        fnmatch.fnmatchcase(v, plain) or fnmatch.fnmatchcase(canonical(v), canon) for v in variants
    )


def _match_override(
    name: str, overrides: ModelOverrides
) -> tuple[str | None, ModelOverride | None]:
    """The settings entry for ``name``: by name (each variant in turn), then by pattern."""
    variants = name_variants(name)
    names = [k for k in overrides if not is_pattern(k)]
    for variant in variants:
        for key in names:
            if _name_matches((variant,), (key,)):
                return key, overrides[key]
    for key, override in overrides.items():
        if is_pattern(key) and _pattern_matches(variants, key):
            return key, override
    return None, None


def _first(value: _T | None, fallback: _T | None) -> _T | None:
    return value if value is not None else fallback


# -- the data file -------------------------------------------------------------


class _Entry(BaseModel):
    """One line of ``models.json``: a ``name`` (with ``aliases``) or a ``pattern``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str | None = Field(default=None, min_length=1)
    pattern: str | None = Field(default=None, min_length=1)
    aliases: tuple[str, ...] = ()
    context_window: int = Field(ge=MIN_CONTEXT_WINDOW, strict=True)
    max_output_tokens: int = Field(ge=1, strict=True)
    images: bool = Field(strict=True)
    api: WireAPI | None = None
    input_price: _Price = None
    cached_input_price: _Price = None
    output_price: _Price = None
    cache_write_price: _Price = None
    #: When these figures were read, if not the file's date.
    read: date | None = None
    note: str | None = None

    @model_validator(mode="after")
    def _name_or_pattern(self) -> Self:
        if (self.name is None) == (self.pattern is None):
            raise ValueError("give exactly one of name and pattern")
        if self.name is not None and is_pattern(self.name):
            raise ValueError(f"name {self.name!r} holds a pattern character: use pattern")
        if self.pattern is not None and self.aliases:
            raise ValueError("a pattern takes no aliases")
        if self.max_output_tokens > self.context_window:
            raise ValueError("max_output_tokens exceeds context_window")
        return self


class _File(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    #: When the figures were read (an entry may give its own date).
    read: date
    #: Where they were read.
    source: str = Field(min_length=1)
    models: tuple[_Entry, ...]


@dataclass(frozen=True, slots=True)
class _Known:
    info: ModelInfo
    #: Every name this entry answers to (name and aliases); empty for a pattern.
    names: tuple[str, ...]
    pattern: str | None


class _Registry:
    def __init__(self, data: _File) -> None:
        self.entries: tuple[_Known, ...] = tuple(_known(e, data.read) for e in data.models)
        seen: dict[str, str] = {}
        for known in self.entries:
            for key in known.names or (known.pattern or "",):
                if canonical(key) in seen:
                    raise RegistryError(
                        f"{REGISTRY_FILE}: {key!r} is listed twice "
                        f"(also as {seen[canonical(key)]!r})"
                    )
                seen[canonical(key)] = key

    def match(self, name: str) -> _Known | None:
        variants = name_variants(name)
        named = [k for k in self.entries if k.names]
        for variant in variants:
            for known in named:
                if _name_matches((variant,), known.names):
                    return known
        for known in self.entries:
            if known.pattern is not None and _pattern_matches(variants, known.pattern):
                return known
        return None


def _known(entry: _Entry, read: date) -> _Known:
    label = entry.name or entry.pattern
    assert label is not None  # the validator wants one of them
    info = ModelInfo(
        name=label,
        context_window=entry.context_window,
        max_output_tokens=entry.max_output_tokens,
        images=entry.images,
        prices=Prices(
            entry.input_price, entry.cached_input_price, entry.output_price, entry.cache_write_price
        ),
        read=entry.read or read,
        note=entry.note,
        api=entry.api,
    )
    names = () if entry.name is None else (entry.name, *entry.aliases)
    return _Known(info, names, entry.pattern)


def parse_registry(text: str) -> tuple[ModelInfo, ...]:
    """Check a registry file's text as ``lookup`` would load it; its entries in order."""
    return tuple(k.info for k in _parse(text).entries)


def _parse(text: str) -> _Registry:
    try:
        return _Registry(_File.model_validate(json.loads(text)))
    except (ValueError, ValidationError) as exc:
        if isinstance(exc, RegistryError):
            raise
        raise RegistryError(f"{REGISTRY_FILE} is malformed: {exc}") from None


@functools.cache
def _registry() -> _Registry:
    """The shipped registry, read once per process."""
    text = files("cairn.provider").joinpath(REGISTRY_FILE).read_text(encoding="utf-8")
    return _parse(text)
