"""A long conversation never holds the event loop: the SDKs' typed walk over every message
(1-2 ms each) is skipped, so a 2,000-message request costs the loop milliseconds, not
seconds, while other chats wait (agent/providers/base.py, `unchecked`)."""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

import pytest

from agent.providers.base import ProviderSettings
from agent.providers.factory import build_provider

MESSAGES = 2_000
# CPU seconds of the loop's thread (its own work and the fake server's, which runs on the
# same loop). The OpenAI SDK's typed walk cost 0.7-0.85 s for these; without it the worst
# gap is 0.02-0.06 s. With Anthropic the fake's own streaming work reached 0.65 s on a
# busy CI machine, more than the walk ever cost here (0.17-0.33 s): its bound only
# catches a stall of the size the issue reported (1-2.5 s).
STALL_S = {"openai": 0.5, "anthropic": 1.5}


def conversation() -> list[dict[str, Any]]:
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"}
             for i in range(MESSAGES)]
    return [{"role": "system", "content": "be brief"}, *turns, {"role": "user", "content": "q"}]


async def worst_stall_during(work) -> tuple[Any, float]:
    """The work's result, and the most CPU time the loop's thread spent between two ticks
    of a 10 ms timer. CPU time, not wall time: a busy machine that takes the CPU away
    from us stretches the wall-clock gaps without our code holding the loop any longer.
    The objects the suite made before are frozen out of the garbage collector meanwhile:
    late in a full run a collection that walks them all cost the loop 0.5 s of CPU,
    which is the heap's size, not this work's (it still pays for its own garbage)."""
    worst = 0.0
    done = False
    gc.collect()
    gc.freeze()

    async def tick() -> None:
        nonlocal worst
        while not done:
            asked = time.thread_time()
            await asyncio.sleep(0.01)
            worst = max(worst, time.thread_time() - asked)

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.05)
    try:
        result = await work
    finally:
        done = True
        await ticker
        gc.unfreeze()
    return result, worst


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize("streamed", [False, True])
async def test_a_long_conversation_costs_the_loop_milliseconds(kind, streamed, fake_openai,
                                                               fake_anthropic, autoclose):
    fake = fake_openai if kind == "openai" else fake_anthropic
    llm = autoclose(build_provider(ProviderSettings(
        provider=kind, model="claude-sonnet-5" if kind == "anthropic" else "gpt-4o-mini",
        base_url=fake.base_url, api_key="test-key", max_retries=0, timeout_s=30)))
    pieces: list[str] = []
    completion, worst = await worst_stall_during(llm.complete(
        conversation(), on_text=pieces.append if streamed else None))
    assert completion.message["content"] == "echo: q"
    assert worst < STALL_S[kind], f"the loop was held {worst:.2f} s"
    assert fake.calls[-1].json["messages"][-1]["content"] in ("q", [{"type": "text",
                                                                     "text": "q"}])
