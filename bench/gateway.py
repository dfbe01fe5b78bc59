"""Gateway throughput and per-turn overhead with an instant provider (LLM time excluded).

Runs 1, 100 and 1,000 chats at once, each sending its messages one after another (the
next only after the previous reply), through the real gateway, router, SQLite store and
context engine. Prints turns/s, the p50/p99 time from hand-off to reply delivered, the
store calls a turn made and the writes each COMMIT carried (group commit), then each of
issue 17's targets as a ratio. 1,000 chats run twice: 2 turns each (half of them a new
chat's first), then 6 (mostly chats the process knows).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.agent import AgentSettings  # noqa: E402
from agent.engines import resolve_engine_factory  # noqa: E402
from agent.providers.base import Completion, Provider, ProviderSettings  # noqa: E402
from agent.usage import CanonicalUsage  # noqa: E402
from gateway.auth import Authorizer  # noqa: E402
from gateway.config import load_config  # noqa: E402
from gateway.service.app import Gateway  # noqa: E402
from gateway.service.run import tune_collector  # noqa: E402
from gateway.turns.conversations import Conversations  # noqa: E402
from gateway.wiring import build_gateway  # noqa: E402
from platforms.base import ChatRef, Chunk, Handler, InboundMessage, PlatformAdapter  # noqa: E402
from storage.sqlite import SqliteSessionStore  # noqa: E402

# Issue 17's targets; every figure printed is measured in the run.
TARGET_P50_MS = 2.0
TARGET_TURNS_S = 1_000
TARGET_CALLS = 6


class InstantProvider(Provider):
    kind = "openai"

    async def complete(self, messages: list[dict[str, Any]], **kw: Any) -> Completion:
        text = "ok: " + str(messages[-1].get("content", ""))[:40]
        prompt = sum(len(str(m.get("content", ""))) for m in messages) // 4
        return Completion({"role": "assistant", "content": text},
                          CanonicalUsage(input_tokens=prompt, output_tokens=4), self.model)


class BenchPlatform(PlatformAdapter):
    name = "bench"

    def __init__(self, handler: Handler) -> None:
        super().__init__(handler)
        self.waiters: dict[str, asyncio.Future[None]] = {}

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, chat: ChatRef, chunk: Chunk, reply_to: str | None = None) -> None: ...

    async def delivered(self, chat: ChatRef, message_ids: tuple[str, ...]) -> None:
        for mid in message_ids:
            fut = self.waiters.pop(mid, None)
            if fut and not fut.done():
                fut.set_result(None)

    async def turn(self, chat_id: str, n: int) -> float:
        mid = f"{chat_id}-{n}"
        fut = asyncio.get_running_loop().create_future()
        self.waiters[mid] = fut
        started = time.perf_counter()
        await self.handler(InboundMessage(platform="bench", chat_id=chat_id, user_id="u",
                                          message_id=mid, text=f"message {n} from {chat_id}"))
        await fut
        return time.perf_counter() - started


async def build(tmp: Path) -> tuple[Gateway, BenchPlatform]:
    cfg_path = tmp / "config.yaml"
    cfg_path.write_text(f"storage: {{path: {tmp / 'bench.db'}}}\n"
                        "gateway: {open: true, coalesce_ms: 0}\n")
    config = load_config(cfg_path)
    provider = InstantProvider(ProviderSettings(provider="openai", model="instant",
                                                context_length=128_000))
    store = SqliteSessionStore(config.db_path)
    conversations = Conversations(
        store, provider=provider, summary_provider=None,
        engine_factory=resolve_engine_factory("compressor", data_dir=tmp),
        system_prompt="You are a benchmark.",
        settings=AgentSettings(max_output_tokens=256, threshold=0.5, target_ratio=0.2,
                               protect_last_n=20, compression_enabled=True))
    gateway = build_gateway(store, conversations, [BenchPlatform], auth=Authorizer(config),
                            coalesce_ms=config.gateway.coalesce_ms)
    await gateway.initialize()
    await gateway.start()
    tune_collector()  # as `threadline run` does once started
    platform = gateway.adapters["bench"]
    assert isinstance(platform, BenchPlatform)
    return gateway, platform


async def run(chats: int, turns_per_chat: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        gateway, platform = await build(Path(tmp))
        latencies: list[float] = []

        async def one_chat(i: int) -> None:
            for n in range(turns_per_chat):
                latencies.append(await platform.turn(str(i), n))

        store = gateway.store
        assert isinstance(store, SqliteSessionStore)
        calls, commits = store.stats.calls, store.stats.commits
        started = time.perf_counter()
        await asyncio.gather(*(one_chat(i) for i in range(chats)))
        elapsed = time.perf_counter() - started
        await asyncio.sleep(0.05)  # the last deliveries' writes
        calls, commits = store.stats.calls - calls, store.stats.commits - commits
        writes = store.stats.committed_writes
        await gateway.stop(drain_timeout=10)
        await gateway.shutdown()
    latencies.sort()
    return {"turns": len(latencies), "turns_per_s": len(latencies) / elapsed,
            "p50_ms": statistics.median(latencies) * 1000,
            "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
            "calls_per_turn": calls / len(latencies),
            "writes_per_commit": writes / max(1, store.stats.commits), "commits": commits}


async def main() -> None:
    print(f"{'chats':>6} {'turns':>6} {'turns/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'store calls/turn':>17} {'writes/commit':>14}")
    results = {}
    for chats, turns in ((1, 200), (100, 5), (1000, 2), (1000, 6)):
        r = results[chats, turns] = await run(chats, turns)
        print(f"{chats:>6} {r['turns']:>6} {r['turns_per_s']:>9.0f} {r['p50_ms']:>8.2f} "
              f"{r['p99_ms']:>8.2f} {r['calls_per_turn']:>17.2f} {r['writes_per_commit']:>14.1f}")
    one, many = results[1, 200], results[1000, 6]
    print("targets (measured / target; at least 1.00 meets it):")
    print(f"  1 chat, p50 overhead <= {TARGET_P50_MS} ms: {TARGET_P50_MS / one['p50_ms']:.2f}")
    print(f"  1,000 chats, >= {TARGET_TURNS_S:,} turns/s: "
          f"{many['turns_per_s'] / TARGET_TURNS_S:.2f}")
    worst = max(r["calls_per_turn"] for r in results.values())
    print(f"  store calls per turn <= {TARGET_CALLS}: {TARGET_CALLS / worst:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
