"""The fake Discord's state: users, guilds, channels, messages, commands, interactions.

`WorldMixin` builds the world (`add_guild`, `add_channel`, ...; ids are snowflake
strings), pushes user events (`user_message`, with attachments the fake's CDN serves, or
only into history with `dispatch=False`; `interaction`) and answers the gateway's
questions (READY, GUILD_CREATE, member chunks). Changes made after the client connected
are announced (CHANNEL_CREATE, THREAD_CREATE, ...). `SentMessage` and `Callback` record
what the bot did.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tests.harness import discord_commands as c
from tests.harness import discord_payloads as p
from tests.harness.discord_payloads import (
    APP_ID,
    BOT_ID,
    DEFAULT_PERMISSIONS,
    DEFAULT_USER_ID,
    EPHEMERAL,
    IS_VOICE_MESSAGE,
    LOADING,
    ApiError,
    AttachmentFile,
    Files,
    unknown,
)


@dataclass(frozen=True)
class SentMessage:
    """One accepted write by the bot: a send, an interaction response, a follow-up, an edit."""

    id: str
    channel_id: str
    content: str
    allowed_mentions: dict[str, Any] | None  # as sent
    message_reference: dict[str, Any] | None  # as sent
    flags: int
    via: str  # "channel" | "callback" | "followup" | "edit"
    at: float  # time.monotonic()
    interaction_id: str | None = None
    attachments: tuple[str, ...] = ()  # file names
    embeds: tuple[dict[str, Any], ...] = ()
    nonce: int | str | None = None  # as sent

    @property
    def ephemeral(self) -> bool:
        return bool(self.flags & EPHEMERAL)


@dataclass(frozen=True)
class Callback:
    """One interaction callback as the fake saw it; `status` 200 when accepted."""

    interaction_id: str
    type: int | None
    data: dict[str, Any]
    elapsed: float  # seconds since INTERACTION_CREATE was dispatched
    status: int = 200
    code: int | None = None  # Discord's error code when rejected


@dataclass(eq=False)
class InteractionState:
    id: str
    token: str
    channel_id: str
    dispatched_at: float
    acked: bool = False
    original_id: str | None = None
    filled: bool = True  # False while the original is a deferred "thinking" message
    message_ids: set[str] = field(default_factory=set)


@dataclass(eq=False)
class GuildState:
    data: dict[str, Any]
    roles: dict[str, dict[str, Any]] = field(default_factory=dict)
    channels: list[str] = field(default_factory=list)
    threads: list[str] = field(default_factory=list)
    members: dict[str, dict[str, Any]] = field(default_factory=dict)


class WorldMixin:
    """State and world-building for FakeDiscord (which supplies `_announce`, `dispatch`)."""

    if TYPE_CHECKING:
        app_flags: int

        @property
        def gateway_url(self) -> str: ...
        @property
        def cdn_base(self) -> str: ...
        def _announce(self, event: str, data: dict[str, Any]) -> None: ...
        async def dispatch(self, event: str, data: dict[str, Any]) -> int | None: ...
        async def _notify(self) -> None: ...

    def _init_world(self) -> None:
        self.ids = p.Snowflakes()
        self.users: dict[str, dict[str, Any]] = {BOT_ID: p.bot_user()}
        self.guilds: dict[str, GuildState] = {}
        self.channels: dict[str, dict[str, Any]] = {}  # text channels, threads, DMs
        self.stored: dict[str, dict[str, Any]] = {}  # every message, by id, as last edited
        self.commands: dict[str | None, list[dict[str, Any]]] = {}  # by guild id; None: global
        self.interactions: dict[str, InteractionState] = {}
        self.outbox: list[SentMessage] = []
        self.outbox_by_channel: dict[str, list[SentMessage]] = {}  # the same, indexed
        self.deleted: list[str] = []  # ids of deleted messages
        # (channel id, content) each time a bot write left two of its messages in a channel
        # showing the same text at once: what a user sees as a duplicate, however brief.
        self.shown_twice: list[tuple[str, str]] = []
        # What the CDN serves: (channel id, attachment id, file name) -> the file.
        self.cdn: dict[tuple[str, str, str], AttachmentFile] = {}

    # --- building ---------------------------------------------------------------------------
    def add_guild(self, name: str = "g", *, owner_id: str = p.OWNER_ID) -> str:
        """A guild with @everyone (ordinary permissions), the bot's managed role, the bot
        and the owner as members."""
        guild_id = self.ids.next()
        bot_role = p.role(self.ids.next(), p.BOT_NAME, p.BOT_PERMISSIONS, 1, bot_id=BOT_ID)
        everyone = p.role(guild_id, "@everyone", DEFAULT_PERMISSIONS)
        g = self.guilds[guild_id] = GuildState(p.guild(guild_id, name, owner_id=owner_id),
                                               {guild_id: everyone, bot_role["id"]: bot_role})
        g.members[BOT_ID] = p.member(self.users[BOT_ID], [bot_role["id"]])
        self._join(g, owner_id, (), "owner")
        self._announce("GUILD_CREATE", self._guild_create(g))
        return guild_id

    def add_channel(self, guild_id: str, name: str = "general") -> str:
        g = self.guilds[guild_id]
        channel = p.text_channel(self.ids.next(), guild_id, name, len(g.channels))
        self.channels[channel["id"]] = channel
        g.channels.append(channel["id"])
        self._announce("CHANNEL_CREATE", channel)
        return channel["id"]

    def add_thread(self, parent_id: str, owner_id: str = BOT_ID, name: str = "thread") -> str:
        """A public thread (type 11) under a text channel."""
        guild_id = self.channels[parent_id]["guild_id"]
        thread = p.thread(self.ids.next(), guild_id, parent_id, owner_id, name)
        self.channels[thread["id"]] = thread
        self.guilds[guild_id].threads.append(thread["id"])
        self._announce("THREAD_CREATE", {**thread, "newly_created": True})
        return thread["id"]

    def add_role(self, guild_id: str, name: str, permissions: int) -> str:
        g = self.guilds[guild_id]
        role = p.role(self.ids.next(), name, permissions, len(g.roles))
        g.roles[role["id"]] = role
        self._announce("GUILD_ROLE_CREATE", {"guild_id": guild_id, "role": role})
        return role["id"]

    def add_member(self, guild_id: str, user_id: str, role_ids: Iterable[str] = (),
                   name: str | None = None) -> str:
        member = self._join(self.guilds[guild_id], user_id, role_ids, name)
        self._announce("GUILD_MEMBER_ADD", {**member, "guild_id": guild_id})
        return user_id

    def dm_channel(self, user_id: str) -> str:
        """The DM channel (type 1) between the bot and the user, made on first use."""
        for channel in self.channels.values():
            if channel["type"] == 1 and channel["recipients"][0]["id"] == user_id:
                return channel["id"]
        channel = p.dm_channel(self.ids.next(), self._user(user_id))
        self.channels[channel["id"]] = channel
        return channel["id"]

    def _user(self, user_id: str, name: str | None = None, *,
              bot: bool = False) -> dict[str, Any]:
        return self.users.setdefault(user_id, p.user(user_id, name, bot=bot))

    def _join(self, g: GuildState, user_id: str, role_ids: Iterable[str],
              name: str | None) -> dict[str, Any]:
        member = g.members[user_id] = p.member(self._user(user_id, name), role_ids)
        return member

    def _channel(self, channel_id: str) -> dict[str, Any]:
        channel = self.channels.get(channel_id)
        if channel is None:
            raise unknown("Channel")
        return channel

    def _command(self, name: str, guild_id: str | None) -> dict[str, Any] | None:
        """The synced command an interaction names: the guild's first, then global."""
        scopes = [guild_id, None] if guild_id else [None]
        return next((c for scope in scopes for c in self.commands.get(scope, [])
                     if c["name"] == name), None)

    # --- user events in ---------------------------------------------------------------------
    async def user_message(self, channel_id: str, content: str = "", *,
                           author_id: str = DEFAULT_USER_ID, mentions_bot: bool = False,
                           mention_ids: Iterable[str] = (), reply_to: str | None = None,
                           author_is_bot: bool = False,
                           attachments: Iterable[AttachmentFile | tuple[Any, ...]] = (),
                           dispatch: bool = True) -> str:
        """Dispatch MESSAGE_CREATE from a user; returns its id. A reply pings (mentions)
        the replied-to author, as Discord's default reply does. `dispatch=False`: the
        message only joins the channel's history (written while the bot was offline).

        `attachments`: AttachmentFile objects or (filename, data[, content_type[, size]])
        tuples; each gets a signed URL on the fake's CDN (`GET /attachments/...`), which
        serves the bytes. A file with `duration_secs` makes this a voice message."""
        files = [AttachmentFile.of(a) for a in attachments]
        if not (content or files):
            raise ValueError("a message needs content or attachments")
        channel = self._channel(channel_id)
        if mentions_bot and f"<@{BOT_ID}>" not in content and f"<@!{BOT_ID}>" not in content:
            content = f"<@{BOT_ID}> {content}" if content else f"<@{BOT_ID}>"
        ids = ([BOT_ID] if mentions_bot else []) + list(mention_ids)
        reference, target = None, None
        if reply_to is not None:
            target = self.stored.get(reply_to)
            if target is None:
                raise ValueError(f"no message {reply_to} to reply to")
            reference = {"type": 0, "message_id": reply_to, "channel_id": target["channel_id"]}
            if channel.get("guild_id"):
                reference["guild_id"] = channel["guild_id"]
            ids.append(target["author"]["id"])
        author = self._user(author_id, bot=author_is_bot)
        voice = any(f.duration_secs is not None for f in files)
        message = p.message(self.ids.next(), channel_id, author, content,
                            mentions=[self._user(i) for i in dict.fromkeys(ids)],
                            reference=reference, flags=IS_VOICE_MESSAGE if voice else 0,
                            attachments=[self._attachment(channel_id, f) for f in files])
        if target is not None:
            message["referenced_message"] = quoted(target)
        self.stored[message["id"]] = message
        if dispatch:
            await self.dispatch("MESSAGE_CREATE", self._on_gateway(message))
        return message["id"]

    async def interaction(self, name: str, options: dict[str, Any] | None, channel_id: str, *,
                          user_id: str = DEFAULT_USER_ID,
                          permissions: int = DEFAULT_PERMISSIONS) -> str:
        """Dispatch INTERACTION_CREATE for a slash command; returns the interaction id.
        The command id is the synced one when the command was synced."""
        channel = self._channel(channel_id)
        guild_id = channel.get("guild_id")
        command = self._command(name, guild_id)
        data: dict[str, Any] = {"id": command["id"] if command else self.ids.next(),
                                "name": name, "type": 1, "options": c.command_options(options)}
        if command is not None and command.get("guild_id"):
            data["guild_id"] = command["guild_id"]
        member = None
        if guild_id is not None:
            g = self.guilds[guild_id]
            member = {**(g.members.get(user_id) or self._join(g, user_id, (), None)),
                      "permissions": str(permissions)}
        state = InteractionState(self.ids.next(), secrets.token_urlsafe(48), channel_id,
                                 time.monotonic())
        self.interactions[state.id] = state
        await self.dispatch("INTERACTION_CREATE", c.interaction(
            state.id, state.token, data, channel, user_data=self._user(user_id),
            member_data=member, app_permissions=p.BOT_PERMISSIONS))
        return state.id

    def _attachment(self, channel_id: str, file: AttachmentFile) -> dict[str, Any]:
        """The attachment object for a file, which the CDN now serves."""
        attachment_id = self.ids.next()
        self.cdn[(channel_id, attachment_id, file.filename)] = file
        return p.attachment(attachment_id, channel_id, file.filename, file.claimed_size,
                            base=self.cdn_base, content_type=file.reported_type,
                            dimensions=file.dimensions(), duration_secs=file.duration_secs,
                            description=file.description)

    # --- what the gateway sends -------------------------------------------------------------
    def _ready_data(self, session_id: str) -> dict[str, Any]:
        return {"v": 10, "user": p.bot_user(), "session_id": session_id,
                "session_type": "normal", "resume_gateway_url": self.gateway_url,
                "guilds": [{"id": guild_id, "unavailable": True} for guild_id in self.guilds],
                "application": {"id": APP_ID, "flags": self.app_flags},
                "private_channels": [], "relationships": [], "presences": [],
                "guild_join_requests": [], "geo_ordered_rtc_regions": ["local"],
                "user_settings": {}, "_trace": ["fake-discord"]}

    def _guild_creates(self) -> list[dict[str, Any]]:
        return [self._guild_create(g) for g in self.guilds.values()]

    def _guild_create(self, g: GuildState) -> dict[str, Any]:
        return {**g.data, "roles": list(g.roles.values()), "members": list(g.members.values()),
                "member_count": len(g.members),
                "channels": [self.channels[c] for c in g.channels],
                "threads": [self.channels[t] for t in g.threads]}

    def _guild_members(self, guild_id: str) -> list[dict[str, Any]]:
        g = self.guilds.get(guild_id)
        return list(g.members.values()) if g else []

    def _on_gateway(self, message: dict[str, Any]) -> dict[str, Any]:
        """A message as MESSAGE_CREATE carries it: in guilds with guild_id, the author's
        member (no user) and a member on each mention."""
        guild_id = self.channels[message["channel_id"]].get("guild_id")
        if guild_id is None:
            return message
        g = self.guilds[guild_id]
        author = g.members.get(message["author"]["id"]) or self._join(
            g, message["author"]["id"], (), None)
        mentions = [{**u, "member": without_user(g.members[u["id"]])} if u["id"] in g.members
                    else u for u in message["mentions"]]
        return {**message, "guild_id": guild_id, "member": without_user(author),
                "mentions": mentions}

    # --- messages the bot writes ------------------------------------------------------------
    def _create(self, channel_id: str, payload: dict[str, Any], files: Files,
                state: InteractionState | None = None, where: tuple[str, ...] = (), *,
                check: bool = True) -> dict[str, Any]:
        """Validate and store a new bot message (`_sent` logs and echoes it)."""
        if check:
            p.check_message_body(payload, prefix=where, has_files=bool(files))
        reference, target = self._reference(payload.get("message_reference"))
        message = p.message(self.ids.next(), channel_id, self.users[BOT_ID],
                            payload.get("content") or "", flags=int(payload.get("flags") or 0),
                            reference=reference, embeds=payload.get("embeds"),
                            attachments=[self._attachment(channel_id, f) for f in files])
        if target is not None:
            message["referenced_message"] = quoted(target)
        if state is not None:
            message.update(webhook_id=APP_ID, application_id=APP_ID,
                           type=19 if reference else 20)
            state.message_ids.add(message["id"])
        self.stored[message["id"]] = message
        return message

    def _reference(self, ref: dict[str, Any] | None) -> tuple[dict[str, Any] | None,
                                                               dict[str, Any] | None]:
        """The stored reference and its target; 400 for an unknown target unless
        `fail_if_not_exists` is false (then the message goes out without a reply)."""
        if not ref:
            return None, None
        target = self.stored.get(str(ref.get("message_id")))
        if target is None:
            if ref.get("fail_if_not_exists", True):
                raise p.form_error(["message_reference"], "MESSAGE_REFERENCE_UNKNOWN_MESSAGE",
                                   "Unknown message")
            return None, None
        reference = {"type": 0, "message_id": target["id"], "channel_id": target["channel_id"]}
        guild_id = self.channels[target["channel_id"]].get("guild_id")
        return ({**reference, "guild_id": guild_id} if guild_id else reference), target

    async def _edit(self, message: dict[str, Any], payload: dict[str, Any], files: Files,
                    via: str, state: InteractionState | None = None) -> dict[str, Any]:
        if message["author"]["id"] != BOT_ID:
            raise ApiError(403, 50005, "Cannot edit a message authored by another user")
        changes = {k: payload[k] or ([] if k != "content" else "")
                   for k in ("content", "embeds", "components") if k in payload}
        edited = {**message, **changes, "flags": message["flags"] & ~LOADING,
                  "edited_timestamp": p.now_iso()}
        if files:
            edited["attachments"] = [self._attachment(message["channel_id"], f) for f in files]
        p.check_message_body(edited, has_files=bool(files))
        self.stored[message["id"]] = edited
        await self._sent(edited, payload, via, state, event="MESSAGE_UPDATE")
        return edited

    async def _delete(self, message: dict[str, Any]) -> None:
        self._forget(message)
        if not is_ephemeral(message):
            gateway = self._on_gateway(message)
            self._announce("MESSAGE_DELETE", {k: gateway[k] for k in ("id", "channel_id",
                                                                     "guild_id") if k in gateway})
        await self._notify()

    def _forget(self, message: dict[str, Any]) -> None:
        """A deleted message is gone, and so are its attachments on the CDN."""
        del self.stored[message["id"]]
        self.deleted.append(message["id"])
        for a in message["attachments"]:
            self.cdn.pop((message["channel_id"], a["id"], a["filename"]), None)

    async def _sent(self, message: dict[str, Any], payload: dict[str, Any], via: str,
                    state: InteractionState | None = None, *,
                    event: str = "MESSAGE_CREATE") -> None:
        """Log an accepted write and echo it on the gateway (ephemeral ones stay private)."""
        sent = SentMessage(
            message["id"], message["channel_id"], message["content"],
            payload.get("allowed_mentions"), payload.get("message_reference"),
            message["flags"], via, time.monotonic(), state.id if state else None,
            tuple(a["filename"] for a in message["attachments"]), tuple(message["embeds"]),
            payload.get("nonce"))
        self.outbox.append(sent)
        self.outbox_by_channel.setdefault(sent.channel_id, []).append(sent)
        if sent.content and sum(m["channel_id"] == sent.channel_id and m["content"] == sent.content
                                and m["author"]["id"] == BOT_ID for m in self.stored.values()) > 1:
            self.shown_twice.append((sent.channel_id, sent.content))
        if not is_ephemeral(message):
            self._announce(event, self._on_gateway(message))
        await self._notify()


def without_user(member: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in member.items() if k != "user"}


def quoted(message: dict[str, Any]) -> dict[str, Any]:
    """A message as `referenced_message` (one level deep, as on Discord)."""
    return {k: v for k, v in message.items() if k != "referenced_message"}


def is_ephemeral(message: dict[str, Any]) -> bool:
    return bool(message.get("flags", 0) & EPHEMERAL)
