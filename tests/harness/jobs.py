"""Jobs for worker-pool tests: each runs inside a worker process (gateway/offload.py)."""

from __future__ import annotations

import os
import signal
import time


def add(a: int, b: int) -> int:
    return a + b


def pid() -> int:
    return os.getpid()


def nap_pid(seconds: float) -> int:
    """The worker's pid, after a pause (so two calls at once land on two workers)."""
    time.sleep(seconds)
    return os.getpid()


def spin() -> None:
    """CPU work that never ends (the shape of a runaway regex or PDF parser)."""
    while True:
        pass


def fail(message: str) -> None:
    raise ValueError(message)


def hog(megabytes: int) -> int:
    return len(bytearray(megabytes * 1024 * 1024))


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


class _Unpicklable(Exception):
    def __reduce__(self):  # type: ignore[override]
        raise TypeError("not picklable")


def fail_oddly() -> None:
    raise _Unpicklable("odd")


def render_slowly(text: str) -> list:
    """A formatter that never finishes (a converter caught in exponential backtracking)."""
    spin()
    return []
