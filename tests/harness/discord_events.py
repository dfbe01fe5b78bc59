"""User-side events beyond plain messages (`EventsMixin`): system messages, forwards,
deletes, group DMs. Each stores what it creates (so history and GET see it) and
dispatches it like Discord; `dispatch=False` only stores.

System messages (MESSAGE_CREATE with a non-default `type`; see `discord_messages.py`):
`pin_notice` (6, anywhere; the target gets `pinned` and CHANNEL_PINS_UPDATE goes out),
`join_notice` (7), `boost_notice` (8, or 9-11 with a tier), `automod_notice` (24) in guild
channels; `thread_created_notice` (18, in the thread's parent); `rename_notice` (4) and
`recipient_notice` (1/2) in threads and group DMs; `call_notice` (3) in DMs and group DMs;
`poll_result_notice` (46). `system_message` builds any other type.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tests.harness import discord_messages as m
from tests.harness import discord_payloads as p
from tests.harness.discord_payloads import DEFAULT_USER_ID, AttachmentFile

THREADS = (10, 11, 12)
GROUP_DM, DM = 3, 1


class EventsMixin:
    """Dispatchers for FakeDiscord (the world supplies the helpers below)."""

    if TYPE_CHECKING:
        ids: p.Snowflakes
        channels: dict[str, dict[str, Any]]
        stored: dict[str, dict[str, Any]]
        cdn: dict[tuple[str, str, str], AttachmentFile]

        def _user(self, user_id: str, name: str | None = None, *,
                  bot: bool = False) -> dict[str, Any]: ...
        def _channel(self, channel_id: str) -> dict[str, Any]: ...
        def _guild_members(self, guild_id: str) -> list[dict[str, Any]]: ...
        def add_member(self, guild_id: str, user_id: str, role_ids: Iterable[str] = (),
                       name: str | None = None) -> str: ...
        def _attachment(self, channel_id: str, file: AttachmentFile) -> dict[str, Any]: ...
        def _on_gateway(self, message: dict[str, Any]) -> dict[str, Any]: ...
        def _announce(self, event: str, data: dict[str, Any]) -> None: ...
        async def dispatch(self, event: str, data: dict[str, Any]) -> int | None: ...
        async def _delete(self, message: dict[str, Any]) -> None: ...
        def _forget(self, message: dict[str, Any]) -> None: ...
        async def _notify(self) -> None: ...

    # --- building -------------------------------------------------------------------------
    def group_dm(self, user_ids: Iterable[str], name: str | None = None) -> str:
        """A group DM (type 3) of these users and the bot, owned by the first user. (Real
        bots cannot join group DMs; discord.py sees its messages in a DMChannel.)"""
        users = [self._user(u) for u in user_ids]
        channel = m.group_dm(self.ids.next(), users[0]["id"], users, name)
        self.channels[channel["id"]] = channel
        return channel["id"]

    # --- system messages ------------------------------------------------------------------
    async def system_message(self, channel_id: str, kind: str | int, *,
                             author_id: str = DEFAULT_USER_ID, content: str = "",
                             mention_ids: Iterable[str] = (),
                             reference: dict[str, Any] | None = None, dispatch: bool = True,
                             **fields: Any) -> str:
        """Store (and dispatch) a message of `kind` (a discord.py MessageType name or
        Discord's number); `fields` are set on the payload as they are."""
        self._channel(channel_id)
        message = m.system(self.ids.next(), channel_id, self._user(author_id), kind,
                           content=content, mentions=[self._user(i) for i in mention_ids],
                           reference=reference, **fields)
        self.stored[message["id"]] = message
        if dispatch:
            await self.dispatch("MESSAGE_CREATE", self._on_gateway(message))
        return message["id"]

    async def pin_notice(self, message_id: str, *, by: str = DEFAULT_USER_ID) -> str:
        target = self._known(message_id)
        channel_id = target["channel_id"]
        guild_id = self.channels[channel_id].get("guild_id")
        target["pinned"] = True
        pins = {"channel_id": channel_id, "last_pin_timestamp": p.now_iso()}
        self._announce("CHANNEL_PINS_UPDATE", {**pins, "guild_id": guild_id} if guild_id
                       else pins)
        return await self.system_message(channel_id, "pins_add", author_id=by,
                                         reference=m.reference(message_id, channel_id,
                                                               guild_id))

    async def join_notice(self, channel_id: str, user_id: str) -> str:
        """A member joined (GUILD_MEMBER_ADD first if they were not one)."""
        guild_id = self._in(channel_id, (0,))["guild_id"]
        if all(member["user"]["id"] != user_id for member in self._guild_members(guild_id)):
            self.add_member(guild_id, user_id)
        return await self.system_message(channel_id, "new_member", author_id=user_id)

    async def boost_notice(self, channel_id: str, user_id: str, *, tier: int = 0,
                           count: int = 1) -> str:
        """A boost (8); with `tier` 1-3 the boost that reached that level (9-11). Content
        is the number of boosts when more than one."""
        self._in(channel_id, (0,))
        return await self.system_message(channel_id, 8 + tier, author_id=user_id,
                                         content=str(count) if count > 1 else "")

    async def thread_created_notice(self, thread_id: str) -> str:
        """"X started a thread" in the parent; the reference names the thread."""
        thread = self._in(thread_id, THREADS)
        return await self.system_message(
            thread["parent_id"], "thread_created", author_id=thread["owner_id"],
            content=thread["name"],
            reference=m.reference(None, thread_id, thread["guild_id"]))

    async def rename_notice(self, channel_id: str, name: str, *,
                            by: str = DEFAULT_USER_ID) -> str:
        channel = self._in(channel_id, (*THREADS, GROUP_DM))
        channel["name"] = name
        if channel["type"] in THREADS:
            self._announce("THREAD_UPDATE", channel)
        return await self.system_message(channel_id, "channel_name_change", author_id=by,
                                         content=name)

    async def recipient_notice(self, channel_id: str, user_id: str, *, removed: bool = False,
                               by: str = DEFAULT_USER_ID) -> str:
        """`by` added (or removed) `user_id` to a thread or group DM."""
        channel = self._in(channel_id, (*THREADS, GROUP_DM))
        if channel["type"] == GROUP_DM:
            others = [u for u in channel["recipients"] if u["id"] != user_id]
            channel["recipients"] = others if removed else [*others, self._user(user_id)]
        return await self.system_message(
            channel_id, "recipient_remove" if removed else "recipient_add", author_id=by,
            mention_ids=[user_id])

    async def call_notice(self, channel_id: str, *, by: str = DEFAULT_USER_ID,
                          participants: Iterable[str] | None = None,
                          ended: bool = False) -> str:
        self._in(channel_id, (DM, GROUP_DM))
        ids = list(participants) if participants is not None else [by]
        return await self.system_message(channel_id, "call", author_id=by,
                                         call=m.call(ids, ended=ended))

    async def automod_notice(self, channel_id: str, user_id: str, blocked: str, *,
                             rule_name: str = "Block words", keyword: str = "*",
                             in_channel: str | None = None) -> str:
        """AutoMod's alert in `channel_id` about `user_id`'s blocked message (written in
        `in_channel`, default the same channel)."""
        self._in(channel_id, (0,))
        embed = m.automod_embed(in_channel or channel_id, self.ids.next(), rule_name=rule_name,
                                keyword=keyword, content=blocked)
        return await self.system_message(channel_id, "auto_moderation_action",
                                         author_id=user_id, embeds=[embed])

    async def poll_result_notice(self, channel_id: str, question: str, *,
                                 by: str = DEFAULT_USER_ID, poll_id: str | None = None,
                                 total_votes: int = 0,
                                 winner: tuple[int, str, int] | None = None) -> str:
        """A poll ended: the reference names the poll's message (`poll_id`; default an id
        the fake does not store), `winner` is (answer id, text, votes)."""
        guild_id = self._channel(channel_id).get("guild_id")
        embed = m.poll_result_embed(question, total_votes=total_votes, winner=winner)
        return await self.system_message(
            channel_id, "poll_result", author_id=by, embeds=[embed],
            reference=m.reference(poll_id or self.ids.next(), channel_id, guild_id))

    # --- forwards ---------------------------------------------------------------------------
    async def forward_message(self, channel_id: str, source_id: str | None = None, *,
                              content: str = "",
                              attachments: Iterable[AttachmentFile | tuple[Any, ...]] = (),
                              author_id: str = DEFAULT_USER_ID,
                              source_channel_id: str | None = None,
                              dispatch: bool = True) -> str:
        """A forward into `channel_id`: empty content, `message_reference.type` 1, and one
        snapshot of the source (a stored message, or `content`/`attachments` of a message
        in `source_channel_id`, which the fake need not know). The snapshot's files are
        served by the CDN under the forward's channel."""
        if source_id is not None:
            source = self._known(source_id)
            files = [self.cdn[(source["channel_id"], a["id"], a["filename"])]
                     for a in source["attachments"]]
        else:
            files = [AttachmentFile.of(a) for a in attachments]
            source = p.message(self.ids.next(), source_channel_id or channel_id,
                               self._user(author_id), content)
        snapshot = {**source, "attachments": [self._attachment(channel_id, f) for f in files]}
        source_channel = self.channels.get(source["channel_id"]) or {}
        message = p.message(self.ids.next(), channel_id, self._user(author_id), "",
                            flags=m.HAS_SNAPSHOT,
                            reference=m.reference(source["id"], source["channel_id"],
                                                  source_channel.get("guild_id"),
                                                  kind=m.FORWARD))
        message.update(type=0, message_snapshots=[m.snapshot(snapshot)])
        self.stored[message["id"]] = message
        if dispatch:
            await self.dispatch("MESSAGE_CREATE", self._on_gateway(message))
        return message["id"]

    # --- deletes ----------------------------------------------------------------------------
    async def delete_message(self, message_id: str) -> None:
        """Someone (a user, a moderator) deleted it: MESSAGE_DELETE; GET is a 404 after."""
        await self._delete(self._known(message_id))

    async def delete_messages(self, message_ids: Iterable[str]) -> None:
        """A bulk delete in one guild channel: one MESSAGE_DELETE_BULK."""
        messages = [self._known(i) for i in message_ids]
        channel_ids = {message["channel_id"] for message in messages}
        if len(channel_ids) != 1:
            raise ValueError("a bulk delete covers messages of one channel")
        channel_id = channel_ids.pop()
        guild_id = self.channels[channel_id].get("guild_id")
        if guild_id is None:
            raise ValueError("bulk deletes happen in guild channels only")
        for message in messages:
            self._forget(message)
        self._announce("MESSAGE_DELETE_BULK", {"ids": [message["id"] for message in messages],
                                               "channel_id": channel_id, "guild_id": guild_id})
        await self._notify()

    # --- helpers ----------------------------------------------------------------------------
    def _known(self, message_id: str) -> dict[str, Any]:
        message = self.stored.get(message_id)
        if message is None:
            raise ValueError(f"the fake knows no message {message_id}")
        return message

    def _in(self, channel_id: str, types: tuple[int, ...]) -> dict[str, Any]:
        channel = self._channel(channel_id)
        if channel["type"] not in types:
            raise ValueError(f"Discord posts this notice only in channels of types {types}, "
                             f"not in {channel_id} (type {channel['type']})")
        return channel
