"""A stored message made into work for its chat: a command answered now or queued in the
chat's order, a one-sentence refusal, or a message job; with several processes sharing
the database the job goes to whichever process holds the chat (cluster.py).

New messages are routed here by the intake (inbound/); rows stored earlier are routed
here again by recovery.py after a restart and by the cluster when it adopts another
process's rows, so every way in meets the same rules."""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass

from gateway.delivery.outbound import Outbound
from gateway.turns.attachments import AttachmentReader
from gateway.turns.cluster import Cluster
from gateway.turns.commands import CommandTable, Invocation, parse_command
from gateway.turns.conversations import Conversations
from gateway.turns.jobs import CommandJob, Job, MessageJob, message_of
from gateway.turns.router import ChatRouter
from gateway.turns.worker import ChatWorker
from platforms.base import InboundMessage
from platforms.text import visible
from storage.base import SessionStore
from storage.models import InboundRecord


@dataclass(eq=False, kw_only=True)
class Routing:
    store: SessionStore
    outbound: Outbound
    conversations: Conversations
    reader: AttachmentReader
    commands: CommandTable
    worker: ChatWorker
    router: ChatRouter
    # Several processes on one database: chat leases decide who answers. Set by wiring
    # once built, since the cluster adopts rows through this routing.
    cluster: Cluster | None = None

    def unreadable(self, msg: InboundMessage) -> str | None:
        """Why a message cannot be answered, in one sentence to its sender; None: it can."""
        refusal = self.reader.refusal(msg)  # attachments all declined, by what they are
        if refusal:
            return refusal
        if not visible(msg.text) and not msg.attachments:
            return "That message was empty."
        return self.conversations.too_long(msg.text)

    async def route(self, msg: InboundMessage, record: InboundRecord,
                    command: Invocation | None) -> Awaitable[object] | None:
        """A stored inbound message: a command, a refusal, or a job for the chat's worker.
        Returns what remains to be said (an immediate command's answer, a refusal)."""
        if command is not None:
            return await self._command(msg, record, command)
        refusal = self.unreadable(msg)
        if refusal:
            await self.store.finish_inbound([record.id], "failed")
            return self.outbound.answer(msg.chat, refusal, msg.message_id)
        await self._enqueue(msg.chat_key, MessageJob(msg.chat, record))
        return None

    async def routed(self, msg: InboundMessage, record: InboundRecord) -> None:
        """Route a stored row and wait for what is said about it (recovery, adoption)."""
        command = parse_command(record.text) if msg.may_command else None
        after = await self.route(msg, record, command)
        if after is not None:
            await after

    async def adopt(self, record: InboundRecord) -> None:
        """A pending ledger row another process stored or left: routed as if received."""
        await self.routed(message_of(record), record)

    async def _command(self, msg: InboundMessage, record: InboundRecord,
                       invocation: Invocation) -> Awaitable[object] | None:
        """Session-changing commands queue behind the chat's turns; the rest answer now
        (the answer is returned, to be awaited after the message is accepted)."""
        command = self.commands.find(invocation.name)
        # In the chat's order, whoever sent it (an unknown command is answered in order
        # too); whether the sender may run it is asked there, by the worker, so an admin
        # lookup never lets the next message overtake this one.
        if command is None or command.serial:
            name = command.name if command is not None else invocation.name
            await self._enqueue(msg.chat_key, CommandJob(msg, record, name, invocation.args))
            return None
        if self.cluster is not None and not self.cluster.may_act(msg.chat_key):
            # It acts on the turn running now (/stop), which runs where the chat is held:
            # there it goes, as any message; the holder answers it at once.
            await self.cluster.enqueue(msg.chat_key, CommandJob(msg, record, invocation.name,
                                                                invocation.args))
            return None
        return self.worker.run_command(msg, record, invocation.name, invocation.args,
                                       chat=self.router.running(msg.chat_key))

    async def _enqueue(self, chat_key: str, job: Job) -> None:
        """To this chat's worker, here, or (sharing a database) to whoever holds the chat."""
        if self.cluster is None:
            self.router.submit(chat_key, job)
        else:
            await self.cluster.enqueue(chat_key, job)
