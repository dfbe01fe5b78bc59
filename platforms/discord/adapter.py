"""The Discord adapter on discord.py: explicit lifecycle, gated inbound, paced outbound.

The client is driven step by step (never `bot.run()`, which owns the loop and signals):
`initialize()` logs in (REST: who we are, which application), `register_commands()` puts
the slash commands in the tree and syncs them only when Discord's list differs, `start()` opens
the gateway websocket in a task of its own and waits for READY, `stop()` stops taking
events, `shutdown()` closes the client. discord.py keeps the websocket alive by itself
(heartbeats, RESUME after op 7 or a zombie connection, a new session after op 9).

Sending maps discord.py's errors onto the gateway's kinds: a rate limit discord.py will
not wait out itself → RateLimited (for that channel), 5xx and network → PlatformDown,
403/404/400 → Undeliverable. Discord Markdown passes through as written.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
from dataclasses import dataclass

import discord
import yarl
from discord import app_commands

from platforms.base import (
    Attachment,
    ChatRef,
    Chunk,
    Handler,
    InboundMessage,
    PlatformAdapter,
    PlatformDown,
    PlatformRefused,
    SendLimits,
    Undeliverable,
)
from platforms.discord import catchup, files, slash
from platforms.discord.errors import errors_as_kinds, refusal
from platforms.discord.inbound import from_interaction, from_message, is_user_message, place
from platforms.text import INLINE_ROOM, keep_inline, split_message, utf16_len

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
    catch_up_hours: float = 24.0  # DMs quiet longer than this are not read on start
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
    keeps_keys = True  # a create with a known nonce returns the message it made
    max_message_length = DISCORD_LIMIT
    limits = DISCORD_LIMITS

    def __init__(self, handler: Handler, settings: DiscordSettings) -> None:
        super().__init__(handler)
        self.settings = settings
        self.client: discord.Client | None = None
        self.tree: app_commands.CommandTree | None = None
        self.interactions = slash.Interactions(MENTIONS)
        self._connection: asyncio.Task[None] | None = None
        self._receiving = False  # slash commands are taken (messages always are)
        self._closing = False
        self._endpoints: tuple[str, yarl.URL] | None = None
        self._commands: frozenset[str] = frozenset()
        # Live messages held while a catch-up reads what came before them, in order.
        self._held: collections.deque[tuple[discord.Message, bool]] | None = None
        self._ready_before = False
        self._up = False  # started: from now on an ended connection is a loss to report
        self._catching_up: asyncio.Task[None] | None = None

    # --- lifecycle ----------------------------------------------------------------------
    async def initialize(self) -> None:
        """Log in over REST (a refused token is a PlatformRefused); a failed start gets a
        new client."""
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
        for handler in (self.on_message, self.on_message_edit, self.on_raw_message_delete,
                        self.on_raw_bulk_message_delete, self.on_ready):
            client.event(handler)
        self.client, self.tree = client, app_commands.CommandTree(client)
        self.tree.error(self._on_command_error)
        self._closing, self._ready_before = False, False
        try:
            await client.login(s.token)
        except BaseException as exc:
            await client.close()
            refused = refusal(exc)
            if refused is not None:
                raise refused from None
            raise
        self.bot_username = client.user.name if client.user else None

    async def register_commands(self, commands: list[tuple[str, str]]) -> None:
        """Slash commands: always known locally; synced when Discord's own list (one GET)
        differs from them, so commands removed on Discord's side come back."""
        assert self.tree is not None, "initialize() first"
        self._commands = frozenset(name for name, _ in commands)
        slash.define(self.tree, commands, self._on_slash)
        if slash.same(await self.tree.fetch_commands(), self.tree):
            log.info("discord: slash commands unchanged; not syncing")
            return
        synced = await self.tree.sync()
        log.info("discord: synced %d slash commands", len(synced))

    async def start(self) -> None:
        """Open the gateway connection and wait for READY (or the reason it failed).
        Live messages are held until `catch_up()` has read what came before them."""
        client = self.client
        assert client is not None, "initialize() first"
        self._receiving, self._held = True, collections.deque()
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
            ended = self._connection
            error = (ended.exception() if ended.done() and not ended.cancelled() else None)
            await self._close()
            refused = refusal(error)
            if refused is not None:
                raise refused
            raise PlatformDown("discord: the gateway connection did not become ready")
        self._up = True

    async def stop(self) -> None:
        # Slash commands are refused from now on; messages are still handed over (the
        # gateway stores them for the next run) and sends keep working for the drain.
        self._receiving = False

    async def shutdown(self) -> None:
        self._receiving = self._up = False
        if not self._closing:
            self._closing = True
            await self.interactions.abandon(self._forget_interaction)
        if self._catching_up is not None:
            self._catching_up.cancel()
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
        """discord.py reconnects by itself; its connection ends only for good (a fatal
        close code) or when closed."""
        if task.cancelled() or not self._up or self._closing:
            return
        self._up = False
        error = task.exception()
        refused = refusal(error) or PlatformRefused(
            f"the Discord gateway connection ended{f': {error}' if error else ''}")
        self._receiving = False
        if self.on_refused is not None:
            self.on_refused(refused)
        else:
            log.error("discord: %s", refused)

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

    async def on_raw_message_delete(self, event: discord.RawMessageDeleteEvent) -> None:
        await self._deleted(event.channel_id, (event.message_id,))

    async def on_raw_bulk_message_delete(self, event: discord.RawBulkMessageDeleteEvent
                                         ) -> None:
        await self._deleted(event.channel_id, tuple(sorted(event.message_ids)))

    async def on_ready(self) -> None:
        """A new session (not a resume): what was said while disconnected is read again.
        The first one's catch-up is the gateway's call, once recovery is done."""
        if self._ready_before and self._catching_up is None:
            if self._held is None:
                self._held = collections.deque()
            self._catching_up = asyncio.create_task(self.catch_up(), name="discord-catch-up")
        self._ready_before = True

    async def catch_up(self) -> None:
        try:
            if self.resume_points is not None and self.client is not None:
                read = await catchup.read_missed(
                    self.client, await self.resume_points(), self.settings.catch_up_hours,
                    lambda message: self._hand_over(message, edited=False))
                log.info("discord: read %d message(s) said while the bot was away", read)
        finally:
            while self._held:
                message, edited = self._held.popleft()
                await self._hand_over(message, edited=edited)
            self._held, self._catching_up = None, None

    async def _inbound(self, message: discord.Message, *, edited: bool) -> None:
        if self._held is not None:
            self._held.append((message, edited))
            return
        await self._hand_over(message, edited=edited)

    async def _hand_over(self, message: discord.Message, *, edited: bool) -> None:
        if message.author.id == self._bot_id:
            return  # our own messages come back to us over the gateway
        if not is_user_message(message):
            log.debug("discord: ignoring a %s notice in %s", message.type, message.channel.id)
            return
        await self.handler(from_message(message, self._bot_id, edited=edited,
                                        require_mention=self.settings.require_mention,
                                        commands=self._commands))

    async def _deleted(self, channel_id: int, message_ids: tuple[int, ...]) -> None:
        channel = self.client.get_channel(channel_id) if self.client is not None else None
        chat_id, thread_id = place(channel, channel_id)
        for message_id in message_ids:
            await self.handler(InboundMessage(
                platform=self.name, chat_id=chat_id, user_id="", message_id=str(message_id),
                text="", thread_id=thread_id, is_group=getattr(channel, "guild", None)
                is not None, is_delete=True))

    async def _forget_interaction(self, interaction: discord.Interaction) -> None:
        """An interaction answered "send it again" at shutdown: its stored command is
        not run by the next start."""
        await self.handler(dataclasses.replace(from_interaction(interaction, ""),
                                               is_delete=True))

    async def _on_slash(self, interaction: discord.Interaction, text: str) -> None:
        if not self._receiving:
            await interaction.response.send_message(slash.RESTARTING, ephemeral=True)
            return
        msg = from_interaction(interaction, text)
        await self.interactions.run(interaction, lambda: self.handler(msg))

    async def _on_command_error(self, interaction: discord.Interaction,
                                error: app_commands.AppCommandError) -> None:
        await slash.answer_error(interaction, error)

    # --- outbound -----------------------------------------------------------------------
    def render(self, text: str) -> list[Chunk]:
        parts = split_message(text, self.max_message_length - INLINE_ROOM, measure=utf16_len)
        return [Chunk(part) for part in keep_inline(parts) if part.strip()]  # no blanks

    async def send(self, chat: ChatRef, chunk: Chunk, reply_to: str | None = None
                   ) -> str | None:
        if reply_to is not None and reply_to in self.interactions:
            try:
                with errors_as_kinds():
                    return await self.interactions.send(reply_to, chunk)
            except Undeliverable as exc:  # expired: say it in the channel instead
                if chunk.private:
                    log.warning("discord: a private answer to interaction %s could not be "
                                "given (%s); not saying it in public", reply_to, exc)
                    return None
                log.warning("discord: answering interaction %s failed (%s); sending to the "
                            "channel", reply_to, exc)
                reply_to = None
        if chunk.private and chat.group:
            log.info("discord: not saying a private answer in public in %s", chat.key)
            return None
        channel = self._channel(chat)
        reference = (discord.MessageReference(message_id=int(reply_to), channel_id=channel.id,
                                              fail_if_not_exists=False)
                     if reply_to and reply_to.isdigit() else None)
        extra = {"nonce": chunk.key} if chunk.key else {}  # Discord drops a repeat of it
        with errors_as_kinds():
            sent = await channel.send(chunk.text, allowed_mentions=MENTIONS,
                                      reference=reference, **extra)  # type: ignore[arg-type]
        return str(sent.id)

    def stream_mode(self, chat: ChatRef) -> str:
        return "edit"

    def render_partial(self, text: str) -> list[Chunk]:
        return self.render(text)  # Markdown passes through: unfinished, it shows as typed

    async def edit(self, chat: ChatRef, message_id: str, chunk: Chunk) -> None:
        message = self._channel(chat).get_partial_message(int(message_id))
        with errors_as_kinds():
            await message.edit(content=chunk.text, allowed_mentions=MENTIONS)

    async def delete(self, chat: ChatRef, message_id: str) -> None:
        with errors_as_kinds():
            await self._channel(chat).get_partial_message(int(message_id)).delete()

    async def typing(self, chat: ChatRef) -> None:
        with errors_as_kinds():
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
