"""How late the event loop wakes: the gateway's pulse (docs/operations.md, "Event loop").

Every chat is answered from one event loop, so anything that holds it (CPU work that
should have gone to a worker, blocking I/O) delays every chat at once. A task sleeps a
tenth of a second at a time and measures how much later than asked it woke; the largest
such stall of each minute is logged when it is notable, shown in metrics, `/status` (for
admins) and `threadline doctor` (through the store's settings).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

TICK_S = 0.1  # how often the loop is sampled
WINDOW_S = 60.0  # the largest stall is reported per this window
NOTABLE_S = 0.25  # a minute whose largest stall reaches this is logged (a warning past 1 s)
SETTING = "loop:lag"  # the store setting that holds the last minute's figure


@dataclass(frozen=True)
class Minute:
    """The largest stall seen in one window, and when the window ended (unix time)."""

    largest_s: float
    ended_at: float

    def as_json(self) -> str:
        return json.dumps({"largest_s": round(self.largest_s, 4), "ended_at": self.ended_at})

    @classmethod
    def from_json(cls, text: str) -> Minute | None:
        try:
            data = json.loads(text)
            return cls(float(data["largest_s"]), float(data["ended_at"]))
        except (ValueError, TypeError, KeyError):
            return None


class LoopWatch:
    """Samples the running loop; `largest_s` is the worst stall of the current window."""

    def __init__(self, *, observe: Callable[[float], None] = lambda lag: None,
                 report: Callable[[Minute], Awaitable[None]] | None = None,
                 tick_s: float = TICK_S, window_s: float = WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._observe = observe  # each sample's lag (a metrics histogram)
        # Each window's figure (the store, metrics); the gateway sets it to record_lag.
        self.report = report
        self._tick = tick_s
        self._window = window_s
        self._clock = clock
        self.largest_s = 0.0
        self.last: Minute | None = None  # the last complete window
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="loop-watch")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def worst_recent(self) -> float:
        """The worst stall of the last complete window and of the one running now."""
        return max(self.largest_s, self.last.largest_s if self.last else 0.0)

    async def _run(self) -> None:
        window_end = self._clock() + self._window
        while True:
            asked = self._clock()
            await asyncio.sleep(self._tick)
            lag = max(0.0, self._clock() - asked - self._tick)
            self._observe(lag)
            self.largest_s = max(self.largest_s, lag)
            if self._clock() >= window_end:
                window_end = self._clock() + self._window
                await self._close_window()

    async def _close_window(self) -> None:
        minute = self.last = Minute(self.largest_s, time.time())
        self.largest_s = 0.0
        if minute.largest_s >= NOTABLE_S:
            log.log(logging.WARNING if minute.largest_s >= 1.0 else logging.INFO,
                    "event loop: stalled up to %.2f s in the last minute (every chat waits "
                    "that long)", minute.largest_s)
        if self.report is not None:
            try:
                await self.report(minute)
            except Exception as exc:  # a figure for watching; never a reason to stop
                log.debug("event loop: could not record the last minute: %s", exc)
