"""Updates for the fake Telegram server: builders shaped like Telegram's, and the queue
getUpdates serves them from.

Offsets in entities are UTF-16 code units, as in the Bot API: an emoji outside the
Basic Multilingual Plane counts 2, so `len()` is wrong as soon as one appears.
Chat kind follows Telegram's id ranges: a positive id is a private chat (it equals the
user's id), -100… is a supergroup, any other negative id a basic group.

Every file an update carries (photo sizes, document, voice, audio, sticker) is registered
in the factory's `FileStore`, which the fake serves through getFile and its download
route: a builder given `file_id=` (from `FakeTelegram.add_file`) or `data=` carries that
file, one given neither a generated file of a plausible size that starts with the
format's magic bytes (JPEG, Ogg, MP3, WebP).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import re
import time
from dataclasses import dataclass
from typing import Any

DEFAULT_USER_ID = 5550001
DEFAULT_GROUP_ID = -1001234567890
MAX_DOWNLOAD_BYTES = 20 * 1024 * 1024  # getFile refuses larger files (the Bot API's limit)
PHOTO_WIDTHS = (90, 320, 1280)  # the sizes Telegram sends a photo in, smallest first

# Telegram's file_id prefixes by kind, so ids look like the real ones.
_ID_PREFIX = {"photo": "AgACAgIAAxkBAAI", "document": "BQACAgIAAxkBAAI",
              "voice": "AwACAgIAAxkBAAI", "audio": "CQACAgIAAxkBAAI",
              "sticker": "CAACAgIAAxkBAAI"}
_FOLDER = {"photo": "photos", "document": "documents", "voice": "voice", "audio": "music",
           "sticker": "stickers"}
# Leading bytes (and a tail) of the generated files, so they sniff as their format.
_MAGIC = {"photo": (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00", b"\xff\xd9"),
          "voice": (b"OggS\x00\x02", b""), "audio": (b"ID3\x04\x00\x00", b""),
          "sticker": (b"RIFF\x00\x00\x00\x00WEBPVP8 ", b""), "document": (b"", b"")}

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


def generated_file(kind: str, size: int) -> bytes:
    """`size` bytes that start (and end) like a file of `kind` ("photo" → JPEG, "voice" →
    Ogg, "audio" → MP3, "sticker" → WebP); deterministic filler in between."""
    head, tail = _MAGIC.get(kind, (b"", b""))
    body = max(0, size - len(head) - len(tail))
    filler = (bytes(range(32, 127)) * (body // 95 + 1))[:body]
    return (head + filler + tail)[:size]


@dataclass(frozen=True)
class StoredFile:
    """What getFile answers for one file; `file_size` may be a claim larger than the bytes."""

    file_id: str
    file_unique_id: str
    file_path: str
    file_size: int

    def as_result(self) -> dict[str, Any]:
        return {"file_id": self.file_id, "file_unique_id": self.file_unique_id,
                "file_size": self.file_size, "file_path": self.file_path}


class FileStore:
    """Files users sent the bot. `data[file_id]` holds the bytes a download returns (tests
    may also set it directly); each file has a unique id, a download path such as
    "photos/file_3.jpg", and a size that `add(size=...)` can claim without holding it."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self._meta: dict[str, tuple[str, str]] = {}  # file_id -> (unique id, path)
        self._claimed: dict[str, int] = {}
        self._by_path: dict[str, str] = {}
        self._numbers = itertools.count(1)

    def add(self, data: bytes, *, size: int | None = None, kind: str = "document",
            suffix: str = "") -> str:
        """Register `data`; returns a new file_id. `suffix` (".pdf") ends its path."""
        number = next(self._numbers)
        digest = hashlib.sha256(data).hexdigest()[:10]
        file_id = f"{_ID_PREFIX.get(kind, _ID_PREFIX['document'])}{number:05d}{digest}"
        self.data[file_id] = bytes(data)
        self._register(file_id, number, _FOLDER.get(kind, "documents"), suffix)
        if size is not None:
            self._claimed[file_id] = size
        return file_id

    def get(self, file_id: str) -> StoredFile | None:
        """The file, or None for an unknown id (set directly in `data`: registered now)."""
        if file_id not in self.data:
            return None
        if file_id not in self._meta:
            self._register(file_id, next(self._numbers), "documents", "")
        unique_id, path = self._meta[file_id]
        size = self._claimed.get(file_id, len(self.data[file_id]))
        return StoredFile(file_id, unique_id, path, size)

    def by_path(self, path: str) -> bytes | None:
        """The bytes behind a getFile path, or None."""
        file_id = self._by_path.get(path)
        return None if file_id is None else self.data.get(file_id)

    def _register(self, file_id: str, number: int, folder: str, suffix: str) -> None:
        path = f"{folder}/file_{number}{suffix}"
        self._meta[file_id] = (f"AQAD{number:04d}{file_id[-6:]}", path)
        self._by_path[path] = file_id


