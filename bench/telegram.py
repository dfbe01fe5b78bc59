"""Telegram end to end: update in, reply out, through python-telegram-bot and the fake Bot API.

    python bench/telegram.py [--messages N]

An instant provider (no model time), the real gateway, store, outbound budget and PTB
polling the fake server on 127.0.0.1. Each chat sends its next message once the reply to
the previous one arrived. Two runs per size: `paced` keeps Telegram's limits (one message a
second per chat, thirty a second per bot), `unpaced` switches them off to show what our own
path costs. Prints messages/s and the p50/p99 time from update pushed to reply accepted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# This file is named like python-telegram-bot's package: take its folder off the path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from agent.agent import AgentSettings  # noqa: E402
from agent.engines import resolve_engine_factory  # noqa: E402
from agent.providers.base import Completion, Provider, ProviderSettings  # noqa: E402
from agent.usage import CanonicalUsage  # noqa: E402
from gateway.app import Gateway  # noqa: E402
from gateway.auth import Authorizer  # noqa: E402
from gateway.config import load_config  # noqa: E402
from gateway.conversations import Conversations  # noqa: E402
from platforms.base import SendLimits  # noqa: E402
from platforms.telegram.adapter import TelegramAdapter, TelegramSettings  # noqa: E402
from storage.sqlite import SqliteSessionStore  # noqa: E402
from tests.harness.fake_telegram import FakeTelegram  # noqa: E402


class InstantProvider(Provider):
    kind = "openai"

    async def complete(self, messages: list[dict[str, Any]], **kw: Any) -> Completion:
        text = "ok: " + str(messages[-1].get("content", ""))[:40]
        return Completion({"role": "assistant", "content": text},
                          CanonicalUsage(input_tokens=100, output_tokens=4), self.model)


async def build(tmp: Path, fake: FakeTelegram, paced: bool) -> Gateway:
    cfg = tmp / "config.yaml"
    cfg.write_text(f"storage: {{path: {tmp / 'bench.db'}}}\n"
                   "gateway: {open: true, coalesce_ms: 0}\n")
    config = load_config(cfg)
    store = SqliteSessionStore(config.db_path)
    provider = InstantProvider(ProviderSettings(provider="openai", model="instant",
                                                context_length=128_000))
    conversations = Conversations(
        store, provider=provider, summary_provider=None,
        engine_factory=resolve_engine_factory("compressor", data_dir=tmp),
        system_prompt="You are a benchmark.", settings=AgentSettings(max_output_tokens=256))
    settings = TelegramSettings(token=fake.token, base_url=fake.base_url,
                                base_file_url=fake.base_file_url, poll_timeout_s=1.0)

    def telegram(handler: Any) -> TelegramAdapter:
        adapter = TelegramAdapter(handler, settings)
        if not paced:
            adapter.limits = SendLimits()
        return adapter

    gateway = Gateway(store, conversations, [telegram], auth=Authorizer(config),
                      coalesce_ms=0)
    await gateway.initialize()
    await gateway.start()
    return gateway


async def run(chats: int, per_chat: int, paced: bool) -> dict[str, float]:
    fake = FakeTelegram()
    await fake.start()
    with tempfile.TemporaryDirectory() as tmp:
        gateway = await build(Path(tmp), fake, paced)
        latencies: list[float] = []

        async def one_chat(user: int) -> None:
            for n in range(per_chat):
                pushed = time.monotonic()
                fake.push(fake.updates.private_text(f"message {n}", user))
                sent = await fake.wait_for_messages(user, n + 1, timeout=600)
                latencies.append(sent[n].at - pushed)

        started = time.monotonic()
        await asyncio.gather(*(one_chat(7_000_000 + i) for i in range(chats)))
        elapsed = time.monotonic() - started
        await gateway.stop(drain_timeout=10)
        await gateway.shutdown()
    await fake.stop()
    latencies.sort()
    return {"messages": len(latencies), "per_s": len(latencies) / elapsed,
            "p50_ms": statistics.median(latencies) * 1000,
            "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000}


async def main(per_chat: int) -> None:
    print(f"{'mode':>8} {'chats':>6} {'msgs':>6} {'msgs/s':>8} {'p50 ms':>9} {'p99 ms':>9}")
    for paced in (False, True):
        for chats in (1, 200):
            r = await run(chats, per_chat, paced)
            print(f"{'paced' if paced else 'unpaced':>8} {chats:>6} {r['messages']:>6} "
                  f"{r['per_s']:>8.1f} {r['p50_ms']:>9.1f} {r['p99_ms']:>9.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5, help="messages per chat")
    asyncio.run(main(parser.parse_args().messages))
