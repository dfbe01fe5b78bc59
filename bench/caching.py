"""Prompt caching over a long conversation, against the fake Anthropic server's honest
cache simulation.

    python bench/caching.py [--turns N]

A scripted conversation (the real gateway, store, compressor and Anthropic SDK; a Claude
model name, so the "system_and_3" breakpoints are on) with a window small enough that it
compacts several times. Prints the share of all prompt tokens read from cache, and the
billed input cost relative to no caching, at Anthropic's ratios: cache read 0.1 x the
input price, cache write 1.25 x. Then the cost of placing the markers on one request of
2,000 messages (median of many).

Then the same in a group with room context on (docs/groups.md): three people chat between
the bot's turns, and each mention brings what they said as a room block. The block is part
of the new turn, after the last cache breakpoint, and is stored with it, so every request's
messages begin with the previous request's messages, byte for byte (cache markers aside),
except across a compaction. Prints how many consecutive requests kept that prefix.
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.caching import mark  # noqa: E402
from gateway.config import load_config  # noqa: E402
from gateway.wiring import create_gateway  # noqa: E402
from tests.harness.anthropic_cache import without_markers  # noqa: E402
from tests.harness.fake_anthropic import FakeAnthropic  # noqa: E402
from tests.harness.gateway import summarizing_responder, write_config  # noqa: E402
from tests.harness.platform import RecordingPlatform  # noqa: E402

READ, WRITE = 0.1, 1.25  # billed per input token, relative to an uncached one


def question(n: int) -> str:
    return (f"Turn {n}: here is the next part of the story, with its places and names, "
            + "and a few more details to keep in mind " * 6)


async def conversation(turns: int, window: int, *, room: bool = False) -> dict[str, float]:
    """`room`: a Telegram-style group with room context, three chatter lines a turn."""
    fake = FakeAnthropic(responder=summarizing_responder, api_key="bench-key")
    await fake.start()
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(write_config(
            Path(tmp), model={"provider": "anthropic", "name": "claude-test-model",
                              "base_url": fake.url, "api_key": "bench-key",
                              "context_length": window, "max_output_tokens": 512},
            compression={"protect_last_n": 6},
            platforms={"telegram": {"group_context": {"enabled": room}}}))
        platform = RecordingPlatform("telegram" if room else "test")
        gateway = create_gateway(config, [platform])
        await gateway.initialize()
        await gateway.start()
        said = 0
        for n in range(turns):
            for k in range(3 if room else 0):
                await platform.say(f"chatter {n}.{k} about the plan", is_group=True,
                                   addressed_to_bot=False, user_id=f"u{k}")
            await platform.say(question(n), is_group=room)
            said += 4 if room else 1
            await platform.wait_delivered(said, timeout=60)
        key = f"{platform.name}:1"
        chain = await gateway.store.chain(
            (await gateway.store.live_session(key)).id)  # type: ignore[union-attr]
        await gateway.stop(drain_timeout=10)
        await gateway.shutdown()
    await fake.stop()
    totals = fake.usage_totals()
    read, written = totals["cache_read_input_tokens"], totals["cache_creation_input_tokens"]
    prompt = totals["input_tokens"] + read + written
    billed = totals["input_tokens"] + READ * read + WRITE * written
    kept, pairs = stable_prefixes([c.json for c in fake.calls_to("/v1/messages")])
    return {"calls": len(fake.usages), "compactions": len(chain) - 1, "prompt": prompt,
            "read_share": read / prompt, "cost_ratio": billed / prompt, "kept": kept,
            "pairs": pairs}


def _text(message: dict[str, Any]) -> str:
    content = message["content"]
    return content if isinstance(content, str) else " ".join(
        str(b.get("text", "")) for b in content)


def _handoff(body: dict[str, Any]) -> str | None:
    """The summary a request carries (a compaction writes a new one), if any."""
    return next((_text(m) for m in body["messages"] if "THREADLINE HANDOFF" in _text(m)),
                None)


def stable_prefixes(bodies: list[dict[str, Any]]) -> tuple[int, int]:
    """(requests whose messages begin with the previous request's, pairs compared): chat
    requests only; a pair across a compaction (a new summary) is not compared."""
    chats = [without_markers(b) for b in bodies if "handoff checkpoint" not in str(b.get("system"))]
    kept = pairs = 0
    for before, after in zip(chats, chats[1:], strict=False):
        if _handoff(before) != _handoff(after):
            continue  # a compaction came between them
        pairs += 1
        previous = before["messages"]
        kept += (after["system"] == before["system"]
                 and after["messages"][:len(previous)] == previous)
    return kept, pairs


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
    print(f"requests that begin with the previous one: {r['kept']:.0f} of {r['pairs']:.0f}")
    g = await conversation(turns, window=10_000, room=True)
    print(f"in a group with room context: {g['calls']:.0f} provider calls, "
          f"{g['compactions']:.0f} compactions; read from cache: {g['read_share']:.1%}; "
          f"billed input cost {g['cost_ratio']:.3f} x; requests that begin with the "
          f"previous one: {g['kept']:.0f} of {g['pairs']:.0f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    asyncio.run(main(parser.parse_args().turns))
