"""The clock tests drive: every async test runs on a `ClockLoop`, an event loop whose time a
test may move on. The gateway reads its loop's time for every wait and deadline and the wall
clock moved on by as much (gateway/clock.py), so `await clock.advance(120)` lets a 120 s
outage, a lease period or a day's budget pass at once, while sockets, processes and
databases stay real: only the passage of time is simulated (docs/architecture.md, "Time in
tests").

Real processes (`threadline run` in a subprocess) keep their own real clocks: time in them
passes as it does; a test moves only its own loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import pytest

# How far one step of `advance` moves the clock: timers come due one step at a time, with
# a moment of real time between steps for the sockets they use.
STEP_S = 0.5
SETTLE_S = 0.002  # real time left to the loop after each step


class ClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose time runs with the monotonic clock, `ahead` seconds in front."""

    def __init__(self) -> None:
        super().__init__()
        self.ahead = 0.0

    def time(self) -> float:
        return super().time() + self.ahead


class Clock:
    """A test's hold on its loop's clock."""

    def __init__(self, loop: ClockLoop) -> None:
        self.loop = loop

    def now(self) -> float:
        """The loop's time (what the gateway's waits and deadlines are measured in)."""
        return self.loop.time()

    def wall(self) -> float:
        """Unix seconds as the gateway sees them (gateway/clock.py's wall)."""
        return time.time() + self.loop.ahead

    async def advance(self, seconds: float, *, step: float = STEP_S) -> None:
        """Let `seconds` pass: in steps of `step`, each followed by a moment of real time,
        so what comes due in a step (a retry, a renewal, a pause ending) does its I/O
        before the next step, in order, as it would have."""
        left = seconds
        while left > 1e-9:
            moved = min(step, left)
            self.loop.ahead += moved
            left -= moved
            await asyncio.sleep(0)
            await asyncio.sleep(SETTLE_S)

    async def until(self, check: Any, *, within: float, step: float = STEP_S,
                    what: Any = None) -> float:
        """Move the clock on, step by step, until `check()` holds; how long that took in
        the loop's time. Fails once `within` seconds of it passed without."""
        began = self.now()
        while not check():
            if self.now() - began > within:
                raise AssertionError(f"not true within {within} s on the test clock: "
                                     f"{what() if what else ''}")
            await self.advance(step, step=step)
        return self.now() - began


def loop_factories() -> Mapping[str, Any]:
    return {"clock": ClockLoop}


@pytest.hookimpl
def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item
                                  ) -> Mapping[str, Any]:
    return loop_factories()


@pytest.fixture
async def clock() -> Clock:
    """The running test's clock (its event loop's)."""
    loop = asyncio.get_running_loop()
    assert isinstance(loop, ClockLoop), "async tests run on a ClockLoop (tests/harness/clock.py)"
    return Clock(loop)
