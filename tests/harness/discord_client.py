"""A plain discord.py `Client` that records what the fake Discord tells it (messages,
deletes), for tests of the fake itself: `async with logged_in(fake) as client: ...`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import discord

from tests.harness.fake_discord import BOT_ID, FakeDiscord

C = TypeVar("C", bound=discord.Client)


class Watcher(discord.Client):
    """Keeps every message (others' in `received`, its own in `echoes`) and every delete
    it is told about."""

    def __init__(self, *, message_content: bool = True, members: bool = False,
                 heartbeat_timeout: float = 2.0) -> None:
        intents = discord.Intents.default()
        intents.message_content = message_content
        intents.members = members
        super().__init__(intents=intents, guild_ready_timeout=0.05,
                         heartbeat_timeout=heartbeat_timeout)
        self.received: list[discord.Message] = []
        self.echoes: list[tuple[discord.Message, float]] = []  # its own, with time.monotonic()
        self.deleted: list[discord.Message] = []  # on_message_delete (cached messages)
        self.bulk_deleted: list[list[discord.Message]] = []
        self.raw_deletes: list[int] = []  # every MESSAGE_DELETE(_BULK) id, cached or not
        self._changed = asyncio.Condition()

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        """discord.py sleeps 5 s before every IDENTIFY but the first; not in tests."""

    async def on_message(self, message: discord.Message) -> None:
        if message.author.id != int(BOT_ID):
            self.received.append(message)
        else:
            self.echoes.append((message, time.monotonic()))
        await self._note()

    async def on_message_delete(self, message: discord.Message) -> None:
        self.deleted.append(message)
        await self._note()

    async def on_bulk_message_delete(self, messages: list[discord.Message]) -> None:
        self.bulk_deleted.append(messages)
        await self._note()

    async def on_raw_message_delete(self, event: discord.RawMessageDeleteEvent) -> None:
        self.raw_deletes.append(event.message_id)
        await self._note()

    async def on_raw_bulk_message_delete(self, event: discord.RawBulkMessageDeleteEvent) -> None:
        self.raw_deletes.extend(sorted(event.message_ids))
        await self._note()

    async def on_socket_event_type(self, event: str) -> None:
        await self._note()  # the event is parsed into the cache by now

    async def until(self, done: Callable[[], bool],
                    timeout: float = 5.0) -> None:  # noqa: ASYNC109
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(done)

    async def _note(self) -> None:
        async with self._changed:
            self._changed.notify_all()


@asynccontextmanager
async def logged_in(fake: FakeDiscord, client: C | None = None) -> AsyncIterator[C | Watcher]:
    """Any discord.py client (a Watcher by default) logged in, connected and ready;
    always closed."""
    client = client or Watcher()
    task: asyncio.Task[None] | None = None
    try:
        await client.login(fake.token)
        task = asyncio.create_task(client.connect())
        async with asyncio.timeout(5):
            await client.wait_until_ready()
        yield client
    finally:
        await client.close()
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)


async def connect_failure(fake: FakeDiscord, client: Watcher | None = None,
                          after_ready: Callable[[], object] | None = None) -> BaseException:
    """What `Client.connect()` raises (it must end within 5 s); `after_ready` runs once
    the client is ready (a knob that ends the session)."""
    client = client or Watcher()
    try:
        await client.login(fake.token)
        task = asyncio.create_task(client.connect())
        if after_ready is not None:
            async with asyncio.timeout(5):
                await client.wait_until_ready()
            result = after_ready()
            if asyncio.iscoroutine(result):
                await result
        async with asyncio.timeout(5):
            try:
                await task
            except Exception as error:  # noqa: BLE001 - the point is to return it
                return error
        raise AssertionError("Client.connect() returned without an error")
    finally:
        await client.close()
