"""The adapter contract between a chat platform library and the gateway."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ChatRef:
    """Where a reply goes: a platform chat, optionally a thread or forum topic in it."""

    platform: str
    chat_id: str
    thread_id: str | None = None

    @property
    def key(self) -> str:
        base = f"{self.platform}:{self.chat_id}"
        return f"{base}:{self.thread_id}" if self.thread_id else base


@dataclass(frozen=True)
class InboundMessage:
    """One message from a user, as every adapter reports it to the gateway."""

    platform: str
    chat_id: str
    user_id: str
    message_id: str
    text: str
    thread_id: str | None = None
    user_name: str | None = None
    is_group: bool = False
    addressed_to_bot: bool = True
    is_admin_hint: bool = False
    reply_to_bot: bool = False
    is_bot: bool = False
    is_edit: bool = False
    attachments: tuple[str, ...] = ()  # kinds of attachment we could not read ("photo", ...)

    @property
    def chat(self) -> ChatRef:
        return ChatRef(self.platform, self.chat_id, self.thread_id)

    @property
    def chat_key(self) -> str:
        return self.chat.key


Handler = Callable[[InboundMessage], Awaitable[None]]


class PlatformAdapter(ABC):
    """A platform connection, built with the handler its messages go to.

    Lifecycle, in the words the rest of the project uses: `initialize()` (connect,
    learn who we are), `start()` (begin receiving), `stop()` (stop receiving),
    `shutdown()` (release everything). Startup work such as registering the command menu
    is a method of its own, `register_commands()`.
    """

    name: str = "platform"
    max_message_length: int = 4096
    bot_username: str | None = None  # `/cmd@name` for another name is not for us

    def __init__(self, handler: Handler) -> None:
        self.handler = handler

    async def initialize(self) -> None:  # noqa: B027 - optional
        """Connect and authenticate; nothing is received yet."""

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def stop(self) -> None: ...

    async def shutdown(self) -> None:  # noqa: B027 - optional
        """Release connections and files; the adapter is not used again."""

    @abstractmethod
    async def send(self, chat: ChatRef, text: str, reply_to: str | None = None) -> None: ...

    async def typing(self, chat: ChatRef) -> None:  # noqa: B027 - optional
        """Show a typing indicator where the platform has one."""

    async def register_commands(self, commands: list[tuple[str, str]]) -> None:  # noqa: B027
        """Startup work such as setMyCommands or slash-command sync."""

    async def delivered(self, chat: ChatRef, message_ids: tuple[str, ...]) -> None:  # noqa: B027
        """Everything the gateway will say about these inbound messages has been sent."""

    async def wait_closed(self) -> None:  # noqa: B027
        """Return when the platform ends by itself (console end of input); else never."""
        await asyncio.Event().wait()


PlatformFactory = Callable[[Handler], PlatformAdapter]
