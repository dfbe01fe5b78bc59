"""Circuit breakers for the models of a fallback chain (docs/fallbacks.md).

A model that failed `failures` calls in a row is open: nobody calls it for `cooldown_s`.
Then it is half-open: exactly one call probes it while every other skips it; the probe's
success closes the breaker, its failure opens it for another cool-down. One `Breakers`
serves the whole gateway, so every chat and the summarizer see the same verdicts.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import IntEnum
from urllib.parse import urlsplit

from agent.providers.base import Provider

log = logging.getLogger(__name__)

# What became of one model call in a chain (the metric's `outcome` label).
OUTCOMES = ("ok", "failed", "fell_back", "skipped")


class State(IntEnum):
    """The breaker's state; the values are what the metric shows."""

    CLOSED = 0
    OPEN = 1
    HALF_OPEN = 2


@dataclass(frozen=True)
class BreakerSettings:
    failures: int = 3  # consecutive failures that open it
    cooldown_s: float = 60.0  # how long it stays open before one probe


class Breaker:
    """One model's breaker. `admit` says whether a call may go out and whether it is the
    probe; every admitted call ends in exactly one of `succeeded`, `failed`, `abandoned`."""

    def __init__(self, label: str, settings: BreakerSettings,
                 clock: Callable[[], float]) -> None:
        self.label = label
        self.settings = settings
        self._clock = clock
        self.state = State.CLOSED
        self.failures = 0  # in a row
        self._opened_at = 0.0
        self._probing = False

    def admit(self) -> tuple[bool, bool]:
        """(may call, is the probe)."""
        if self.state is State.CLOSED:
            return True, False
        if self.state is State.OPEN:
            if self._clock() - self._opened_at < self.settings.cooldown_s:
                return False, False
            self.state = State.HALF_OPEN
        if self._probing:
            return False, False  # someone else is probing it right now
        self._probing = True
        return True, True

    @property
    def suspect(self) -> bool:
        """Failed lately: open, half-open, or closed with failures counting up."""
        return self.state is not State.CLOSED or self.failures > 0

    def succeeded(self, probe: bool) -> None:
        """The model answered (an error that is the request's own counts: it is up)."""
        if probe:
            self._probing = False
        if self.state is not State.CLOSED:
            log.warning("model %s: breaker closed, it answers again", self.label)
        self.state, self.failures = State.CLOSED, 0

    def failed(self, probe: bool) -> None:
        self.failures += 1
        if probe:
            self._probing = False
            self._open("the probe after its cool-down failed")
        elif self.state is State.CLOSED and self.failures >= self.settings.failures:
            self._open(f"{self.failures} failures in a row")

    def abandoned(self, probe: bool) -> None:
        """The call ended with no verdict (the turn was stopped): the next one probes."""
        if probe:
            self._probing = False

    def _open(self, why: str) -> None:
        self.state, self._opened_at = State.OPEN, self._clock()
        log.warning("model %s: breaker opened after %s; skipping it for %g s", self.label,
                    why, self.settings.cooldown_s)


class Breakers:
    """Every model's breaker and call outcomes, by model (one per gateway)."""

    def __init__(self, settings: BreakerSettings | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings or BreakerSettings()
        self._clock = clock
        self._by_key: dict[tuple[str, str, str], Breaker] = {}
        self._outcomes: dict[str, Counter[str]] = {}

    def for_model(self, provider: Provider) -> Breaker:
        """The breaker of this model at this endpoint (made on first use)."""
        settings = provider.settings
        key = (provider.kind, settings.base_url or "", provider.model)
        breaker = self._by_key.get(key)
        if breaker is None:
            taken = any(b.label == provider.model for b in self._by_key.values())
            label = f"{provider.model}@{_host(settings.base_url)}" if taken else provider.model
            breaker = self._by_key[key] = Breaker(label, self.settings, self._clock)
        return breaker

    def count(self, label: str, outcome: str) -> None:
        self._outcomes.setdefault(label, Counter())[outcome] += 1

    def outcomes(self) -> Iterator[tuple[str, Mapping[str, int]]]:
        """(model, {outcome: calls}) for the metrics endpoint."""
        return iter(list(self._outcomes.items()))

    def states(self) -> dict[str, float]:
        """{model: 0 closed, 1 open, 2 half-open} for the metrics endpoint."""
        return {b.label: float(b.state) for b in self._by_key.values()}


def _host(base_url: str | None) -> str:
    """Where a model is served, without any credentials a URL may carry."""
    return (urlsplit(base_url).hostname or base_url or "default") if base_url else "default"
