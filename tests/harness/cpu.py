"""CPU seconds a piece of work costs the calling thread, for bounds on hostile input.

The thread's CPU time, not the wall clock: a busy machine stretches the wall clock without
our code doing more. The garbage collector waits meanwhile: late in a full run one
collection walks the whole suite's heap (0.7-0.9 s at four million objects), which is the
heap's cost, not the work's."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def cpu_seconds(work: Callable[[], T]) -> tuple[T, float]:
    """The work's result and the CPU seconds it took, with the collector held off."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        started = time.thread_time()
        result = work()
        return result, time.thread_time() - started
    finally:
        if was_on:
            gc.enable()
