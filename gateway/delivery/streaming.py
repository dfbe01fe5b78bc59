"""A reply shown while the model writes it (docs/architecture.md, "Streaming").

The agent hands each piece of the answer to a `LiveReply`; a pump shows the text so far
at most once per interval, each update one platform call through the chat's sending
budget. An update that would have to wait is skipped, never queued: the next one carries
newer text anyway. When the turn ends, the pump stops and the stored reply replaces what
is on screen (the worker does that, with the preview message ids this keeps).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gateway.clock import monotonic as clock_monotonic
from gateway.delivery.budget import SendBudget
from gateway.delivery.rendering import Renderer
from gateway.metrics import Metrics
from platforms.base import (
    ChatRef,
    Chunk,
    PlatformAdapter,
    RateLimited,
    SendError,
    Undeliverable,
)
from platforms.text import FENCE_CLOSE
from storage.base import SessionStore

# A preview recorded before its create, by its key alone (platforms that keep keys).
PENDING_PREVIEW = "?"
log = logging.getLogger(__name__)

SKIPPED_RETRY_S = 0.25  # after a skipped update, look again this soon
GROUP_KEEP = 3  # a group's per-minute sends an update leaves for the final reply
STOPPED_MARK = "[stopped]"


@dataclass(frozen=True)
class StreamSettings:
    """The `streaming` config section."""

    enabled: bool = True
    interval_s: float = 1.0  # at most one update per chat this often


def mark_stopped(text: str) -> str:
    """A partial reply as it stays after /stop: closed code block, then the mark."""
    text = text.rstrip()
    if text.count("```") % 2:
        text += FENCE_CLOSE
    return f"{text}\n\n{STOPPED_MARK}"


@dataclass
class _Update:
    """One platform call that brings the screen closer to the text so far."""

    kind: str  # draft | send | edit | append
    index: int
    chunk: Chunk


class LiveReply:
    """One turn's answer, shown in one chat while it is written."""

    def __init__(self, chat: ChatRef, adapter: PlatformAdapter, budget: SendBudget, mode: str,
                 *, interval_s: float, reply_to: str | None, draft_id: int,
                 metrics: Metrics, renderer: Renderer,
                 on_preview: Callable[[int, str], Awaitable[None]] | None = None,
                 clock: Callable[[], float] = clock_monotonic,
                 allowed: Callable[[], bool] = lambda: True) -> None:
        self.chat = chat
        self.allowed = allowed  # False once this process may have lost the chat (a pause)
        self.adapter = adapter
        self.renderer = renderer
        # Each preview message, recorded as soon as it exists: a crash must never leave one
        # half-written for good (docs/architecture.md, "Streaming").
        self.on_preview = on_preview
        self.budget = budget
        self.mode = mode
        self.interval_s = 0.0 if mode == "append" else interval_s  # a terminal has no limits
        self.reply_to = reply_to
        self.draft_id = draft_id
        self.metrics = metrics
        self.clock = clock
        self.updates = 0  # platform calls that went through
        self._text = ""
        self._wake = asyncio.Event()
        self._shown: list[tuple[str, Chunk]] = []  # edit mode: (message id, chunk) on screen
        self._draft: tuple[int, Chunk] | None = None  # draft mode: the last one shown
        self._appended = ""
        self._last = -math.inf  # when the last update finished
        self._pump: asyncio.Task[None] | None = None
        self._pushing: asyncio.Future[None] | None = None
        self._closed = False
        self._broken = False

    # --- what the agent calls (ReplyStream) ----------------------------------------------
    def text(self, piece: str) -> None:
        if not self._closed:
            self._text += piece
            self._wake.set()

    def retract(self) -> None:
        if not self._closed:
            self._text = ""

    # --- what the worker reads -------------------------------------------------------------
    @property
    def written(self) -> str:
        """The answer's text so far (empty after a retraction)."""
        return self._text

    @property
    def previews(self) -> tuple[str, ...]:
        """Edit mode: the messages showing the reply so far, in order."""
        return tuple(message_id for message_id, _ in self._shown)

    @property
    def showing(self) -> bool:
        return self.updates > 0

    def start(self) -> None:
        self._pump = asyncio.create_task(self._run(), name=f"stream {self.chat.key}")

    async def close(self) -> None:
        """Stop updating; an update on its way is waited for, so none lands after the
        final reply."""
        self._closed = True
        if self._pump is not None:
            self._pump.cancel()
            await asyncio.gather(self._pump, return_exceptions=True)
        if self._pushing is not None:
            await asyncio.gather(self._pushing, return_exceptions=True)

    async def settle(self) -> None:
        """Wait until the previews may be edited again (the interval holds for the final
        edit too)."""
        wait = self._last + self.interval_s - self.clock()
        if self._shown and wait > 0:
            await asyncio.sleep(wait)

    # --- the pump ----------------------------------------------------------------------------
    async def _run(self) -> None:
        while not self._broken:
            await self._wake.wait()
            wait = self._last + self.interval_s - self.clock()
            if wait > 0:
                await asyncio.sleep(wait)
            self._wake.clear()
            update = await self._next_update()
            if update is None:
                continue
            if not self.budget.try_book(self.chat.key, group=self.chat.group, keep=GROUP_KEEP,
                                        message=self.mode != "draft"):
                self.metrics.stream_updates.labels(self.adapter.name, "skipped").inc()
                self._wake.set()  # the text is still ahead of the screen
                await asyncio.sleep(SKIPPED_RETRY_S)
                continue
            self._pushing = asyncio.ensure_future(self._push(update))
            await asyncio.shield(self._pushing)  # a close() waits for it instead

    async def _next_update(self) -> _Update | None:
        text = self._text
        if not text.strip():
            return None
        if self.mode == "append":
            return None if text == self._appended else _Update("append", 0, Chunk(text))
        chunks = await self.renderer.render_partial(self.chat, text)
        if not chunks:
            return None
        if self.mode == "draft":
            index = len(chunks) - 1  # the part being written now
            latest = (index, chunks[index])
            return None if latest == self._draft else _Update("draft", index, chunks[index])
        for index, chunk in enumerate(chunks):
            if index >= len(self._shown):
                return _Update("send", index, chunk)
            if self._shown[index][1] != chunk:
                return _Update("edit", index, chunk)
        return None

    async def _push(self, update: _Update) -> None:
        try:
            await self._shown_or_counted(update)
        finally:  # the interval runs from when an update landed, however the pump ended
            self._last = self.clock()

    async def _shown_or_counted(self, update: _Update) -> None:
        name, chat = self.adapter.name, self.chat
        try:
            await self._call(update)
        except RateLimited as exc:
            log.info("%s: %s is rate limited for %.1f s while streaming; updates pause",
                     name, chat.key, exc.retry_after)
            self.budget.pause(chat.key, exc.retry_after)
            self.metrics.rate_limited.labels(name).inc()
            self.metrics.paused.labels(name).inc(exc.retry_after)
            self.metrics.stream_updates.labels(name, "rate_limited").inc()
            return
        except (Undeliverable, SendError, OSError) as exc:
            # The final reply does not depend on previews: stop them, the answer still comes.
            log.warning("%s: showing the reply in %s as it is written failed (%s); it "
                        "arrives whole", name, chat.key, exc)
            self._broken = True
            self.metrics.stream_updates.labels(name, "failed").inc()
            return
        self.updates += 1
        self.metrics.stream_updates.labels(name, "sent").inc()

    async def _call(self, update: _Update) -> None:
        chat, chunk, index = self.chat, update.chunk, update.index
        if not self.allowed():
            raise SendError("the chat's lease may have lapsed: previews stop here")
        if update.kind == "append":
            await self.adapter.append(chat, chunk.text)
            self._appended = chunk.text
        elif update.kind == "draft":
            await self.adapter.send_draft(chat, self.draft_id + index, chunk)
            self._draft = (index, chunk)
        elif update.kind == "send":
            # Keyed by the turn's message and position: after a crash the turn's new
            # preview is the message a lost answer left behind (where the key is a nonce).
            chunk = dataclasses.replace(chunk, key=f"p{self.draft_id}.{index}")
            if self.on_preview is not None and self.adapter.keeps_keys:
                # Noted first by its key: a kill before its id comes back leaves a message
                # that only the key can find again (Outbound.discard).
                await self.on_preview(index, f"{PENDING_PREVIEW}{chunk.key}")
            message_id = await self.adapter.send_preview(chat, chunk,
                                                         self.reply_to if index == 0 else None)
            if message_id is None:
                raise Undeliverable("the platform gave no message id to edit")
            self._shown.append((message_id, chunk))
            if self.on_preview is not None:
                await self.on_preview(index, message_id)
        else:
            await self.adapter.edit(chat, self._shown[index][0], chunk)
            self._shown[index] = (self._shown[index][0], chunk)


