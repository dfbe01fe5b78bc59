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
