"""Taking a message in: gated, stored in the ledger and handed to routing (turns/), each
chat's messages one after another in the order the adapter handed them over. What is
said about a message (a command's answer, a refusal) follows in a task, in the chat's
order, so `handle` returns as soon as the message is safe (docs/architecture.md, "A turn")."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

from gateway.delivery.outbound import Outbound
from gateway.inbound.gates import Gates
from gateway.inbound.ledger import Ledger, NotStored
from gateway.turns.commands import parse_command
from gateway.turns.routing import Routing
from gateway.turns.worker import GENERIC_FAILURE
from platforms.base import InboundMessage
from storage.errors import StoreUnavailable

log = logging.getLogger(__name__)


class Intake:
    """The adapters' handler behind the door (`handle`), and what a stop waits for."""

    def __init__(self, outbound: Outbound, *, gates: Gates, ledger: Ledger, routing: Routing,
                 running: asyncio.Event) -> None:
        self.outbound = outbound
        self.gates = gates
        self.ledger = ledger
        self.routing = routing
        self.running = running  # set while the gateway runs (service/app.py)
        # Messages being handled right now (an immediate command answers inside handle(),
        # outside the router): a stop lets them finish too before adapters close.
        self._handling = 0
        # Each chat's messages are stored and routed one after another, in the order the
        # adapter handed them over: a store with a pool may finish two writes in either
        # order, and a chat's second message must never overtake its first.
        self._entering: dict[str, tuple[asyncio.Lock, list[int]]] = {}  # lock, [users]
        self._quiet = asyncio.Event()
        self._quiet.set()
        # What is being said about accepted messages, the newest per chat (each waits for
        # the one before it, so a chat's answers keep its order).
        self._answering: dict[str, asyncio.Task[None]] = {}

    # --- the gateway's stop ---------------------------------------------------------------
    async def settle(self, within: float) -> None:
        """Wait until no message is being handled, at most `within` seconds."""
        try:
            await asyncio.wait_for(self._quiet.wait(), within)
        except TimeoutError:
            log.warning("shutdown: %d message(s) still being handled after %.0fs",
                        self._handling, within)

    def hush(self) -> None:
        """Cancel what is still trying to say something: it stays stored, and a command's
        row says whether it was answered."""
        for task in list(self._answering.values()):
            task.cancel()

    # --- entering ----------------------------------------------------------------------
    async def handle(self, msg: InboundMessage) -> bool:
        """An adapter's entry point: returns once the message is stored in the ledger (or
        deliberately ignored) and in its chat's order; what is said about it follows
        later, so an adapter handing messages over one by one (a poller that confirms
        each once stored) is never held up by a reply. Never raises into the platform
        library. False when the store could not take it: a platform that delivers it
        again is left to (nothing is said); elsewhere the user hears it failed."""
        self._handling += 1
        self._quiet.clear()
        lock, users = self._entering.setdefault(msg.chat_key, (asyncio.Lock(), [0]))
        users[0] += 1
        after: Awaitable[object] | None = None
        stored = True
        try:
            async with lock:
                after = await self._accept(msg)
        except NotStored as exc:
            stored, after = False, self.ledger.not_stored(msg, exc)
        except StoreUnavailable as exc:  # stored, then the database went: a sweep routes it
            log.warning("message %s in %s is stored; routing it waits for the database (%s)",
                        msg.message_id, msg.chat_key, exc)
        except Exception:
            log.exception("handling a message in %s failed", msg.chat_key)
            after = self.outbound.answer(msg.chat, GENERIC_FAILURE, msg.message_id)
        finally:
            users[0] -= 1
            if not users[0]:
                del self._entering[msg.chat_key]  # nobody else is entering this chat
            if after is None:
                self._handled()
        if after is not None:
            key = msg.chat_key
            task = asyncio.create_task(self._then(msg, after, self._answering.get(key)),
                                       name=f"answer:{key}")
            self._answering[key] = task
            task.add_done_callback(
                lambda done: self._answering.pop(key) if self._answering.get(key) is done
                else None)
        return stored

    async def _then(self, msg: InboundMessage, work: Awaitable[object],
                    before: asyncio.Task[None] | None) -> None:
        """What is said about a message after it was accepted (a command's answer, a
        refusal), after what was said about the chat's previous one; counted as being
        handled until done, so a stop lets it finish."""
        try:
            if before is not None:
                await asyncio.wait([before])
            await work
        except Exception:
            log.exception("answering a message in %s failed", msg.chat_key)
        finally:
            self._handled()

    def _handled(self) -> None:
        self._handling -= 1
        if not self._handling:
            self._quiet.set()

    async def _accept(self, msg: InboundMessage) -> Awaitable[object] | None:
        """Gate, store and route a message; what remains to be said, to run later."""
        if msg.moved_to is not None:  # the platform moved the chat: follow it
            await self.outbound.moves.move(msg.chat, msg.moved_to)
            return None
        if msg.is_delete:
            await self.ledger.deleted(msg)
            return None
        command = parse_command(msg.text) if msg.may_command else None
        if not self.gates.addressed(msg, command) or self.gates.says_nothing(msg):
            if msg.is_group:
                await self.gates.overheard(msg, command)
            await self.outbound.delivered(msg.chat, (msg.message_id,))  # nothing to say
            return None
        if not self.gates.allowed(msg):
            return self.gates.refuse(msg)
        if msg.is_edit:
            return await self.ledger.edit(msg)
        record = await self.ledger.ingest(msg)
        if record is None:
            log.info("ignoring redelivered message %s in %s", msg.message_id, msg.chat_key)
            await self.outbound.delivered(msg.chat, (msg.message_id,))
            return None
        if not self.running.is_set():  # arrived while draining: the next run answers it
            log.info("message %s in %s arrived while stopping: stored, answered after the "
                     "restart", msg.message_id, msg.chat_key)
            return None
        return await self.routing.route(msg, record, command)
