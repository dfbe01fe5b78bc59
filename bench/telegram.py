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
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# This file is named like python-telegram-bot's package: take its folder off the path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from bench.instant import instant_gateway, summary  # noqa: E402
from gateway.service.app import Gateway  # noqa: E402
from platforms.base import SendLimits  # noqa: E402
from platforms.telegram.adapter import TelegramAdapter, TelegramSettings  # noqa: E402
from tests.harness.fake_telegram import FakeTelegram  # noqa: E402


async def build(tmp: Path, fake: FakeTelegram, paced: bool) -> Gateway:
    settings = TelegramSettings(token=fake.token, base_url=fake.base_url,
                                base_file_url=fake.base_file_url, poll_timeout_s=1.0)

    def telegram(handler: Any) -> TelegramAdapter:
        adapter = TelegramAdapter(handler, settings)
        if not paced:
            adapter.limits = SendLimits()
        return adapter

    return await instant_gateway(tmp, telegram)


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
    return summary(latencies, elapsed)


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
