"""Everything the gateway says to a platform, on one paced path per chat.

Every send goes through the platform's budget (gateway/delivery/budget.py). A reply is delivered
durably: its chunks were recorded with the turn, each is marked sent with the platform's
message id, and what a crash cut short is finished on restart, chunk by chunk (see
docs/architecture.md, "Sending").
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from gateway.delivery.budget import SendBudget
from gateway.delivery.moves import ChatMoves
from gateway.delivery.rendering import Renderer
from gateway.delivery.streaming import PENDING_PREVIEW
from gateway.metrics import Metrics
from platforms.base import (
    ChatMoved,
    ChatRef,
    Chunk,
    PlatformAdapter,
    PlatformDown,
    RateLimited,
    SendError,
    SendUnknown,
    Undeliverable,
)
from storage.base import SessionStore
from storage.coordination import Fence, current_fence
from storage.errors import LeaseLost, StoreUnavailable
from storage.models import Delivery

log = logging.getLogger(__name__)

T = TypeVar("T")

TYPING_REFRESH_S = 4.0
# Waits between tries while a platform is down; then every 8 s, for as long as the process
# runs, so a reply arrives within seconds of the platform coming back, before the chat's
# next one (docs/architecture.md, "Sending").
DOWN_RETRIES_S = (1.0, 2.0, 4.0, 8.0)
STILL_DOWN_NOTE_S = 60.0  # while a call keeps failing, one log line this often
STORE_RETRIES_S = (0.5, 10.0)  # recording a sent part: the first wait, doubling to the last


class _SentAlready:
    """A stored reply's part found sent when about to send it (by another process)."""


SENT_ALREADY = _SentAlready()


@dataclass(frozen=True)
class Outgoing:
    """A message that is said, not stored: a notice, a refusal, a command's answer."""

    text: str
    reply_to: str | None = None


