"""Prompt caching with tools from an MCP server, against the fake Anthropic server's honest
cache simulation.

    python bench/mcp_prefix.py [--turns N]

The real gateway, store and Anthropic SDK, a Claude model name (so the cache breakpoints
are on), and the test MCP server (tests/harness/mcp_server.py) over stdio with its tools
offered in the chat. Every other turn the model calls one of its tools (a sum, a long text
the output budget saves, a picture, a failure, a structured record); halfway through the
server is killed and the run waits for the gateway to start it again. Prints how many
requests begin with the previous request byte for byte (tools, system and messages, cache
markers aside), whether the tool list was the same bytes in every request, the share of
prompt tokens read from cache and the billed input cost relative to no caching (cache
reads 0.1 x the input price, writes 1.25 x). Then what offering the tools costs per
request: the chat's registry asked for its schemas while nothing changed, and after a
server came or went (50 MCP tools).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.tools.registry import Tool, ToolRegistry  # noqa: E402
from gateway.config import load_config  # noqa: E402
from gateway.wiring import create_gateway  # noqa: E402
from tests.harness.fake_anthropic import FakeAnthropic  # noqa: E402
from tests.harness.gateway import write_config  # noqa: E402
from tests.harness.mcp import ASK, asking, kill, prefix_kept, read_pid, stdio_entry  # noqa: E402
from tests.harness.platform import RecordingPlatform  # noqa: E402

READ, WRITE = 0.1, 1.25  # billed per input token, relative to an uncached one
CALLS = [("test__add", {"a": 2, "b": 3}), ("test__long_text", {"chars": 40_000}),
         ("test__image", {}), ("test__raise", {}), ("test__weather", {"city": "Oslo"})]


def turn(n: int) -> str:
    if n % 2:
        name, arguments = CALLS[(n // 2) % len(CALLS)]
        return f"{ASK}{name} {json.dumps(arguments)}"
    return (f"Turn {n}: here is the next part of the story, with its places and names, "
            + "and a few more details to keep in mind " * 6)


async def conversation(turns: int) -> dict[str, Any]:
    fake = FakeAnthropic(responder=asking, api_key="bench-key")
    await fake.start()
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(write_config(
            Path(tmp), model={"provider": "anthropic", "name": "claude-test-model",
                              "base_url": fake.url, "api_key": "bench-key", "vision": True,
                              "context_length": 200_000, "max_output_tokens": 512},
            tools={"mcp": {"test": stdio_entry(Path(tmp) / "mcp.pid", chats=["test:*"])}}))
        platform = RecordingPlatform()
        gateway = create_gateway(config, [platform])
        await gateway.initialize()
        await gateway.start()
        connection = gateway.conversations.mcp.connections["test"]  # type: ignore[union-attr]
        try:
            for n in range(turns):
                if n == turns // 2:
                    await restart(connection, Path(tmp) / "mcp.pid")
                await platform.say(turn(n))
                await platform.wait_delivered(n + 1, timeout=60)
        finally:
            await gateway.stop(drain_timeout=10)
            await gateway.shutdown()
    await fake.stop()
    bodies = [c.json for c in fake.calls_to("/v1/messages") if c.json]
    totals = fake.usage_totals()
    read, written = totals["cache_read_input_tokens"], totals["cache_creation_input_tokens"]
    prompt = totals["input_tokens"] + read + written
    kept, pairs = prefix_kept(bodies)
    return {"requests": len(bodies), "kept": kept, "pairs": pairs,
            "tool_lists": len({json.dumps(b.get("tools")) for b in bodies}),
            "tools": len(bodies[0].get("tools") or []), "read_share": read / prompt,
            "cost_ratio": (totals["input_tokens"] + READ * read + WRITE * written) / prompt,
            "starts": connection.starts}


async def restart(connection: Any, pidfile: Path) -> None:
    """Kill the server and wait until the gateway has it up again."""
    kill(read_pid(pidfile) or 0)
    deadline = time.monotonic() + 60
    while connection.state == "up":  # noqa: ASYNC110 - the program's end, noticed
        await asyncio.sleep(0.01)
    while connection.state != "up" and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)


def offer_cost(tools: int = 50, reps: int = 20_000) -> tuple[float, float]:
    """(µs per schemas() while nothing changed, µs after the source changed)."""
    made = [Tool(f"srv__tool_{i:02d}", "a tool", lambda _: "", {
        "type": "object", "properties": {"x": {"type": "string"}}}) for i in range(tools)]
    current: list[tuple[Tool, ...]] = [tuple(made)]
    registry = ToolRegistry([], [lambda: current[0]])
    registry.schemas()
    started = time.perf_counter()
    for _ in range(reps):
        registry.schemas()
    steady = (time.perf_counter() - started) / reps * 1e6
    changes = []
    for _ in range(reps // 20):
        current[0] = tuple(made)  # a new tuple: what a server coming back gives
        started = time.perf_counter()
        registry.schemas()
        changes.append(time.perf_counter() - started)
    return steady, statistics.median(changes) * 1e6


async def main(turns: int) -> None:
    r = await conversation(turns)
    print(f"{turns} turns, {r['requests']} requests, {r['tools']} tools offered "
          f"({r['starts']} starts of the MCP server: killed halfway)")
    print(f"requests that begin with the previous one, byte for byte: {r['kept']} of "
          f"{r['pairs']}")
    print(f"distinct tool lists across all requests: {r['tool_lists']}")
    print(f"read from cache: {r['read_share']:.1%} of prompt tokens; billed input cost "
          f"{r['cost_ratio']:.3f} x the cost without caching")
    steady, changed = offer_cost()
    print(f"offering 50 MCP tools: {steady:.2f} µs per request while nothing changed, "
          f"{changed:.0f} µs once after a server came or went (median)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=60)
    asyncio.run(main(parser.parse_args().turns))
