"""What the platform benchmarks share: a provider that answers at once, and the gateway
parts around an adapter (store, conversations, authorizer) in a scratch directory."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from agent.agent import AgentSettings
from agent.engines import resolve_engine_factory
from agent.providers.base import Completion, Provider, ProviderSettings
from agent.usage import CanonicalUsage
from gateway.auth import Authorizer
from gateway.config import load_config
from gateway.service.app import Gateway
from gateway.turns.conversations import Conversations
from gateway.wiring import build_gateway, build_store
from platforms.base import PlatformFactory


class InstantProvider(Provider):
    """No model time: the benchmark measures our path and the platform library's."""

    kind = "openai"

    async def complete(self, messages: list[dict[str, Any]], **kw: Any) -> Completion:
        text = "ok: " + str(messages[-1].get("content", ""))[:40]
        return Completion({"role": "assistant", "content": text},
                          CanonicalUsage(input_tokens=100, output_tokens=4), self.model)


async def instant_gateway(tmp: Path, platform: PlatformFactory,
                          storage: str | None = None) -> Gateway:
    """A started gateway on a fresh store (a SQLite file in `tmp`, or the YAML mapping body
    `storage`, e.g. `url: '...'`), answering through the instant provider."""
    cfg = tmp / "config.yaml"
    storage = storage or f"path: {tmp / 'bench.db'}"
    cfg.write_text(f"storage: {{{storage}}}\ngateway: {{open: true, coalesce_ms: 0}}\n")
    config = load_config(cfg)
    store = build_store(config)
    provider = InstantProvider(ProviderSettings(provider="openai", model="instant",
                                                context_length=128_000))
    conversations = Conversations(
        store, provider=provider, summary_provider=None,
        engine_factory=resolve_engine_factory("compressor", data_dir=tmp),
        system_prompt="You are a benchmark.", settings=AgentSettings(max_output_tokens=256))
    gateway = build_gateway(store, conversations, [platform], auth=Authorizer(config),
                            coalesce_ms=0, lease_seconds=config.gateway.lease_seconds)
    await gateway.initialize()
    await gateway.start()
    return gateway


def summary(latencies: list[float], elapsed: float) -> dict[str, float]:
    """messages, messages/s, p50 and p99 latency in milliseconds."""
    latencies = sorted(latencies)
    return {"messages": len(latencies), "per_s": len(latencies) / elapsed,
            "p50_ms": statistics.median(latencies) * 1000,
            "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000}
