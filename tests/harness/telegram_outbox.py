"""What the bot got through to the fake Telegram: accepted messages, edits, drafts,
deletions and chat actions, plus a per-chat timeline of every accepted call.

Only requests Telegram accepted land here, so a test can assert order, timing (`at` is
time.monotonic()) and "exactly once" after retries, rate limits and cut-off requests.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import defaultdict
from typing import Any, NamedTuple

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


@dataclasses.dataclass(frozen=True)
class Draft:
    """One accepted sendMessageDraft: an ephemeral preview, never a message."""

    chat_id: int
    draft_id: int
    text: str  # "" shows Telegram's "Thinking..." placeholder
    entities: list[dict[str, Any]]
    thread_id: int | None
    parse_mode: str | None
    at: float = dataclasses.field(default_factory=time.monotonic)


class Call(NamedTuple):
    """One accepted call on a chat; compares equal to a plain (method, at) tuple."""

    method: str  # Bot API name: "sendMessage", "editMessageText", "sendMessageDraft", ...
    at: float


class Outbox:
    """Per-chat logs of accepted messages, edits, drafts, deletions and chat actions."""

    def __init__(self) -> None:
        self._sent: dict[ChatKey, list[SentMessage]] = defaultdict(list)
        self._edits: dict[ChatKey, list[SentMessage]] = defaultdict(list)
        self._actions: dict[ChatKey, list[ChatAction]] = defaultdict(list)
        self._drafts: dict[ChatKey, list[Draft]] = defaultdict(list)
        self._deleted: dict[ChatKey, list[int]] = defaultdict(list)
        self._timeline: dict[ChatKey, list[Call]] = defaultdict(list)
        self._changed = asyncio.Condition()

    async def add(self, message: SentMessage) -> None:
        self._sent[message.chat_id].append(message)
        self._log(message.chat_id, "sendMessage", message.at)
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
        now = time.monotonic()
        edited = dataclasses.replace(sent[index], text=text, entities=entities,
                                     parse_mode=parse_mode, edited_at=now)
        sent[index] = edited
        self._edits[chat_id].append(edited)
        self._log(chat_id, "editMessageText", now)
        await self._notify()
        return edited

    def add_action(self, action: ChatAction) -> None:
        self._actions[action.chat_id].append(action)
        self._log(action.chat_id, "sendChatAction", action.at)

    async def add_draft(self, draft: Draft) -> None:
        self._drafts[draft.chat_id].append(draft)
        self._log(draft.chat_id, "sendMessageDraft", draft.at)
        await self._notify()

    def is_deleted(self, chat_id: ChatKey, message_id: int) -> bool:
        return message_id in self._deleted.get(chat_id, ())

    async def delete(self, chat_id: ChatKey, message_ids: list[int], method: str) -> None:
        """Drop these ids (the caller has checked they exist and are not deleted yet)."""
        wanted = set(message_ids)
        self._sent[chat_id] = [m for m in self._sent[chat_id] if m.message_id not in wanted]
        self._deleted[chat_id].extend(message_ids)
        self._log(chat_id, method, time.monotonic())
        await self._notify()

    def messages(self, chat_id: ChatKey | None = None) -> list[SentMessage]:
        if chat_id is not None:
            return list(self._sent.get(chat_id, []))
        return sorted((m for ms in self._sent.values() for m in ms), key=lambda m: m.at)

    def edits(self, chat_id: ChatKey) -> list[SentMessage]:
        return list(self._edits.get(chat_id, []))

    def chat_actions(self, chat_id: ChatKey) -> list[ChatAction]:
        return list(self._actions.get(chat_id, []))

    def drafts(self, chat_id: ChatKey) -> list[Draft]:
        return list(self._drafts.get(chat_id, []))

    def deleted(self, chat_id: ChatKey) -> list[int]:
        return list(self._deleted.get(chat_id, []))

    def timeline(self, chat_id: ChatKey) -> list[Call]:
        return list(self._timeline.get(chat_id, []))

    async def wait_for_messages(self, chat_id: ChatKey, count: int = 1,
                                timeout: float = 5.0) -> list[SentMessage]:  # noqa: ASYNC109
        try:
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(lambda: len(self._sent.get(chat_id, [])) >= count)
        except TimeoutError:
            raise AssertionError(f"chat {chat_id} has {len(self.messages(chat_id))} message(s), "
                                 f"not {count}, after {timeout}s") from None
        return self.messages(chat_id)

    async def wait_for_drafts(self, chat_id: ChatKey, count: int = 1,
                              timeout: float = 5.0) -> list[Draft]:  # noqa: ASYNC109
        try:
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(lambda: len(self._drafts.get(chat_id, [])) >= count)
        except TimeoutError:
            raise AssertionError(f"chat {chat_id} has {len(self.drafts(chat_id))} draft(s), "
                                 f"not {count}, after {timeout}s") from None
        return self.drafts(chat_id)

    def _log(self, chat_id: ChatKey, method: str, at: float) -> None:
        self._timeline[chat_id].append(Call(method, at))

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()
