"""Updates for the fake Telegram server: builders shaped like Telegram's, and the queue
getUpdates serves them from.

Offsets in entities are UTF-16 code units, as in the Bot API: an emoji outside the
Basic Multilingual Plane counts 2, so `len()` is wrong as soon as one appears.
Chat kind follows Telegram's id ranges: a positive id is a private chat (it equals the
user's id), -100… is a supergroup, any other negative id a basic group.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import time
from typing import Any

DEFAULT_USER_ID = 5550001
DEFAULT_GROUP_ID = -1001234567890

# Telegram's clients mark these spans themselves, so real updates always carry them.
_MENTION = re.compile(r"(?<![\w@])@[A-Za-z0-9_]{5,32}\b")
_COMMAND = re.compile(r"(?<![\w/])/[A-Za-z0-9_]{1,64}(?:@[A-Za-z0-9_]{5,32})?\b")


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, the unit of every Bot API offset and length."""
    return len(text.encode("utf-16-le")) // 2


def entity_for(text: str, fragment: str, type_: str, *, occurrence: int = 0,
               **extra: Any) -> dict[str, Any]:
    """An entity of `type_` covering the n-th occurrence of `fragment` in `text`."""
    index = -1
    for _ in range(occurrence + 1):
        index = text.find(fragment, index + 1)
        if index < 0:
            raise ValueError(f"{fragment!r} does not occur {occurrence + 1} time(s) in {text!r}")
    return {"type": type_, "offset": utf16_len(text[:index]), "length": utf16_len(fragment),
            **extra}


def mention_entity(text: str, username: str) -> dict[str, Any]:
    """A `mention` entity for "@username" in `text`."""
    return entity_for(text, "@" + username.lstrip("@"), "mention")


def command_entity(text: str, command: str) -> dict[str, Any]:
    """A `bot_command` entity for "/cmd" or "/cmd@bot" in `text`."""
    return entity_for(text, "/" + command.lstrip("/"), "bot_command")


def auto_entities(text: str) -> list[dict[str, Any]]:
    """The mention and bot_command entities Telegram would attach to `text`."""
    found = [(m.start(), m.group(), "mention") for m in _MENTION.finditer(text)]
    found += [(m.start(), m.group(), "bot_command") for m in _COMMAND.finditer(text)]
    return [{"type": kind, "offset": utf16_len(text[:start]), "length": utf16_len(span)}
            for start, span, kind in sorted(found)]


def user_dict(user_id: int) -> dict[str, Any]:
    return {"id": user_id, "is_bot": False, "first_name": f"User {user_id}",
            "username": f"user{user_id}", "language_code": "en"}


def chat_dict(chat_id: int, *, is_forum: bool = False) -> dict[str, Any]:
    """The chat object Telegram sends for this id (kind derived from the id range)."""
    if chat_id > 0:
        return {"id": chat_id, "type": "private", "first_name": f"User {chat_id}",
                "username": f"user{chat_id}"}
    kind = "supergroup" if str(chat_id).startswith("-100") else "group"
    chat: dict[str, Any] = {"id": chat_id, "type": kind, "title": f"Group {-chat_id}"}
    if is_forum:
        chat["is_forum"] = True
    return chat


