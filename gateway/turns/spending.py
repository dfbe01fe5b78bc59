"""Budgets: what a user, a chat and the bot may spend per day and per month, checked before
a turn and booked with its usage (docs/budgets.md).

Spend lives in the store as counters, one per scope and period (`user:telegram:42:d2026-11-27`),
added to in the transaction that records the usage, so a check is a few point lookups. A
turn first places a hold of its estimated cost under every counter it will add to: turns
racing past a limit together overshoot it by at most one turn.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from agent.providers.base import Provider
from agent.usage import UsageEntry
from gateway.config.budgets import BudgetsConfig, Limit
from gateway.turns.pricing import Price, cost
from storage.base import SessionStore
from storage.errors import StoreError
from storage.models import SpendLimit, Spent, UsageRecord

log = logging.getLogger(__name__)

SCOPES = ("user", "chat", "bot")
PERIODS = ("day", "month")
HOLD_TTL_S = 900.0  # a hold a crash left behind stops counting after this
# Room for this many turns under every limit: a turn is admitted on a reading, with no
# hold (no write); nearer, each turn holds its estimate first (docs/budgets.md).
FAR_TURNS = 100


def chat_ident(chat_key: str) -> str:
    """A chat's budget is the whole chat's: `platform:chat_id`, its topics and threads
    included."""
    return ":".join(chat_key.split(":", 2)[:2])


@dataclass(frozen=True)
class Payer:
    """Who a turn's spend is booked to: the counters its usage adds to, priced how."""

    chat: str  # platform:chat_id
    user: str | None  # platform:user_id
    keys: tuple[str, ...]  # every counter this turn adds to (all scopes, both periods)
    prices: Mapping[str, Price]
    hold: str | None = None  # the hold to release with the turn's usage

    def book(self, entries: Sequence[UsageEntry]) -> tuple[UsageRecord, ...]:
        """The turn's usage as store rows, each priced and aimed at this payer's counters."""
        rows = []
        for e in entries:
            price = self.prices.get(e.model)
            rows.append(UsageRecord(model=e.model, purpose=e.purpose, **vars(e.usage),
                                    usd=cost(e.usage, price) if price else 0.0,
                                    spend_keys=self.keys))
        return tuple(rows)


@dataclass(frozen=True)
class Reached:
    """A limit a turn would pass: which, how much, and when it resets."""

    scope: str
    period: str
    limit: Limit
    resets: datetime
    # Not spent yet, but held by answers still being written (they may not use it all).
    busy: bool = False

    def sentence(self, now: datetime, *, instead: str | None = None) -> str:
        """What the user hears; `instead`: the model that answers meanwhile."""
        daily = "daily" if self.period == "day" else "monthly"
        if self.busy and not instead:
            whose = {"user": "Your other answers", "chat": "Other answers in this chat",
                     "bot": "Answers being written elsewhere"}[self.scope]
            return (f"{whose} may use up the {daily} spending limit; send this again once "
                    "they are done.")
        whose = {"user": "You have", "chat": "This chat has",
                 "bot": "This bot has"}[self.scope]
        amount = " and ".join(filter(None, (
            f"${self.limit.usd:,.2f}" if self.limit.usd is not None else "",
            f"{self.limit.tokens:,} tokens" if self.limit.tokens is not None else "")))
        then = (f"until then {instead} answers here" if instead
                else "an admin can raise it")
        return (f"{whose} reached the {daily} spending limit ({amount}). It resets "
                f"{_when(self.resets, now)}; {then}.")


