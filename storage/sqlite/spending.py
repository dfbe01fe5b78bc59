"""The SQLite store's spend counters and holds (SessionStore, "spending budgets").

Every statement finds its rows by primary key or index, so a budget check costs the same
at any number of usage rows. A hold is placed in one write job: the store's single writer
runs it whole inside BEGIN IMMEDIATE, so no other call, nor another process on the file,
reads the counters between its check and its hold.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from storage.models import SpendLimit, Spent, UsageRecord
from storage.spending import by_key

ADD = ("INSERT INTO spend_counters (key, usd, tokens) VALUES (?, ?, ?)"
       " ON CONFLICT (key) DO UPDATE SET usd = usd + excluded.usd,"
       " tokens = tokens + excluded.tokens")
RELEASE = "DELETE FROM spend_holds WHERE hold_id = ?"
DROP_EXPIRED = "DELETE FROM spend_holds WHERE expires_at <= ?"
PLACE = ("INSERT INTO spend_holds (hold_id, key, usd, tokens, expires_at) VALUES (?, ?, ?, ?, ?)"
         " ON CONFLICT (hold_id, key) DO UPDATE SET usd = excluded.usd,"
         " tokens = excluded.tokens, expires_at = excluded.expires_at")
# Each listed key (?1, a JSON list): its counter, and the sums of its live holds (?2: now).
SPENT = """SELECT k.value, COALESCE(c.usd, 0), COALESCE(c.tokens, 0),
    COALESCE((SELECT SUM(h.usd) FROM spend_holds AS h
              WHERE h.key = k.value AND h.expires_at > ?2), 0),
    COALESCE((SELECT SUM(h.tokens) FROM spend_holds AS h
              WHERE h.key = k.value AND h.expires_at > ?2), 0)
    FROM json_each(?1) AS k LEFT JOIN spend_counters AS c ON c.key = k.value"""


def add(db: sqlite3.Connection, usage: Sequence[UsageRecord]) -> None:
    """Add stored usage rows to their keys' counters (inside the caller's transaction)."""
    if any(u.spend_keys for u in usage):
        db.executemany(ADD, by_key(usage))


def release(db: sqlite3.Connection, hold_id: str | None) -> None:
    if hold_id is not None:
        db.execute(RELEASE, (hold_id,))


def totals(db: sqlite3.Connection, keys: Sequence[str], now: float) -> dict[str, Spent]:
    found = db.execute(SPENT, (json.dumps(list(keys)), now)).fetchall()
    return {key: Spent(usd=float(usd + held_usd), tokens=int(tokens + held_tokens))
            for key, usd, tokens, held_usd, held_tokens in found}


def hold(db: sqlite3.Connection, limits: Sequence[SpendLimit], hold_id: str, usd: float,
         tokens: int, now: float, expires_at: float) -> str | None:
    """The first reached limit's key, or None after placing the hold under every key."""
    db.execute(DROP_EXPIRED, (now,))  # holds of turns that never ended (a crash)
    found = totals(db, [limit.key for limit in limits], now)
    for limit in limits:
        if limit.reached_by(found[limit.key]):
            return limit.key
    keys = dict.fromkeys(limit.key for limit in limits)
    db.executemany(PLACE, [(hold_id, key, usd, tokens, expires_at) for key in keys])
    return None


class SpendRows:
    """Mixed into SqliteSessionStore, whose connection helpers it uses."""

    _read: Any  # SqliteConnection.read
    _write: Any  # SqliteConnection.write
    _write_statement: Any  # SqliteConnection.write_statement

    async def spent(self, keys: Sequence[str], *, now: float) -> dict[str, Spent]:
        if not keys:
            return {}
        return await self._read(lambda db: totals(db, keys, now))

    async def hold_spend(self, limits: Sequence[SpendLimit], hold_id: str, usd: float,
                         tokens: int, *, now: float, ttl_s: float) -> str | None:
        if not limits:
            return None
        return await self._write(
            lambda db: hold(db, limits, hold_id, usd, tokens, now, now + ttl_s))

    async def release_hold(self, hold_id: str) -> None:
        await self._write_statement(RELEASE, (hold_id,))