class UpdateFactory:
    """Builds updates with increasing update_id and message_id, and remembers every message.

    The fake server shares the message counter for what the bot sends, so ids never
    collide, and asks `find()` whether a reply target exists.
    """

    def __init__(self, bot_id: int, bot_username: str, bot_name: str = "Threadline") -> None:
        self.bot_username = bot_username
        self.bot_user = {"id": bot_id, "is_bot": True, "first_name": bot_name,
                         "username": bot_username}
        self._update_ids = itertools.count(700_000_001)
        self._message_ids = itertools.count(1)
        self._messages: dict[tuple[int | str, int], dict[str, Any]] = {}
        self._last_bot_message: dict[int | str, int] = {}

    # --- bookkeeping shared with the server -----------------------------------------------
    def next_message_id(self) -> int:
        return next(self._message_ids)

    def remember(self, message: dict[str, Any]) -> None:
        """Record a message so replies to it resolve; the bot's own also become the
        default target of `reply_to_bot`."""
        chat_id = message["chat"]["id"]
        self._messages[(chat_id, message["message_id"])] = message
        if message.get("from", {}).get("id") == self.bot_user["id"]:
            self._last_bot_message[chat_id] = message["message_id"]

    def find(self, chat_id: int | str, message_id: int) -> dict[str, Any] | None:
        return self._messages.get((chat_id, message_id))

    # --- entity helpers for the bot's own name --------------------------------------------
    def mention(self, text: str, username: str | None = None) -> dict[str, Any]:
        """A `mention` entity for "@bot_username" (or another name) in `text`."""
        return mention_entity(text, username or self.bot_username)

    def command(self, text: str, command: str) -> dict[str, Any]:
        """A `bot_command` entity for "/cmd" or "/cmd@bot" in `text`."""
        return command_entity(text, command)

    # --- builders -------------------------------------------------------------------------
    def message(self, *, chat_id: int, user_id: int = DEFAULT_USER_ID,
                thread_id: int | None = None, is_forum: bool = False,
                **fields: Any) -> dict[str, Any]:
        """A bare message dict (remembered); `fields` add the content, e.g. text=..."""
        message: dict[str, Any] = {
            "message_id": self.next_message_id(), "from": user_dict(user_id),
            "chat": chat_dict(chat_id, is_forum=is_forum), "date": int(time.time())}
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            # Forum topics and private-chat topics flag their messages; reply threads don't.
            if is_forum or chat_id > 0:
                message["is_topic_message"] = True
        message.update(fields)
        self.remember(message)
        return message

    def update(self, message: dict[str, Any], kind: str = "message") -> dict[str, Any]:
        """Wrap a message as an update of `kind` ("message", "edited_message", ...)."""
        return {"update_id": next(self._update_ids), kind: message}

    def private_text(self, text: str, user_id: int = DEFAULT_USER_ID,
                     chat_id: int | None = None, *, thread_id: int | None = None,
                     entities: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """A text in a private chat; `thread_id` puts it in a private-chat topic."""
        message = self.message(chat_id=chat_id or user_id, user_id=user_id, thread_id=thread_id,
                               **_text_fields(text, entities))
        return self.update(message)

    def group_text(self, text: str, chat_id: int = DEFAULT_GROUP_ID,
                   user_id: int = DEFAULT_USER_ID, entities: list[dict[str, Any]] | None = None,
                   reply_to_bot: bool = False, thread_id: int | None = None,
                   is_forum: bool = False) -> dict[str, Any]:
        """A text in a group. `entities=None` marks mentions and commands like Telegram
        does; pass [] for none. `reply_to_bot` replies to the bot's last message there."""
        fields = _text_fields(text, entities)
        if reply_to_bot:
            fields["reply_to_message"] = self._bot_message_in(chat_id, thread_id, is_forum)
        message = self.message(chat_id=chat_id, user_id=user_id, thread_id=thread_id,
                               is_forum=is_forum, **fields)
        return self.update(message)

    def photo(self, caption: str | None = None, *, chat_id: int | None = None,
              user_id: int = DEFAULT_USER_ID,
              caption_entities: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """A photo (three sizes, like Telegram sends), with or without a caption."""
        uid = self.next_message_id()
        sizes = [{"file_id": f"photo-{uid}-{w}", "file_unique_id": f"p{uid}{w}", "width": w,
                  "height": w * 3 // 4, "file_size": w * 60} for w in (90, 320, 1280)]
        fields: dict[str, Any] = {"photo": sizes}
        if caption is not None:
            fields["caption"] = caption
            entities = auto_entities(caption) if caption_entities is None else caption_entities
            if entities:
                fields["caption_entities"] = entities
        return self.update(self.message(chat_id=chat_id or user_id, user_id=user_id, **fields))

    def sticker(self, emoji: str = "👍", *, chat_id: int | None = None,
                user_id: int = DEFAULT_USER_ID) -> dict[str, Any]:
        uid = self.next_message_id()
        sticker = {"file_id": f"sticker-{uid}", "file_unique_id": f"s{uid}", "width": 512,
                   "height": 512, "is_animated": False, "is_video": False, "type": "regular",
                   "emoji": emoji, "set_name": "FakeStickers", "file_size": 20_000}
        return self.update(self.message(chat_id=chat_id or user_id, user_id=user_id,
                                        sticker=sticker))

    def voice(self, duration: int = 3, *, chat_id: int | None = None,
              user_id: int = DEFAULT_USER_ID) -> dict[str, Any]:
        uid = self.next_message_id()
        voice = {"file_id": f"voice-{uid}", "file_unique_id": f"v{uid}", "duration": duration,
                 "mime_type": "audio/ogg", "file_size": duration * 4_000}
        return self.update(self.message(chat_id=chat_id or user_id, user_id=user_id,
                                        voice=voice))

    def edited_text(self, original: dict[str, Any], text: str,
                    entities: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """An `edited_message` update: the original message (same id) with new text."""
        before = original.get("message") or original.get("edited_message") or original
        # The old entities describe the old text, so they go; the new text gets its own.
        message = {k: v for k, v in before.items() if k != "entities"}
        message.update(_text_fields(text, entities), edit_date=int(time.time()))
        self.remember(message)
        return self.update(message, "edited_message")

    def _bot_message_in(self, chat_id: int, thread_id: int | None,
                        is_forum: bool) -> dict[str, Any]:
        """The bot's last message in the chat, or a stand-in earlier reply when it has none."""
        last = self._last_bot_message.get(chat_id)
        if last is not None:
            found = self._messages[(chat_id, last)]
            return {k: v for k, v in found.items() if k != "reply_to_message"}
        message: dict[str, Any] = {
            "message_id": self.next_message_id(), "from": self.bot_user,
            "chat": chat_dict(chat_id, is_forum=is_forum), "date": int(time.time()) - 60,
            "text": "(an earlier reply from the bot)"}
        if thread_id is not None:
            message["message_thread_id"] = thread_id
        self.remember(message)
        return message


def _text_fields(text: str, entities: list[dict[str, Any]] | None) -> dict[str, Any]:
    chosen = auto_entities(text) if entities is None else entities
    return {"text": text, **({"entities": chosen} if chosen else {})}


class UpdateQueue:
    """Updates waiting for getUpdates, with Telegram's offset rule and capped long polls.

    An update stays until a later offset confirms it, so updates a client fetched but
    never received (a cancelled poll) come again on its next poll.
    """

    def __init__(self, poll_cap: float) -> None:
        self.poll_cap = poll_cap
        self._queue: list[dict[str, Any]] = []
        self._wake = asyncio.Event()
        self._polls = 0

    def __len__(self) -> int:
        return len(self._queue)

    def items(self) -> list[dict[str, Any]]:
        return list(self._queue)

    def push(self, update: dict[str, Any]) -> None:
        self._queue.append(update)
        self.wake()

    def clear(self) -> None:
        self._queue.clear()

    def wake(self) -> None:
        """Release every parked poll now."""
        self._wake.set()
        self._wake = asyncio.Event()

    async def poll(self, offset: int, limit: int, wait: float,
                   allowed: list[str] | None) -> list[dict[str, Any]] | None:
        """The updates for one getUpdates call; None when a newer poll superseded it."""
        if offset < 0:  # Telegram: keep only the last -offset updates
            self._queue = self._queue[offset:]
        elif offset > 0:
            self._queue = [u for u in self._queue if u["update_id"] >= offset]
        self._polls += 1
        mine = self._polls
        self.wake()  # an older parked poll learns it has been superseded
        if not self._pending(allowed) and wait > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), min(wait, self.poll_cap))
        if mine != self._polls:
            return None
        return self._pending(allowed)[:limit]

    def _pending(self, allowed: list[str] | None) -> list[dict[str, Any]]:
        return [u for u in self._queue if not allowed or any(k in u for k in allowed)]
