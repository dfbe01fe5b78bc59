"""What the bot got through to the fake Telegram: accepted messages, edits, chat actions.

Only requests Telegram accepted land here, so a test can assert order, timing (`at` is
time.monotonic()) and "exactly once" after retries, rate limits and cut-off requests.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import defaultdict
from typing import Any

from tests.harness.telegram_checks import ApiError

ChatKey = int | str  # an integer chat id, or "@channelname"


@dataclasses.dataclass(frozen=True)
class SentMessage:
    """A message the bot sent, as it stands after its last accepted edit."""

    chat_id: ChatKey
    message_id: int
    text: str
    entities: list[dict[str, Any]]
    reply_to: int | None
    thread_id: int | None
    link_preview: dict[str, Any] | None
    parse_mode: str | None
    at: float
    edited_at: float | None = None


@dataclasses.dataclass(frozen=True)
class ChatAction:
    chat_id: ChatKey
    action: str
    thread_id: int | None
    at: float


class Outbox:
    """Per-chat logs of accepted messages, edits and chat actions."""

    def __init__(self) -> None:
        self._sent: dict[ChatKey, list[SentMessage]] = defaultdict(list)
        self._edits: dict[ChatKey, list[SentMessage]] = defaultdict(list)
        self._actions: dict[ChatKey, list[ChatAction]] = defaultdict(list)
        self._changed = asyncio.Condition()

    async def add(self, message: SentMessage) -> None:
        self._sent[message.chat_id].append(message)
        await self._notify()

    async def edit(self, chat_id: ChatKey, message_id: int | None, text: str,
                   entities: list[dict[str, Any]], parse_mode: str | None) -> SentMessage:
        """Apply an edit like Telegram: 400 for an unknown message or an identical text."""
        sent = self._sent.get(chat_id, [])
        index = next((i for i, m in enumerate(sent) if m.message_id == message_id), None)
        if index is None:
            raise ApiError(400, "Bad Request: message to edit not found")
        if sent[index].text == text and sent[index].entities == entities:
            raise ApiError(400, "Bad Request: message is not modified: specified new message "
                                "content and reply markup are exactly the same as a current "
                                "content and reply markup of the message")
        edited = dataclasses.replace(sent[index], text=text, entities=entities,
                                     parse_mode=parse_mode, edited_at=time.monotonic())
        sent[index] = edited
        self._edits[chat_id].append(edited)
        await self._notify()
        return edited

    def add_action(self, action: ChatAction) -> None:
        self._actions[action.chat_id].append(action)

    def messages(self, chat_id: ChatKey | None = None) -> list[SentMessage]:
        if chat_id is not None:
            return list(self._sent.get(chat_id, []))
        return sorted((m for ms in self._sent.values() for m in ms), key=lambda m: m.at)

    def edits(self, chat_id: ChatKey) -> list[SentMessage]:
        return list(self._edits.get(chat_id, []))

    def chat_actions(self, chat_id: ChatKey) -> list[ChatAction]:
        return list(self._actions.get(chat_id, []))

    async def wait_for_messages(self, chat_id: ChatKey, count: int = 1,
                                timeout: float = 5.0) -> list[SentMessage]:  # noqa: ASYNC109
        try:
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(lambda: len(self._sent.get(chat_id, [])) >= count)
        except TimeoutError:
            raise AssertionError(f"chat {chat_id} has {len(self.messages(chat_id))} message(s), "
                                 f"not {count}, after {timeout}s") from None
        return self.messages(chat_id)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()
