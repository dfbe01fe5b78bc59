"""Waiting in tests for what no event announces."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any


async def eventually(check: Callable[[], Any], *, timeout: float = 10.0,  # noqa: ASYNC109
                     every: float = 0.02, what: Callable[[], Any] | None = None) -> None:
    """Poll `check()` until it is true; fail after `timeout` seconds, showing `what()`.

    For conditions no event announces (a fake's log reaching some state)."""
    deadline = time.monotonic() + timeout
    while not check():  # noqa: ASYNC110 - nothing to wait on but the clock
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout}s: {what() if what else ''}")
        await asyncio.sleep(every)


async def while_moving(check: Callable[[], Any], progress: Callable[[], Any], *,
                       stall: float = 60.0, every: float = 0.1,
                       what: Callable[[], Any] | None = None) -> None:
    """Poll `check()` until true; fail only when `progress()` has not changed for `stall`
    seconds. For a backlog drained at the machine's pace: a busy machine drains it slower,
    a stuck gateway not at all (docs/architecture.md, "Under load")."""
    last, moved = progress(), time.monotonic()
    while not check():  # noqa: ASYNC110 - nothing to wait on but the clock
        now, seen = time.monotonic(), progress()
        if seen != last:
            last, moved = seen, now
        elif now - moved > stall:
            raise AssertionError(f"no progress for {stall}s: {what() if what else seen}")
        await asyncio.sleep(every)
