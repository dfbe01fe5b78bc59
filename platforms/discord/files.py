"""Fetching what people attach on Discord: the attachment's CDN URL, through discord.py's
own HTTP session (so its proxy settings apply), within the configured size."""

from __future__ import annotations

import asyncio

import aiohttp
import discord

from platforms.base import Attachment, DownloadError, FileTooLarge

FETCH_TIMEOUT_S = 120.0


async def download(client: discord.Client | None, attachment: Attachment,
                   max_bytes: int) -> bytes:
    if attachment.size is not None and attachment.size > max_bytes:
        raise FileTooLarge(max_bytes, attachment.size)
    if client is None or client.is_closed():
        raise DownloadError("Discord is not connected")
    try:
        async with asyncio.timeout(FETCH_TIMEOUT_S):
            data = await client.http.get_from_cdn(attachment.ref)
    except (discord.NotFound, discord.Forbidden) as exc:
        raise DownloadError("Discord no longer has this file") from exc
    except (discord.HTTPException, aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise DownloadError("Discord did not answer") from exc
    if len(data) > max_bytes:
        raise FileTooLarge(max_bytes, len(data))
    return data
