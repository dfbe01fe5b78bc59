"""What a chat's worker does with a batch: answer it, run a command, or resend a reply.

Every batch has two phases. The model's part runs as a task that /stop may cancel (and
a quick follow-up message may supersede); then the result is written and sent, which
nothing cancels: a stop either wins before the write, or loses and the reply arrives.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterator
from typing import TypeVar

from agent.messages import content_text
from gateway import commands as cmd
from gateway.conversation import Conversations, Outgoing
from gateway.router import CommandJob, Job, MessageJob, ResendJob, Running
from platforms.base import ChatRef, InboundMessage, PlatformAdapter
from platforms.text import split_message
from storage.base import SessionStore
from storage.models import InboundRecord

log = logging.getLogger(__name__)

T = TypeVar("T")

TYPING_REFRESH_S = 4.0
GENERIC_FAILURE = "Sorry, something went wrong on my side. Please try again."
STOPPED = "Stopped. Your message is kept; send another when ready."
CUT_OFF = ("My reply to this was cut off by a restart and could not be recovered. "
           "Please send it again.")


class ChatWorker:
    """Processes one chat's batches, called by the router in the chat's order."""

    def __init__(self, store: SessionStore, conversations: Conversations,
                 adapters: dict[str, PlatformAdapter]) -> None:
        self.store = store
        self.conversations = conversations
        self.adapters = adapters

    async def process(self, chat_key: str, running: Running) -> None:
        job = running.jobs[0]
        if isinstance(job, CommandJob):
            await self._command(chat_key, running, job)
        elif isinstance(job, ResendJob):
            await self._resend(job)
        else:
            await self._answer(chat_key, running)

    # --- the two phases ---------------------------------------------------------------------
    @staticmethod
    async def _until_stopped(running: Running, work: Awaitable[T]) -> T | None:
        """Run the stoppable part; None when a stop (or a newer message) cancelled it."""
        running.stoppable = task = asyncio.ensure_future(work)
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task.cancelled() and running.stop_reason and not (current and current.cancelling()):
                return None
            raise

    async def _answer(self, chat_key: str, running: Running) -> None:
        jobs = [job for job in running.jobs if isinstance(job, MessageJob)]
        chat, records = jobs[0].chat, [job.record for job in jobs]
        ids = tuple(r.message_id for r in records)
        typing = asyncio.create_task(self._keep_typing(chat))
        failure: str | None = None
        try:
            prepared = await self._until_stopped(
                running, self.conversations.prepare(chat, records))
        except Exception:
            log.exception("turn failed in %s", chat_key)
            prepared, failure = None, "failed"
        finally:
            typing.cancel()
        if prepared is None:
            return await self._not_answered(chat, records, failure or running.stop_reason)
        try:
            outgoing = await self.conversations.commit(prepared)
        except Exception:
            log.exception("storing the turn failed in %s", chat_key)
            return await self._not_answered(chat, records, "failed")
        accepted = await self._send_all(chat, outgoing)
        if prepared.result is not None:
            if accepted:
                await self.store.finish_inbound([r.id for r in records], "answered")
            else:
                log.warning("chat %s: the reply was not accepted; it is kept and sent again "
                            "after a restart", chat_key)
        await self.delivered(chat, ids)

    async def _not_answered(self, chat: ChatRef, records: list[InboundRecord],
                            reason: str | None) -> None:
        """A turn that produced nothing: superseded (silently), stopped, or failed."""
        failed = reason != "superseded"
        await asyncio.shield(self.conversations.abandon(chat.key, records, failed=failed))
        if not failed:
            return  # the router answers these together with the newer message
        text = STOPPED if reason == "stop" else GENERIC_FAILURE
        await self.send(chat, text, None if reason == "stop" else records[-1].message_id)
        await self.delivered(chat, tuple(r.message_id for r in records))

    async def _command(self, chat_key: str, running: Running, job: CommandJob) -> None:
        try:
            if job.name == "new":
                await self.conversations.reset(chat_key)
                reply = "Started a fresh conversation. The old one stays stored."
            else:
                reply = await self._compress(chat_key, running, job.args)
        except Exception:
            log.exception("/%s failed in %s", job.name, chat_key)
            reply = GENERIC_FAILURE
        await self.finish_command(job.msg, job.record, reply)

    async def _compress(self, chat_key: str, running: Running, focus: str) -> str:
        prepared = await self._until_stopped(
            running, self.conversations.prepare_compaction(chat_key, focus or None))
        if prepared is None:
            self.conversations.forget(chat_key)
            return "Stopped: the conversation was not compressed."
        return await cmd.finish_compress(self.conversations, chat_key, prepared)

    async def _resend(self, job: ResendJob) -> None:
        records = list(job.records)
        row = records[0].reply_row_id
        stored = await self.store.message(row) if row is not None else None
        text = content_text(stored.message.get("content")) if stored else ""
        if await self.send(job.chat, text.strip() or CUT_OFF, records[-1].message_id):
            await self.store.finish_inbound([r.id for r in records], "answered")
        await self.delivered(job.chat, tuple(r.message_id for r in records))

    # --- outbound ---------------------------------------------------------------------
    async def finish_command(self, msg: InboundMessage, record: InboundRecord,
                             reply: str) -> None:
        await self.store.finish_inbound([record.id], "answered")
        await self.send(msg.chat, reply, msg.message_id)
        await self.delivered(msg.chat, (msg.message_id,))

    async def _send_all(self, chat: ChatRef, outgoing: list[Outgoing]) -> bool:
        """Send in order; True when the reply itself was accepted by the platform."""
        accepted = False
        for item in outgoing:
            sent = await self.send(chat, item.text, item.reply_to)
            accepted = accepted or (sent and item.is_reply)
        return accepted

    async def send(self, chat: ChatRef, text: str, reply_to: str | None = None) -> bool:
        """Split and send; False (logged) when the platform refused any part of it."""
        adapter = self.adapters.get(chat.platform)
        if adapter is None:
            log.warning("no adapter for %s; dropping a reply to %s", chat.platform, chat.key)
            return False
        for chunk in split_message(text, adapter.max_message_length):
            try:
                await adapter.send(chat, chunk, reply_to)
            except Exception:
                log.exception("%s: sending to %s failed", adapter.name, chat.key)
                return False
            reply_to = None
        return True

    async def delivered(self, chat: ChatRef, message_ids: tuple[str, ...]) -> None:
        adapter = self.adapters.get(chat.platform)
        if adapter is not None:
            await adapter.delivered(chat, message_ids)

    async def _keep_typing(self, chat: ChatRef) -> None:
        adapter = self.adapters.get(chat.platform)
        if adapter is None:
            return
        while True:
            try:
                await adapter.typing(chat)
            except Exception as exc:  # typing is a nicety; never fail a turn for it
                log.debug("typing failed in %s: %s", chat.key, exc)
            await asyncio.sleep(TYPING_REFRESH_S)


def recovery_jobs(open_rows: list[InboundRecord]
                  ) -> Iterator[tuple[str, Job | tuple[InboundMessage, InboundRecord]]]:
    """What to do, in order, with the ledger rows a stop or crash left open.

    A stored reply is resent (rows sharing it together); a taken message is answered
    again; a pending row is handed back as the message it was, to be routed like new.
    """
    resend: list[InboundRecord] = []
    for record in [*open_rows, None]:
        if resend and (record is None or record.reply_row_id != resend[0].reply_row_id
                       or record.chat_key != resend[0].chat_key):
            yield resend[0].chat_key, ResendJob(chat_of(resend[0]), tuple(resend))
            resend = []
        if record is None:
            break
        log.info("recovering message %s in %s (%s)", record.message_id, record.chat_key,
                 "reply pending" if record.reply_row_id else record.status)
        if record.reply_row_id is not None:
            resend.append(record)
        elif record.status == "taken":
            yield record.chat_key, MessageJob(chat_of(record), record)
        else:
            yield record.chat_key, (message_of(record), record)


def chat_of(record: InboundRecord) -> ChatRef:
    return ChatRef(record.platform, record.chat_id, record.extra.get("thread_id"))


def message_of(record: InboundRecord) -> InboundMessage:
    """The inbound message a ledger row was made from, as far as the row remembers it."""
    extra = record.extra
    return InboundMessage(
        platform=record.platform, chat_id=record.chat_id, user_id=record.sender_id or "",
        message_id=record.message_id, text=record.text, thread_id=extra.get("thread_id"),
        user_name=record.sender_name, is_group=bool(extra.get("is_group")),
        is_admin_hint=bool(extra.get("admin_hint")))
