"""What a restart finds left to do: routed again in order, with chats whose turn was cut
short held back (docs/architecture.md, "Poison messages")."""

from __future__ import annotations

import asyncio

from gateway.turns.jobs import HoldJob, MessageJob, recovery_jobs
from gateway.turns.router import ChatRouter
from gateway.turns.routing import Routing
from storage.models import InboundRecord


class Recovery:
    def __init__(self, router: ChatRouter, routing: Routing) -> None:
        self.router = router
        self.routing = routing
        self._tasks: list[asyncio.Task[None]] = []

    def stop(self) -> None:
        """Stop releasing held-back chats (the gateway is stopping)."""
        for task in self._tasks:
            task.cancel()

    async def recover(self, rows: list[InboundRecord]) -> None:
        """Finish what was stored but never answered or delivered before a stop or crash.

        Stored replies the platform never took are sent (their missing chunks); messages
        are answered again; commands run again as commands, never as text for the model.
        A message whose turn was cut short may be what killed the process: its chat waits
        until everything else recovered here is done, and such chats then run one at a
        time, so a poison message cannot take other chats down with it again
        (docs/architecture.md, "Poison messages").
        """
        work = list(recovery_jobs(rows))
        held: dict[str, asyncio.Event] = {}  # chats with a turn cut short, in order
        for chat_key, job in work:
            if isinstance(job, MessageJob) and chat_key not in held:
                held[chat_key] = asyncio.Event()
                self.router.submit(chat_key, HoldJob(held[chat_key]))  # all of it waits
        for chat_key, job in work:
            if isinstance(job, tuple):  # a pending inbound message: route it like new
                await self.routing.routed(*job)
            else:
                self.router.submit(chat_key, job)
        if held:
            others = {key for key, _ in work} - held.keys()
            self._tasks.append(asyncio.create_task(self._release_one_by_one(held, others),
                                                   name="rerun-cut-short"))

    async def _release_one_by_one(self, held: dict[str, asyncio.Event], others: set[str]
                                  ) -> None:
        for chat_key in others:
            await self.router.wait_idle(chat_key)
        for chat_key, release in held.items():
            release.set()
            await self.router.wait_idle(chat_key)
