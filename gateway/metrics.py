"""Prometheus metrics: what operators watch without reading logs (docs/operations.md,
"Metrics").

One `Metrics` per gateway, with its own registry (no process-wide state). Counting is
always on and cheap; the HTTP endpoint opens only when `metrics.port` is set. Provider
calls are counted by wrapping each provider (`MeteredProvider`), so chat turns,
summaries, overflow retries and failed calls are all seen in one place.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from agent.errors import ProviderError
from agent.providers.base import Completion, Provider
from agent.usage import CanonicalUsage

log = logging.getLogger(__name__)

TOKEN_KINDS = ("input", "cache_read", "cache_write", "output", "reasoning")
COMPACTION_TRIGGERS = ("automatic", "manual", "hygiene", "failed")


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.turns = Counter("threadline_turns", "Message turns, by outcome", ["outcome"],
                             registry=r)
        self.turn_seconds = Histogram(
            "threadline_turn_seconds", "Time from taking a batch to its reply being stored",
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 40, 80, 160), registry=r)
        self.calls = Counter("threadline_provider_calls", "Provider calls that answered",
                             ["model", "purpose"], registry=r)
        self.errors = Counter("threadline_provider_errors", "Provider calls that failed",
                              ["model", "kind"], registry=r)
        self.tokens = Counter("threadline_tokens", "Tokens, by model and kind",
                              ["model", "kind"], registry=r)
        self.cache_hit = Gauge("threadline_cache_hit_ratio",
                               "Prompt tokens read from cache / all prompt tokens", registry=r)
        self.compactions = Counter("threadline_compactions", "Compactions, by trigger",
                                   ["trigger"], registry=r)
        self.rate_limited = Counter("threadline_outbound_rate_limited",
                                    "429s from a platform", ["platform"], registry=r)
        self.paused = Counter("threadline_outbound_paused_seconds",
                              "Seconds chats were paused by platform rate limits",
                              ["platform"], registry=r)
        self.retries = Counter("threadline_outbound_retries",
                               "Calls to a platform tried again after it failed (an outage)",
                               ["platform"], registry=r)
        self.platform_up = Gauge(
            "threadline_platform_up", "1 while a platform is connected and receiving; 0 while "
            "it is down (refused for good, or being retried)", ["platform"], registry=r)
        self.sends_unknown = Counter(
            "threadline_sends_unknown", "Sends the platform may have taken without answering "
            "in time, by what was done: resent (once), assumed_sent (after a second silence)",
            ["platform", "outcome"], registry=r)
        self.undelivered = Counter("threadline_undelivered_replies",
                                   "Replies left (partly) unsent for the next start",
                                   ["platform"], registry=r)
        self.stream_updates = Counter(
            "threadline_stream_updates", "Updates of replies shown while written, by outcome "
            "(sent, skipped for the budget, rate_limited, failed)", ["platform", "outcome"],
            registry=r)
        self.attachments = Counter(
            "threadline_attachments", "Files people sent, by kind and outcome (read, "
            "declined: not readable or too big; failed: download or transcription)",
            ["kind", "outcome"], registry=r)
        self.queue_depth = Gauge("threadline_chats_busy", "Chats with queued or running work",
                                 registry=r)
        self.loop_lag = Histogram(
            "threadline_event_loop_lag_seconds", "How late the event loop woke, per sample",
            buckets=(0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30), registry=r)
        self.loop_lag_max = Gauge(
            "threadline_event_loop_lag_max_seconds",
            "The largest event loop stall in the last complete minute", registry=r)
        self.running = Gauge("threadline_turns_running", "Batches running now", registry=r)
        self._prompt = self._read = 0
        self._server: Any = None

    # --- recording --------------------------------------------------------------------
    def usage(self, model: str, purpose: str, usage: CanonicalUsage) -> None:
        self.calls.labels(model, purpose).inc()
        for kind in TOKEN_KINDS:
            value = getattr(usage, f"{kind}_tokens")
            if value:
                self.tokens.labels(model, kind).inc(value)
        self._prompt += usage.prompt_tokens
        self._read += usage.cache_read_tokens
        if self._prompt:
            self.cache_hit.set(self._read / self._prompt)

    def watch_counters(self, name: str, doc: str, labels: tuple[str, str],
                       sources: Callable[[], Iterable[tuple[str, Mapping[str, int]]]]) -> None:
        """A counter family read at scrape time from objects that count for themselves
        (adapters, worker pools): `sources()` gives (first label value, {second: count})."""
        self.registry.register(_Counted(name, doc, labels, sources))

    def watch_times(self, name: str, doc: str, label: str,
                    source: Callable[[], Mapping[str, float]]) -> None:
        """A gauge family read at scrape time: {label value: unix seconds}."""
        self.registry.register(_Times(name, doc, label, source))

    def watch_levels(self, name: str, doc: str, label: str,
                     source: Callable[[], Mapping[str, float]]) -> None:
        """A gauge family read at scrape time: {label value: level} (a breaker's state)."""
        self.registry.register(_Times(name, doc, label, source))

    def watch_router(self, activity: Callable[[], tuple[int, int]]) -> None:
        """Queue depth and running turns, read at scrape time."""
        self.queue_depth.set_function(lambda: activity()[0])
        self.running.set_function(lambda: activity()[1])

    # --- the endpoint -----------------------------------------------------------------
    def serve(self, listen: str, port: int) -> None:
        server, _thread = start_http_server(port, addr=listen, registry=self.registry)
        self._server = server
        log.info("metrics: serving Prometheus metrics on http://%s:%d/metrics", listen,
                 server.server_port)

    @property
    def port(self) -> int | None:
        return self._server.server_port if self._server is not None else None

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class _Counted:
    """A scrape-time collector for counts kept elsewhere (no prometheus types there)."""

    def __init__(self, name: str, doc: str, labels: tuple[str, str],
                 sources: Callable[[], Iterable[tuple[str, Mapping[str, int]]]]) -> None:
        self._name, self._doc, self._labels, self._sources = name, doc, labels, sources

    def describe(self) -> list[Any]:
        return []  # nothing to check at registration: the series come and go with the counts

    def collect(self) -> Iterable[CounterMetricFamily]:
        family = CounterMetricFamily(self._name, self._doc, labels=list(self._labels))
        for owner, counts in self._sources():
            for what, count in sorted(counts.items()):
                family.add_metric([owner, what], count)
        yield family


class _Times:
    """A scrape-time gauge of values kept elsewhere (when a loop last worked, a state)."""

    def __init__(self, name: str, doc: str, label: str,
                 source: Callable[[], Mapping[str, float]]) -> None:
        self._name, self._doc, self._label, self._source = name, doc, label, source

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily(self._name, self._doc, labels=[self._label])
        for what, when in sorted(self._source().items()):
            family.add_metric([what], when)
        yield family


class MeteredProvider(Provider):
    """A provider whose every call is counted: answered (with its tokens) or failed."""

    def __init__(self, inner: Provider, metrics: Metrics, purpose: str) -> None:
        super().__init__(inner.settings)
        self.kind = inner.kind
        self.streams = getattr(inner, "streams", False)
        self.inner = inner
        self.metrics = metrics
        self.purpose = purpose

    @property
    def context_length(self) -> int:
        return self.inner.context_length

    @property
    def vision(self) -> bool:
        return self.inner.vision

    async def complete(self, messages: list[dict[str, Any]], **kw: Any) -> Completion:
        started = time.monotonic()
        try:
            completion = await self.inner.complete(messages, **kw)
        except ProviderError as exc:
            self.metrics.errors.labels(self.model, type(exc).__name__).inc()
            raise
        log.debug("%s call to %s took %.2f s", self.purpose, self.model,
                  time.monotonic() - started)
        self.metrics.usage(completion.model or self.model, self.purpose, completion.usage)
        return completion

    async def aclose(self) -> None:
        await self.inner.aclose()
