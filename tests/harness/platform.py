"""A platform at the network edge: records what the gateway sends, feeds it messages."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass

from platforms.base import ChatRef, InboundMessage, PlatformAdapter


@dataclass(frozen=True)
class Sent:
    chat_key: str
    text: str
    reply_to: str | None


class RecordingPlatform(PlatformAdapter):
    """Stands in for a chat service: `say()` delivers a user message, `sent` logs replies."""

    def __init__(self, name: str = "test", *, bot_username: str | None = "threadline_bot"
                 ) -> None:
        super().__init__()
        self.name = name
        self.bot_username = bot_username
        self.failing_sends = 0  # the next N sends fail like a platform outage would
        self.sent: list[Sent] = []
        self.delivered_ids: list[str] = []
        self._changed = asyncio.Condition()
        self._ids = itertools.count(1)

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def send(self, chat: ChatRef, text: str, reply_to: str | None = None) -> None:
        if self.failing_sends:
            self.failing_sends -= 1
            raise ConnectionError("the platform is unreachable")
        async with self._changed:
            self.sent.append(Sent(chat.key, text, reply_to))
            self._changed.notify_all()

    async def delivered(self, chat: ChatRef, message_ids: tuple[str, ...]) -> None:
        async with self._changed:
            self.delivered_ids.extend(message_ids)
            self._changed.notify_all()

    def message(self, text: str, *, chat_id: str = "1", user_id: str = "u1",
                message_id: str | None = None, **kw: object) -> InboundMessage:
        return InboundMessage(platform=self.name, chat_id=chat_id, user_id=user_id,
                              message_id=message_id or str(next(self._ids)), text=text,
                              user_name="Ada", **kw)  # type: ignore[arg-type]

    async def say(self, text: str, **kw: object) -> InboundMessage:
        msg = self.message(text, **kw)
        assert self.handler is not None
        await self.handler(msg)
        return msg

    async def wait_delivered(self, count: int, timeout: float = 10.0) -> None:  # noqa: ASYNC109
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: len(self.delivered_ids) >= count)

    def texts(self, chat_key: str | None = None) -> list[str]:
        return [s.text for s in self.sent if chat_key is None or s.chat_key == chat_key]
