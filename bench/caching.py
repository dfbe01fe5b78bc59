"""Prompt caching over a long conversation, against the fake Anthropic server's honest
cache simulation.

    python bench/caching.py [--turns N]

A scripted conversation (the real gateway, store, compressor and Anthropic SDK; a Claude
model name, so the "system_and_3" breakpoints are on) with a window small enough that it
compacts several times. Prints the share of all prompt tokens read from cache, and the
billed input cost relative to no caching, at Anthropic's ratios: cache read 0.1 x the
input price, cache write 1.25 x. Then the cost of placing the markers on one request of
2,000 messages (median of many).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.caching import mark  # noqa: E402
from gateway.config import load_config  # noqa: E402
from gateway.wiring import create_gateway  # noqa: E402
from tests.harness.fake_anthropic import FakeAnthropic  # noqa: E402
from tests.harness.gateway import summarizing_responder, write_config  # noqa: E402
from tests.harness.platform import RecordingPlatform  # noqa: E402

READ, WRITE = 0.1, 1.25  # billed per input token, relative to an uncached one


def question(n: int) -> str:
    return (f"Turn {n}: here is the next part of the story, with its places and names, "
            + "and a few more details to keep in mind " * 6)


async def conversation(turns: int, window: int) -> dict[str, float]:
    fake = FakeAnthropic(responder=summarizing_responder, api_key="bench-key")
    await fake.start()
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(write_config(
            Path(tmp), model={"provider": "anthropic", "name": "claude-test-model",
                              "base_url": fake.url, "api_key": "bench-key",
                              "context_length": window, "max_output_tokens": 512},
            compression={"protect_last_n": 6}))
        platform = RecordingPlatform()
        gateway = create_gateway(config, [platform])
        await gateway.initialize()
        await gateway.start()
        for n in range(turns):
            await platform.say(question(n))
            await platform.wait_delivered(n + 1, timeout=60)
        chain = await gateway.store.chain(
            (await gateway.store.live_session("test:1")).id)  # type: ignore[union-attr]
        await gateway.stop(drain_timeout=10)
        await gateway.shutdown()
    await fake.stop()
    totals = fake.usage_totals()
    read, written = totals["cache_read_input_tokens"], totals["cache_creation_input_tokens"]
    prompt = totals["input_tokens"] + read + written
    billed = totals["input_tokens"] + READ * read + WRITE * written
    return {"calls": len(fake.usages), "compactions": len(chain) - 1, "prompt": prompt,
            "read_share": read / prompt, "cost_ratio": billed / prompt}


def marking_cost(messages: int, reps: int = 2000) -> float:
    history = [{"role": "system", "content": "You are helpful."}]
    for i in range(messages // 2):
        history += [{"role": "user", "content": f"question {i}"},
                    {"role": "assistant", "content": f"answer {i}"}]
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        mark(history, "5m")
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


async def main(turns: int) -> None:
    r = await conversation(turns, window=10_000)
    print(f"{turns} turns, {r['calls']:.0f} provider calls, {r['compactions']:.0f} compactions, "
          f"{r['prompt']:,.0f} prompt tokens")
    print(f"read from cache: {r['read_share']:.1%} of prompt tokens")
    print(f"billed input cost: {r['cost_ratio']:.3f} x the cost without caching")
    print(f"placing the markers on 2,000 messages: {marking_cost(2000):.4f} ms per request "
          "(median)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    asyncio.run(main(parser.parse_args().turns))
