"""Leases and notices between gateway processes on PostgreSQL (storage/coordination.py).

A lease row is taken with one upsert that only succeeds when the row is free, expired or
already the caller's, so two processes can never both hold it; expiry is judged by the
database's clock, so the processes' clocks may disagree. Notices are LISTEN/NOTIFY on one
channel, carrying the chat key; the listening connection is held apart from the pool,
and made again (LISTEN included) whenever it is lost.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

import asyncpg

from storage.coordination import Coordination, Notice
from storage.errors import StoreError
from storage.postgres.notices import read_notice
from storage.urls import scrub

if TYPE_CHECKING:
    from storage.postgres.store import PostgresSessionStore

log = logging.getLogger(__name__)

CHANNEL = "threadline_chats"
CONNECT_TIMEOUT_S = 10.0
PING_EVERY_S = 15.0  # a quiet notice connection is checked this often
FIRST_PAUSE_S = 0.25  # between tries to listen again, doubling up to the longest
LONGEST_PAUSE_S = 5.0
_LOST = (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)
_NOW = "extract(epoch from clock_timestamp())"
# Every claim that succeeds gives the lease a new generation from one sequence (schema 9):
# work begun under an older take of the chat is refused by its number (storage/coordination.py,
# Fence). $4: whether an expired lease of another holder may be taken.
CLAIM = f"""INSERT INTO leases (name, holder, expires_at) VALUES ($1, $2, {_NOW} + $3)
    ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at,
        epoch = nextval('lease_epochs')
    WHERE leases.holder = excluded.holder OR ($4 AND leases.expires_at < {_NOW})
    RETURNING epoch"""
RENEW = (f"UPDATE leases SET expires_at = {_NOW} + $2 WHERE holder = $1 AND name = ANY($3)"
         " RETURNING name")
RELEASE = ("DELETE FROM leases WHERE name = $1 AND holder = $2"
           " AND ($3::bigint IS NULL OR epoch = $3)")
# Chats with a pending or taken ledger row whose chat lease is missing ($1: or expired).
UNATTENDED = f"""SELECT DISTINCT i.chat_key FROM inbound AS i
    WHERE i.status IN ('pending', 'taken') AND NOT EXISTS (
        SELECT 1 FROM leases AS l WHERE l.name = 'chat:' || i.chat_key
        AND (l.expires_at >= {_NOW} OR NOT $1))"""


class PostgresCoordination(Coordination):
    def __init__(self, store: PostgresSessionStore) -> None:
        self._store = store
        self._listener: asyncpg.Connection | None = None
        self._lost = asyncio.Event()  # set when the notice connection ends
        self._keeper: asyncio.Task[None] | None = None
        self.listening_ok_at = 0.0
        self.ping_every_s = PING_EVERY_S

    async def claim(self, name: str, holder: str, ttl: float, *,
                    take_expired: bool = True) -> int | None:
        found = await self._store.fetch(CLAIM, name, holder, ttl, take_expired)
        return int(found[0][0]) if found else None

    async def renew(self, holder: str, ttl: float, names: Collection[str]) -> set[str]:
        return {row[0] for row in await self._store.fetch(RENEW, holder, ttl, list(names))}

    async def release(self, name: str, holder: str, epoch: int | None = None) -> None:
        await self._store.fetch(RELEASE, name, holder, epoch)

    async def unattended_chats(self, *, expired: bool = True) -> list[str]:
        return [row[0] for row in await self._store.fetch(UNATTENDED, expired)]

    async def notify(self, chat_key: str) -> None:
        await self._store.fetch("SELECT pg_notify($1, $2)", CHANNEL, chat_key)

    async def listen(self, callback: Callable[[Notice], None],
                     reconnected: Callable[[], None] = lambda: None) -> None:
        if self._keeper is not None:
            raise StoreError("already listening")
        try:
            await self._connect(callback)
        except _LOST as exc:
            raise StoreError(f"{self._store.label}: cannot listen for notices: "
                             f"{scrub(str(exc), self._store.url)}") from None
        self._keeper = asyncio.create_task(self._keep_listening(callback, reconnected),
                                           name="cluster-listen")

    async def _connect(self, callback: Callable[[Notice], None]) -> None:
        def heard(_con: Any, _pid: int, _channel: str, payload: str) -> None:
            try:
                notice = read_notice(payload)
            except (ValueError, TypeError, IndexError, KeyError) as exc:
                log.warning("cluster: a notice that cannot be read (%s); ignored", exc)
                return
            callback(notice)
        lost = asyncio.Event()
        listener = await asyncpg.connect(self._store.url, timeout=CONNECT_TIMEOUT_S)
        listener.add_termination_listener(lambda _con: lost.set())
        try:
            await listener.add_listener(CHANNEL, heard)
        except BaseException:
            listener.terminate()
            raise
        self._listener, self._lost = listener, lost
        self.listening_ok_at = time.time()

    async def _keep_listening(self, callback: Callable[[Notice], None],
                              reconnected: Callable[[], None]) -> None:
        """Whenever the notice connection is lost (a database restart, a network cut),
        connect and LISTEN again, pausing longer after each failed try."""
        while True:
            await self._until_lost()
            log.warning("cluster: the notice connection to %s was lost; connecting again",
                        self._store.label)
            pause = FIRST_PAUSE_S
            while True:
                try:
                    await self._connect(callback)
                    break
                except Exception as exc:  # noqa: BLE001 - a driver's surprise must not deafen us
                    # Besides lost connections, asyncpg raises errors of its own when a
                    # server answers out of turn (e.g. while shutting down): this task
                    # ending would leave the process deaf to notices until it stops.
                    log.log(logging.DEBUG if isinstance(exc, _LOST) else logging.WARNING,
                            "cluster: listening again failed (%s: %s); next try in %.1f s",
                            type(exc).__name__, scrub(str(exc), self._store.url), pause)
                await asyncio.sleep(pause)
                pause = min(pause * 2, LONGEST_PAUSE_S)
            log.info("cluster: listening for notices again")
            reconnected()

    async def _until_lost(self) -> None:
        """Return once the notice connection ended, or stopped answering a ping (a cut
        that closed nothing, then closed here)."""
        while True:
            try:
                await asyncio.wait_for(self._lost.wait(), self.ping_every_s)
                return
            except TimeoutError:
                pass
            listener = self._listener
            try:
                if listener is not None:
                    await listener.fetchval("SELECT 1", timeout=CONNECT_TIMEOUT_S)
                    self.listening_ok_at = time.time()
            except Exception:  # noqa: BLE001 - whatever failed, the connection is done
                if listener is not None:
                    listener.terminate()
                return

    async def close(self) -> None:
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.cancel()
            try:
                await keeper
            except asyncio.CancelledError:
                pass
            except Exception as exc:  # noqa: BLE001 - stopping goes on whatever it was
                log.warning("cluster: the notice listener had failed: %s: %s",
                            type(exc).__name__, scrub(str(exc), self._store.url))
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                await listener.close()
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                log.warning("closing the notice connection failed: %s",
                            scrub(str(exc), self._store.url))
