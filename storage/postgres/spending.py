"""The PostgreSQL store's spend counters and holds (SessionStore, "spending budgets").

Every statement finds its rows by primary key or index. Placing a hold is one statement,
`threadline_hold`, which first takes an advisory lock per key, in one order (so two
admissions never wait on each other in a cycle): admissions sharing a key run one at a
time across every process, and each reads the counters and holds after the previous one
committed (a volatile function's statements each take a fresh snapshot). A turn's usage
adds to the counters and removes its hold in the turn's own statement (`with_spend`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from storage.models import SpendLimit, Spent, TurnRecord, UsageRecord
from storage.spending import by_key

# Schema 8 (storage/postgres/schema.py). The lock keys hash each spend key with a seed of
# its own, apart from the per-chat locks (seed 0) taken when a chat's first session opens.
FUNCTIONS = (
    """CREATE FUNCTION threadline_hold(p_keys text[], p_usd float8[], p_tokens bigint[],
        p_hold text, p_hold_usd float8, p_hold_tokens bigint, p_now float8,
        p_expires float8)
    RETURNS text LANGUAGE plpgsql AS $$
    DECLARE v_lock bigint; v_reached text;
    BEGIN
        FOR v_lock IN SELECT DISTINCT hashtextextended(k, 38) FROM unnest(p_keys) AS k
                ORDER BY 1 LOOP
            PERFORM pg_advisory_xact_lock(v_lock);
        END LOOP;
        -- Holds of turns that never ended (a crash); rows another call is removing
        -- (a release) are left to it rather than waited for.
        DELETE FROM spend_holds WHERE (hold_id, key) IN (SELECT hold_id, key
            FROM spend_holds WHERE expires_at <= p_now FOR UPDATE SKIP LOCKED);
        SELECT l.key INTO v_reached
            FROM unnest(p_keys, p_usd, p_tokens) WITH ORDINALITY AS l(key, usd, tokens, n)
            CROSS JOIN LATERAL (SELECT COALESCE(SUM(usd), 0) AS usd,
                    COALESCE(SUM(tokens), 0) AS tokens
                FROM spend_counters WHERE key = l.key) AS c
            CROSS JOIN LATERAL (SELECT COALESCE(SUM(h.usd), 0) AS usd,
                    COALESCE(SUM(h.tokens), 0) AS tokens
                FROM spend_holds AS h WHERE h.key = l.key AND h.expires_at > p_now) AS held
            WHERE (l.usd IS NOT NULL AND c.usd + held.usd >= l.usd)
               OR (l.tokens IS NOT NULL AND c.tokens + held.tokens >= l.tokens)
            ORDER BY l.n LIMIT 1;
        IF v_reached IS NOT NULL THEN
            RETURN v_reached;
        END IF;
        INSERT INTO spend_holds (hold_id, key, usd, tokens, expires_at)
            SELECT DISTINCT p_hold, k, p_hold_usd, p_hold_tokens, p_expires
            FROM unnest(p_keys) AS k
            ON CONFLICT (hold_id, key) DO UPDATE SET usd = excluded.usd,
                tokens = excluded.tokens, expires_at = excluded.expires_at;
        RETURN NULL;
    END $$""",
)

HOLD = "SELECT threadline_hold($1, $2, $3, $4, $5, $6, $7, $8)"
RELEASE = "DELETE FROM spend_holds WHERE hold_id = $1"
# Lateral lookups, not joins: an index probe per key at any table size (a join may read
# the whole of a small counters table).
SPENT = """SELECT k, c.usd + held.usd, c.tokens + held.tokens FROM unnest($1::text[]) AS k
    CROSS JOIN LATERAL (SELECT COALESCE(SUM(usd), 0)::float8 AS usd,
            COALESCE(SUM(tokens), 0)::bigint AS tokens
        FROM spend_counters WHERE key = k) AS c
    CROSS JOIN LATERAL (SELECT COALESCE(SUM(h.usd), 0)::float8 AS usd,
            COALESCE(SUM(h.tokens), 0)::bigint AS tokens
        FROM spend_holds AS h WHERE h.key = k AND h.expires_at > $2) AS held"""
# Adds (key, usd, tokens) arrays to the counters; rows are locked in key order.
_ADD = """INSERT INTO spend_counters AS c (key, usd, tokens)
    SELECT * FROM unnest(${0}::text[], ${1}::float8[], ${2}::bigint[]) ORDER BY 1
    ON CONFLICT (key) DO UPDATE SET usd = c.usd + excluded.usd,
        tokens = c.tokens + excluded.tokens"""
ADD = _ADD.format(1, 2, 3)


def with_spend(statement: str, first: int) -> str:
    """`statement` with a turn's counters added and its hold removed in the same statement
    (so as atomic as it); `turn_args` fill parameters `first` to `first + 3`."""
    added = _ADD.format(first, first + 1, first + 2)
    return (f"WITH spend_added AS ({added}), hold_released AS"
            f" (DELETE FROM spend_holds WHERE hold_id = ${first + 3}) {statement}")


def _arrays(usage: Sequence[UsageRecord]) -> list[list[Any]]:
    rows = by_key(usage)
    return [[r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]]


def turn_args(turn: TurnRecord) -> list[Any]:
    return [*_arrays(turn.usage), turn.release_hold]


async def add(con: asyncpg.Connection, usage: Sequence[UsageRecord]) -> None:
    """Add stored usage rows to their keys' counters (inside the caller's transaction)."""
    if any(u.spend_keys for u in usage):
        await con.execute(ADD, *_arrays(usage))


async def release(con: asyncpg.Connection, hold_id: str | None) -> None:
    if hold_id is not None:
        await con.execute(RELEASE, hold_id)


class SpendRows:
    """Mixed into PostgresSessionStore, whose query helpers it uses."""

    fetch: Any  # PostgresSessionStore.fetch
    _execute: Any

    async def spent(self, keys: Sequence[str], *, now: float) -> dict[str, Spent]:
        if not keys:
            return {}
        found = await self.fetch(SPENT, list(keys), now)
        return {row[0]: Spent(usd=float(row[1]), tokens=int(row[2])) for row in found}

    async def hold_spend(self, limits: Sequence[SpendLimit], hold_id: str, usd: float,
                         tokens: int, *, now: float, ttl_s: float) -> str | None:
        if not limits:
            return None
        found = await self.fetch(HOLD, [lim.key for lim in limits], [lim.usd for lim in limits],
                                 [lim.tokens for lim in limits], hold_id, usd, tokens, now,
                                 now + ttl_s)
        return found[0][0]

    async def release_hold(self, hold_id: str) -> None:
        await self._execute(RELEASE, hold_id)
