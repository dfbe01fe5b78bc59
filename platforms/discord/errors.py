"""discord.py's errors in the gateway's words: send failures by kind, and the refusals
that no retry can cure (docs/operations.md, "A platform refuses the bot")."""

from __future__ import annotations

import asyncio

import aiohttp
import discord

from platforms.base import PlatformDown, PlatformRefused, RateLimited, Undeliverable

# Gateway close codes after which Discord will not take this bot as configured.
FATAL_CLOSES = {
    4004: "Discord refused the bot token (close code 4004): check platforms.discord.token",
    4010: "Discord refused the shard settings (close code 4010): check "
          "platforms.discord.shard_count and shard_ids",
    4011: "Discord requires this bot to shard (close code 4011): set "
          "platforms.discord.shard_count",
    4012: "Discord refused the gateway API version (close code 4012): upgrade discord.py",
    4013: "Discord refused the requested intents as invalid (close code 4013)",
    4014: "the Message Content intent is not enabled for this bot (close code 4014): turn "
          "it on in the Discord developer portal, Bot > Privileged Gateway Intents",
}


def refusal(error: BaseException | None) -> PlatformRefused | None:
    """The refusal an error from login or the gateway connection stands for, if any."""
    if isinstance(error, discord.PrivilegedIntentsRequired):
        return PlatformRefused(FATAL_CLOSES[4014])
    if isinstance(error, discord.ConnectionClosed) and error.code in FATAL_CLOSES:
        return PlatformRefused(FATAL_CLOSES[error.code])
    if isinstance(error, discord.LoginFailure):
        return PlatformRefused("Discord refused the bot token (HTTP 401): check "
                               "platforms.discord.token")
    return None


class errors_as_kinds:  # noqa: N801 - used as a context manager, reads like a phrase
    """discord.py's errors as the gateway's send error kinds."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> bool:
        if exc is None:
            return False
        if isinstance(exc, discord.RateLimited):
            raise RateLimited(exc.retry_after, "discord rate limit") from exc
        if isinstance(exc, discord.HTTPException) and exc.status == 429:
            raise RateLimited(1.0, "discord rate limit (retries used up)") from exc
        if isinstance(exc, discord.DiscordServerError):
            raise PlatformDown(f"discord: {exc}") from exc
        if isinstance(exc, discord.HTTPException):  # 400, 403, 404: this will not change
            raise Undeliverable(f"discord: {exc}") from exc
        if isinstance(exc, aiohttp.ClientError | OSError | asyncio.TimeoutError):
            raise PlatformDown(f"discord: {exc}") from exc
        return False
