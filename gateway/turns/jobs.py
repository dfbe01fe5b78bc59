"""The work a chat's worker is given: typed jobs, the running batch, and what a restart
finds left to do."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

from gateway import clock
from platforms.base import Attachment, ChatRef, InboundMessage
from storage.models import InboundRecord

log = logging.getLogger(__name__)


class Stopped(Exception):
    """The stoppable part of a job was cancelled by /stop."""


@dataclass
class MessageJob:
    """A user message for the model; consecutive ones are answered in one turn."""

    chat: ChatRef
    record: InboundRecord
    arrived: float = field(default_factory=clock.monotonic)


@dataclass
class CommandJob:
    """A command that changes the session (/new, /compress): it runs in the chat's order."""

    msg: InboundMessage
    record: InboundRecord
    name: str
    args: str
    arrived: float = field(default_factory=clock.monotonic)


@dataclass
class ResendJob:
    """A reply stored before a restart but never accepted by the platform."""

    chat: ChatRef
    records: tuple[InboundRecord, ...]
    arrived: float = field(default_factory=clock.monotonic)


@dataclass
class HoldJob:
    """Holds a chat's queue until released: after a restart, a chat whose turn was cut
    short waits until other chats were served (gateway/turns/recovery.py)."""

    release: asyncio.Event
    arrived: float = field(default_factory=clock.monotonic)


Job = MessageJob | CommandJob | ResendJob | HoldJob


@dataclass
class Running:
    """The batch a chat's worker is processing, and the part of it a stop may cancel.

    The worker runs the model work as the `stoppable` task; once that task is done the
    results are being written and sent, a stop is too late and the reply is delivered.
    """

    jobs: list[Job]
    stoppable: asyncio.Task | None = None
    stop_reason: str | None = None  # stop | superseded
    supersedable: bool = True  # False while files are read: a newer message must not restart it

    @property
    def is_messages(self) -> bool:
        return bool(self.jobs) and isinstance(self.jobs[0], MessageJob)

    def senders(self) -> set[str | None]:
        """Who asked for this batch (a /stop from them is honoured in groups)."""
        return {job.record.sender_id for job in self.jobs
                if isinstance(job, MessageJob | CommandJob)}

    def stop(self, reason: str) -> bool:
        if self.stoppable is None or self.stoppable.done():
            return False
        if reason == "superseded" and not self.supersedable:
            return False
        self.stop_reason = reason
        self.stoppable.cancel()
        return True


def recovery_jobs(open_rows: list[InboundRecord]
                  ) -> Iterator[tuple[str, Job | tuple[InboundMessage, InboundRecord]]]:
    """What to do, in order, with the ledger rows a stop or crash left open.

    A stored reply is resent once, for all the rows it answers (wherever other chats'
    rows fall between them); a taken message is answered again; a pending row is handed
    back as the message it was, to be routed like a new one.
    """
    answers: dict[int, list[InboundRecord]] = defaultdict(list)
    for record in open_rows:
        if record.reply_row_id is not None:
            answers[record.reply_row_id].append(record)
    for record in open_rows:
        log.info("recovering message %s in %s (%s)", record.message_id, record.chat_key,
                 "reply pending" if record.reply_row_id else record.status)
        if record.reply_row_id is not None:
            group = answers.pop(record.reply_row_id, None)
            if group:  # the first row of the group sends it; the others are in it
                yield record.chat_key, ResendJob(chat_of(record), tuple(group))
        elif record.status == "taken":
            yield record.chat_key, MessageJob(chat_of(record), record)
        else:
            yield record.chat_key, (message_of(record), record)


def chat_of(record: InboundRecord) -> ChatRef:
    return ChatRef(record.platform, record.chat_id, record.extra.get("thread_id"),
                   group=bool(record.extra.get("is_group")))


def message_of(record: InboundRecord) -> InboundMessage:
    """The inbound message a ledger row was made from, as far as the row remembers it."""
    extra = record.extra
    return InboundMessage(
        platform=record.platform, chat_id=record.chat_id, user_id=record.sender_id or "",
        message_id=record.message_id, text=record.text, thread_id=extra.get("thread_id"),
        user_name=record.sender_name, is_group=bool(extra.get("is_group")),
        is_admin_hint=bool(extra.get("admin_hint")), may_command=not extra.get("plain"),
        attachments=tuple(Attachment.from_dict(a) for a in extra.get("attachments") or ()
                          if isinstance(a, dict)))


def extra_of(msg: InboundMessage) -> dict[str, object]:
    """What the inbound row keeps beside the text, so a restart can route it again (read
    back by `message_of`)."""
    extra: dict[str, object] = {"thread_id": msg.thread_id, "is_group": msg.is_group,
                                "admin_hint": msg.is_admin_hint}
    if not msg.may_command:
        extra["plain"] = True  # looks like a command, is not one (recovery reads it so)
    if msg.attachments:
        extra["attachments"] = [a.as_dict() for a in msg.attachments]
    return extra
