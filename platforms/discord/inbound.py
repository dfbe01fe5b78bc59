"""From discord.py's messages and slash-command interactions to InboundMessages.

Where a message belongs: a DM is its own chat; a guild text channel is a chat; a thread
is a session of its own inside its parent channel (chat = parent, thread = the thread).
Gating in guilds: a real mention of the bot, a reply to one of its messages, a thread the
bot created, or a typed command; everything else never reaches the model.
"""

from __future__ import annotations

import logging
import re

import discord

from platforms.base import Attachment, InboundMessage

log = logging.getLogger(__name__)

_TYPED_COMMAND = re.compile(r"^/[A-Za-z0-9_]{1,32}(?:@\w+)?(?:\s|$)")


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
    typed_command = bool(_TYPED_COMMAND.match(_text(message, bot_id)))
    return mentioned or typed_command, reply_to_bot


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


def attachments_of(message: discord.Message) -> tuple[Attachment, ...]:
    """What the message carries, described for the gateway (fetched later from the CDN
    URL; the gateway reads the bytes to tell what a "document" really is)."""
    found = [Attachment(_kind(a), a.url, a.filename, a.content_type, a.size, a.description)
             for a in message.attachments]
    found.extend(Attachment("sticker", name=sticker.name) for sticker in message.stickers)
    return tuple(found)


def from_message(message: discord.Message, bot_id: int, *, require_mention: bool,
                 edited: bool = False) -> InboundMessage:
    guild = message.guild is not None
    chat_id, thread_id = place(message.channel, message.channel.id)
    to_us, reply_to_bot = (addressed(message, bot_id, require_mention=require_mention)
                           if guild else (True, False))
    text = _text(message, bot_id)
    admin_hint = guild and to_us and text.startswith("/") and _manages_messages(message)
    return InboundMessage(
        platform="discord", chat_id=chat_id, user_id=str(message.author.id),
        message_id=str(message.id), text=text, thread_id=thread_id,
        user_name=message.author.display_name, is_group=guild, addressed_to_bot=to_us,
        is_admin_hint=admin_hint, reply_to_bot=reply_to_bot,
        is_bot=message.author.bot or message.author.id == bot_id, is_edit=edited,
        attachments=attachments_of(message))


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
