"""Memory that chats which spoke once leave behind in the gateway process.

    python bench/memory.py [--chats N] [--concurrency C] [--trace]

The gateway of bench/gateway.py (instant provider, bench adapter, real router, context
engine and SQLite store in a scratch directory) is warmed up with WARMUP_CHATS chats, and
RSS read after a garbage collection; then N distinct chats (default 10,000) each send one
message and wait for its reply, C at a time, and once the gateway is idle (no queued or
running work, workers gone) RSS is read again. Prints the growth, per chat and against
TARGET_MB per TARGET_CHATS chats, the gateway's containers that grew, and the project's
classes with more live instances. `--trace` also runs tracemalloc from the baseline on
(slower; its bookkeeping inflates RSS) and prints the top 10 file:line sites still alive.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import os
import resource
import sys
import sysconfig
import tempfile
import time
import tracemalloc
from collections import Counter, deque
from pathlib import Path
from typing import Any

# Run as a script, this folder comes first on sys.path, and bench/gateway.py would
# shadow the gateway package: take the folder off and put the project root first.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from bench.gateway import BenchPlatform, build  # noqa: E402
from gateway.service.app import Gateway  # noqa: E402

TARGET_MB = 50.0  # what TARGET_CHATS chats that spoke once may leave behind, at most
TARGET_CHATS = 10_000
WARMUP_CHATS = 50
TURN_TIMEOUT_S = 60.0
IDLE_TIMEOUT_S = 60.0
PROJECT_PACKAGES = ("agent", "gateway", "platforms", "storage")
MB = 1024 * 1024
WATCHED = (  # per-chat containers always shown; any other container that changed shows too
    "gateway.router._chats",
    "gateway.conversations._agents",
    "gateway.store._live._by_chat",
    "gateway.outbound.budgets['bench']._next",
    "gateway.intake.gates.auth._refused_at",
    "gateway.adapters['bench'].waiters",
)


def peak_rss_bytes() -> int:
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, else KiB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def rss_bytes() -> int:
    """The resident size now (Linux); elsewhere the peak, which is all `resource` tells."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return peak_rss_bytes()


def trimmed_rss_bytes() -> int | None:
    """RSS after glibc hands its free heap pages back (None without glibc): what is left
    is memory still in use or fragmented, not merely kept by the allocator."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        return None
    return rss_bytes()


def project_objects() -> Counter[str]:
    """Live (gc-tracked) instances of the project's own classes, by qualified name."""
    counts: Counter[str] = Counter()
    for obj in gc.get_objects():
        if _ours(obj, PROJECT_PACKAGES):
            counts[f"{type(obj).__module__}.{type(obj).__qualname__}"] += 1
    return counts


def containers(obj: Any, path: str, depth: int = 4, seen: set[int] | None = None
               ) -> dict[str, int]:
    """len() of each dict, list, set, deque or sized project object in `obj`'s attributes
    and, `depth` levels down, in the project objects it holds (also in small dicts, such
    as the adapters or send budgets): found by walking, a renamed or new cache shows too."""
    seen = set() if seen is None else seen
    found: dict[str, int] = {}
    if id(obj) in seen or depth <= 0 or not hasattr(obj, "__dict__"):
        return found
    seen.add(id(obj))
    for attr, value in vars(obj).items():
        where = f"{path}.{attr}"
        if _ours(value):
            if hasattr(type(value), "__len__"):
                found[where] = len(value)
            found.update(containers(value, where, depth - 1, seen))
        elif isinstance(value, (dict, list, set, deque)):
            found[where] = len(value)
            if isinstance(value, dict) and len(value) <= 16:
                for key, item in value.items():
                    if _ours(item):
                        found.update(containers(item, f"{where}[{key!r}]", depth - 1, seen))
    return found


def _ours(value: Any, packages: tuple[str, ...] = (*PROJECT_PACKAGES, "bench")) -> bool:
    """An instance of a class defined in these packages (a metaclass may turn a class's
    __module__ into a descriptor: such classes are not ours)."""
    module = type(value).__dict__.get("__module__", type(value).__module__)
    return isinstance(module, str) and module.split(".")[0] in packages


async def drive(platform: BenchPlatform, keys: list[str], concurrency: int) -> None:
    """Each chat sends one message and waits for its reply, `concurrency` at a time."""
    todo = iter(keys)

    async def lane() -> None:
        for key in todo:  # shared by all lanes: each key is taken once
            await asyncio.wait_for(platform.turn(key, 0), TURN_TIMEOUT_S)

    async with asyncio.TaskGroup() as lanes:
        for _ in range(concurrency):
            lanes.create_task(lane())


