"""Resident memory of a process and its children (the gateway and its workers), sampled."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path


def _rss_kb(pid: int) -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process (this kernel has no /proc/PID/task/*/children)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (entry / "stat").read_text()
                found[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])
    return found


def _tree(pid: int) -> list[int]:
    parents = _parents()
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += [child for child, parent in parents.items() if parent == current]
    return found


def tree_rss_mb(pid: int) -> float:
    """Resident memory of `pid` and every process under it, now, in MB."""
    return sum(_rss_kb(p) for p in _tree(pid)) / 1024


class PeakMemory:
    """Samples a process tree's resident memory every `every_s` until stopped; `peak_mb`."""

    def __init__(self, pid: int, every_s: float = 0.05) -> None:
        self.pid = pid
        self.every_s = every_s
        self.peak_mb = 0.0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> PeakMemory:
        self._task = asyncio.create_task(self._sample())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _sample(self) -> None:
        while True:
            self.peak_mb = max(self.peak_mb, tree_rss_mb(self.pid))
            await asyncio.sleep(self.every_s)