class Outbound:
    """Sends through the adapters; a platform error is logged and reported, never raised."""

    def __init__(self, adapters: Mapping[str, PlatformAdapter], store: SessionStore,
                 metrics: Metrics | None = None, renderer: Renderer | None = None,
                 moves: ChatMoves | None = None) -> None:
        self.adapters = adapters
        self.store = store
        self.metrics = metrics or Metrics()
        self.renderer = renderer or Renderer(adapters)
        self.moves = moves or ChatMoves(store)
        self.budgets = {name: SendBudget(a.limits) for name, a in adapters.items()}
        # With several processes: whether work begun under a take of a chat (its fence)
        # may still speak for it (turns/cluster.py). Asked right before every platform
        # call, after any wait for the chat's pace (docs/scale-out.md, "Fencing").
        self.holds: Callable[[Fence], bool] = lambda fence: True

    def _may_speak(self, chat: ChatRef) -> None:
        """Raise LeaseLost when the work running now may no longer speak for its chat."""
        fence = current_fence()
        if fence is not None and not self.holds(fence):
            raise LeaseLost(f"{fence.chat_key}: taken again since this work began (lease "
                            f"generation {fence.epoch}); not sending to {chat.key}")

    async def render(self, chat: ChatRef, text: str) -> list[Chunk]:
        return await self.renderer.render(chat, text)

    # --- saying things ------------------------------------------------------------------
    async def send(self, chat: ChatRef, text: str, reply_to: str | None = None, *,
                   private: bool = False) -> bool:
        """Render and send; False (logged) when the platform did not take all of it.

        `private`: meant for the asker alone, where the platform can (see Chunk)."""
        for chunk in await self.render(chat, text):
            if private:
                chunk = dataclasses.replace(chunk, private=True)
            if await self._send_chunk(chat, chunk, reply_to) is False:
                return False
            reply_to = None
        return True

    async def send_all(self, chat: ChatRef, outgoing: Sequence[Outgoing]) -> None:
        for item in outgoing:
            await self.send(chat, item.text, item.reply_to)

    async def answer(self, chat: ChatRef, text: str, message_id: str, *,
                     private: bool = False) -> bool:
        """One reply to one inbound message, then "delivered" for it."""
        sent = await self.send(chat, text, message_id, private=private)
        await self.delivered(chat, (message_id,))
        return sent

    async def deliver(self, chat: ChatRef, chunks: Sequence[Delivery], reply_to: str | None,
                      *, just_stored: bool = False) -> bool:
        """Send a stored reply's pending chunks in order, marking each as it goes.

        A chunk recorded with a platform message id replaces that message (the preview a
        streamed reply was shown in) instead of sending a new one. True when every chunk
        is with the platform (or refused for good); False when a transient failure left
        some pending for the next start.
        """
        for chunk in chunks:
            if chunk.status != "pending":
                continue
            outcome: str | None | Undeliverable | bool | _SentAlready
            # The same part is the same message however often it is sent (a nonce).
            part = Chunk(chunk.text, chunk.entities, key=f"r{chunk.inbound_id}.{chunk.chunk}")
            if chunk.platform_message_id:
                outcome = await self._edit_chunk(chat, chunk.platform_message_id, part)
            else:
                # A reply just stored has its first chunk marked `sending` by the store.
                premarked = just_stored and chunk.chunk == 0
                outcome = await self._send_chunk(
                    chat, part,
                    reply_to if chunk.chunk == 0 else None,
                    ledger=(self.store, chunk.inbound_id, chunk.chunk), premarked=premarked)
            if outcome is False:
                return False
            if outcome is SENT_ALREADY:
                continue
            refused = isinstance(outcome, Undeliverable)
            await self._mark_delivered(chunk, None if refused else outcome, refused)
        return True

    async def _mark_delivered(self, chunk: Delivery, message_id: str | None,
                              refused: bool) -> None:
        """The platform has the chunk (or refused it for good): the ledger must learn it,
        however long the store is out of reach or its disk full, for a chunk left pending
        is sent again, and shows twice. The chat waits meanwhile, as for a platform outage."""
        pause = STORE_RETRIES_S[0]
        while True:
            try:
                await self.store.mark_delivered(chunk.inbound_id, chunk.chunk, message_id,
                                                failed=refused)
                return
            except StoreUnavailable as exc:
                if pause == STORE_RETRIES_S[0]:
                    log.warning("a reply part to inbound %s was sent; recording that waits "
                                "for the database (%s)", chunk.inbound_id, exc)
            await asyncio.sleep(pause)
            pause = min(pause * 2, STORE_RETRIES_S[1])

    async def _edit_chunk(self, chat: ChatRef, message_id: str, chunk: Chunk
                          ) -> str | None | Undeliverable | bool:
        """Turn a preview into its final chunk; a preview that is gone (deleted in the
        chat) gets the chunk as a new message instead."""
        adapter = self.adapters[chat.platform]
        outcome = await self._paced(chat, lambda to: adapter.edit(to, message_id, chunk))
        if isinstance(outcome, Undeliverable):
            log.info("%s: preview %s in %s could not be edited (%s); sending the reply part "
                     "anew", chat.platform, message_id, chat.key, outcome)
            return await self._send_chunk(chat, chunk, None)
        return message_id if outcome is not False else False

    async def replace(self, chat: ChatRef, previews: Sequence[str], text: str,
                      reply_to: str | None) -> None:
        """Say `text` instead of what the previews show (a failure, after a partial
        reply): the first preview becomes it, the others go. No previews: a new message."""
        if not previews:
            await self.send(chat, text, reply_to)
            return
        chunks = await self.render(chat, text)
        await self._edit_chunk(chat, previews[0], chunks[0])
        for chunk in chunks[1:]:
            await self._send_chunk(chat, chunk, None)
        await self.discard(chat, previews[1:])

    async def discard(self, chat: ChatRef, message_ids: Sequence[str]) -> None:
        """Delete previews the final reply did not need (logged when the platform will not).
        A preview noted only by its key (PENDING_PREVIEW: its create was cut off before its
        id came back) is found again by sending that key, which the platform answers with
        the message it already has, then deleted (docs/architecture.md, "Streaming")."""
        adapter = self.adapters.get(chat.platform)
        for message_id in message_ids:
            if adapter is None:
                continue
            if message_id.startswith(PENDING_PREVIEW):
                key = message_id.removeprefix(PENDING_PREVIEW)
                found = await self._paced(chat, lambda to, k=key: adapter.send_preview(
                    to, Chunk("\u2026", key=k)))
                if not isinstance(found, str):
                    continue
                message_id = found
            await self._paced(chat, lambda to, m=message_id: adapter.delete(to, m))

    async def delivered(self, chat: ChatRef, message_ids: tuple[str, ...]) -> None:
        """Tell the adapter everything about these inbound messages has been said."""
        adapter = self.adapters.get(chat.platform)
        if adapter is not None:
            await adapter.delivered(chat, message_ids)

    async def keep_typing(self, chat: ChatRef, until: Callable[[], bool] | None = None) -> None:
        """Refresh the typing indicator until cancelled (or `until()` says the reply is
        showing), only when the budget has room."""
        adapter = self.adapters.get(chat.platform)
        if adapter is None:
            return
        budget = self.budgets[chat.platform]
        fence = current_fence()
        while not (until and until()):
            if fence is not None and not self.holds(fence):
                return
            if budget.typing_allowed(chat.key, group=chat.group):
                try:
                    await adapter.typing(self.moves.resolve(chat))
                except Exception as exc:  # typing is a nicety: never fail a turn for it
                    log.debug("typing failed in %s: %s", chat.key, exc)
            await asyncio.sleep(TYPING_REFRESH_S)

    # --- one message, paced, with the platform's pauses honoured ---------------------------
    async def _send_chunk(self, chat: ChatRef, chunk: Chunk, reply_to: str | None, *,
                          ledger: tuple[SessionStore, int, int] | None = None,
                          premarked: bool = False
                          ) -> str | None | Undeliverable | bool | _SentAlready:
        """The platform message id (or None) once sent; an Undeliverable when refused for
        good; False when it could not be sent at all; SENT_ALREADY for a stored reply's
        chunk that another process has sent meanwhile.

        A stored reply's chunk (`ledger`: the store, its inbound id and position) is marked
        `sending` before each call and cleared by a clear answer, so a crash in between
        leaves a trace: the send after it is marked `maybe_sent`. Marking looks at the
        chunk's row (and, fenced, the chat's lease): a chunk sent already goes no more. A send the platform may
        have taken without answering in time (SendUnknown) is made once more, then taken as
        sent: a message shows twice at worst, never zero times, never again and again."""
        adapter = self.adapters.get(chat.platform)
        if adapter is None:
            log.warning("no adapter for %s; dropping a message to %s", chat.platform, chat.key)
            return False
        unknown = 0
        marked = premarked

        async def send(to: ChatRef) -> str | None | _SentAlready:
            nonlocal unknown, marked
            if ledger is not None and not marked \
                    and not await ledger[0].mark_sending(ledger[1], ledger[2]):
                return SENT_ALREADY
            marked = False  # every later try is marked anew
            try:
                return await adapter.send(to, chunk, reply_to)
            except SendUnknown as exc:
                unknown += 1
                if unknown > 1:
                    self.metrics.sends_unknown.labels(chat.platform, "assumed_sent").inc()
                    log.warning("%s: %s gave no answer twice for the same message (%s); "
                                "taking it as sent", chat.platform, to.key, exc)
                    return None
                self.metrics.sends_unknown.labels(chat.platform, "resent").inc()
                log.warning("%s: %s gave no answer in time (%s); sending it once more "
                            "(it may show twice)", chat.platform, to.key, exc)
                raise PlatformDown("sending once more") from exc
            except (SendError, OSError):  # certainly not sent (refused, or not reached)
                if ledger is not None:
                    await ledger[0].mark_not_sent(ledger[1], ledger[2])
                raise

        return await self._paced(chat, send)

    async def _paced(self, chat: ChatRef, call: Callable[[ChatRef], Awaitable[T]]
                     ) -> T | Undeliverable | bool:
        """One platform call to the chat (wherever it lives now), paced, with the
        platform's pauses honoured and outages waited out for as long as the process runs:
        its result; an Undeliverable when refused for good; False on an unexpected error."""
        name = chat.platform
        budget = self.budgets[name]
        failures, down_since, noted = 0, 0.0, 0.0
        loop = asyncio.get_running_loop()
        while True:
            chat = self.moves.resolve(chat)
            await budget.wait_turn(chat.key, group=chat.group)
            self._may_speak(chat)  # the wait may have outlasted the chat's lease (a pause)
            try:
                result = await call(chat)
            except RateLimited as exc:
                log.warning("%s: %s is rate limited for %.1f s", name, chat.key,
                            exc.retry_after)
                budget.pause(chat.key, exc.retry_after)
                self.metrics.rate_limited.labels(name).inc()
                self.metrics.paused.labels(name).inc(exc.retry_after)
                continue
            except ChatMoved as exc:
                chat = await self.moves.move(chat, exc.new_chat_id)
                continue
            except Undeliverable as exc:
                log.warning("%s: %s refused a message for good: %s", name, chat.key, exc)
                return exc
            except (PlatformDown, SendError, OSError) as exc:
                now = loop.time()
                if not failures:
                    down_since = noted = now
                    log.warning("%s: sending to %s failed (%s); trying again while it lasts",
                                name, chat.key, exc)
                elif now - noted >= STILL_DOWN_NOTE_S:
                    noted = now
                    log.warning("%s: %s still cannot be reached after %.0f s (%s)", name,
                                chat.key, now - down_since, exc)
                self.metrics.retries.labels(name).inc()
                await asyncio.sleep(DOWN_RETRIES_S[min(failures, len(DOWN_RETRIES_S) - 1)])
                failures += 1
                continue
            except (StoreUnavailable, LeaseLost):
                raise  # the ledger is out of reach (the turn waits, outages.py), or the
                # chat is another's now (the turn is dropped, worker.py)
            except Exception:
                log.exception("%s: sending to %s failed", name, chat.key)
                return False
            if failures:
                log.info("%s: %s reached again after %.0f s", name, chat.key,
                         loop.time() - down_since)
            return result
