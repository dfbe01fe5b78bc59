"""Reading what was said while the bot was away (docs/architecture.md, "Discord").

For each chat the gateway stored a message of, the channel's history after that message
is read oldest first and handed over like live messages: the ledger makes a message
already stored a no-op, so a message answered by an earlier run is never answered again.
Channels are read when the chat has a live session; DMs when they spoke recently.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import aiohttp
import discord

from platforms.base import ResumePoint

log = logging.getLogger(__name__)

PER_CHAT = 200  # messages read per chat at most: a long absence is not replayed whole


def worth_reading(point: ResumePoint, hours: float, now: float) -> bool:
    if not point.message_id.isdigit():
        return False
    if point.chat.group:
        return point.live
    return now - point.received_at <= hours * 3600


async def _channel(client: discord.Client, channel_id: int) -> discord.abc.Messageable | None:
    channel = client.get_channel(channel_id)
    if channel is None:
        channel = await client.fetch_channel(channel_id)
    return channel if isinstance(channel, discord.abc.Messageable) else None


async def read_missed(client: discord.Client, points: list[ResumePoint], hours: float,
                      hand_over: Callable[[discord.Message], Awaitable[None]]) -> int:
    """Hand over each chat's messages after its point; how many were read."""
    now, read = time.time(), 0
    for point in points:
        if not worth_reading(point, hours, now):
            continue
        chat_id = int(point.chat.thread_id or point.chat.chat_id)
        try:
            channel = await _channel(client, chat_id)
            if channel is None:
                continue
            async for message in channel.history(after=discord.Object(int(point.message_id)),
                                                 limit=PER_CHAT, oldest_first=True):
                read += 1
                await hand_over(message)
        except (discord.HTTPException, aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("discord: reading what %s said while the bot was away failed: %s",
                        point.chat.key, exc)
    return read
