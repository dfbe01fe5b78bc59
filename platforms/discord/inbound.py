"""From discord.py's messages and slash-command interactions to InboundMessages.

Where a message belongs: a DM is its own chat; a guild text channel is a chat; a thread
is a session of its own inside its parent channel (chat = parent, thread = the thread).
Gating in guilds: a real mention of the bot, a reply to one of its messages or a thread
the bot created; everything else never reaches the model. A typed `/word` there is a
command only when it names one of ours and the message is addressed to the bot; else it is
chatter like any other. Only what users wrote counts: system messages (pins, joins,
boosts, thread notices...) are no messages at all, and a forward is read from its
snapshot (docs/architecture.md, "Discord").
"""

from __future__ import annotations

import logging
import re

import discord

from platforms.base import Attachment, InboundMessage

log = logging.getLogger(__name__)

_TYPED_COMMAND = re.compile(r"^/([A-Za-z0-9_]{1,32})(?:@\w+)?(?:\s|$)")
# What users write; every other type is Discord's own notice (or a thread's starter copy).
USER_TYPES = (discord.MessageType.default, discord.MessageType.reply)
FORWARDED = "Forwarded message:"


def place(channel: object, channel_id: int) -> tuple[str, str | None]:
    """(chat id, thread id) of a channel: a thread lives inside its parent channel."""
    if isinstance(channel, discord.Thread) and channel.parent_id:
        return str(channel.parent_id), str(channel.id)
    return str(channel_id), None


def _reply_to_bot(message: discord.Message, bot_id: int) -> bool:
    reference = message.reference
    if reference is None:
        return False
    replied = reference.resolved or reference.cached_message
    return isinstance(replied, discord.Message) and replied.author.id == bot_id


def _bot_thread(channel: object, bot_id: int) -> bool:
    return isinstance(channel, discord.Thread) and channel.owner_id == bot_id


def addressed(message: discord.Message, bot_id: int, *,
              require_mention: bool) -> tuple[bool, bool]:
    """(addressed to us, a reply to one of ours) for a guild message."""
    reply_to_bot = _reply_to_bot(message, bot_id)
    if not require_mention or _bot_thread(message.channel, bot_id):
        return True, reply_to_bot
    mentioned = any(user.id == bot_id for user in message.mentions)  # a real user mention
    return mentioned, reply_to_bot


def is_user_message(message: discord.Message) -> bool:
    """Written by someone (or forwarded), not a notice Discord made (pins, joins...)."""
    return message.type in USER_TYPES


def _forward(message: discord.Message) -> discord.MessageSnapshot | None:
    snapshots = getattr(message, "message_snapshots", None) or []
    return snapshots[0] if snapshots and message.flags.forwarded else None


def _text(message: discord.Message, bot_id: int) -> str:
    """The content without our own mention (`<@id>` or the older `<@!id>`)."""
    return re.sub(rf"<@!?{bot_id}>\s*", "", message.content).strip()


def _manages_messages(message: discord.Message) -> bool:
    """Manage Messages in this channel; a failed lookup is no admin (and is logged)."""
    author, channel = message.author, message.channel
    try:
        if isinstance(author, discord.Member) and hasattr(channel, "permissions_for"):
            return bool(channel.permissions_for(author).manage_messages)  # type: ignore[union-attr]
    except Exception as exc:
        log.warning("discord: cannot tell whether %s manages messages in %s (%s); treating "
                    "as not an admin", author.id, message.channel.id, exc)
    return False


def _kind(attachment: discord.Attachment) -> str:
    family = (attachment.content_type or "").split("/", 1)[0]
    if family == "audio":
        return "voice" if attachment.is_voice_message() else "audio"
    return {"image": "image", "video": "video"}.get(family, "document")


def attachments_of(message: discord.Message | discord.MessageSnapshot
                   ) -> tuple[Attachment, ...]:
    """What the message carries, described for the gateway (fetched later from the CDN
    URL; the gateway reads the bytes to tell what a "document" really is)."""
    found = [Attachment(_kind(a), a.url, a.filename, a.content_type, a.size, a.description)
             for a in message.attachments]
    found.extend(Attachment("sticker", name=sticker.name) for sticker in message.stickers)
    return tuple(found)


def _content(message: discord.Message, bot_id: int) -> tuple[str, tuple[Attachment, ...]]:
    """The words and files: a forward's are its snapshot's, said to be forwarded."""
    forwarded = _forward(message)
    if forwarded is None:
        return _text(message, bot_id), attachments_of(message)
    note = _text(message, bot_id)  # a comment sent with the forward, if any
    text = "\n".join(part for part in (note, FORWARDED, forwarded.content.strip()) if part)
    return text, attachments_of(forwarded)


def may_command(text: str, commands: frozenset[str], *, guild: bool, to_us: bool) -> bool:
    """Whether a typed `/word` is a command: in a DM always (an unknown one is answered
    with the list); in a guild only one of ours, addressed to the bot."""
    match = _TYPED_COMMAND.match(text)
    if match is None or not guild:
        return True
    return to_us and match.group(1).lower() in commands


def from_message(message: discord.Message, bot_id: int, *, require_mention: bool,
                 commands: frozenset[str] = frozenset(), edited: bool = False
                 ) -> InboundMessage:
    guild = message.guild is not None
    chat_id, thread_id = place(message.channel, message.channel.id)
    mentioned, reply_to_bot = (addressed(message, bot_id, require_mention=True)
                               if guild else (True, False))
    to_us = mentioned or not require_mention
    text, attachments = _content(message, bot_id)
    command = may_command(text, commands, guild=guild, to_us=to_us or reply_to_bot)
    admin_hint = (guild and to_us and command and text.startswith("/")
                  and _manages_messages(message))
    return InboundMessage(
        platform="discord", chat_id=chat_id, user_id=str(message.author.id),
        message_id=str(message.id), text=text, thread_id=thread_id,
        user_name=message.author.display_name, is_group=guild, addressed_to_bot=to_us,
        is_admin_hint=admin_hint, reply_to_bot=reply_to_bot,
        is_bot=message.author.bot or message.author.id == bot_id, is_edit=edited,
        attachments=attachments, may_command=command, mentioned=mentioned)


def from_interaction(interaction: discord.Interaction, text: str) -> InboundMessage:
    """A slash command as the command text it stands for (`/compress focus`)."""
    guild = interaction.guild_id is not None
    chat_id, thread_id = place(interaction.channel, interaction.channel_id or 0)
    admin_hint = guild and bool(interaction.permissions.manage_messages)
    return InboundMessage(
        platform="discord", chat_id=chat_id, user_id=str(interaction.user.id),
        message_id=str(interaction.id), text=text, thread_id=thread_id,
        user_name=interaction.user.display_name, is_group=guild, addressed_to_bot=True,
        is_admin_hint=admin_hint, is_bot=interaction.user.bot)
