"""Per-chat ordered workers: each chat's jobs run one at a time, chats run concurrently."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

MAX_COALESCE_WAIT_FACTOR = 3  # a burst never holds a turn back longer than 3 x coalesce_ms


@dataclass
class Job:
    """A unit of work for one chat: a user message, or a command that must run in order."""

    kind: str  # message | command
    payload: Any
    arrived: float = field(default_factory=time.monotonic)


Processor = Callable[[str, list[Job]], Awaitable[None]]


class _ChatQueue:
    def __init__(self) -> None:
        self.jobs: deque[Job] = deque()
        self.worker: asyncio.Task[None] | None = None
        self.current: asyncio.Task[None] | None = None


class ChatRouter:
    """Runs `process(chat_key, jobs)` for each chat in arrival order.

    Consecutive message jobs queued behind a running turn are handed over together, so
    the next turn answers them at once; a burst (two or more queued at pickup) waits
    until the chat has been quiet for `coalesce_ms` before its turn starts. Commands
    always run alone. Idle chats keep no worker, so memory does not grow with chats seen.
    """

    def __init__(self, process: Processor, *, coalesce_ms: int = 1500) -> None:
        self._process = process
        self._coalesce = coalesce_ms / 1000.0
        self._chats: dict[str, _ChatQueue] = {}
        self._accepting = True

    @property
    def active_chats(self) -> int:
        return len(self._chats)

    def busy(self, chat_key: str) -> bool:
        chat = self._chats.get(chat_key)
        return bool(chat and chat.current and not chat.current.done())

    def submit(self, chat_key: str, job: Job) -> bool:
        if not self._accepting:
            return False
        chat = self._chats.get(chat_key)
        if chat is None:
            chat = self._chats[chat_key] = _ChatQueue()
        chat.jobs.append(job)
        if chat.worker is None or chat.worker.done():
            chat.worker = asyncio.create_task(self._work(chat_key, chat), name=f"chat:{chat_key}")
        return True

    def cancel_current(self, chat_key: str) -> bool:
        """/stop: cancel the running turn of this chat; queued jobs still run."""
        chat = self._chats.get(chat_key)
        if chat and chat.current and not chat.current.done():
            chat.current.cancel()
            return True
        return False

    async def drain(self, grace_s: float) -> None:
        """Stop taking jobs and let queued and running work finish, within `grace_s`."""
        self._accepting = False
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
                batch = await self._next_batch(chat)
                chat.current = asyncio.create_task(self._process(chat_key, batch))
                try:
                    await chat.current
                except asyncio.CancelledError:
                    current = asyncio.current_task()
                    if current is not None and current.cancelling():
                        raise  # the worker itself is being cancelled (shutdown)
                    log.info("chat %s: turn cancelled", chat_key)
                except Exception:
                    # The processor reports its own failures to the user; this is a last guard.
                    log.exception("chat %s: job failed", chat_key)
                finally:
                    chat.current = None
        finally:
            if not chat.jobs and self._chats.get(chat_key) is chat:
                del self._chats[chat_key]

    async def _next_batch(self, chat: _ChatQueue) -> list[Job]:
        first = chat.jobs.popleft()
        if first.kind != "message":
            return [first]
        batch = [first]
        self._take_messages(chat, batch)
        if len(batch) > 1 and self._coalesce > 0:
            deadline = time.monotonic() + self._coalesce * MAX_COALESCE_WAIT_FACTOR
            while True:
                quiet_until = batch[-1].arrived + self._coalesce
                wait = min(quiet_until, deadline) - time.monotonic()
                if wait <= 0:
                    break
                await asyncio.sleep(wait)
                if not self._take_messages(chat, batch):
                    break
        return batch

    def _take_messages(self, chat: _ChatQueue, batch: list[Job]) -> int:
        """Move queued message jobs (up to the next command) into the batch."""
        taken = 0
        while chat.jobs and chat.jobs[0].kind == "message":
            batch.append(chat.jobs.popleft())
            taken += 1
        return taken
