"""Gateway throughput on PostgreSQL with 1, 2 and 3 processes, and on SQLite with 1.

    python bench/scale.py [--chats 300] [--turns 6]

Each process is a real gateway (router, context engine, chat leases on PostgreSQL) with an
instant provider and an in-process platform; the chats are split between the processes
(as a balancer routing by chat would), each chat sending its next message once the
previous reply was delivered. All processes start together; turns/s counts every turn
over the time from the first start to the last finish. A real PostgreSQL server is
started for the run (tests/harness/postgres.py: the OS server binaries, fsync off), each
configuration on a fresh database. Prints turns/s, p50/p99 from hand-off to delivery, the
scaling ratio against one PostgreSQL process, and the statements PostgreSQL ran per turn
(`pg_stat_statements`, BEGIN and COMMIT included, background lease work included), with
`--statements` the ones that ran most.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gateway import BenchPlatform  # noqa: E402
from bench.instant import instant_gateway  # noqa: E402
from gateway.service.app import Gateway  # noqa: E402
from gateway.service.run import tune_collector  # noqa: E402
from tests.harness.postgres import PostgresServer, run_in_fresh_loop  # noqa: E402

CONFIGS = (("sqlite", 1), ("postgresql", 1), ("postgresql", 2), ("postgresql", 3))


async def _gateway(tmp: Path, storage: str) -> tuple[Gateway, BenchPlatform]:
    gateway = await instant_gateway(tmp, BenchPlatform, storage)
    tune_collector()  # as `threadline run` does once started
    platform = gateway.adapters["bench"]
    assert isinstance(platform, BenchPlatform)
    return gateway, platform


async def _serve(storage: str, chats: list[int], turns: int, ready: Any) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        gateway, platform = await _gateway(Path(tmp), storage)
        latencies: list[float] = []

        async def one_chat(chat: int) -> None:
            for n in range(turns):
                latencies.append(await platform.turn(str(chat), n))

        await asyncio.to_thread(ready.wait)  # every process built: start together
        started = time.time()
        await asyncio.gather(*(one_chat(c) for c in chats))
        finished = time.time()
        await gateway.stop(drain_timeout=10)
        await gateway.shutdown()
    return {"latencies": latencies, "started": started, "finished": finished}


def _worker(storage: str, chats: list[int], turns: int, ready: Any, out: Any) -> None:
    out.put(asyncio.run(_serve(storage, chats, turns, ready)))


def measure(storage: str, processes: int, chats: int, turns: int) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    ready, out = ctx.Barrier(processes), ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(storage, list(range(w, chats, processes)),
                                                 turns, ready, out)) for w in range(processes)]
    for w in workers:
        w.start()
    results = [out.get(timeout=600) for _ in workers]
    for w in workers:
        w.join(timeout=60)
    latencies = sorted(x for r in results for x in r["latencies"])
    elapsed = max(r["finished"] for r in results) - min(r["started"] for r in results)
    return {"turns": len(latencies), "turns_per_s": len(latencies) / elapsed,
            "p50_ms": statistics.median(latencies) * 1000,
            "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000}


async def _fresh(server: PostgresServer) -> str:
    url = await server.fresh_database()
    con = await asyncpg.connect(url)
    try:
        await con.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        await con.execute("SELECT pg_stat_statements_reset()")
    finally:
        await con.close()
    return url


async def _statements(url: str) -> list[tuple[int, str]]:
    """(calls, query) of everything this database ran since `_fresh`, most first."""
    con = await asyncpg.connect(url)
    try:
        found = await con.fetch(
            "SELECT calls, query FROM pg_stat_statements WHERE dbid = (SELECT oid FROM"
            " pg_database WHERE datname = current_database()) ORDER BY calls DESC")
    finally:
        await con.close()
    return [(int(r["calls"]), " ".join(r["query"].split())) for r in found]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", type=int, default=300)
    parser.add_argument("--turns", type=int, default=6, help="turns per chat")
    parser.add_argument("--statements", action="store_true",
                        help="list the statements that ran most (1 process)")
    args = parser.parse_args()
    server = PostgresServer(Path(tempfile.mkdtemp(prefix="threadline-bench-pg-")),
                            shared_preload_libraries="pg_stat_statements")
    server.start()
    try:
        print(f"{args.chats} chats x {args.turns} turns, instant provider, "
              f"{mp.cpu_count()} CPUs")
        print(f"{'store':>10} {'processes':>9} {'turns':>6} {'turns/s':>9} {'p50 ms':>8} "
              f"{'p99 ms':>8} {'stmts/turn':>10}")
        results = {}
        with tempfile.TemporaryDirectory() as tmp:
            for kind, processes in CONFIGS:
                url = None if kind == "sqlite" else run_in_fresh_loop(_fresh(server))
                storage = (f"path: {Path(tmp) / f'{processes}.db'}" if url is None
                           else f"url: '{url}'")
                r = results[kind, processes] = measure(storage, processes, args.chats,
                                                       args.turns)
                ran = run_in_fresh_loop(_statements(url)) if url else []
                per_turn = f"{sum(n for n, _ in ran) / r['turns']:.2f}" if url else "-"
                print(f"{kind:>10} {processes:>9} {r['turns']:>6} {r['turns_per_s']:>9.0f} "
                      f"{r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {per_turn:>10}")
                if args.statements and url and processes == 1:
                    for n, query in ran[:30]:
                        print(f"    {n / r['turns']:6.2f}/turn  {query[:100]}")
        one = results["postgresql", 1]["turns_per_s"]
        print("scaling on PostgreSQL (turns/s against 1 process): " + ", ".join(
            f"{p} processes {results['postgresql', p]['turns_per_s'] / one:.2f}x"
            for p in (2, 3)))
        print(f"PostgreSQL, 1 process, against SQLite: "
              f"{one / results['sqlite', 1]['turns_per_s']:.2f}x")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
