"""What a chat's worker does with a batch: answer it, run a command, or resend a reply.

Every batch has two phases. The model's part runs as a task that /stop may cancel (and
a quick follow-up message may supersede); then the result is written and sent, which
nothing cancels: a stop either wins before the write, or loses and the reply arrives.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from gateway.auth import Authorizer
from gateway.delivery.outbound import Outbound
from gateway.delivery.streaming import LiveReply, Streaming, mark_stopped
from gateway.metrics import Metrics
from gateway.turns.attachments import AttachmentReader, Reading
from gateway.turns.commands import CommandCall, CommandTable, Refusal
from gateway.turns.conversations import Conversations, NothingLeft
from gateway.turns.jobs import (
    CommandJob,
    HoldJob,
    MessageJob,
    ResendJob,
    Running,
    Stopped,
    chat_of,
)
from gateway.turns.outages import Outages
from gateway.turns.resets import Resets
from gateway.turns.spend_gate import SpendGate, admit, release
from gateway.turns.turn_records import Prepared, out_chunks
from platforms.base import ChatRef, InboundMessage
from storage.base import SessionStore
from storage.coordination import Fence, fenced
from storage.errors import LeaseLost, StoreUnavailable
from storage.models import Delivery, InboundRecord

log = logging.getLogger(__name__)
T = TypeVar("T")

GENERIC_FAILURE = "Sorry, something went wrong on my side. Please try again."
STOPPED = "Stopped. Your message is kept; send another when ready."
CUT_OFF = ("My reply to this was cut off by a restart and could not be recovered. "
           "Please send it again.")
SKIPPED = ("I could not handle that message: trying to answer it stopped me twice, so I "
           "skipped it.")
MAX_ATTEMPTS = 2  # turns started on one message before it is skipped as poison


class ChatWorker(Outages):
    """Processes one chat's batches, called by the router in the chat's order."""

    def __init__(self, store: SessionStore, conversations: Conversations, outbound: Outbound,
                 commands: CommandTable, auth: Authorizer, resets: Resets,
                 metrics: Metrics, streaming: Streaming, reader: AttachmentReader) -> None:
        self.store = store
        self.reader = reader
        self.streaming = streaming
        self.resets = resets
        self.metrics = metrics
        self.conversations = conversations
        self.outbound = outbound
        self.commands = commands
        self.auth = auth
        self.pulse: Callable[[], float] | None = None  # the loop's worst stall, for /status
        self.spending = SpendGate(conversations.budgets, conversations, auth, store,
                                  outbound) if conversations.budgets else None  # budgets
        self.platforms_down: Callable[[], list[str]] = list  # for /status (service/connections.py)
        # With several processes: only while its lease surely holds (cluster.py).
        self.may_act: Callable[[str], bool] = lambda chat_key: True
        self.forfeit: Callable[[str, Callable[[], Awaitable[None]] | None], None] = \
            lambda chat_key, first: None  # when it said no
        # This process's take of the chat, which the batch's writes and sends carry.
        self.fence_of: Callable[[str], Fence | None] = lambda chat_key: None

    async def process(self, chat_key: str, running: Running) -> None:
        """One batch, under the take of the chat it began with: once the chat was taken
        again (by another process, or lost and taken back by this one), the store refuses
        the batch's writes and the outbound path its sends (LeaseLost), and the batch is
        dropped unsaid (docs/scale-out.md, "Fencing")."""
        job = running.jobs[0]
        if isinstance(job, HoldJob):
            await job.release.wait()
            return
        with fenced(self.fence_of(chat_key)):
            try:
                if isinstance(job, CommandJob):
                    await self._command(chat_key, running, job)
                elif isinstance(job, ResendJob):
                    await self._resend(job)
                else:
                    await self._answer_through_outages(chat_key, running)
            except LeaseLost as exc:
                self._give_up(chat_key, f"another process holds it now ({exc})")

    # --- running commands (also the immediate ones, outside the worker) --------------------
    async def run_command(self, msg: InboundMessage, record: InboundRecord, name: str,
                          args: str, *, chat: Running | None, own: Running | None = None
                          ) -> None:
        """Answer a command and finish its ledger row; failures become one sentence.

        `chat`: the batch the chat is running (what /stop would stop); `own`: this
        command's batch when it runs in the chat's order, whose model work /stop cancels.
        """
        command = self.commands.find(name)
        reply: str
        if command is None:
            reply = Refusal(f"Unknown command /{name}. {self.commands.help_text()}")
        elif command.access == "manage" and not await self.auth.may_manage(msg):
            reply = Refusal(f"/{command.name} is admin-only here.")
        else:
            call = CommandCall(msg, args, self.conversations, self.store, self.auth,
                               self.commands, chat, functools.partial(self._stoppable, own),
                               self.pulse, self.platforms_down)
            try:
                reply = await command.run(call)
            except LeaseLost:
                raise  # the chat is another's now: its holder runs the command
            except Exception:
                log.exception("/%s failed in %s", name, msg.chat_key)
                reply = GENERIC_FAILURE
        await self.store.finish_inbound([record.id], "answered")
        await self.outbound.answer(msg.chat, reply, msg.message_id,
                                   private=isinstance(reply, Refusal))

    async def _stoppable(self, running: Running | None, work: Awaitable[T]) -> T:
        """A serial command's model work, cancellable by /stop (then Stopped is raised)."""
        if running is None:
            return await work
        result = await self._until_stopped(running, work)
        if result is None and running.stop_reason:
            raise Stopped
        return result  # type: ignore[return-value]

    async def _command(self, chat_key: str, running: Running, job: CommandJob) -> None:
        if not self._still_ours(chat_key, "before a command"):
            return  # its new holder runs it
        await self.run_command(job.msg, job.record, job.name, job.args, chat=running,
                               own=running)

    # --- the two phases of a message batch ----------------------------------------------------
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
        if not self._still_ours(chat_key, "before its turn"):
            return
        jobs = [job for job in running.jobs if isinstance(job, MessageJob)]
        cut_short = [job.record for job in jobs if job.record.status == "taken"]
        records = await self._retried([job.record for job in jobs])
        chat = self.outbound.moves.resolve(jobs[0].chat)  # where the chat lives now
        chat_key = chat.key
        if cut_short:  # a turn cut short: its previews go, also when skipped as poison
            await self._clear_previews(chat, cut_short)
        if not records:
            return
        notice = await self.resets.before_turn(chat_key)  # a reset the chat has not heard of
        if notice:
            await self.outbound.send(chat, notice)
        try:
            records, parts = await self._read_attachments(chat, running, records)
        except Stopped:
            self.metrics.turns.labels("stop").inc()
            return await self._not_answered(chat, records, "stop")
        records, payer, model = await admit(self.spending, chat, records)
        if not records:
            return
        live = self.streaming.open(chat, records[-1].message_id, draft_id=records[-1].id)
        typing = asyncio.create_task(self.outbound.keep_typing(
            chat, until=(lambda: live.showing) if live else None))
        started = time.monotonic()
        failure: str | None = None
        try:
            prepared = await self._until_stopped(
                running, self.conversations.prepare(chat, records, live, parts, payer, model))
        except NothingLeft:  # every message of the batch was deleted while it waited
            prepared, failure = None, "deleted"
        except LeaseLost:  # another process took the chat: it answers
            prepared, failure = None, "lost"
        except StoreUnavailable as exc:
            prepared, failure = None, "unreachable"
            log.warning("chat %s: the database is out of reach (%s)", chat_key, exc)
        except Exception:
            log.exception("turn failed in %s", chat_key)
            prepared, failure = None, "failed"
        finally:
            typing.cancel()
            if live is not None:
                await asyncio.shield(live.close())
        if prepared is not None:
            return await self._commit(chat, records, prepared, live, started)
        await asyncio.shield(release(self.spending, payer))  # nothing will book its hold
        await self._unprepared(chat, records, running, live, failure)

    async def _unprepared(self, chat: ChatRef, records: list[InboundRecord], running: Running,
                          live: LiveReply | None, failure: str | None) -> None:
        """A turn that stored nothing: its chat moved, messages deleted, store down, stop."""
        if failure == "lost":  # the take was refused: only retried rows counted an attempt
            return self._give_up(chat.key, "another process holds it now",
                                 [r.id for r in records if r.status == "taken"])
        if failure == "deleted":
            log.info("chat %s: nothing left to answer (deleted before its turn)", chat.key)
            return
        if failure == "unreachable":
            return self._unreachable(chat, records)
        outcome = failure or running.stop_reason or "failed"
        self.metrics.turns.labels(outcome).inc()
        if outcome == "stop" and live is not None and live.written.strip():
            return await self._stopped_midway(chat, records, live)
        return await self._not_answered(chat, records, outcome, live)

    async def _commit(self, chat: ChatRef, records: list[InboundRecord], prepared: Prepared,
                      live: LiveReply | None, started: float) -> None:
        """Store the turn, then say it: notices, the reply (finishing its previews)."""
        previews = live.previews if live else ()
        if not self._still_ours(chat.key, "before storing its turn", [r.id for r in records]):
            return await self._charge(prepared)
        try:
            committed = await self.conversations.commit(
                prepared, functools.partial(self.outbound.render, chat), previews)
        except StoreUnavailable as exc:
            log.warning("chat %s: storing the turn failed: the database is out of reach (%s)",
                        chat.key, exc)
            return self._unreachable(chat, records)
        except LeaseLost:
            self._give_up(chat.key, "another process holds it now (nothing stored)",
                          [r.id for r in records])
            return await self._charge(prepared)
        except Exception:
            log.exception("storing the turn failed in %s", chat.key)
            self.metrics.turns.labels("failed").inc()
            return await self._not_answered(chat, records, "failed", live)
        self.metrics.turns.labels("failed" if prepared.failure else "answered").inc()
        self.metrics.turn_seconds.observe(time.monotonic() - started)
        if not self._still_ours(chat.key, "before sending its reply"):
            return  # stored: the chat's new holder sends it (a resend of a stored reply)
        # A reply already on screen is finished before notices about the turn: they may
        # not come between its parts (the console prints it as one run of text).
        shown = live is not None and live.showing
        if not shown:
            await self.outbound.send_all(chat, committed.before)
        if committed.failure is not None:
            await self.outbound.replace(chat, previews, committed.failure.text,
                                        committed.failure.reply_to)
        if committed.reply:
            await self._deliver(chat, records, committed.reply, live)
        await self.outbound.send_all(chat, (*(committed.before if shown else ()),
                                            *committed.after))
        await self.outbound.delivered(chat, tuple(r.message_id for r in records))

    async def _charge(self, prepared: Prepared) -> None:
        """A turn dropped after its model calls (the chat moved on): what they cost is still
        booked to the payer, and the turn's hold goes. A record of money spent, not of the
        conversation: written whoever holds the chat now."""
        with fenced(None):
            try:
                await asyncio.shield(self.conversations.charge(prepared))
            except StoreUnavailable as exc:
                log.warning("chat %s: the cost of a dropped turn was not booked (%s)",
                            prepared.chat_key, exc)

    async def _retried(self, records: list[InboundRecord]) -> list[InboundRecord]:
        """Messages to answer, leaving out poison. A taken message comes back only when a
        turn on it was cut short (a crash, a kill, the watchdog): one more attempt is
        counted before it runs, and a message that already had MAX_ATTEMPTS is finished
        with a short answer instead (docs/architecture.md, "Poison messages")."""
        again = [r for r in records if r.status == "taken"]
        if not again:
            return records
        poison = [r for r in again if r.attempts >= MAX_ATTEMPTS]
        for record in poison:
            log.warning("chat %s: message %s was tried %d times and stopped the gateway each "
                        "time; skipping it", record.chat_key, record.message_id,
                        record.attempts)
            await self._skip(record)
        retry = [r.id for r in again if r.attempts < MAX_ATTEMPTS]
        if retry:
            await self.store.retry_inbound(retry)
        return [r for r in records if r not in poison]

    async def _skip(self, record: InboundRecord) -> None:
        """Say SKIPPED to a poison message, durably: recorded for delivery first, the row
        open until the platform has it, so a kill in between says it on the next start."""
        chat = chat_of(record)
        notice = await self.store.deliveries(record.id)
        fresh = not notice
        if fresh:
            await self.store.record_notice(record.id, out_chunks(
                await self.outbound.render(chat, SKIPPED), ()))
            notice = await self.store.deliveries(record.id)
        await self._clear_previews(chat, [record])  # its cut-short previews
        if await self.outbound.deliver(chat, notice, record.message_id, just_stored=fresh):
            await self.store.finish_inbound([record.id], "failed")
            await self.outbound.delivered(chat, (record.message_id,))

    async def _read_attachments(self, chat: ChatRef, running: Running,
                                records: list[InboundRecord]
                                ) -> tuple[list[InboundRecord], dict[int, list[dict[str, Any]]]]:
        """Fetch and read what the new messages carry (typing meanwhile). A message left
        with nothing to answer is answered with why, and leaves the batch; the others
        hear in one message what was declined or noticed about their files.

        Reading is stoppable: /stop (but not a newer message, which would only make the
        same files be read again) cancels it, and the reading worker is killed. Raises
        Stopped then, with nothing said or written."""
        todo = [r for r in records if r.status == "pending" and r.extra.get("attachments")]
        if not todo:
            return records, {}
        typing = asyncio.create_task(self.outbound.keep_typing(chat))
        running.supersedable = False
        try:
            readings = await self._until_stopped(running, self._read_all(todo))
        finally:
            running.supersedable = True
            typing.cancel()
        if readings is None:
            raise Stopped
        kept, parts = list(records), {}
        for record, reading in zip(todo, readings, strict=True):
            said = "\n".join(reading.said)
            if not reading.parts and not record.text.strip():
                kept.remove(record)
                await self.store.finish_inbound([record.id], "failed")
                await self.outbound.answer(chat, said or GENERIC_FAILURE, record.message_id)
                continue
            parts[record.id] = reading.parts
            if said:
                await self.outbound.send(chat, said, record.message_id)
        return kept, parts

    async def _read_all(self, records: list[InboundRecord]) -> list[Reading]:
        # A coroutine, not a bare gather: cancelled, its task reads as cancelled (a stop).
        return await asyncio.gather(*(self.reader.read(r) for r in records))

    async def _stopped_midway(self, chat: ChatRef, records: list[InboundRecord],
                              live: LiveReply) -> None:
        """/stop during a streamed answer: what was written stays, marked, and is stored as
        the reply, so the chat and the transcript agree."""
        text = mark_stopped(live.written)
        try:
            committed = await asyncio.shield(self.conversations.commit_partial(
                chat.key, records, text, functools.partial(self.outbound.render, chat),
                live.previews))
        except Exception:
            log.exception("storing a stopped reply failed in %s", chat.key)
            return await self._not_answered(chat, records, "stop", live)
        await self._deliver(chat, records, committed.reply, live)
        await self.outbound.delivered(chat, tuple(r.message_id for r in records))

    async def _deliver(self, chat: ChatRef, records: list[InboundRecord],
                       reply: Sequence[Delivery], live: LiveReply | None = None, *,
                       recovered: bool = False) -> None:
        """Send a stored reply; the store marks its messages answered with the last chunk.
        Previews of a streamed reply become its chunks; previews left over go."""
        if live is not None:
            await live.settle()
        if not await self.outbound.deliver(chat, reply, records[-1].message_id,
                                           just_stored=not recovered):
            self.metrics.undelivered.labels(chat.platform).inc()
            log.warning("chat %s: part of a reply could not be sent; the rest goes out after "
                        "a restart", chat.key)
        if recovered or (live is not None and live.previews):  # any previews left over?
            used = {c.platform_message_id for c in reply if c.platform_message_id}
            await self._clear_previews(chat, records, keep=used)

    async def _clear_previews(self, chat: ChatRef, records: Sequence[InboundRecord], *,
                              keep: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        """Remove the previews recorded for these messages that the reply does not use:
        left over by a shorter final text, or by a turn a crash or a stop cut short."""
        ids = [r.id for r in records]
        shown = await self.store.previews(ids)
        if not shown:
            return
        leftover = [m for found in shown.values() for m in found if m not in keep]
        await self.outbound.discard(chat, leftover)
        await self.store.forget_previews(ids)

    async def _not_answered(self, chat: ChatRef, records: list[InboundRecord],
                            reason: str | None, live: LiveReply | None = None) -> None:
        """A turn that produced nothing: superseded (silently), stopped, or failed; its
        previews become the sentence (or go, when superseded)."""
        if not self._still_ours(chat.key, "before saying it failed"):
            return  # it failed because another process answered it meanwhile
        failed = reason != "superseded"
        try:
            await asyncio.shield(self.conversations.abandon(chat.key, records, failed=failed))
        except StoreUnavailable:
            return self._unreachable(chat, records)
        previews = live.previews if live else ()
        if not failed:
            await self.outbound.discard(chat, previews)
            if previews:
                await self._clear_previews(chat, records)
            return  # the router answers these together with the newer message
        text = STOPPED if reason == "stop" else GENERIC_FAILURE
        await self.outbound.replace(chat, previews, text,
                                    None if reason == "stop" else records[-1].message_id)
        if previews:
            await self._clear_previews(chat, records, keep=set(previews[:1]))
        await self.outbound.delivered(chat, tuple(r.message_id for r in records))

    async def _resend(self, job: ResendJob) -> None:
        """Finish a reply a crash or an outage cut short: exactly its missing chunks."""
        if not self._still_ours(job.chat.key, "before resending a reply"):
            return
        records = list(job.records)
        chunks = await self.store.deliveries(records[-1].id)
        if chunks:
            await self._deliver(job.chat, records, chunks, recovered=True)
        else:  # stored but never recorded for delivery: nothing reliable to resend
            await self.outbound.send(job.chat, CUT_OFF, records[-1].message_id)
            await self.store.finish_inbound([r.id for r in records], "answered")
        await self.outbound.delivered(job.chat, tuple(r.message_id for r in records))
