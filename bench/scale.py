"""Gateway throughput on PostgreSQL with 1, 2 and 3 processes, and on SQLite with 1.

    python bench/scale.py [--chats 300] [--turns 6] [--route round-robin|by-chat]

Each process is a real gateway (router, context engine, chat leases on PostgreSQL) with an
instant provider and an in-process platform. This process drives every chat, each sending
its next message once the previous reply was delivered, and hands each message to one of
the gateway processes: with `--route round-robin` (the default, as a balancer in front of
Telegram webhooks would) message n of chat c goes to process (c + n) % processes, which
stores it and either holds the chat's lease or leaves the message to the holder (woken by
a PostgreSQL NOTIFY); with `--route by-chat` every message of chat c goes to process
c % processes (as a balancer routing by chat would). A process's messages come through an
inbox queue; whichever process delivers a reply reports it (message id, time) to one
outbox queue. All processes start together; turns/s counts every turn over the time from
the first start to the last delivery. A real PostgreSQL server is started for the run
(tests/harness/postgres.py: the OS server binaries, fsync off), each configuration on a
fresh database. Prints turns/s, p50/p99 from hand-off (the receiving process calling its
handler) to delivery (at the holder; both read time.time() on this machine), the scaling
ratio against one PostgreSQL process, and the statements PostgreSQL ran per turn
(`pg_stat_statements`, BEGIN and COMMIT included, background lease work included), with
`--statements` the ones that ran most.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import multiprocessing as mp
import queue
import statistics
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gateway import BenchPlatform  # noqa: E402
from bench.instant import instant_gateway  # noqa: E402
from gateway.service.run import tune_collector  # noqa: E402
from platforms.base import ChatRef, Handler, InboundMessage  # noqa: E402
from tests.harness.postgres import PostgresServer, run_in_fresh_loop  # noqa: E402

CONFIGS = (("sqlite", 1), ("postgresql", 1), ("postgresql", 2), ("postgresql", 3))
ROUTES = ("round-robin", "by-chat")
STARTUP_TIMEOUT_S = 300.0  # every gateway process built and at the barrier
STALL_S = 120.0  # no reply delivered for this long: say which messages wait, and stop
RESULTS_TIMEOUT_S = 120.0  # each process's stop and report, once every reply came


def target(route: str, chat: int, n: int, processes: int) -> int:
    """The process message n of chat `chat` is handed to."""
    return (chat + n) % processes if route == "round-robin" else chat % processes


class RelayPlatform(BenchPlatform):
    """Hands a message to the handler without waiting for its reply (which may be sent by
    another process, the chat's holder), and reports every message id this process
    delivers to the driver's outbox: ("delivered", message id, time.time(), process)."""

    index = 0  # this process's number and the outbox; set in each process before it builds
    outbox: Any = None

    def __init__(self, handler: Handler) -> None:
        super().__init__(handler)
        self.handed: dict[str, float] = {}  # message id -> time.time() it went to the handler
        self._tasks: set[asyncio.Task[bool | None]] = set()

    async def delivered(self, chat: ChatRef, message_ids: tuple[str, ...]) -> None:
        now = time.time()
        for mid in message_ids:
            self.outbox.put(("delivered", mid, now, self.index))

    def hand_off(self, items: list[tuple[int, int]]) -> None:
        """Message n of each (chat, n) to the handler, each on a task of its own."""
        for chat, n in items:
            chat_id, mid = str(chat), f"{chat}-{n}"
            self.handed[mid] = time.time()
            task = asyncio.create_task(self.handler(InboundMessage(
                platform="bench", chat_id=chat_id, user_id="u", message_id=mid,
                text=f"message {n} from {chat_id}")))
            self._tasks.add(task)
            task.add_done_callback(functools.partial(self._handled, mid))

    def _handled(self, mid: str, task: asyncio.Task[bool | None]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            self.outbox.put(("failed", mid, "the handler was cancelled", self.index))
        elif task.exception() is not None:
            self.outbox.put(("failed", mid, f"the handler raised {task.exception()!r}",
                             self.index))
        elif task.result() is False:
            self.outbox.put(("failed", mid, "the handler could not store it", self.index))

    async def settle(self) -> None:
        """Until every handler call returned."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))


async def _serve(storage: str, index: int, inbox: Any, outbox: Any,
                 ready: Any) -> dict[str, Any]:
    RelayPlatform.index, RelayPlatform.outbox = index, outbox
    with tempfile.TemporaryDirectory() as tmp:
        gateway = await instant_gateway(Path(tmp), RelayPlatform, storage)
        tune_collector()  # as `threadline run` does once started
        platform = gateway.adapters["bench"]
        assert isinstance(platform, RelayPlatform)
        loop = asyncio.get_running_loop()
        stopped = asyncio.Event()

        def read() -> None:
            """The inbox onto the loop, in batches of what has arrived; None ends it."""
            while True:
                items = [inbox.get()]
                with contextlib.suppress(queue.Empty):
                    while len(items) < 256 and items[-1] is not None:
                        items.append(inbox.get_nowait())
                if items[-1] is None:
                    loop.call_soon_threadsafe(platform.hand_off, items[:-1])
                    loop.call_soon_threadsafe(stopped.set)
                    return
                loop.call_soon_threadsafe(platform.hand_off, items)

        await asyncio.to_thread(ready.wait)  # every process built: start together
        started = time.time()
        threading.Thread(target=read, name="inbox", daemon=True).start()
        await stopped.wait()
        await platform.settle()
        await gateway.stop(drain_timeout=10)
        await gateway.shutdown()
    return {"handed": platform.handed, "started": started}


def _worker(storage: str, index: int, inbox: Any, outbox: Any, ready: Any) -> None:
    try:
        result = asyncio.run(_serve(storage, index, inbox, outbox, ready))
    except BaseException:
        outbox.put(("crashed", index, traceback.format_exc()))
        raise
    outbox.put(("result", index, result))


class Driver:
    """Sends each chat's messages one after another to the processes `route` picks, the
    next once the previous one's reply was delivered (by whichever process)."""

    def __init__(self, route: str, processes: int, chats: int, turns: int,
                 inboxes: list[Any]) -> None:
        self.route, self.processes, self.chats, self.turns = route, processes, chats, turns
        self.inboxes = inboxes
        self.sent_to: dict[str, int] = {}  # message id -> the process it was handed to
        self.delivered: dict[str, tuple[float, int]] = {}  # message id -> (when, by whom)
        self.current = [0] * chats  # each chat's message waiting for its reply
        self.notes: list[str] = []  # anything odd: failures, replies twice or unasked
        self.results: dict[int, dict[str, Any]] = {}

    def start(self) -> None:
        for chat in range(self.chats):
            self._send(chat, 0)

    def _send(self, chat: int, n: int) -> None:
        p = target(self.route, chat, n, self.processes)
        self.sent_to[f"{chat}-{n}"] = p
        self.current[chat] = n
        self.inboxes[p].put((chat, n))

    def take(self, event: tuple[Any, ...]) -> bool:
        """One outbox event; True when it was a first delivery (progress)."""
        kind = event[0]
        if kind == "delivered":
            _, mid, at, by = event
            if mid not in self.sent_to or mid in self.delivered:
                how = "again" if mid in self.delivered else "though never sent"
                self.notes.append(f"{mid} delivered {how} by process {by} (sent to "
                                  f"process {self.sent_to.get(mid)})")
                return False
            self.delivered[mid] = (at, by)
            chat, n = (int(part) for part in mid.split("-"))
            if n + 1 < self.turns:
                self._send(chat, n + 1)
            return True
        if kind == "failed":
            _, mid, why, by = event
            self.notes.append(f"{mid} at process {by}: {why}")
        elif kind == "crashed":
            raise SystemExit(f"gateway process {event[1]} failed:\n{event[2]}")
        elif kind == "result":
            self.results[event[1]] = event[2]
        return False

    def waiting(self) -> str:
        """The messages still waiting for their reply, where they went, who held the chat."""
        total = self.chats * self.turns
        lines = [f"{len(self.delivered)} of {total} replies delivered; waiting:"]
        for chat, n in enumerate(self.current):
            mid = f"{chat}-{n}"
            if mid in self.delivered:
                continue
            before = self.delivered.get(f"{chat}-{n - 1}")
            lines.append(f"  {mid} handed to process {self.sent_to[mid]}" + (
                f", {mid.split('-')[0]}-{n - 1} answered by process {before[1]}"
                if before else ""))
        return "\n".join(lines[:41] + ([f"  ... {len(lines) - 41} more"]
                                       if len(lines) > 41 else []))


def measure(storage: str, processes: int, chats: int, turns: int,
            route: str) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    ready, outbox = ctx.Barrier(processes + 1), ctx.Queue()
    inboxes = [ctx.Queue() for _ in range(processes)]
    workers = [ctx.Process(target=_worker, args=(storage, w, inboxes[w], outbox, ready),
                           name=f"gateway-{w}") for w in range(processes)]
    for w in workers:
        w.start()
    driver = Driver(route, processes, chats, turns, inboxes)
    try:
        try:
            ready.wait(timeout=STARTUP_TIMEOUT_S)
        except threading.BrokenBarrierError:
            with contextlib.suppress(queue.Empty):  # a crash report explains it
                while True:
                    driver.take(outbox.get(timeout=10))
            raise SystemExit(f"the gateway processes did not all start within "
                             f"{STARTUP_TIMEOUT_S:.0f} s") from None
        driver.start()
        quiet_since = time.monotonic()
        while len(driver.delivered) < chats * turns:
            try:
                if driver.take(outbox.get(timeout=1.0)):
                    quiet_since = time.monotonic()
                continue
            except queue.Empty:
                pass
            dead = [w.name for w in workers if not w.is_alive()]
            if dead or time.monotonic() - quiet_since > STALL_S:
                with contextlib.suppress(queue.Empty):  # a crash report, if one came
                    while True:
                        driver.take(outbox.get(timeout=1.0))
                why = (f"{', '.join(dead)} ended" if dead
                       else f"no reply delivered for {STALL_S:.0f} s")
                raise SystemExit(f"{route}, {processes} processes: {why}; "
                                 f"{driver.waiting()}\nnotes: {driver.notes}")
        for inbox in inboxes:
            inbox.put(None)
        deadline = time.monotonic() + RESULTS_TIMEOUT_S
        while len(driver.results) < processes:
            driver.take(outbox.get(timeout=max(0.1, deadline - time.monotonic())))
        for w in workers:
            w.join(timeout=60)
    finally:
        for w in workers:
            if w.is_alive():
                w.terminate()
                w.join(timeout=10)
    handed = {mid: t for r in driver.results.values() for mid, t in r["handed"].items()}
    latencies = sorted(at - handed[mid] for mid, (at, _) in driver.delivered.items())
    elapsed = (max(at for at, _ in driver.delivered.values())
               - min(r["started"] for r in driver.results.values()))
    moved = sum(by != driver.sent_to[mid] for mid, (_, by) in driver.delivered.items())
    return {"turns": len(latencies), "turns_per_s": len(latencies) / elapsed,
            "p50_ms": statistics.median(latencies) * 1000,
            "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
            "moved": moved / len(latencies), "notes": driver.notes}


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
    parser.add_argument("--route", choices=ROUTES, default="round-robin",
                        help="which process gets a chat's message n: (chat + n) %% processes"
                             " (round-robin, default) or chat %% processes (by-chat)")
    parser.add_argument("--statements", action="store_true",
                        help="list the statements that ran most (1 process)")
    args = parser.parse_args()
    server = PostgresServer(Path(tempfile.mkdtemp(prefix="threadline-bench-pg-")),
                            shared_preload_libraries="pg_stat_statements")
    server.start()
    try:
        print(f"{args.chats} chats x {args.turns} turns, routed {args.route}, "
              f"instant provider, {mp.cpu_count()} CPUs")
        print(f"{'store':>10} {'processes':>9} {'turns':>6} {'turns/s':>9} {'p50 ms':>8} "
              f"{'p99 ms':>8} {'stmts/turn':>10}")
        results = {}
        with tempfile.TemporaryDirectory() as tmp:
            for kind, processes in CONFIGS:
                url = None if kind == "sqlite" else run_in_fresh_loop(_fresh(server))
                storage = (f"path: {Path(tmp) / f'{processes}.db'}" if url is None
                           else f"url: '{url}'")
                r = results[kind, processes] = measure(storage, processes, args.chats,
                                                       args.turns, args.route)
                ran = run_in_fresh_loop(_statements(url)) if url else []
                per_turn = f"{sum(n for n, _ in ran) / r['turns']:.2f}" if url else "-"
                print(f"{kind:>10} {processes:>9} {r['turns']:>6} {r['turns_per_s']:>9.0f} "
                      f"{r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {per_turn:>10}")
                if args.statements and url:
                    for n, query in ran[:30]:
                        print(f"    {n / r['turns']:6.2f}/turn  {query[:100]}")
        one = results["postgresql", 1]["turns_per_s"]
        print("scaling on PostgreSQL (turns/s against 1 process): " + ", ".join(
            f"{p} processes {results['postgresql', p]['turns_per_s'] / one:.2f}x"
            for p in (2, 3)))
        print(f"PostgreSQL, 1 process, against SQLite: "
              f"{one / results['sqlite', 1]['turns_per_s']:.2f}x")
        print("replies delivered by a process other than the one the message was handed to: "
              + ", ".join(f"{p} processes {results['postgresql', p]['moved']:.0%}"
                          for p in (2, 3)))
        for (kind, processes), r in results.items():
            for note in r["notes"][:20]:
                print(f"  note ({kind}, {processes} processes): {note}")
            if len(r["notes"]) > 20:
                print(f"  note ({kind}, {processes} processes): ... "
                      f"{len(r['notes']) - 20} more")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