class Streaming:
    """Opens a LiveReply for a turn where streaming is on and the platform can show one."""

    def __init__(self, settings: StreamSettings, adapters: dict[str, PlatformAdapter],
                 budgets: dict[str, SendBudget], metrics: Metrics, renderer: Renderer,
                 store: SessionStore | None = None) -> None:
        self.settings = settings
        self.adapters = adapters
        self.budgets = budgets
        self.metrics = metrics
        self.renderer = renderer
        self.store = store
        # With several processes: whether the chat's lease surely holds (turns/cluster.py).
        self.may_act: Callable[[str], bool] = lambda chat_key: True

    def open(self, chat: ChatRef, reply_to: str | None, draft_id: int) -> LiveReply | None:
        adapter = self.adapters.get(chat.platform)
        if not self.settings.enabled or adapter is None:
            return None
        mode = adapter.stream_mode(chat)
        if mode is None:
            return None
        store = self.store
        record = (None if store is None or mode != "edit" else
                  lambda position, message_id: store.record_preview(draft_id, position,
                                                                    message_id))
        may_act = self.may_act
        live = LiveReply(chat, adapter, self.budgets[chat.platform], mode,
                         interval_s=self.settings.interval_s, reply_to=reply_to,
                         draft_id=draft_id, metrics=self.metrics, renderer=self.renderer,
                         on_preview=record, allowed=lambda: may_act(chat.key))
        live.start()
        return live