async def wait_idle(gateway: Gateway, tasks_before: int) -> float:
    """Seconds until no chat has work and every worker task is gone (RuntimeError if never)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while loop.time() - started < IDLE_TIMEOUT_S:
        busy, running = gateway.router.activity()
        if not busy and not running and len(asyncio.all_tasks()) <= tasks_before:
            return loop.time() - started
        await asyncio.sleep(0.05)
    raise RuntimeError(f"the gateway was not idle after {IDLE_TIMEOUT_S:.0f} s: "
                       f"{gateway.router.activity()}, {len(asyncio.all_tasks())} tasks")


def collect() -> None:
    for _ in range(3):  # cycles freed by one pass may free more in the next
        gc.collect()


async def run(chats: int, concurrency: int, trace: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="membench-") as tmp:
        gateway, platform = await build(Path(tmp))
        tasks_before = len(asyncio.all_tasks())
        await drive(platform, [f"warm-{i}" for i in range(WARMUP_CHATS)], concurrency)
        await wait_idle(gateway, tasks_before)
        if trace:
            tracemalloc.start(1)
        collect()
        objects_before = project_objects()
        held_before = containers(gateway, "gateway")
        rss_before = rss_bytes()

        started = time.perf_counter()
        await drive(platform, [f"chat-{i}" for i in range(chats)], concurrency)
        elapsed = time.perf_counter() - started
        idle_s = await wait_idle(gateway, tasks_before)
        collect()
        rss_after = rss_bytes()
        snapshot = tracemalloc.take_snapshot() if trace else None
        traced = tracemalloc.get_traced_memory()[0] if trace else 0
        bookkeeping = tracemalloc.get_tracemalloc_memory()
        tracemalloc.stop()
        objects_grown = project_objects() - objects_before
        held, tasks_alive = containers(gateway, "gateway"), len(asyncio.all_tasks())
        agent_limit = getattr(gateway.conversations, "_max_agents", "?")
        rss_trimmed = trimmed_rss_bytes()

        await gateway.stop(drain_timeout=10)
        await gateway.shutdown()

    growth = rss_after - rss_before
    target = TARGET_MB * MB * chats / TARGET_CHATS
    print(f"chats:                {chats:,} (one message each, {concurrency} at a time, "
          f"{elapsed:.1f} s, {chats / elapsed:,.0f}/s; idle {idle_s:.2f} s later)")
    print(f"RSS at start:         {rss_before / MB:8.1f} MB  (after {WARMUP_CHATS} warm-up chats)")
    peak = max(peak_rss_bytes(), rss_after)  # the kernel's high-water mark may lag a little
    print(f"RSS after:            {rss_after / MB:8.1f} MB  (peak {peak / MB:.1f} MB)")
    print(f"growth:               {growth / MB:8.1f} MB")
    print(f"growth per chat:      {growth / chats / 1024:8.2f} KB")
    if rss_trimmed is not None:
        print(f"after malloc_trim(0): {rss_trimmed / MB:8.1f} MB  (growth "
              f"{(rss_trimmed - rss_before) / MB:.1f} MB once glibc returns its free pages)")
    print(f"target:               {TARGET_MB:g} MB per {TARGET_CHATS:,} chats"
          + (f" ({target / MB:.1f} MB for {chats:,})" if chats != TARGET_CHATS else "")
          + f"; growth / target = {growth / target:.2f}")
    if trace:
        print(f"(tracemalloc was on: {bookkeeping / MB:.1f} MB of its own bookkeeping is part "
              "of the RSS growth; run without --trace for the figure to hold to the target)")

    print(f"\ncontainers in the gateway, before -> after (the watched ones, and any that "
          f"changed; agent cache limit {agent_limit}, {tasks_alive} asyncio task(s) alive):")
    for path in (*WATCHED, *(p for p in held if p not in WATCHED)):
        before, after = held_before.get(path, "-"), held.get(path, "not found (renamed?)")
        if path in WATCHED or before != after:
            print(f"  {path:<52} {before:>7} -> {after}")

    print("\nproject objects alive now that were not before (top 10 by count):")
    for name, count in objects_grown.most_common(10) or [("(none)", 0)]:
        print(f"  {count:>8,}  {name}")

    if snapshot is not None:
        snapshot = snapshot.filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        print(f"\nallocated since the baseline and still alive: {traced / MB:.1f} MB "
              f"({traced / chats:,.0f} B per chat); top 10 sites:")
        for stat in snapshot.statistics("lineno")[:10]:
            frame = stat.traceback[0]
            print(f"  {stat.size / 1024:9.1f} KiB {stat.count:>8,} blocks  "
                  f"{_short(frame.filename)}:{frame.lineno}")


def _short(filename: str) -> str:
    """A path relative to the project root, site-packages or the standard library."""
    stdlib = sysconfig.get_paths()["stdlib"]
    for base in (str(_HERE.parent) + os.sep, "site-packages" + os.sep, stdlib + os.sep):
        at = filename.find(base)
        if at >= 0:
            return filename[at + len(base):]
    return filename


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", type=int, default=TARGET_CHATS,
                        help="distinct chats that each send one message (default 10000)")
    parser.add_argument("--concurrency", type=int, default=200,
                        help="chats waiting for their reply at once (default 200)")
    parser.add_argument("--trace", action="store_true", help="also run tracemalloc")
    args = parser.parse_args()
    if min(args.chats, args.concurrency) < 1:
        parser.error("--chats and --concurrency must be at least 1")
    asyncio.run(run(args.chats, args.concurrency, args.trace))


if __name__ == "__main__":
    main()
