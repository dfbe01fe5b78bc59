"""Token usage normalized across providers (docs/architecture.md, "Provider errors and usage")."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CanonicalUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        """Everything the model read: the compaction trigger uses only this."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens


@dataclass(frozen=True)
class UsageEntry:
    """One provider call, attributed: which model, for what (chat | summary), how much."""

    model: str
    purpose: str
    usage: CanonicalUsage


@dataclass
class UsageLedger:
    """Collects the calls of one turn (the agent's and its engine's), drained per turn."""

    entries: list[UsageEntry] = field(default_factory=list)

    def record(self, model: str, purpose: str, usage: CanonicalUsage) -> None:
        self.entries.append(UsageEntry(model, purpose, usage))

    def drain(self) -> tuple[UsageEntry, ...]:
        spent, self.entries = tuple(self.entries), []
        return spent


def _get(obj: Any, key: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) else 0


def from_anthropic(usage: Any) -> CanonicalUsage:
    """Anthropic Messages: input_tokens excludes cache reads and writes."""
    return CanonicalUsage(
        input_tokens=_int(_get(usage, "input_tokens")),
        output_tokens=_int(_get(usage, "output_tokens")),
        cache_read_tokens=_int(_get(usage, "cache_read_input_tokens")),
        cache_write_tokens=_int(_get(usage, "cache_creation_input_tokens")),
        # Thinking is already inside output_tokens: kept for reporting, never added.
        reasoning_tokens=_int(_get(_get(usage, "output_tokens_details"), "thinking_tokens")),
    )


def _without_cache(total: int, details: Any, usage: Any, *write_keys: str
                   ) -> tuple[int, int, int]:
    """(uncached input, cache read, cache write) of an OpenAI-shaped prompt total that
    includes both. Cache writes are reported by some routers only, under varying names."""
    cached = _int(_get(details, "cached_tokens"))
    written = next((n for key in write_keys for source in (details, usage)
                    if (n := _int(_get(source, key)))), 0)
    return max(total - cached - written, 0), cached, written


def from_openai_chat(usage: Any) -> CanonicalUsage:
    """Chat Completions: prompt_tokens includes cached tokens, which we split out."""
    uncached, cached, written = _without_cache(
        _int(_get(usage, "prompt_tokens")), _get(usage, "prompt_tokens_details"), usage,
        "cache_write_tokens")
    return CanonicalUsage(
        input_tokens=uncached,
        output_tokens=_int(_get(usage, "completion_tokens")),
        cache_read_tokens=cached,
        cache_write_tokens=written,
        # Already inside completion_tokens: kept for reporting, never added to output.
        reasoning_tokens=_int(_get(_get(usage, "completion_tokens_details"),
                                   "reasoning_tokens")),
    )


def from_openai_responses(usage: Any) -> CanonicalUsage:
    """Responses API: input_tokens includes cached tokens, which we split out."""
    uncached, cached, written = _without_cache(
        _int(_get(usage, "input_tokens")), _get(usage, "input_tokens_details"), usage,
        "cache_creation_tokens", "cache_write_tokens")
    return CanonicalUsage(
        input_tokens=uncached,
        output_tokens=_int(_get(usage, "output_tokens")),
        cache_read_tokens=cached,
        cache_write_tokens=written,
        # Already inside output_tokens: kept for reporting, never added to output.
        reasoning_tokens=_int(_get(_get(usage, "output_tokens_details"), "reasoning_tokens")),
    )
