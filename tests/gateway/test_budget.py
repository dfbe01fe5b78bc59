"""The sending budget: a bot-wide rate is shared fairly, first come first served, so no
chat starves while others keep sending."""

from __future__ import annotations

import asyncio
import time

from gateway.delivery.budget import SendBudget
from platforms.base import SendLimits

RATE = 100  # calls a second, bot-wide


async def test_a_bot_wide_rate_is_shared_first_come_first_served() -> None:
    budget = SendBudget(SendLimits(per_bot_per_second=RATE))
    chats, sends = 100, 4
    waits: list[float] = []

    async def chat(key: str) -> None:
        for _ in range(sends):  # each chat asks again as soon as its last send went
            asked = time.monotonic()
            await budget.wait_turn(key, group=False)
            waits.append(time.monotonic() - asked)

    started = time.monotonic()
    await asyncio.gather(*(chat(f"c{i}") for i in range(chats)))
    elapsed = time.monotonic() - started
    assert elapsed >= (chats * sends - RATE) / RATE * 0.95  # the rate held
    # Fair: a send waits for about one round of the others (chats / RATE seconds), never
    # for several rounds while luckier chats go again and again.
    assert max(waits) < 2.0 * chats / RATE, max(waits)


async def test_typing_never_takes_a_slot_a_waiting_send_needs() -> None:
    now = [0.0]
    budget = SendBudget(SendLimits(per_bot_per_second=2), clock=lambda: now[0])
    await budget.wait_turn("a", group=False)
    await budget.wait_turn("b", group=False)  # the bot's two calls this second are used
    waiting = asyncio.create_task(budget.wait_turn("c", group=False))
    await asyncio.sleep(0.05)  # "c" now sleeps until the second is over
    now[0] = 1.01  # ... which it is: a slot is free, and "c" is first in line for it
    assert not budget.typing_allowed("d", group=False)
    await waiting
    assert budget.typing_allowed("d", group=False)  # "c" went; this second has room again
