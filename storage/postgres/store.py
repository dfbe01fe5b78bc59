"""SessionStore on PostgreSQL (asyncpg, a connection pool), for several gateway processes.

Every store call is one transaction on one pooled connection. The rules the SQLite store
enforces with BEGIN IMMEDIATE hold here through row locks (a session's row is locked
before anything is appended to it), an advisory lock per chat while a chat's first
session is opened, and the same unique constraints (docs/storage.md, "PostgreSQL").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import asyncpg

from storage import rows
from storage.base import SessionStore
from storage.coordination import current_fence
from storage.errors import StoreError, StoreUnavailable
from storage.live import MAX_CHATS, LiveSessions
from storage.models import (
    ChatActivity,
    ChatSummary,
    InboundRecord,
    NewMessage,
    SearchHit,
    SessionRecord,
    StoredMessage,
    TurnRecord,
    UsageRecord,
    UsageTotals,
)
from storage.postgres import continuation, schema, turns
from storage.postgres import queries as q
from storage.postgres.connecting import (
    RETRIES,
    RETRYABLE,
    SESSION_SETTINGS,
    UNREACHABLE,
    as_it_was,
    check_url,
)
from storage.postgres.coordination import PostgresCoordination
from storage.postgres.deliveries import DeliveryRows
from storage.postgres.files import PostgresShelf
from storage.postgres.observed import ObservedRows
from storage.postgres.spending import SpendRows
from storage.urls import mask_url, scrub

log = logging.getLogger(__name__)
T = TypeVar("T")
Work = Callable[[q.Con], Awaitable[T]]

class PostgresSessionStore(DeliveryRows, ObservedRows, SpendRows, SessionStore):
    """`storage: {url: postgresql://user@host/db}`: a store several processes share."""

    def __init__(self, url: str, *, min_connections: int = 1, max_connections: int = 10,
                 max_live_chats: int = MAX_CHATS, command_timeout: float = 60.0,
                 upgrade: bool = True) -> None:
        self.url, self.upgrade = url, upgrade  # upgrade: may migrate an older schema
        self.label = mask_url(url)
        self._sizes = (min_connections, max_connections)
        self._timeout = command_timeout
        self._pool: asyncpg.Pool | None = None
        self._live = LiveSessions(max_live_chats)
        self.holder: str | None = None  # with a cluster: this process, in lease rows
        # A test's hook: awaited by a fenced write (its name given) after it read its fence
        # and before its statement goes, to hold it there while the lease moves.
        self.before_fenced_write: Callable[[str], Awaitable[None]] | None = None
        self.coordination: PostgresCoordination = PostgresCoordination(self)
        # Writes whose caller was cancelled while they ran: they still commit, and every
        # later call waits for them, so the caller's next read sees what it wrote.
        self._orphans: set[asyncio.Future[Any]] = set()

    async def __aenter__(self) -> PostgresSessionStore:
        await self.initialize()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()
    # --- lifecycle -------------------------------------------------------------------
    async def initialize(self) -> None:
        """Open the pool and migrate; StoreError names the database (never its password)."""
        if self._pool is not None:
            return
        check_url(self.url)
        try:
            pool = await asyncpg.create_pool(self.url, min_size=self._sizes[0],
                                             max_size=self._sizes[1],
                                             command_timeout=self._timeout,
                                             server_settings=SESSION_SETTINGS,
                                             reset=as_it_was)
        except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError, ValueError) as exc:
            reason = scrub(str(exc), self.url)  # a client error may quote the URL
            raise StoreError(f"cannot open the database {self.label}: {reason}") from None
        try:
            async with pool.acquire() as con:
                await schema.migrate(con, self.label, upgrade=self.upgrade)
        except BaseException:
            await pool.close()
            raise
        self._pool = pool

    async def shutdown(self) -> None:
        pool, self._pool = self._pool, None
        self._live.clear()
        await self.coordination.close()
        if pool is not None:
            await pool.close()

    async def begin_run(self) -> bool:
        """PostgreSQL recovers from a crash by itself: there is no file to check."""
        return False

    async def end_run(self) -> None:
        return None

    def member(self, holder: str) -> None:
        self.holder = holder

    async def _fence(self, write: str) -> int | None:
        """The generation the work running now is fenced by (None: not fenced), read as
        the write begins, so a write held up meanwhile still carries the old one."""
        fence = current_fence()
        if self.before_fenced_write is not None:
            await self.before_fenced_write(write)
        return None if fence is None else fence.epoch

    async def _fenced_rows(self, sql: str, ids: list[int], *args: Any) -> None:
        """An update of ledger rows that counts only under the rows' chat lease: refused
        whole (LeaseLost) when the fence's generation is not the lease's any more."""
        epoch = await self._fence("ledger")

        async def work(con: q.Con) -> None:
            done = await con.execute(sql, *args, ids, epoch)
            if epoch is not None and done.endswith(" 0") and ids \
                    and not await con.fetchval(q.FENCE_OF_ROWS, ids, epoch):
                raise turns.lease_lost(f"inbound {ids}", epoch)
        await self._run(work, transaction=False)

    def shelf(self, namespace: str, retention_s: float) -> PostgresShelf:
        return PostgresShelf(self, namespace, retention_s)

    async def backup(self, dest: str) -> None:
        raise StoreError(f"back up {self.label} with pg_dump; `threadline backup` copies "
                         "SQLite files only")

    # --- running work ----------------------------------------------------------------
    async def _run(self, work: Work[T], *, transaction: bool = True) -> T:
        """`work` in one transaction; re-run when PostgreSQL aborted it for a deadlock.

        A single statement is atomic by itself: `transaction=False` saves the BEGIN and
        COMMIT round trips."""
        pool = self._pool
        if pool is None:
            raise StoreError(f"the store {self.label} is not open")
        if self._orphans:
            await asyncio.wait(set(self._orphans))
        for attempt in range(RETRIES):
            try:
                async with pool.acquire() as con:
                    if not transaction:
                        return await work(con)
                    async with con.transaction():
                        return await work(con)
            except RETRYABLE:
                if attempt == RETRIES - 1:
                    raise StoreError(f"{self.label} kept aborting a transaction") from None
                await asyncio.sleep(0.01 * (attempt + 1))
            except StoreError:
                raise
            except UNREACHABLE as exc:
                raise StoreUnavailable(f"{self.label}: {scrub(str(exc), self.url)}") from exc
            except (TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
                reason = scrub(str(exc), self.url)
                raise turns.refusal(exc) or StoreError(f"{self.label}: {reason}") from exc
        raise AssertionError("unreachable")

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        """One statement's rows (one statement: atomic without a transaction block)."""
        return await self._run(lambda con: con.fetch(sql, *args), transaction=False)

    async def _execute(self, sql: str, *args: Any) -> None:
        await self._run(lambda con: con.execute(sql, *args), transaction=False)

    async def _then(self, session_id: str | None, work: Work[T],
                    update: Callable[[T], None], *, transaction: bool = True) -> T:
        """A write, and the live map updated from its result once it committed, also when
        the caller was cancelled meanwhile (as in the SQLite store)."""
        task = asyncio.ensure_future(self._run(work, transaction=transaction))

        def settled(done: asyncio.Future[T]) -> None:
            if not done.cancelled() and done.exception() is None:
                update(done.result())
            elif session_id is not None:
                self._live.forget(session_id)
        task.add_done_callback(settled)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                self._orphans.add(task)
                task.add_done_callback(self._orphans.discard)
            raise

    # --- sessions and chains ---------------------------------------------------------
    async def live_session(self, chat_key: str) -> SessionRecord | None:
        known = self._live.get(chat_key)
        if known is not None:
            return known
        found = await self._run(lambda con: q.live_session(con, chat_key))
        if found is not None:
            self._live.put(found)
        return found

    async def create_root_session(self, chat_key: str, *, model: str | None,
                                  system_prompt: str | None,
                                  system_message: NewMessage | None = None) -> SessionRecord:
        return await self._then(None, lambda con: turns.open_chat(
            con, chat_key, create=True, model=model, system_prompt=system_prompt,
            system_message=system_message, now=time.time()), self._live.put, transaction=False)

    def forget_chat(self, chat_key: str) -> None:
        self._live.forget_chat(chat_key)

    async def open_session(self, chat_key: str, *, model: str | None,
                           system_prompt: str | None,
                           system_message: NewMessage | None = None) -> SessionRecord:
        known = self._live.get(chat_key)
        if known is not None:
            return known

        return await self._then(None, lambda con: turns.open_chat(
            con, chat_key, create=False, model=model, system_prompt=system_prompt,
            system_message=system_message, now=time.time()), self._live.put, transaction=False)

    async def get_session(self, session_id: str) -> SessionRecord | None:
        return await self._run(lambda con: q.load_session(con, session_id))

    async def end_session(self, session_id: str, reason: str) -> None:
        if reason == "compression":
            raise StoreError("a session ends by compression only through record_turn")

        epoch = await self._fence("end_session")

        async def work(con: q.Con) -> None:
            await q.end_reason_of(con, session_id, lock=True)
            await turns.require_lease(con, session_id, epoch)
            await con.execute(q.END_SESSION, reason, time.time(), session_id)
        await self._then(session_id, work, lambda _: self._live.forget(session_id))

    async def get_compression_tip(self, session_id: str) -> str:
        found = await self.fetch(q.TIP, *q.chain_params(session_id))
        tip, depth = found[0]
        if depth >= rows.MAX_CHAIN_DEPTH:
            log.warning("compression chain from %s is cyclic or deeper than %d steps",
                        session_id, rows.MAX_CHAIN_DEPTH)
        return str(tip)

    async def chain(self, session_id: str) -> list[SessionRecord]:
        found = await self.fetch(q.CHAIN_SESSIONS, *q.chain_params(session_id))
        return [rows.session_record(row) for row in found]

    async def list_sessions(self, chat_key: str | None = None,
                            limit: int = 200) -> list[SessionRecord]:
        return [rows.session_record(row)
                for row in await self.fetch(q.SESSION_BY_CHAT, chat_key, limit)]

    async def save_engine_state(self, session_id: str, state: dict[str, Any],
                                last_prompt_tokens: int | None = None) -> None:
        await self._then(session_id,
                         lambda con: q.save_state(con, session_id, state, last_prompt_tokens),
                         self._live.put)

    # --- messages --------------------------------------------------------------------
    async def load_history(self, session_id: str) -> list[StoredMessage]:
        return [rows.stored_message(row) for row in await self.fetch(q.HISTORY, session_id)]

    async def message(self, row_id: int) -> StoredMessage | None:
        found = await self.fetch(q.MESSAGE_BY_ID, row_id)
        return rows.stored_message(found[0]) if found else None

    async def append_messages(self, session_id: str,
                              messages: list[NewMessage]) -> list[StoredMessage]:
        async def work(con: q.Con) -> list[StoredMessage]:
            await q.require_open(con, session_id)
            return await q.append(con, session_id, messages, time.time())
        return await self._then(session_id, work,
                                lambda stored: self._live.grew(session_id, len(stored)))

    async def record_turn(self, session_id: str, turn: TurnRecord) -> SessionRecord:
        # Nearly every turn is one statement (turns.py); a compaction is a transaction.
        compacted = turn.compaction is not None
        record = continuation.record_turn if compacted else turns.record
        epoch = await self._fence("record_turn")
        return await self._then(session_id, lambda con: record(
            con, session_id, epoch, turn, time.time()), self._live.put,
            transaction=compacted)

    async def search(self, query: str, chat_key: str | None = None,
                     limit: int = 50) -> list[SearchHit]:
        match = q.ts_query(query)
        if match is None:
            return []
        found = await self.fetch(q.SEARCH, match, chat_key, limit)
        return [rows.search_hit(row) for row in found]

    # --- the inbound ledger ----------------------------------------------------------
    async def ingest(self, *, platform: str, chat_id: str, message_id: str, chat_key: str,
                     text: str, sender_id: str | None, sender_name: str | None,
                     extra: dict[str, Any] | None = None) -> InboundRecord | None:
        record = InboundRecord(0, platform, chat_id, message_id, chat_key, text, sender_id,
                               sender_name, time.time(), "pending", None, dict(extra or {}))
        found = await self.fetch(q.INGEST, *rows.inbound_values(record), self.holder or "")
        if not found:
            return None
        return replace(record, id=found[0][0], open_before=tuple(found[0][1]),
                       held_by=found[0][2])

    async def take_inbound(self, inbound_ids: list[int], session_id: str,
                           messages: list[NewMessage],
                           texts: Sequence[str] | None = None) -> list[StoredMessage]:
        unanswered = [m if m.answered is not None else replace(m, answered=False)
                      for m in messages]
        epoch = await self._fence("take_inbound")
        return await self._then(session_id, lambda con: turns.take(
            con, session_id, epoch, inbound_ids, unanswered, time.time(), texts),
            lambda stored: self._live.grew(session_id, len(stored)), transaction=False)

    async def find_inbound(self, platform: str, chat_id: str,
                           message_id: str) -> InboundRecord | None:
        found = await self.fetch(q.FIND_INBOUND, platform, chat_id, message_id)
        return rows.inbound_record(found[0]) if found else None

    async def update_inbound_text(self, platform: str, chat_id: str, message_id: str,
                                  text: str) -> str | None:
        key = (platform, chat_id, message_id)
        return await self._run(lambda con: q.update_pending_text(con, key, text))

    async def finish_inbound(self, inbound_ids: list[int], status: str) -> None:
        if status not in ("answered", "failed"):
            raise StoreError(f"an inbound row finishes answered or failed, not {status!r}")
        await self._fenced_rows(q.FINISH_INBOUND, list(inbound_ids), status)

    async def retry_inbound(self, inbound_ids: list[int], *, undo: bool = False) -> None:
        if undo:  # giving back what this process counted: whoever holds the chat now
            await self._execute(q.UNDO_ATTEMPT, list(inbound_ids))
        else:
            await self._fenced_rows(q.RETRY_INBOUND, list(inbound_ids))

    async def inbound(self, inbound_ids: list[int]) -> list[InboundRecord]:
        found = await self.fetch(q.INBOUND_BY_IDS, list(inbound_ids))
        return [rows.inbound_record(row) for row in found]

    async def open_inbound(self, chat_key: str | None = None) -> list[InboundRecord]:
        return [rows.inbound_record(row) for row in await self.fetch(q.OPEN_INBOUND, chat_key)]

    async def latest_inbound(self, platform: str) -> list[InboundRecord]:
        return [rows.inbound_record(row) for row in await self.fetch(q.LATEST_INBOUND, platform)]

    # --- usage -----------------------------------------------------------------------
    async def record_usage(self, session_id: str, usage: UsageRecord) -> None:
        async def work(con: q.Con) -> None:
            await q.end_reason_of(con, session_id)  # an unknown id is an error
            await q.insert_usage(con, session_id, (usage,), time.time())
        self._live.forget(session_id)  # its usage totals change: read it again when asked
        await self._run(work)

    async def usage_totals(self, session_id: str) -> UsageTotals:
        found = await self.fetch(q.USAGE_TOTALS, *q.chain_params(session_id))
        return rows.usage_totals(tuple(found[0]))

    async def usage_by_model(self, session_id: str) -> dict[str, UsageTotals]:
        found = await self.fetch(q.USAGE_BY_MODEL, *q.chain_params(session_id))
        return {row[0]: rows.usage_totals(tuple(row[1:])) for row in found}

    async def usage_by_session(self, session_ids: list[str]) -> dict[str, UsageTotals]:
        found = await self.fetch(q.USAGE_BY_SESSION, list(session_ids))
        return {row[0]: rows.usage_totals(tuple(row[1:])) for row in found}

    async def chat_summaries(self) -> list[ChatSummary]:
        async def work(con: q.Con) -> list[ChatSummary]:
            return rows.chat_summaries(await con.fetch(rows.CHAT_SUMMARIES),
                                       await con.fetch(rows.USAGE_BY_CHAT))
        return await self._run(work)

    async def session_messages(self, session_id: str, start: int,
                               limit: int) -> list[StoredMessage]:
        found = await self.fetch(q.SESSION_PAGE, session_id, start, limit)
        return [rows.stored_message(row) for row in found]

    async def usage_by_day(self) -> dict[str, dict[str, UsageTotals]]:
        day = "to_char(to_timestamp(at) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"
        return rows.usage_by_day(await self.fetch(rows.USAGE_BY_DAY.format(day=day)))

    async def session_tokens(self, chat_key: str) -> dict[str, tuple[int, int]]:
        found = await self.fetch(rows.SESSION_TOKENS.format(key="$1"), chat_key)
        return {row[0]: (int(row[1]), int(row[2])) for row in found}

    async def chat_activity(self, chat_key: str | None = None) -> list[ChatActivity]:
        found = await self.fetch(q.CHAT_ACTIVITY, chat_key)
        return [ChatActivity(row[0], row[1], float(row[2])) for row in found]

    # --- settings --------------------------------------------------------------------
    async def get_setting(self, key: str) -> str | None:
        found = await self.fetch(q.GET_SETTING, key)
        return None if not found else str(found[0][0])

    async def put_setting(self, key: str, value: str) -> None:
        await self._execute(q.PUT_SETTING, key, value, time.time())
