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
    )


def from_openai_chat(usage: Any) -> CanonicalUsage:
    """Chat Completions: prompt_tokens includes cached tokens, which we split out."""
    details = _get(usage, "prompt_tokens_details")
    cached = _int(_get(details, "cached_tokens"))
    written = _int(_get(details, "cache_write_tokens")) or _int(_get(usage, "cache_write_tokens"))
    prompt = _int(_get(usage, "prompt_tokens"))
    completion_details = _get(usage, "completion_tokens_details")
    return CanonicalUsage(
        input_tokens=max(prompt - cached - written, 0),
        output_tokens=_int(_get(usage, "completion_tokens")),
        cache_read_tokens=cached,
        cache_write_tokens=written,
        # Already inside completion_tokens: kept for reporting, never added to output.
        reasoning_tokens=_int(_get(completion_details, "reasoning_tokens")),
    )
