"""Discord end to end: message in over the gateway websocket, reply out over REST, through
discord.py and the fake Discord.

    python bench/discord.py [--messages N]

An instant provider (no model time), the real gateway, store and outbound path, and the
real discord.py client connected to the fake on 127.0.0.1. Each channel (a DM) sends its
next message once the reply to the previous one arrived; 1 and 200 channels at once. Two
runs per size: `paced` keeps Discord's global limit (50 requests a second per bot, typing
included), `unpaced` switches it off to show what our path and discord.py cost. Prints
messages/s and the p50/p99 time from MESSAGE_CREATE sent to reply accepted.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

# This file is named like discord.py's package: take its folder off the path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from bench.instant import instant_gateway, summary  # noqa: E402
from platforms.base import Handler, SendLimits  # noqa: E402
from platforms.discord.adapter import DiscordAdapter, DiscordSettings  # noqa: E402
from tests.harness.fake_discord import FakeDiscord  # noqa: E402


async def run(channels: int, per_channel: int, paced: bool) -> dict[str, float]:
    fake = FakeDiscord()
    await fake.start()
    settings = DiscordSettings(token=fake.token, api_base=fake.api_base,
                               gateway_url=fake.gateway_url, guild_ready_timeout=0.05)
    dms = [fake.dm_channel(str(800_000_000_000_000_000 + i)) for i in range(channels)]

    def discord(handler: Handler) -> DiscordAdapter:
        adapter = DiscordAdapter(handler, settings)
        if not paced:
            adapter.limits = SendLimits()
        return adapter

    with tempfile.TemporaryDirectory() as tmp:
        gateway = await instant_gateway(Path(tmp), discord)
        latencies: list[float] = []

        async def one_channel(index: int) -> None:
            dm, user = dms[index], str(800_000_000_000_000_000 + index)
            for n in range(per_channel):
                pushed = time.monotonic()
                await fake.user_message(dm, f"message {n}", author_id=user)
                sent = await fake.wait_for_messages(dm, n + 1, timeout=600)
                latencies.append(sent[n].at - pushed)

        started = time.monotonic()
        await asyncio.gather(*(one_channel(i) for i in range(channels)))
        elapsed = time.monotonic() - started
        await gateway.stop(drain_timeout=10)
        await gateway.shutdown()
    await fake.stop()
    return summary(latencies, elapsed)


async def main(per_channel: int) -> None:
    print(f"{'mode':>8} {'channels':>8} {'msgs':>6} {'msgs/s':>8} {'p50 ms':>9} "
          f"{'p99 ms':>9}")
    for paced in (False, True):
        for channels in (1, 200):
            r = await run(channels, per_channel, paced)
            print(f"{'paced' if paced else 'unpaced':>8} {channels:>8} {r['messages']:>6} "
                  f"{r['per_s']:>8.1f} {r['p50_ms']:>9.1f} {r['p99_ms']:>9.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5, help="messages per channel")
    asyncio.run(main(parser.parse_args().messages))
