"""Each chat's live session, in memory, so a turn resolves its chat without a store call.

The map is kept exact by this process's own writes (a new root, a turn, a continuation,
an end). Another process (`threadline compress`) can move a chat on behind our back;
every write re-checks in SQL, so such a write fails with ContinuationConflict, the entry
is forgotten, and the next lookup reads the store again: a miss always falls through
to the store. The map starts empty and fills as chats speak; it holds the chats that
spoke last (MAX_CHATS), so its memory does not grow with every chat ever seen. See
docs/architecture.md, "The live-session map".
"""

from __future__ import annotations

from dataclasses import replace

from storage.models import SessionRecord

MAX_CHATS = 4096  # about 2 KB each; a chat beyond them costs one read when it speaks


class LiveSessions:
    def __init__(self, max_chats: int = MAX_CHATS) -> None:
        self.max_chats = max_chats
        self._by_chat: dict[str, SessionRecord] = {}  # least recently used first
        self._chat_of: dict[str, str] = {}  # session id -> chat key, for writes by id

    def __len__(self) -> int:
        return len(self._by_chat)

    def get(self, chat_key: str) -> SessionRecord | None:
        record = self._by_chat.pop(chat_key, None)
        if record is not None:
            self._by_chat[chat_key] = record  # now the most recently used
        return record

    def put(self, record: SessionRecord) -> None:
        """A record as it is now: the chat's live session, or one that just ended."""
        if not record.live:
            self.forget(record.id)
            return
        old = self._by_chat.get(record.chat_key)
        if old is not None and old.id != record.id:
            self._chat_of.pop(old.id, None)
        self._by_chat.pop(record.chat_key, None)
        self._by_chat[record.chat_key] = record
        self._chat_of[record.id] = record.chat_key
        while len(self._by_chat) > self.max_chats:
            evicted = self._by_chat.pop(next(iter(self._by_chat)))
            self._chat_of.pop(evicted.id, None)

    def grew(self, session_id: str, messages: int) -> None:
        """`messages` were appended to the session."""
        record = self.of(session_id)
        if record is not None and messages:
            self._by_chat[record.chat_key] = replace(
                record, message_count=record.message_count + messages)

    def forget(self, session_id: str) -> None:
        """Whatever we knew of this session may be stale: read the store next time."""
        chat_key = self._chat_of.pop(session_id, None)
        if chat_key is not None and (found := self._by_chat.get(chat_key)) is not None \
                and found.id == session_id:
            del self._by_chat[chat_key]

    def forget_chat(self, chat_key: str) -> None:
        """Another process may have moved the chat on: read the store next time."""
        found = self._by_chat.pop(chat_key, None)
        if found is not None:
            self._chat_of.pop(found.id, None)

    def clear(self) -> None:
        self._by_chat.clear()
        self._chat_of.clear()

    def of(self, session_id: str) -> SessionRecord | None:
        chat_key = self._chat_of.get(session_id)
        record = self._by_chat.get(chat_key) if chat_key is not None else None
        return record if record is not None and record.id == session_id else None
