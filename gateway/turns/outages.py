"""A chat's turn when the ground moves under it: the store goes out of reach mid-turn, or
its disk fills (the chat waits in place and runs it again once the store takes writes), or,
with several processes, the chat's lease may have lapsed (the turn is dropped unsaid).
Mixed into ChatWorker (worker.py); see docs/scale-out.md and docs/operations.md."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import NoReturn

from gateway.turns.conversations import Conversations
from gateway.turns.jobs import MessageJob, ResendJob, Running
from platforms.base import ChatRef
from storage.base import SessionStore
from storage.errors import StoreError, StoreUnavailable
from storage.models import InboundRecord

log = logging.getLogger(__name__)
FIRST_PAUSE_S = 0.5  # before asking a store that failed again, doubling up to the longest
LONGEST_PAUSE_S = 10.0
WRITE_CHECK = "outage:write_check"  # the setting written to learn that writes work again


class Pauses:
    """The waits of one batch through its outages, each twice the last up to the longest.
    They grow across the batch's reruns too: a store that takes the check but fails the
    turn again (a disk with a few pages free) is not asked twice a second."""

    def __init__(self) -> None:
        self.next_s = FIRST_PAUSE_S

    async def wait(self) -> None:
        pause, self.next_s = self.next_s, min(self.next_s * 2, LONGEST_PAUSE_S)
        await asyncio.sleep(pause)


class StoreDown(Exception):
    """The store went out of reach mid-turn; the batch runs again once it answers."""


def jobs_chat(running: Running) -> ChatRef:
    return next(job.chat for job in running.jobs if isinstance(job, MessageJob))


class Outages:
    """Mixed into ChatWorker: its store, conversations, `_answer` and `_resend`."""

    store: SessionStore
    conversations: Conversations
    # With several processes: whether the chat's lease surely holds (cluster.py), and
    # what to do when it may not.
    may_act: Callable[[str], bool]
    forfeit: Callable[[str, Callable[[], Awaitable[None]] | None], None]

    async def _answer(self, chat_key: str, running: Running) -> None:
        raise NotImplementedError

    async def _resend(self, job: ResendJob) -> None:
        raise NotImplementedError

    async def _answer_through_outages(self, chat_key: str, running: Running) -> None:
        """Answer the batch. When the store goes out of reach mid-turn (or its disk is
        full), the chat waits in place (its later messages behind it: nothing overtakes)
        until the store takes a write, then what is still open runs again, or, when the turn's reply was stored after
        all (a commit whose answer was lost), is sent (docs/scale-out.md)."""
        resends: list[ResendJob] = []  # stored replies to finish before the rest runs
        answer = True  # messages of the batch still to answer
        pauses = Pauses()
        while True:
            try:
                while resends:
                    await self._resend(resends[0])
                    resends.pop(0)
                if answer:
                    await self._answer(chat_key, running)
                return
            except (StoreDown, StoreUnavailable):
                self.conversations.forget(chat_key)
                log.warning("chat %s: the turn runs again once the database is back", chat_key)
            jobs = [job for job in running.jobs if isinstance(job, MessageJob)]
            fresh = await self._once_stored([job.record.id for job in jobs], pauses)
            if not self._still_ours(chat_key, "once the database was back",
                                    [job.record.id for job in jobs]):
                return  # the chat moved on meanwhile: its new holder finishes it
            replied: dict[int, list[InboundRecord]] = {}
            for job in list(jobs):
                record = fresh.get(job.record.id)
                if record is not None and record.reply_row_id is not None:
                    replied.setdefault(record.reply_row_id, []).append(record)
                if record is None or record.status not in ("pending", "taken") \
                        or record.reply_row_id is not None:
                    jobs.remove(job)
                else:  # as new: its status is read again; an outage counts no attempt
                    job.record = dataclasses.replace(record, status="pending")
            waiting = {r.id for resend in resends for r in resend.records}
            resends += [ResendJob(jobs_chat(running), tuple(group)) for group in replied.values()
                        if not waiting & {r.id for r in group}]
            answer = bool(jobs)
            if jobs:
                running.jobs[:] = jobs

    async def _once_stored(self, ids: list[int], pauses: Pauses) -> dict[int, InboundRecord]:
        """The rows, read once the store takes a write again. Reading alone proves too
        little: a full disk still reads, and a turn run again too soon fetches and reads
        its files (a transcription costs) only to fail at its first write."""
        while True:
            await pauses.wait()
            try:
                await self.store.put_setting(WRITE_CHECK, f"{time.time():.0f}")
                return {r.id: r for r in await self.store.inbound(ids)}
            except StoreError:
                continue

    def _still_ours(self, chat_key: str, when: str, dropped: Sequence[int] = ()) -> bool:
        """Whether this process may still write and send for the chat: not once its lease
        may have lapsed (a pause); then the turn is dropped unsaid and the chat given up
        (docs/scale-out.md, "A paused process")."""
        if self.may_act(chat_key):
            return True
        self._give_up(chat_key, f"the lease may have lapsed {when}", dropped)
        return False

    def _give_up(self, chat_key: str, why: str, dropped: Sequence[int] = ()) -> None:
        """Drop the turn and the chat. The attempt the turn counted on its `dropped` rows
        is given back: a turn this process let go proves nothing about the message, and
        must not make it look like poison to the next holder."""
        log.warning("chat %s: %s; the turn is dropped and the chat given up", chat_key, why)
        self.conversations.forget(chat_key)
        ids = list(dropped)
        self.forfeit(chat_key, (lambda: self.store.retry_inbound(ids, undo=True))
                     if ids else None)

    def _unreachable(self, chat: ChatRef, records: list[InboundRecord]) -> NoReturn:
        """The store failed mid-turn: nothing is said, the messages stay open."""
        self.conversations.forget(chat.key)  # it may hold what was never stored
        raise StoreDown(chat.key)
