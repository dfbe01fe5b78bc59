"""The Discord adapter on discord.py: explicit lifecycle, gated inbound, paced outbound.

The client is driven step by step (never `bot.run()`, which owns the loop and signals):
`initialize()` logs in (REST: who we are, which application), `register_commands()` puts
the slash commands in the tree and syncs them only when they changed, `start()` opens
the gateway websocket in a task of its own and waits for READY, `stop()` stops taking
events, `shutdown()` closes the client. discord.py keeps the websocket alive by itself
(heartbeats, RESUME after op 7 or a zombie connection, a new session after op 9).

Sending maps discord.py's errors onto the gateway's kinds: a rate limit discord.py will
not wait out itself → RateLimited (for that channel), 5xx and network → PlatformDown,
403/404/400 → Undeliverable. Discord Markdown passes through as written.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import aiohttp
import discord
import yarl
from discord import app_commands

from platforms.base import (
    Attachment,
    ChatRef,
    Chunk,
    Handler,
    PlatformAdapter,
    PlatformDown,
    RateLimited,
    SendLimits,
    Undeliverable,
)
from platforms.discord import files, slash
from platforms.discord.inbound import from_interaction, from_message
from platforms.text import split_message, utf16_len

log = logging.getLogger(__name__)

DISCORD_LIMIT = 2000  # characters per message (counted here in UTF-16 units, never fewer)
# discord.py paces each channel by the rate-limit headers itself; this caps the bot overall.
DISCORD_LIMITS = SendLimits(per_bot_per_second=50)
# A rate limit longer than this is not waited out inside discord.py (30 s is its minimum):
# the gateway's budget pauses that one channel instead.
MAX_LIBRARY_WAIT_S = 30.0
READY_TIMEOUT_S = 60.0
# Never @everyone, @here or roles; a user only as the author of the message replied to.
MENTIONS = discord.AllowedMentions(everyone=False, users=False, roles=False,
                                   replied_user=True)


@dataclass(frozen=True)
class DiscordSettings:
    token: str
    api_base: str | None = None  # e.g. http://127.0.0.1:9000/api/v10
    gateway_url: str | None = None  # e.g. ws://127.0.0.1:9000/gateway
    require_mention: bool = True
    guild_ready_timeout: float = 2.0
    heartbeat_timeout: float = 60.0  # silence after which a connection counts as dead
    # Past Discord's 2,500-guild line a bot must shard; each process runs some shards
    # (discord.py's AutoShardedClient). None: one unsharded connection.
    shard_count: int | None = None
    shard_ids: tuple[int, ...] | None = None  # this process's shards; None: all of them


def intents() -> discord.Intents:
    chosen = discord.Intents.none()
    chosen.guilds = True  # channels, threads and roles: where a message is, who is admin
    chosen.guild_messages = chosen.dm_messages = True
    chosen.message_content = True  # privileged: enable it in the developer portal
    return chosen


class DiscordAdapter(PlatformAdapter):
    """DMs, guild text channels and threads (each thread a session of its own)."""

    name = "discord"
    max_message_length = DISCORD_LIMIT
    limits = DISCORD_LIMITS

    def __init__(self, handler: Handler, settings: DiscordSettings) -> None:
        super().__init__(handler)
        self.settings = settings
        self.client: discord.Client | None = None
        self.tree: app_commands.CommandTree | None = None
        self.interactions = slash.Interactions(MENTIONS)
        self._connection: asyncio.Task[None] | None = None
        self._receiving = False
        self._endpoints: tuple[str, yarl.URL] | None = None

    # --- lifecycle ----------------------------------------------------------------------
    async def initialize(self) -> None:
        """Log in over REST (a wrong token fails here); a failed start gets a new client."""
        if self.client is not None and not self.client.is_closed():
            return
        self._use_endpoints()
        s = self.settings
        options = {"intents": intents(), "allowed_mentions": MENTIONS,
                   "guild_ready_timeout": s.guild_ready_timeout,
                   "heartbeat_timeout": s.heartbeat_timeout,
                   "max_ratelimit_timeout": MAX_LIBRARY_WAIT_S}
        client = (discord.Client(**options) if s.shard_count is None else
                  discord.AutoShardedClient(**options, shard_count=s.shard_count,
                                            shard_ids=list(s.shard_ids)
                                            if s.shard_ids is not None else None))
        client.event(self.on_message)
        client.event(self.on_message_edit)
        self.client, self.tree = client, app_commands.CommandTree(client)
        self.tree.error(self._on_command_error)
        try:
            await client.login(s.token)
        except BaseException:
            await client.close()
            raise
        self.bot_username = client.user.name if client.user else None

    async def register_commands(self, commands: list[tuple[str, str]],
                                registered: str | None = None) -> str | None:
        """Slash commands: always known locally; synced with Discord only when changed
        (each sync is rate limited hard, and a restart should cost none)."""
        assert self.tree is not None, "initialize() first"
        fingerprint = slash.define(self.tree, commands, self._on_slash)
        if fingerprint == registered:
            log.info("discord: slash commands unchanged; not syncing")
            return fingerprint
        synced = await self.tree.sync()
        log.info("discord: synced %d slash commands", len(synced))
        return fingerprint

    async def start(self) -> None:
        """Open the gateway connection and wait for READY (or the reason it failed)."""
        client = self.client
        assert client is not None, "initialize() first"
        self._receiving = True
        self._connection = asyncio.create_task(client.connect(), name="discord-connect")
        self._connection.add_done_callback(self._connection_ended)
        ready = asyncio.create_task(client.wait_until_ready())
        try:
            done, _ = await asyncio.wait({ready, self._connection}, timeout=READY_TIMEOUT_S,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
        if ready not in done:
            self._receiving = False
            await self._close()
            raise PlatformDown("discord: the gateway connection did not become ready")

    async def stop(self) -> None:
        self._receiving = False  # sends keep working while the gateway drains

    async def shutdown(self) -> None:
        self._receiving = False
        await self._close()
        if self._endpoints is not None:
            discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = \
                self._endpoints
            self._endpoints = None

    async def _close(self) -> None:
        if self.client is not None:
            await self.client.close()
        if self._connection is not None:
            await asyncio.gather(self._connection, return_exceptions=True)
            self._connection = None

    def _use_endpoints(self) -> None:
        """discord.py has no option for other endpoints: its two class attributes are the
        documented way (HARNESS.md); the originals come back at shutdown."""
        s = self.settings
        if not (s.api_base or s.gateway_url) or self._endpoints is not None:
            return
        self._endpoints = (discord.http.Route.BASE,
                           discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)
        if s.api_base:
            discord.http.Route.BASE = s.api_base.rstrip("/")
        if s.gateway_url:
            discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(s.gateway_url)

    def _connection_ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or not self._receiving:
            return
        error = task.exception()
        log.error("discord: the gateway connection ended%s; no Discord messages arrive "
                  "until a restart", f": {error}" if error else "")

    # --- inbound ------------------------------------------------------------------------
    @property
    def _bot_id(self) -> int:
        assert self.client is not None and self.client.user is not None
        return self.client.user.id

    async def on_message(self, message: discord.Message) -> None:
        await self._inbound(message, edited=False)

    async def on_message_edit(self, before: discord.Message, after: discord.Message) -> None:
        if before.content != after.content:
            await self._inbound(after, edited=True)

    async def _inbound(self, message: discord.Message, *, edited: bool) -> None:
        if message.author.id == self._bot_id:
            return  # our own messages come back to us over the gateway
        if not self._receiving:
            log.warning("discord: message %s in %s arrived while stopping; not answered",
                        message.id, message.channel.id)
            return
        await self.handler(from_message(message, self._bot_id, edited=edited,
                                        require_mention=self.settings.require_mention))

    async def _on_slash(self, interaction: discord.Interaction, text: str) -> None:
        if not self._receiving:
            await interaction.response.send_message(
                "I am restarting; please try again in a minute.", ephemeral=True)
            return
        msg = from_interaction(interaction, text)
        await self.interactions.run(interaction, lambda: self.handler(msg))

    async def _on_command_error(self, interaction: discord.Interaction,
                                error: app_commands.AppCommandError) -> None:
        log.error("discord: slash command %s failed: %s", interaction.command, error)

    # --- outbound -----------------------------------------------------------------------
    def render(self, text: str) -> list[Chunk]:
        parts = split_message(text, self.max_message_length, measure=utf16_len)
        return [Chunk(part) for part in parts if part.strip()]  # Discord refuses blanks

    async def send(self, chat: ChatRef, chunk: Chunk, reply_to: str | None = None
                   ) -> str | None:
        if reply_to is not None and reply_to in self.interactions:
            try:
                with _errors_as_kinds():
                    return await self.interactions.send(reply_to, chunk)
            except Undeliverable as exc:  # expired: say it in the channel instead
                log.warning("discord: answering interaction %s failed (%s); sending to the "
                            "channel", reply_to, exc)
                reply_to = None
        channel = self._channel(chat)
        reference = (discord.MessageReference(message_id=int(reply_to), channel_id=channel.id,
                                              fail_if_not_exists=False)
                     if reply_to and reply_to.isdigit() else None)
        with _errors_as_kinds():
            sent = await channel.send(chunk.text, allowed_mentions=MENTIONS,
                                      reference=reference)  # type: ignore[arg-type]
        return str(sent.id)

    def stream_mode(self, chat: ChatRef) -> str:
        return "edit"

    def render_partial(self, text: str) -> list[Chunk]:
        return self.render(text)  # Markdown passes through: unfinished, it shows as typed

    async def edit(self, chat: ChatRef, message_id: str, chunk: Chunk) -> None:
        message = self._channel(chat).get_partial_message(int(message_id))
        with _errors_as_kinds():
            await message.edit(content=chunk.text, allowed_mentions=MENTIONS)

    async def delete(self, chat: ChatRef, message_id: str) -> None:
        with _errors_as_kinds():
            await self._channel(chat).get_partial_message(int(message_id)).delete()

    async def typing(self, chat: ChatRef) -> None:
        with _errors_as_kinds():
            await self._channel(chat).typing()

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        return await files.download(self.client, attachment, max_bytes)

    async def delivered(self, chat: ChatRef, message_ids: tuple[str, ...]) -> None:
        for message_id in message_ids:
            await self.interactions.close(message_id)

    def _channel(self, chat: ChatRef) -> discord.PartialMessageable:
        if self.client is None or self.client.is_closed():
            raise PlatformDown("discord: the client is closed")  # kept for the next start
        return self.client.get_partial_messageable(int(chat.thread_id or chat.chat_id))


class _errors_as_kinds:  # noqa: N801 - used as a context manager, reads like a phrase
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
