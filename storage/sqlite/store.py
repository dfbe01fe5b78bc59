"""SessionStore on SQLite: one connection driven by a single writer task, WAL, group commit.

Several processes may open the same file (the CLI while the gateway runs), so every rule
that matters is enforced by SQL: BEGIN IMMEDIATE transactions that re-check state, UNIQUE
constraints, and a partial unique index allowing one compression child per session.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import replace
from typing import Any, TypeVar

from storage import rows
from storage.base import SessionStore
from storage.errors import StoreError
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
from storage.sqlite import continuation, integrity, spending
from storage.sqlite import queries as q
from storage.sqlite.connection import Db, SqliteConnection
from storage.sqlite.deliveries import DeliveryRows
from storage.sqlite.observed import ObservedRows
from storage.sqlite.opening import Access
from storage.sqlite.spending import SpendRows

log = logging.getLogger(__name__)
T = TypeVar("T")


LIGHT_HISTORY = 500  # messages a history may have to be read on the loop itself
_RUN_KEY = integrity.RUN_KEY


class SqliteSessionStore(DeliveryRows, ObservedRows, SpendRows, SessionStore):
    """The embedded store: `async with SqliteSessionStore(path) as store: ...`."""

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_ms: int = 5000,
                 lock_retries: int = 5, max_live_chats: int = MAX_CHATS,
                 access: Access = "upgrade") -> None:
        """`access`: how the file is opened, and who may upgrade it (opening.py)."""
        self._conn = SqliteConnection(path, busy_timeout_ms=busy_timeout_ms,
                                      lock_retries=lock_retries, access=access)
        self._path = self._conn.path
        self._read = self._conn.read
        self._write = self._conn.write
        self._write_statement = self._conn.write_statement
        self.stats = self._conn.stats
        self._live = LiveSessions(max_live_chats)

    @property
    def path(self) -> str:
        return self._path

    async def __aenter__(self) -> SqliteSessionStore:
        await self.initialize()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # --- lifecycle -------------------------------------------------------------------
    async def initialize(self) -> None:
        """Open the file in the store's way (for `upgrade`: create the directory, set the
        pragmas and migrate); StoreError names the path."""
        await self._conn.open()

    async def begin_run(self) -> bool:
        """A gateway starts: True when the previous run did not end cleanly, in which case
        the file was checked (PRAGMA quick_check) and a damaged one refused. Beside a live
        gateway (a `chat` beside the service) there is nothing to check, and it stays the
        one named: each clears only its own name when it stops."""
        previous = await self.get_setting(_RUN_KEY)
        if previous and integrity.still_running(previous):
            return False
        if previous:
            log.warning("the previous run (pid %s) did not end cleanly; checking %s",
                        previous, self._path)
            if problem := await asyncio.to_thread(self._quick_check):
                raise StoreError(integrity.damaged(self._path, problem))
        await self.put_setting(_RUN_KEY, str(os.getpid()))
        return bool(previous)

    async def end_run(self) -> None:
        """The gateway stops cleanly: the next start needs no check."""
        await self._write_statement(q.END_RUN, (time.time(), _RUN_KEY, str(os.getpid())))

    def _quick_check(self) -> str | None:
        with closing(self._conn.plain()) as db:
            return integrity.quick_check(db)

    async def backup(self, dest: str | os.PathLike[str]) -> None:
        """A consistent copy at `dest` (SQLite's online backup), while others write."""
        if self._path == ":memory:":
            raise StoreError("an in-memory database cannot be backed up")
        if problem := integrity.unsafe_target(self._path, str(dest)):
            raise StoreError(f"backup refused: {problem}")

        def copy() -> None:
            with closing(self._conn.plain()) as source:
                integrity.copy_to(source, str(dest), self._path)

        try:
            await asyncio.to_thread(copy)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"backing up {self._path} to {dest} failed: {exc}") from exc

    async def shutdown(self) -> None:
        await self._conn.close()
        self._live.clear()

    # --- sessions and chains ---------------------------------------------------------
    async def live_session(self, chat_key: str) -> SessionRecord | None:
        """From memory while this process knows the chat; else one read, remembered."""
        known = self._live.get(chat_key)
        if known is not None:
            return known
        found = await self._read(lambda db: q.live_session(db, chat_key))
        if found is not None:
            self._live.put(found)
        return found

    async def create_root_session(self, chat_key: str, *, model: str | None,
                                  system_prompt: str | None,
                                  system_message: NewMessage | None = None) -> SessionRecord:
        return await self._then(
            None, lambda db: q.new_root(db, chat_key, model, system_prompt, system_message),
            self._live.put)

    def forget_chat(self, chat_key: str) -> None:
        self._live.forget_chat(chat_key)

    async def open_session(self, chat_key: str, *, model: str | None,
                           system_prompt: str | None,
                           system_message: NewMessage | None = None) -> SessionRecord:
        """The chat's live session; a new root only when there is none, in one transaction."""
        known = self._live.get(chat_key)
        if known is not None:
            return known

        def work(db: Db) -> SessionRecord:
            live = q.live_session(db, chat_key)
            if live is not None:
                return live
            return q.new_root(db, chat_key, model, system_prompt, system_message)
        return await self._then(None, work, self._live.put)

    async def get_session(self, session_id: str) -> SessionRecord | None:
        return await self._read(lambda db: q.load_session(db, session_id))

    async def end_session(self, session_id: str, reason: str) -> None:
        if reason == "compression":
            raise StoreError("a session ends by compression only through record_turn")

        def work(db: Db) -> None:
            q.end_reason_of(db, session_id)  # an unknown id is an error
            db.execute(q.END_SESSION, (reason, time.time(), session_id))
        await self._then(session_id, work, lambda _: self._live.forget(session_id))

    async def get_compression_tip(self, session_id: str) -> str:
        params = q.chain_params(session_id)
        tip, depth = await self._read(lambda db: q.fetch_one(db, q.TIP, params))
        if depth >= q.MAX_CHAIN_DEPTH:
            log.warning("compression chain from %s is cyclic or deeper than %d steps",
                        session_id, q.MAX_CHAIN_DEPTH)
        return str(tip)

    async def chain(self, session_id: str) -> list[SessionRecord]:
        params = q.chain_params(session_id)
        return await self._read(
            lambda db: q.fetch_all(db, q.CHAIN_SESSIONS, params, rows.session_record), heavy=True)

    async def list_sessions(self, chat_key: str | None = None,
                            limit: int = 200) -> list[SessionRecord]:
        """Newest first, with message count and the session's own usage totals."""
        params = {"key": chat_key, "limit": limit}
        return await self._read(
            lambda db: q.fetch_all(db, q.SESSION_BY_CHAT, params, rows.session_record), heavy=True)

    async def save_engine_state(self, session_id: str, state: dict[str, Any],
                                last_prompt_tokens: int | None = None) -> None:
        await self._then(session_id,
                         lambda db: q.save_state(db, session_id, state, last_prompt_tokens),
                         self._live.put)

    # --- messages --------------------------------------------------------------------
    async def load_history(self, session_id: str) -> list[StoredMessage]:
        """On the loop when the session is known to be short; else in the reader thread."""
        known = self._live.of(session_id)
        heavy = known is None or known.message_count > LIGHT_HISTORY
        return await self._read(
            lambda db: q.fetch_all(db, q.HISTORY, (session_id,), rows.stored_message),
            heavy=heavy)

    async def message(self, row_id: int) -> StoredMessage | None:
        found = await self._read(
            lambda db: q.fetch_all(db, q.MESSAGE_BY_ID, (row_id,), rows.stored_message))
        return found[0] if found else None

    async def append_messages(self, session_id: str,
                              messages: list[NewMessage]) -> list[StoredMessage]:
        """Append after the session's last seq; ContinuationConflict if it was continued."""
        def work(db: Db) -> list[StoredMessage]:
            q.require_open(db, session_id)
            return q.append(db, session_id, messages, time.time())
        return await self._then(session_id, work,
                                lambda stored: self._live.grew(session_id, len(stored)))

    async def record_turn(self, session_id: str, turn: TurnRecord) -> SessionRecord:
        def work(db: Db) -> SessionRecord:
            now = time.time()
            if turn.before or turn.after or turn.compaction is not None:
                q.require_open(db, session_id, continuing=turn.compaction is not None)
            else:  # only the ledger, usage or engine state: fine on an ended session too
                q.end_reason_of(db, session_id)
            before = q.append(db, session_id, turn.before, now)
            live_id = session_id
            if turn.compaction is not None:
                live_id = continuation.continue_session(db, session_id, turn.compaction,
                                                              now, len(before))
            after = q.append(db, live_id, turn.after, now)
            reply = (after or before or [None])[-1]
            q.set_reply(db, turn.replied, reply)
            if turn.replied and reply is not None:
                q.insert_delivery(db, turn.replied[-1], reply.id, turn.delivery)
            q.mark_inbound(db, (), turn.failed)
            # A turn's usage is booked on the session it started in; totals are chain-wide.
            q.insert_usage(db, session_id, turn.usage, now)
            spending.release(db, turn.release_hold)
            return q.save_state(db, live_id, turn.engine_state, turn.last_prompt_tokens)
        # A continuation's record replaces its parent as the chat's live session.
        return await self._then(session_id, work, self._live.put)

    async def _then(self, session_id: str | None, work: Callable[[Db], T],
                    update: Callable[[T], None]) -> T:
        """A write, and the live map updated from its result as soon as it committed,
        also when the caller was cancelled meanwhile; after a failure what we remembered
        of `session_id` is dropped (another process may have moved the chat on)."""
        future = self._conn.submit(work, write=True)

        def settled(done: asyncio.Future[T]) -> None:
            if not done.cancelled() and done.exception() is None:
                update(done.result())
            elif session_id is not None:
                self._live.forget(session_id)
        future.add_done_callback(settled)
        return await asyncio.shield(future)

    async def search(self, query: str, chat_key: str | None = None,
                     limit: int = 50) -> list[SearchHit]:
        match = q.fts_match(query)
        if match is None:
            return []
        params = {"match": match, "key": chat_key, "limit": limit}
        try:
            return await self._read(
                lambda db: q.fetch_all(db, q.SEARCH, params, rows.search_hit), heavy=True)
        except StoreError as exc:
            raise StoreError(f"search for {query!r} failed: {exc.__cause__ or exc}") from exc

    # --- the inbound ledger ----------------------------------------------------------
    async def ingest(self, *, platform: str, chat_id: str, message_id: str, chat_key: str,
                     text: str, sender_id: str | None, sender_name: str | None,
                     extra: dict[str, Any] | None = None) -> InboundRecord | None:
        record = InboundRecord(0, platform, chat_id, message_id, chat_key, text, sender_id,
                               sender_name, time.time(), "pending", None, dict(extra or {}))

        row = await self._write_statement(q.INGEST, rows.inbound_values(record))
        return replace(record, id=row[0]) if row else None

    async def take_inbound(self, inbound_ids: list[int], session_id: str,
                           messages: list[NewMessage],
                           texts: Sequence[str] | None = None) -> list[StoredMessage]:
        """Append (answered=False) and mark the pending rows taken, atomically.

        Each row links to the message carrying its platform message id, else to the message
        at its position when there are as many messages as rows, else to the last message.
        """
        unanswered = [m if m.answered is not None else replace(m, answered=False)
                      for m in messages]

        def work(db: Db) -> list[StoredMessage]:
            q.require_open(db, session_id, live=True)  # new messages never go to an ended one
            stored = q.append(db, session_id, unanswered, time.time())
            q.take_inbound(db, inbound_ids, stored, texts)
            return stored
        return await self._then(session_id, work,
                                lambda stored: self._live.grew(session_id, len(stored)))

    async def find_inbound(self, platform: str, chat_id: str,
                           message_id: str) -> InboundRecord | None:
        found = await self._read(lambda db: q.fetch_all(
            db, q.FIND_INBOUND, (platform, chat_id, message_id), rows.inbound_record))
        return found[0] if found else None

    async def update_inbound_text(self, platform: str, chat_id: str, message_id: str,
                                  text: str) -> str | None:
        key = (platform, chat_id, message_id)
        return await self._write(lambda db: q.update_pending_text(db, key, text))

    async def finish_inbound(self, inbound_ids: list[int], status: str) -> None:
        if status not in ("answered", "failed"):
            raise StoreError(f"an inbound row finishes answered or failed, not {status!r}")
        await self._write_statement(q.FINISH_INBOUND, (status, json.dumps(list(inbound_ids))))

    async def retry_inbound(self, inbound_ids: list[int], *, undo: bool = False) -> None:
        await self._write_statement(q.UNDO_ATTEMPT if undo else q.RETRY_INBOUND,
                                    (json.dumps(list(inbound_ids)),))

    async def inbound(self, inbound_ids: list[int]) -> list[InboundRecord]:
        ids = json.dumps(list(inbound_ids))
        return await self._read(
            lambda db: q.fetch_all(db, q.INBOUND_BY_IDS, (ids,), rows.inbound_record))

    async def open_inbound(self, chat_key: str | None = None) -> list[InboundRecord]:
        return await self._read(
            lambda db: q.fetch_all(db, q.OPEN_INBOUND, (chat_key,), rows.inbound_record),
            heavy=chat_key is None)

    async def latest_inbound(self, platform: str) -> list[InboundRecord]:
        return await self._read(lambda db: q.fetch_all(db, q.LATEST_INBOUND, (platform,),
                                                       rows.inbound_record), heavy=True)

    # --- usage -----------------------------------------------------------------------
    async def record_usage(self, session_id: str, usage: UsageRecord) -> None:
        def work(db: Db) -> None:
            q.end_reason_of(db, session_id)  # an unknown id is an error
            q.insert_usage(db, session_id, (usage,), time.time())
        self._live.forget(session_id)  # its usage totals change: read it again when asked
        await self._write(work)

    async def usage_totals(self, session_id: str) -> UsageTotals:
        params = q.chain_params(session_id)
        row = await self._read(lambda db: q.fetch_one(db, q.USAGE_TOTALS, params), heavy=True)
        return rows.usage_totals(row)

    async def usage_by_model(self, session_id: str) -> dict[str, UsageTotals]:
        params = q.chain_params(session_id)
        return dict(await self._read(lambda db: q.fetch_all(
            db, q.USAGE_BY_MODEL, params, lambda r: (r[0], rows.usage_totals(r[1:]))), heavy=True))

    async def usage_by_session(self, session_ids: list[str]) -> dict[str, UsageTotals]:
        ids = json.dumps(list(session_ids))
        return dict(await self._read(lambda db: q.fetch_all(
            db, q.USAGE_BY_SESSION, (ids,), lambda r: (r[0], rows.usage_totals(r[1:]))),
            heavy=True))

    async def chat_summaries(self) -> list[ChatSummary]:
        def work(db: Db) -> list[ChatSummary]:
            return rows.chat_summaries(db.execute(rows.CHAT_SUMMARIES).fetchall(),
                                       db.execute(rows.USAGE_BY_CHAT).fetchall())
        return await self._read(work, heavy=True)

    async def session_messages(self, session_id: str, start: int,
                               limit: int) -> list[StoredMessage]:
        return await self._read(lambda db: q.fetch_all(
            db, q.SESSION_PAGE, (session_id, start, limit), rows.stored_message))

    async def usage_by_day(self) -> dict[str, dict[str, UsageTotals]]:
        sql = rows.USAGE_BY_DAY.format(day="strftime('%Y-%m-%d', at, 'unixepoch')")
        return rows.usage_by_day(await self._read(
            lambda db: db.execute(sql).fetchall(), heavy=True))

    async def session_tokens(self, chat_key: str) -> dict[str, tuple[int, int]]:
        found = await self._read(lambda db: q.fetch_all(
            db, rows.SESSION_TOKENS.format(key="?"), (chat_key,), tuple), heavy=True)
        return {row[0]: (int(row[1]), int(row[2])) for row in found}

    async def chat_activity(self, chat_key: str | None = None) -> list[ChatActivity]:
        return await self._read(lambda db: q.fetch_all(
            db, q.CHAT_ACTIVITY, (chat_key,), lambda r: ChatActivity(r[0], r[1], float(r[2]))),
            heavy=True)

    # --- settings --------------------------------------------------------------------
    async def get_setting(self, key: str) -> str | None:
        row = await self._read(lambda db: q.fetch_one(db, q.GET_SETTING, (key,)))
        return None if row is None else str(row[0])

    async def put_setting(self, key: str, value: str) -> None:
        await self._write_statement(q.PUT_SETTING, (key, value, time.time()))
