"""SQLite store benchmark: tip resolution, history load, append throughput (a real file, WAL).

    python bench/store.py

Prints the median `get_compression_tip` time at chain depth 1, 10 and 100, resolving a
chat to its live session (from memory, and from the file), whether the tip walk's plan
uses the parent-link index, the median time to load a 10,000-message history, and append
and turn throughput: one call at a time, and 100 chats at once (group commit).
"""

from __future__ import annotations

import asyncio
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from storage.models import Compaction, NewMessage, TurnRecord, UsageRecord  # noqa: E402
from storage.sqlite import SqliteSessionStore, queries  # noqa: E402

CHAIN_DEPTH = 100
HISTORY = 10_000
LIVE_TARGET_US = 20  # issue 17: resolving a known chat
PARENT_INDEX = "sessions_one_continuation"  # the partial unique index on parent_session_id


def message(i: int) -> NewMessage:
    """A realistic mix: plain text, block content, tool calls and tool results."""
    body = f"message {i}: " + "lorem ipsum dolor sit amet " * 8
    kind = i % 4
    if kind == 0:
        data: dict[str, Any] = {"role": "user", "content": body}
    elif kind == 1:
        data = {"role": "user", "content": [{"type": "text", "text": body}]}
    elif kind == 2:
        data = {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": "read", "arguments": "{\"path\": \"x\"}"}}]}
    else:
        data = {"role": "tool", "tool_call_id": f"c{i - 1}", "content": body}
    return NewMessage(data, tokens=60)


async def median_ms(call: Callable[[], Awaitable[Any]], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        await call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


async def bench_tip(store: SqliteSessionStore) -> list[tuple[str, str]]:
    session = await store.create_root_session("bench:chain", model="m", system_prompt="s")
    ids = [session.id]
    for i in range(CHAIN_DEPTH):
        turn = TurnRecord(before=(message(0), message(3)),
                          compaction=Compaction(messages=(message(i),)),
                          usage=(UsageRecord("m", "summary", input_tokens=100, output_tokens=10),))
        ids.append((await store.record_turn(ids[-1], turn)).id)
    rows = []
    for depth in (1, 10, 100):
        start = ids[CHAIN_DEPTH - depth]
        assert await store.get_compression_tip(start) == ids[-1]
        ms = await median_ms(lambda s=start: store.get_compression_tip(s), 300)
        rows.append((f"get_compression_tip, depth {depth}", f"{ms:.3f} ms (median)"))
    known = await median_ms(lambda: store.live_session("bench:chain"), 2000) * 1000
    rows.append(("live_session, chat known here (memory)", f"{known:.2f} µs (median)"))
    async with SqliteSessionStore(store.path, max_live_chats=0) as other:  # never remembers
        read = await median_ms(lambda: other.live_session("bench:chain"), 300) * 1000
    rows.append(("live_session, chat not known (one read)", f"{read:.1f} µs (median)"))
    rows.append(("  target: known chat <= 20 µs", f"{LIVE_TARGET_US / known:.0f}x within"))
    with sqlite3.connect(store.path) as db:
        plan = " ".join(str(row[-1]) for row in db.execute(
            "EXPLAIN QUERY PLAN " + queries.TIP, queries.chain_params(ids[0])))
    rows.append(("tip walk uses the parent-link index", "yes" if PARENT_INDEX in plan else
                 f"NO: {plan}"))
    ms = await median_ms(lambda: store.usage_totals(ids[-1]), 100)
    rows.append((f"usage_totals over {CHAIN_DEPTH + 1} sessions", f"{ms:.3f} ms (median)"))
    return rows


async def bench_appends(store: SqliteSessionStore) -> list[tuple[str, str]]:
    session = await store.create_root_session("bench:append", model="m", system_prompt="s")
    single = 2_000
    started = time.perf_counter()
    for i in range(single):
        await store.append_messages(session.id, [message(i)])
    single_rate = single / (time.perf_counter() - started)

    batched = await store.create_root_session("bench:history", model="m", system_prompt="s")
    started = time.perf_counter()
    for first in range(0, HISTORY, 500):
        await store.append_messages(batched.id, [message(i) for i in range(first, first + 500)])
    batch_rate = HISTORY / (time.perf_counter() - started)

    turns = 1_000
    started = time.perf_counter()
    for i in range(turns):
        await store.record_turn(session.id, TurnRecord(
            before=(message(i * 4), message(i * 4 + 2), message(i * 4 + 3)),
            usage=(UsageRecord("m", "chat", input_tokens=1000, output_tokens=50),), last_prompt_tokens=1000))
    turn_rate = turns / (time.perf_counter() - started)

    together = await group_commit(store)
    history_ms = await median_ms(lambda: store.load_history(batched.id), 7)
    return [
        ("append, 1 message per call", f"{single_rate:,.0f} msg/s"),
        ("append, 500 messages per call", f"{batch_rate:,.0f} msg/s"),
        ("record_turn (3 messages + usage)", f"{turn_rate:,.0f} turns/s"),
        ("record_turn, 100 chats at once (group commit)", together),
        (f"load_history, {HISTORY:,} messages", f"{history_ms:.1f} ms (median)"),
    ]


async def group_commit(store: SqliteSessionStore) -> str:
    """100 chats each record a turn at the same moment, 20 times over: turns/s, and how
    many writes each COMMIT carried."""
    sessions = [await store.create_root_session(f"bench:group:{n}", model="m",
                                                system_prompt="s") for n in range(100)]
    commits, writes = store.stats.commits, store.stats.committed_writes
    started = time.perf_counter()
    for i in range(20):
        await asyncio.gather(*(store.record_turn(s.id, TurnRecord(
            before=(message(i * 4), message(i * 4 + 2)),
            usage=(UsageRecord("m", "chat", input_tokens=1000, output_tokens=50),)))
            for s in sessions))
    rate = 2000 / (time.perf_counter() - started)
    per_commit = (store.stats.committed_writes - writes) / (store.stats.commits - commits)
    return f"{rate:,.0f} turns/s, {per_commit:.0f} writes per commit"


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with SqliteSessionStore(Path(tmp) / "bench.db") as store:
            started = time.perf_counter()
            rows = await bench_tip(store) + await bench_appends(store)
            total = time.perf_counter() - started
    width = max(len(name) for name, _ in rows)
    print(f"{'store benchmark (SQLite, WAL, synchronous=NORMAL)':<{width}}  result")
    print("-" * (width + 24))
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    print(f"{'(total wall time)':<{width}}  {total:.1f} s")


if __name__ == "__main__":
    asyncio.run(main())
