"""What the budget check costs a turn at 100,000 usage rows (issue 38, acceptance 6).

    python bench/budget.py [--rows 100000] [--checks 2000] [--postgres URL]

Fills a real store (SQLite in a temp directory, or the PostgreSQL database at URL, which
it empties first) with `--rows` usage rows spread over 1,000 users in 200 chats, each row
counted against its user, chat and the bot for the day and the month, as the gateway books
them. Then times what a turn adds when budgets are set: the check that places the turn's
hold (`Budgets.admit`, limits on all three scopes and both periods), and the same near a
limit, where each turn places a hold (a write); the release of a hold is untimed (a turn
lets go of it in the transaction that books its usage). Prints the median and the 95th percentile in ms beside
the goal (0.2 ms), and the same check with no limits set (no store call at all).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.config.budgets import BudgetsConfig  # noqa: E402
from gateway.turns.pricing import Price  # noqa: E402
from gateway.turns.spending import Budgets  # noqa: E402
from storage.base import SessionStore  # noqa: E402
from storage.models import TurnRecord, UsageRecord  # noqa: E402

GOAL_MS = 0.2
USERS, CHATS, PER_TURN = 1000, 200, 1000
LIMITS = {"user": {"day": {"usd": 5.0}, "month": {"usd": 50.0, "tokens": 10**9}},
          "chat": {"day": {"usd": 20.0}, "month": {"tokens": 10**10}},
          "bot": {"day": {"usd": 10**6}, "month": {"usd": 10**7}}}
# Each user has spent about $0.42 today: room for fewer than 100 more turns at $0.01.
NEAR = {"user": {"day": {"usd": 1.2}}}
PRICES = {"bench-model": Price.per_million(3.0, 15.0)}


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


async def fill(store: SessionStore, budgets: Budgets, rows: int) -> None:
    """`rows` usage rows, a thousand per recorded turn, each booked like a real turn's."""
    session = await store.create_root_session("telegram:bench", model="bench-model",
                                              system_prompt="s")
    for start in range(0, rows, PER_TURN):
        usage = []
        for n in range(start, min(rows, start + PER_TURN)):
            payer = budgets.payer(f"telegram:{n % CHATS}", f"telegram:u{n % USERS}")
            usage.append(UsageRecord(model="bench-model", purpose="chat", input_tokens=900,
                                     output_tokens=100, usd=0.0042,
                                     spend_keys=payer.keys))
        await store.record_turn(session.id, TurnRecord(usage=tuple(usage)))


async def time_checks(budgets: Budgets, checks: int) -> list[float]:
    spent = []
    for n in range(checks):
        chat, user = f"telegram:{n % CHATS}", f"telegram:u{n % USERS}"
        started = time.perf_counter()
        payer, reached = await budgets.admit(chat, user, admin=False, usd=0.01, tokens=2000)
        spent.append((time.perf_counter() - started) * 1000)
        assert reached is None, reached
        # A turn lets go of its hold in the transaction that books its usage: no extra
        # call for it then. Here it goes on its own, untimed.
        await budgets.release(payer)
    return spent


def report(label: str, times: list[float]) -> None:
    times = sorted(times)
    p95 = times[int(len(times) * 0.95)]
    print(f"{label:<34} median {statistics.median(times):.3f} ms   p95 {p95:.3f} ms")


async def open_store(args: argparse.Namespace, directory: Path) -> SessionStore:
    if args.postgres:
        from storage.postgres.store import PostgresSessionStore

        store: SessionStore = PostgresSessionStore(args.postgres)
        await store.initialize()
        return store
    from storage.sqlite.store import SqliteSessionStore

    store = SqliteSessionStore(directory / "threadline.db")
    await store.initialize()
    return store


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = await open_store(args, Path(tmp))
        try:
            limited = Budgets(BudgetsConfig.model_validate(LIMITS), store, PRICES, utc_now)
            near = Budgets(BudgetsConfig.model_validate(NEAR), store, PRICES, utc_now)
            free = Budgets(BudgetsConfig(), store, PRICES, utc_now)
            started = time.perf_counter()
            await fill(store, limited, args.rows)
            print(f"{args.rows:,} usage rows written in {time.perf_counter() - started:.1f} s "
                  f"({'PostgreSQL' if args.postgres else 'SQLite'})")
            await time_checks(limited, 200)  # warm
            checked = await time_checks(limited, args.checks)
            holding = await time_checks(near, args.checks)
            unchecked = await time_checks(free, args.checks)
        finally:
            await store.shutdown()
    report("check, limits set", checked)
    report("check near a limit (places a hold)", holding)
    report("check, no limits set", unchecked)
    median = statistics.median(checked)
    print(f"goal: at most {GOAL_MS} ms a turn: {'met' if median <= GOAL_MS else 'MISSED'} "
          f"({median / GOAL_MS:.2f} of it)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--checks", type=int, default=2000)
    parser.add_argument("--postgres", metavar="URL", help="an empty PostgreSQL database")
    asyncio.run(main(parser.parse_args()))
