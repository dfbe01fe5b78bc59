"""A fallback chain: the configured model first, then `model.fallbacks`, in order
(docs/fallbacks.md).

A call goes to the next model only when it failed for a reason that is not the
request's own: the model is unreachable, timing out, answering 5xx or overloaded, refusing
our credentials, missing, or rate limiting us for longer than `max_wait_s`. A bad request,
a context overflow or an output cap is the request's: every model would refuse it alike,
so it is raised at once (the agent's own recovery handles overflow and caps).

The chain is itself a `Provider` (its head's name, kind and window), so whatever takes a
provider can take a chain: its `complete` falls back without fitting the request. The
agent routes a turn itself (`route()`), because it fits the transcript to each model's
window before calling it (agent/fallback.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from agent.errors import (
    AuthError,
    ModelNotFoundError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitedError,
)
from agent.providers.base import Completion, Provider
from agent.providers.breaker import Breaker, Breakers

log = logging.getLogger(__name__)

T = TypeVar("T")

NOBODY_ANSWERS = "every model of the chain is resting after repeated failures"


@dataclass(frozen=True)
class FallbackPolicy:
    max_wait_s: float = 30.0  # a 429 asking for longer than this (in all) moves on
    announce: bool = False  # a reply from another model says so
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep  # how a 429 is waited out


def why_not(exc: ProviderError, policy: FallbackPolicy) -> str | None:
    """Why a failed call moves on to the next model, in plain words (never the provider's
    own text, which may quote a key); None when the failure is the request's own."""
    status = f" (HTTP {exc.status})" if exc.status else ""
    if isinstance(exc, ProviderTimeoutError):
        return "did not answer in time" + status
    if isinstance(exc, ProviderUnavailableError):
        return f"is unavailable{status}" if status else "is unreachable"
    if isinstance(exc, AuthError):
        return "refused our credentials or quota" + status
    if isinstance(exc, ModelNotFoundError):
        return "does not know this model" + status
    if isinstance(exc, RateLimitedError):
        if exc.retry_after is None:
            return "is rate limiting us and gave no time to wait"
        return (f"is rate limiting us (it asks for {exc.retry_after:g} s more; "
                f"max_wait_s is {policy.max_wait_s:g} s)")
    return None


class ModelChain(Provider):
    """Models tried in order, each behind its breaker (none when there is only one: with
    nothing to fall back to, a call always goes out)."""

    streams = False  # a chain's own `complete` never streams; the agent routes per model

    def __init__(self, models: Sequence[Provider], *, breakers: Breakers | None = None,
                 policy: FallbackPolicy | None = None) -> None:
        if not models:
            raise ValueError("a model chain needs at least one model")
        super().__init__(models[0].settings)
        self.models = tuple(models)
        self.kind = self.head.kind
        self.breakers = breakers or Breakers()
        self.policy = policy or FallbackPolicy()

    @property
    def head(self) -> Provider:
        """The model every turn starts with."""
        return self.models[0]

    @property
    def context_length(self) -> int:
        return self.head.context_length

    @property
    def vision(self) -> bool:
        return self.head.vision

    def breaker(self, provider: Provider) -> Breaker | None:
        return self.breakers.for_model(provider) if len(self.models) > 1 else None

    @classmethod
    def of(cls, models: Provider) -> ModelChain:
        """`models` as a chain: itself when it is one, else a chain of that model alone."""
        return models if isinstance(models, ModelChain) else cls([models])

    def route(self) -> Route:
        """A way through the chain for one turn."""
        return Route(self)

    async def complete(self, messages: list[dict[str, Any]], **kw: Any) -> Completion:
        kw.pop("on_text", None)  # see `streams`
        return await self.route().call(lambda model: model.complete(messages, **kw))

    async def aclose(self) -> None:
        for model in self.models:
            await model.aclose()


class SummaryChain(ModelChain):
    """The chain the summarizer calls: it sizes its requests to `context_length`, so that
    is the smallest window among the models a call may reach now (the first model that has
    not failed lately and every one before it)."""

    @property
    def context_length(self) -> int:
        windows = []
        for model in self.models:
            windows.append(model.context_length)
            breaker = self.breaker(model)
            if breaker is None or not breaker.suspect:
                break
        return min(windows)


class Route:
    """One turn's way through a chain. A model that failed in this turn is not tried again
    in it: a later call of the turn (after a tool call) starts where the last one answered."""

    def __init__(self, chain: ModelChain) -> None:
        self.chain = chain
        self._start = 0
        self.answered_by: Provider | None = None  # the model that answered last

    @property
    def fell_back(self) -> bool:
        return self.answered_by is not None and self.answered_by is not self.chain.head

    def notice(self) -> str | None:
        """What the reply says about a fallback, when the operator wants it said."""
        if not (self.fell_back and self.chain.policy.announce):
            return None
        assert self.answered_by is not None
        return f"(Answered by {self.answered_by.model}: {self.chain.head.model} is not " \
               "available right now.)"

    async def call(self, attempt: Callable[[Provider], Awaitable[T]]) -> T:
        """`attempt(model)` on each model in turn until one answers."""
        chain, models = self.chain, self.chain.models
        skipped: list[str] = []  # "model reason", for the log line
        last: ProviderError | None = None
        for index in range(self._start, len(models)):
            model = models[index]
            breaker = chain.breaker(model)
            label = breaker.label if breaker else model.model
            may, probe = breaker.admit() if breaker else (True, False)
            if not may:
                chain.breakers.count(label, "skipped")
                skipped.append(f"{label} is resting after failures")
                continue
            try:
                result = await self._waiting(model, attempt)
            except ProviderError as exc:
                why = why_not(exc, chain.policy)
                if why is None:  # the request's own fault: the model itself is up
                    if breaker:
                        breaker.succeeded(probe)
                    chain.breakers.count(label, "failed")
                    raise
                if breaker:
                    breaker.failed(probe)
                more = index + 1 < len(models)
                chain.breakers.count(label, "fell_back" if more else "failed")
                skipped.append(f"{label} {why}")
                last = exc
                continue
            except BaseException:
                if breaker:
                    breaker.abandoned(probe)
                raise
            if breaker:
                breaker.succeeded(probe)
            chain.breakers.count(label, "ok")
            self._start, self.answered_by = index, model
            if skipped:
                log.warning("model fallback: %s answered instead: %s", label,
                            "; ".join(skipped))
            return result
        if skipped and len(models) > 1:
            log.warning("model fallback: no model answered: %s", "; ".join(skipped))
        raise last or ProviderUnavailableError(NOBODY_ANSWERS)

    async def _waiting(self, model: Provider, attempt: Callable[[Provider], Awaitable[T]]
                       ) -> T:
        """One model's attempt; a 429 is waited out on it while the waits add up to no
        more than `max_wait_s` (after the SDK's own retries)."""
        waited = 0.0
        policy = self.chain.policy
        while True:
            try:
                return await attempt(model)
            except RateLimitedError as exc:
                wait = exc.retry_after
                if wait is None or waited + wait > policy.max_wait_s:
                    raise
                log.info("model %s is rate limiting us; waiting %g s", model.model, wait)
                await policy.sleep(wait)
                waited += wait