def _when(resets: datetime, now: datetime) -> str:
    left = resets - now
    hours, rest = divmod(int(left.total_seconds()) // 60, 60)
    wait = f"{hours} h {rest} min" if hours else f"{rest} min"
    zone = resets.tzname() or "UTC"
    if resets.date() == (now + timedelta(days=1)).date() or left < timedelta(days=1):
        return f"at {resets:%H:%M} {zone} (in {wait})"
    return f"on {resets:%Y-%m-%d} at {resets:%H:%M} {zone}"


class Budgets:
    """The limits of `budgets:`, read against the store's counters."""

    def __init__(self, config: BudgetsConfig, store: SessionStore, prices: Mapping[str, Price],
                 clock: Callable[[], datetime], fallback: Provider | None = None) -> None:
        self.config = config
        self.fallback = fallback  # the model past a limit (on_limit: fallback)
        self.store = store
        self.prices = prices
        self.clock = clock
        self.zone = ZoneInfo(config.timezone)
        self._day: date | None = None  # the day `_ends` was worked out for
        self._ends: dict[str, tuple[str, datetime]] = {}
        self._limit_cache: dict[tuple[str, str, str], Limit] = {}

    # --- periods and keys ---------------------------------------------------------------
    def _periods(self, now: datetime) -> dict[str, tuple[str, datetime]]:
        """Each period's key suffix and when it ends, in the budgets' time zone (worked
        out once a day: formatting dates cost more than the rest of a check)."""
        local = now.astimezone(self.zone)
        day = local.date()
        if self._day != day:
            midnight = local.replace(hour=0, minute=0, second=0, microsecond=0)
            first = midnight.replace(day=1)
            self._day, self._ends = day, {
                "day": (f"d{day:%Y-%m-%d}", midnight + timedelta(days=1)),  # wall-clock: DST-proof
                "month": (f"m{day:%Y-%m}", (first + timedelta(days=32)).replace(day=1))}
        return self._ends

    def suffix(self, period: str, now: datetime) -> str:
        """The period's part of a counter key: `d2026-11-27`, `m2026-11`."""
        return self._periods(now)[period][0]

    @staticmethod
    def _ident(scope: str, chat: str, user: str | None) -> str | None:
        return {"user": user, "chat": chat, "bot": ""}[scope]

    def keys(self, chat: str, user: str | None, now: datetime) -> dict[tuple[str, str], str]:
        """(scope, period) -> counter key, for every scope this turn has."""
        found = {}
        for period, (suffix, _) in self._periods(now).items():
            for scope in SCOPES:
                ident = self._ident(scope, chat, user)
                if ident is not None:
                    found[scope, period] = f"{scope}:{ident}:{suffix}" if ident else \
                        f"bot:{suffix}"
        return found

    def payer(self, chat: str, user: str | None, hold: str | None = None) -> Payer:
        keys = self.keys(chat, user, self.clock())
        return Payer(chat, user, tuple(keys.values()), self.prices, hold)

    # --- limits -------------------------------------------------------------------------
    def limit(self, scope: str, period: str, ident: str) -> Limit:
        """The limit in force: an override's kinds over the general ones (worked out once
        per scope, period and override: the config does not change)."""
        override = self.config.overrides.get(ident) if ident else None
        cache_key = (scope, period, ident if override is not None else "")
        found = self._limit_cache.get(cache_key)
        if found is None:
            general: Limit = getattr(getattr(self.config, scope), period)
            own: Limit | None = getattr(override, period) if override else None
            found = general if own is None else Limit(
                usd=own.usd if own.usd is not None else general.usd,
                tokens=own.tokens if own.tokens is not None else general.tokens)
            self._limit_cache[cache_key] = found
        return found

    def exempt(self, chat: str, user: str | None, admin: bool) -> bool:
        for ident in (user, chat):
            override = self.config.overrides.get(ident) if ident else None
            if override is not None and override.exempt is not None:
                return override.exempt
        return admin and self.config.exempt_admins

    def _limits(self, chat: str, user: str | None, now: datetime
                ) -> list[tuple[SpendLimit, Reached]]:
        found = []
        ends = self._periods(now)
        for (scope, period), key in self.keys(chat, user, now).items():
            limit = self.limit(scope, period, self._ident(scope, chat, user) or "")
            if limit.usd is not None or limit.tokens is not None:
                found.append((SpendLimit(key, limit.usd, limit.tokens),
                              Reached(scope, period, limit, ends[period][1])))
        return found

    async def admit(self, chat: str, user: str | None, *, admin: bool, usd: float,
                    tokens: int) -> tuple[Payer, Reached | None]:
        """Check a turn of about (`usd`, `tokens`) before it runs; (its payer, None) when
        admitted, else (a payer holding nothing, the limit it reached).

        Far from every limit (room for FAR_TURNS such turns) a reading is enough. Nearer,
        the turn holds its estimate under every limited counter until its usage is booked,
        placed atomically with the check, so turns racing to the limit pass it by at most
        one turn's cost."""
        now = self.clock()
        limits = [] if self.exempt(chat, user, admin) else self._limits(chat, user, now)
        if not limits:
            return self.payer(chat, user), None
        stamp = now.timestamp()
        spent = await self.store.spent([lim.key for lim, _ in limits], now=stamp)
        for lim, why in limits:
            if lim.reached_by(spent[lim.key]):
                return await self._refused(chat, user, lim, why)
        if all(_far(lim, spent[lim.key], usd, tokens) for lim, _ in limits):
            return self.payer(chat, user), None
        hold = uuid.uuid4().hex
        reached = await self.store.hold_spend([lim for lim, _ in limits], hold, usd, tokens,
                                              now=stamp, ttl_s=HOLD_TTL_S)
        if reached is None:
            return self.payer(chat, user, hold), None
        return await self._refused(chat, user,
                                   *next((lim, r) for lim, r in limits if lim.key == reached))

    async def _refused(self, chat: str, user: str | None, limit: SpendLimit, why: Reached
                       ) -> tuple[Payer, Reached | None]:
        # Spent, or only held by turns still running? (No hold lives past `inf`.)
        spent = await self.store.spent([limit.key], now=math.inf)
        busy = not limit.reached_by(spent[limit.key])
        log.info("budget: %s %s limit %s in %s (user %s)", why.period, why.scope,
                 "held by running turns" if busy else "reached", chat, user or "-")
        return self.payer(chat, user), replace(why, busy=busy)

    async def release(self, payer: Payer | None) -> None:
        """Let go of a turn's hold now (it expires by itself otherwise)."""
        if payer is None or payer.hold is None:
            return
        try:
            await self.store.release_hold(payer.hold)
        except StoreError as exc:
            log.warning("budget: a hold stays until it expires (%s)", exc)

    async def standing(self, chat: str, user: str | None, *, admin: bool
                       ) -> list[tuple[str, str, float, int, Limit]]:
        """(scope, period, usd spent, tokens spent, limit) for /usage and the web view;
        the bot's own only for admins."""
        now = self.clock()
        keys = {k: v for k, v in self.keys(chat, user, now).items() if admin or k[0] != "bot"}
        spent = await self.store.spent(list(keys.values()), now=now.timestamp())
        rows = []
        for (scope, period), key in keys.items():
            got = spent.get(key)
            limit = self.limit(scope, period, self._ident(scope, chat, user) or "")
            rows.append((scope, period, got.usd if got else 0.0, got.tokens if got else 0,
                         limit))
        return rows

    async def overview(self, chats: Sequence[str]) -> list[Standing]:
        """The web view's table: the bot, each override's user, and these chats (with the
        chat overrides), each with what it spent today and this month of its limits."""
        now = self.clock()
        who = [("bot", "")] + [("user", k) for k in self.config.overrides] + [
            ("chat", c) for c in dict.fromkeys([*map(chat_ident, chats),
                                                *self.config.overrides])]
        suffixes = {p: self.suffix(p, now) for p in PERIODS}
        keys = {(scope, ident, p): f"{scope}:{ident}:{suffixes[p]}" if ident
                else f"bot:{suffixes[p]}" for scope, ident in who for p in PERIODS}
        spent = await self.store.spent(list(keys.values()), now=now.timestamp())
        rows = []
        for scope, ident in who:
            cells = []
            for period in PERIODS:
                got = spent.get(keys[scope, ident, period]) or Spent()
                cells.append((got.usd, got.tokens, self.limit(scope, period, ident)))
            rows.append(Standing(scope, ident or "the bot", *cells))
        return rows


@dataclass(frozen=True)
class Standing:
    """One row of the web view's budget table: (usd, tokens, limit) per period."""

    scope: str
    who: str
    day: tuple[float, int, Limit]
    month: tuple[float, int, Limit]


def _far(limit: SpendLimit, spent: Spent, usd: float, tokens: int) -> bool:
    return ((limit.usd is None or limit.usd - spent.usd > FAR_TURNS * usd)
            and (limit.tokens is None or limit.tokens - spent.tokens > FAR_TURNS * tokens))


WHO = {"user": "You", "chat": "This chat", "bot": "The bot"}
WHEN = {"day": "today", "month": "this month"}


def standing_lines(rows: Sequence[tuple[str, str, float, int, Limit]]) -> list[str]:
    """/usage's budget lines: spent of the limit, per scope and period."""
    lines = ["Spending limits:"]
    for scope, period, usd, tokens, limit in rows:
        parts = []
        if limit.usd is not None or limit.tokens is None:
            cap = f" of ${limit.usd:,.2f}" if limit.usd is not None else ""
            parts.append(f"${usd:,.4f}{cap}")
        if limit.tokens is not None:
            parts.append(f"{tokens:,} of {limit.tokens:,} tokens")
        free = "" if limit.set else " (no limit)"
        lines.append(f"{WHO[scope]} {WHEN[period]}: {'; '.join(parts)}{free}")
    return lines
