"""From a Telegram update to an InboundMessage: thread, gating, attachments, admins."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from telegram import Message, MessageEntity, User
from telegram.constants import ChatMemberStatus, ChatType

from platforms.base import Attachment, InboundMessage, loop_time

log = logging.getLogger(__name__)

ADMIN_TTL_S = 300.0  # a group administrator stays one (or not) in our eyes for 5 minutes
GROUP_TYPES = (ChatType.GROUP, ChatType.SUPERGROUP)
# What a message may carry besides files, by the attribute PTB gives it: declined.
OTHER = ("location", "venue", "contact", "poll", "dice", "game")
_ADMIN_STATUSES = (ChatMemberStatus.ADMINISTRATOR, ChatMemberStatus.OWNER)


class AdminCache:
    """Who administers which group, asked of Telegram (getChatMember) and kept a while.

    A lookup that fails counts as "not an admin" (and is logged): a network hiccup must
    never grant rights.
    """

    def __init__(self, lookup: Callable[[int, int], Awaitable[str]],
                 ttl_s: float = ADMIN_TTL_S, clock: Callable[[], float] | None = None
                 ) -> None:
        self._lookup = lookup
        self._ttl = ttl_s
        self._clock = clock or loop_time
        self._known: dict[tuple[int, int], tuple[bool, float]] = {}

    async def is_admin(self, chat_id: int, user_id: int) -> bool:
        key = (chat_id, user_id)
        cached = self._known.get(key)
        now = self._clock()
        if cached is not None and now - cached[1] < self._ttl:
            return cached[0]
        try:
            admin = await self._lookup(chat_id, user_id) in _ADMIN_STATUSES
        except Exception as exc:
            log.warning("telegram: cannot tell whether %s administers %s (%s); treating as "
                        "not an admin", user_id, chat_id, exc)
            return False  # not cached: the next command asks again
        self._known[key] = (admin, now)
        return admin


def thread_of(message: Message) -> str | None:
    """The session-defining thread: a forum topic, or a thread in a private chat.

    Replies in an ordinary supergroup also carry a thread id (the reply chain); those are
    not sessions of their own.
    """
    thread = message.message_thread_id
    if thread is None:
        return None
    if message.is_topic_message or message.chat.type == ChatType.PRIVATE:
        return str(thread)
    return None


def addressed(message: Message, bot: User, *, require_mention: bool) -> tuple[bool, bool]:
    """(addressed to us, a reply to one of ours) for a group message."""
    reply = message.reply_to_message
    reply_to_bot = bool(reply and reply.from_user and reply.from_user.id == bot.id)
    if not require_mention:
        return True, reply_to_bot
    name = (bot.username or "").lower()
    entities = message.parse_entities() or message.parse_caption_entities()
    for entity, text in entities.items():
        if entity.type == MessageEntity.MENTION and text.lower() == f"@{name}":
            return True, reply_to_bot
        if entity.type == MessageEntity.TEXT_MENTION and entity.user and entity.user.id == bot.id:
            return True, reply_to_bot
        if entity.type == MessageEntity.BOT_COMMAND and entity.offset == 0:
            target = text.partition("@")[2].lower()
            if not target or target == name:  # a bare /cmd is for every bot in the group
                return True, reply_to_bot
    return False, reply_to_bot


def attachments_of(message: Message) -> tuple[Attachment, ...]:
    """What the message carries, described for the gateway (nothing is downloaded here).

    A photo is its largest size; a document stays a document whatever it holds (the
    gateway reads its bytes to tell a picture from a text); voice notes and music are
    "voice" and "audio"; videos, video notes and animations are "video".
    """
    mid = message.message_id
    found: list[Attachment] = []
    if message.photo:
        largest = max(message.photo, key=lambda p: (p.file_size or 0, p.width * p.height))
        found.append(Attachment("image", largest.file_id, f"photo_{mid}.jpg", "image/jpeg",
                                largest.file_size))
    if message.document and not message.animation:  # an animation comes as both
        doc = message.document
        found.append(Attachment("document", doc.file_id, doc.file_name, doc.mime_type,
                                doc.file_size))
    if message.voice:
        voice = message.voice
        found.append(Attachment("voice", voice.file_id, f"voice_{mid}.ogg",
                                voice.mime_type or "audio/ogg", voice.file_size))
    if message.audio:
        audio = message.audio
        found.append(Attachment("audio", audio.file_id, audio.file_name or f"audio_{mid}",
                                audio.mime_type, audio.file_size))
    for video in (message.video, message.video_note, message.animation):
        if video:
            found.append(Attachment("video", video.file_id, None, None, video.file_size))
            break
    if message.sticker:
        found.append(Attachment("sticker", message.sticker.file_id, "sticker"))
    found.extend(Attachment("other", name=kind) for kind in OTHER if getattr(message, kind, None))
    return tuple(found)


def to_inbound(message: Message, bot: User, *, edited: bool,
               require_mention: bool) -> InboundMessage | None:
    """The message as the gateway sees it; None for what carries nothing to answer.

    Nothing is looked up here (whether the sender administers the group is asked when a
    command needs it, in the chat's order: `TelegramAdapter.check_admin`), so a message
    takes its place in its chat the moment it arrives. Service messages (pins, joins, title
    changes, ...) carry nothing to answer and are dropped, at debug level; a group's move
    to a supergroup becomes a message saying where the chat went (`moved_to`)."""
    chat = message.chat
    group = chat.type in GROUP_TYPES
    if message.migrate_to_chat_id:
        return InboundMessage(platform="telegram", chat_id=str(chat.id), user_id="",
                              message_id=str(message.message_id), text="",
                              is_group=group, moved_to=str(message.migrate_to_chat_id))
    text = message.text or message.caption or ""
    attachments = attachments_of(message)
    if not text and not attachments:
        log.debug("telegram: service message %s in %s ignored", message.message_id, chat.id)
        return None
    sender = _sender(message)
    if sender is None:
        return None  # a channel's own post, not a message to the bot
    user_id, user_name, is_bot, admin = sender
    mentioned, reply_to_bot = addressed(message, bot, require_mention=True) \
        if group else (True, False)
    to_us = mentioned or not require_mention
    return InboundMessage(
        platform="telegram", chat_id=str(chat.id), user_id=user_id,
        message_id=str(message.message_id), text=text, thread_id=thread_of(message),
        user_name=user_name, is_group=group, addressed_to_bot=to_us,
        is_admin_hint=admin, reply_to_bot=reply_to_bot, is_bot=is_bot,
        is_edit=edited, attachments=attachments, mentioned=mentioned)


def _sender(message: Message) -> tuple[str, str | None, bool, bool] | None:
    """(user id, name, is a bot, known admin) of who wrote the message.

    An anonymous group admin writes as the group itself (`sender_chat` is the chat; the
    account is GroupAnonymousBot): an admin of that chat. A member posting as a linked
    channel writes as that channel: an ordinary member, known by the channel's id (a
    negative number, never an admin)."""
    chat, sender_chat, user = message.chat, message.sender_chat, message.from_user
    if sender_chat is not None:
        if sender_chat.id == chat.id:
            return str(chat.id), "an anonymous admin", False, True
        if chat.type in GROUP_TYPES:
            return str(sender_chat.id), sender_chat.title or "a channel", False, False
        return None
    if user is None:
        return None
    return str(user.id), user.full_name, user.is_bot, False
