"""An adapter's handler for platform tests: keeps every InboundMessage it is given."""

from __future__ import annotations

import asyncio

from platforms.base import InboundMessage


class Inbox:
    """The adapter's handler: keeps every InboundMessage it reports, in order."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[InboundMessage] = asyncio.Queue()

    async def __call__(self, msg: InboundMessage) -> None:
        self.queue.put_nowait(msg)

    async def next(self) -> InboundMessage:
        async with asyncio.timeout(5):
            return await self.queue.get()
