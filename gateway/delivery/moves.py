"""Chats a platform moved to a new id (a Telegram group upgraded to a supergroup): every
call goes where the chat is now, and its conversation continues there (docs/architecture.md,
"Chats that move")."""

from __future__ import annotations

import dataclasses
import logging

from platforms.base import ChatRef
from storage.base import SessionStore

log = logging.getLogger(__name__)

MAX_HOPS = 8  # a group can move once; this only guards against a loop in the data


class ChatMoves:
    def __init__(self, store: SessionStore) -> None:
        self.store = store
        self._to: dict[tuple[str, str], str] = {}  # (platform, old id) -> new id

    async def load(self) -> None:
        """What earlier runs recorded, so nothing goes to an old id after a restart."""
        self._to = await self.store.chat_moves()

    def resolve(self, chat: ChatRef) -> ChatRef:
        chat_id = chat.chat_id
        for _ in range(MAX_HOPS):
            moved = self._to.get((chat.platform, chat_id))
            if moved is None:
                break
            chat_id = moved
        return chat if chat_id == chat.chat_id else dataclasses.replace(chat, chat_id=chat_id)

    async def move(self, chat: ChatRef, new_chat_id: str) -> ChatRef:
        """Record the move (the conversation and replies on their way go with it)."""
        if self._to.get((chat.platform, chat.chat_id)) != new_chat_id:
            log.info("%s: chat %s moved to %s; its conversation continues there",
                     chat.platform, chat.chat_id, new_chat_id)
            await self.store.move_chat(chat.platform, chat.chat_id, new_chat_id)
            self._to[(chat.platform, chat.chat_id)] = new_chat_id
        return dataclasses.replace(chat, chat_id=new_chat_id)
