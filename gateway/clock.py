"""The gateway's one clock: its event loop's. Every wait is an asyncio sleep or timer, every
deadline is measured in the loop's time, and the calendar (session resets, budgets' days and
months, retention) is the wall clock moved on by as much as the loop's time has been. In
production the loop's time is the monotonic clock and nothing is moved; a test runs the
gateway on a loop whose clock it moves on (tests/harness/clock.py), so "a 120 s outage"
passes at once while sockets, processes and databases stay real (docs/architecture.md,
"Time in tests")."""

from __future__ import annotations

import asyncio
import datetime as dt
import time


def monotonic() -> float:
    """The running loop's time (outside a loop: the monotonic clock)."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()


def wall() -> float:
    """Unix seconds, moved on with the loop's clock."""
    return time.time() + (monotonic() - time.monotonic())


def utc_now() -> dt.datetime:
    return dt.datetime.fromtimestamp(wall(), dt.UTC)
