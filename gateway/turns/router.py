"""Per-chat ordered workers: each chat's jobs run one at a time, chats run concurrently."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable

from gateway import clock
from gateway.turns.jobs import HoldJob, Job, MessageJob, Running

log = logging.getLogger(__name__)

MAX_COALESCE_WAIT_FACTOR = 3  # a burst never holds a turn back longer than 3 x coalesce_ms


Processor = Callable[[str, Running], Awaitable[None]]


class _ChatQueue:
    def __init__(self) -> None:
        self.jobs: deque[Job] = deque()
        self.worker: asyncio.Task[None] | None = None
        self.running: Running | None = None


class ChatRouter:
    """Runs `process(chat_key, running)` for each chat in arrival order.

    Consecutive message jobs queued behind a running turn are handed over together, so
    the next turn answers them at once; a burst (two or more at pickup) waits until the
    chat has been quiet for `coalesce_ms` before its turn starts. A single message into an
    idle chat starts at once; if a second one follows within `coalesce_ms` while the first
    is still with the model, that turn is superseded: cancelled unseen and answered again
    together with the newcomer (see docs/architecture.md, "Coalescing"). Commands always
    run alone. Idle chats keep no worker, so memory does not grow with chats seen.
    """

    def __init__(self, process: Processor, *, coalesce_ms: int = 1500) -> None:
        self._process = process
        self._coalesce = coalesce_ms / 1000.0
        self._chats: dict[str, _ChatQueue] = {}
        self._accepting = True
        self._idle: dict[str, asyncio.Event] = {}  # chat -> set when its work is all done

    def submit(self, chat_key: str, job: Job) -> bool:
        if not self._accepting:
            return False
        chat = self._chats.get(chat_key)
        if chat is None:
            chat = self._chats[chat_key] = _ChatQueue()
        chat.jobs.append(job)
        if isinstance(job, MessageJob):
            self._maybe_supersede(chat, job)
        if chat.worker is None or chat.worker.done():
            chat.worker = asyncio.create_task(self._work(chat_key, chat), name=f"chat:{chat_key}")
        return True

    def busy(self, chat_key: str) -> bool:
        """Whether the chat has work queued or running here."""
        return chat_key in self._chats

    async def wait_idle(self, chat_key: str) -> None:
        """Return once the chat has no work queued or running here."""
        if chat_key in self._chats:
            await self._idle.setdefault(chat_key, asyncio.Event()).wait()

    def running(self, chat_key: str) -> Running | None:
        chat = self._chats.get(chat_key)
        return chat.running if chat else None

    def activity(self) -> tuple[int, int]:
        """(chats with queued or running work, batches running now), for status lines."""
        busy = [c for c in self._chats.values()
                if c.jobs or c.running is not None or (c.worker and not c.worker.done())]
        return len(busy), sum(1 for c in busy if c.running is not None)

    def _maybe_supersede(self, chat: _ChatQueue, job: MessageJob) -> None:
        running = chat.running
        if (running is None or not running.is_messages or len(running.jobs) != 1
                or self._coalesce <= 0 or job.arrived - running.jobs[0].arrived > self._coalesce):
            return
        if running.stop("superseded"):
            log.info("a second message followed within %.0f ms: answering both together",
                     self._coalesce * 1000)

    async def drain(self, grace_s: float) -> None:
        """Stop taking jobs and let queued and running work finish, within `grace_s`."""
        self._accepting = False
        for chat in self._chats.values():
            if chat.worker and chat.running and isinstance(chat.running.jobs[0], HoldJob):
                chat.worker.cancel()  # held back after a crash: it stays stored for next time
        workers = [c.worker for c in self._chats.values() if c.worker and not c.worker.done()]
        if not workers:
            return
        done, pending = await asyncio.wait(workers, timeout=grace_s)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if pending:
            log.warning("shutdown: %d chat(s) did not finish within %.0fs", len(pending), grace_s)

    async def _work(self, chat_key: str, chat: _ChatQueue) -> None:
        try:
            while chat.jobs:
                running = chat.running = Running(await self._next_batch(chat))
                try:
                    await self._process(chat_key, running)
                except asyncio.CancelledError:
                    raise  # the worker itself is being cancelled (shutdown)
                except Exception:
                    # The processor reports its own failures to the user; this is a last guard.
                    log.exception("chat %s: job failed", chat_key)
                finally:
                    chat.running = None
                if running.stop_reason == "superseded":
                    chat.jobs.extendleft(reversed(running.jobs))
        finally:
            if not chat.jobs and self._chats.get(chat_key) is chat:
                del self._chats[chat_key]
                idle = self._idle.pop(chat_key, None)
                if idle is not None:
                    idle.set()

    async def _next_batch(self, chat: _ChatQueue) -> list[Job]:
        first = chat.jobs.popleft()
        if not isinstance(first, MessageJob):
            return [first]
        batch: list[Job] = [first]
        self._take_messages(chat, batch)
        if len(batch) > 1 and self._coalesce > 0:
            deadline = clock.monotonic() + self._coalesce * MAX_COALESCE_WAIT_FACTOR
            while True:
                quiet_until = batch[-1].arrived + self._coalesce
                wait = min(quiet_until, deadline) - clock.monotonic()
                if wait <= 0:
                    break
                await asyncio.sleep(wait)
                if not self._take_messages(chat, batch):
                    break
        return batch

    def _take_messages(self, chat: _ChatQueue, batch: list[Job]) -> int:
        """Move queued message jobs (up to the next other job) into the batch."""
        taken = 0
        while chat.jobs and isinstance(chat.jobs[0], MessageJob):
            batch.append(chat.jobs.popleft())
            taken += 1
        return taken