class UpdateFactory:
    """Builds updates with increasing update_id and message_id, and remembers every message.

    The fake server shares the message counter for what the bot sends, so ids never
    collide, and asks `find()` whether a reply target exists.
    """

    def __init__(self, bot_id: int, bot_username: str, bot_name: str = "Threadline",
                 files: FileStore | None = None) -> None:
        self.bot_username = bot_username
        self.files = files if files is not None else FileStore()
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

    def unparseable(self, text: str = "a message the library cannot read",
                    user_id: int = DEFAULT_USER_ID) -> dict[str, Any]:
        """A private text python-telegram-bot cannot parse: its `date` is an object (as a Bot
        API server of another version might send it), not a Unix time, so `Update.de_json`
        raises TypeError. The text is there to check it never reaches a log."""
        update = self.private_text(text, user_id)
        update["message"]["date"] = {"seconds": int(time.time()), "nanos": 0}
        return update

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
              caption_entities: list[dict[str, Any]] | None = None,
              file_id: str | None = None, data: bytes | None = None) -> dict[str, Any]:
        """A photo in three sizes (widths 90, 320, 1280, increasing file sizes), like
        Telegram sends, with or without a caption. The largest size is `file_id` (or
        `data`) when given; the smaller ones are generated thumbnails."""
        largest = self._file("photo", file_id, data, 76_800, ".jpg")
        top = largest["file_size"]
        thumbs = [max(1, min(5_400, top // 16)), max(2, min(19_200, top // 4))]
        sizes = [self._file("photo", None, None, n, ".jpg") for n in thumbs] + [largest]
        photo = [{**f, "width": w, "height": w * 3 // 4} for f, w in zip(sizes, PHOTO_WIDTHS,
                                                                         strict=True)]
        fields = {"photo": photo, **_caption_fields(caption, caption_entities)}
        return self.update(self.message(chat_id=chat_id or user_id, user_id=user_id, **fields))

    def document(self, file_name: str = "notes.txt", mime_type: str | None = "text/plain", *,
                 caption: str | None = None, chat_id: int | None = None,
                 user_id: int = DEFAULT_USER_ID,
                 caption_entities: list[dict[str, Any]] | None = None,
                 file_id: str | None = None, data: bytes | None = None) -> dict[str, Any]:
        """A file sent as a document (file_name, mime_type, file_size), with or without a
        caption; without `file_id`/`data` a short text names the file."""
        if file_id is None and data is None:
            data = f"Contents of {file_name}.\n".encode()
        suffix = "." + file_name.rsplit(".", 1)[1] if "." in file_name else ""
        document = {**self._file("document", file_id, data, 0, suffix), "file_name": file_name}
        if mime_type is not None:
            document["mime_type"] = mime_type
        fields = {"document": document, **_caption_fields(caption, caption_entities)}
        return self.update(self.message(chat_id=chat_id or user_id, user_id=user_id, **fields))

    def sticker(self, emoji: str = "👍", *, chat_id: int | None = None,
                user_id: int = DEFAULT_USER_ID, file_id: str | None = None,
                data: bytes | None = None) -> dict[str, Any]:
        sticker = {**self._file("sticker", file_id, data, 20_000, ".webp"), "width": 512,
                   "height": 512, "is_animated": False, "is_video": False, "type": "regular",
                   "emoji": emoji, "set_name": "FakeStickers"}
        return self.update(self.message(chat_id=chat_id or user_id, user_id=user_id,
                                        sticker=sticker))

    def voice(self, duration: int = 3, *, chat_id: int | None = None,
              user_id: int = DEFAULT_USER_ID, file_id: str | None = None,
              data: bytes | None = None, mime_type: str = "audio/ogg",
              caption: str | None = None) -> dict[str, Any]:
        """A voice note (Ogg Opus, ~4 KB a second unless `file_id`/`data` say otherwise)."""
        voice = {**self._file("voice", file_id, data, duration * 4_000, ".oga"),
                 "duration": duration, "mime_type": mime_type}
        return self.update(self.message(chat_id=chat_id or user_id, user_id=user_id,
                                        voice=voice, **_caption_fields(caption, None)))

    def audio(self, duration: int = 30, *, chat_id: int | None = None,
              user_id: int = DEFAULT_USER_ID, file_id: str | None = None,
              data: bytes | None = None, file_name: str = "track.mp3",
              mime_type: str = "audio/mpeg", title: str | None = None,
              performer: str | None = None, caption: str | None = None) -> dict[str, Any]:
        """A music file (shown with a player; ~16 KB a second unless given)."""
        audio: dict[str, Any] = {**self._file("audio", file_id, data, duration * 16_000,
                                              ".mp3"),
                                 "duration": duration, "file_name": file_name,
                                 "mime_type": mime_type}
        audio.update({k: v for k, v in (("title", title), ("performer", performer)) if v})
        return self.update(self.message(chat_id=chat_id or user_id, user_id=user_id,
                                        audio=audio, **_caption_fields(caption, None)))

    def _file(self, kind: str, file_id: str | None, data: bytes | None, default_size: int,
              suffix: str) -> dict[str, Any]:
        """{file_id, file_unique_id, file_size} of a registered, given or generated file."""
        if file_id is not None and data is not None:
            raise ValueError("pass file_id or data, not both")
        if file_id is None:
            content = generated_file(kind, default_size) if data is None else data
            file_id = self.files.add(content, kind=kind, suffix=suffix)
        stored = self.files.get(file_id)
        if stored is None:
            raise ValueError(f"no file {file_id!r}: register it with FakeTelegram.add_file")
        return {"file_id": stored.file_id, "file_unique_id": stored.file_unique_id,
                "file_size": stored.file_size}

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


def _caption_fields(caption: str | None,
                    entities: list[dict[str, Any]] | None) -> dict[str, Any]:
    """caption and caption_entities (None: the mentions and commands Telegram marks)."""
    if caption is None:
        return {}
    chosen = auto_entities(caption) if entities is None else entities
    return {"caption": caption, **({"caption_entities": chosen} if chosen else {})}


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
