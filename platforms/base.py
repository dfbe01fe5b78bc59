"""The adapter contract between a chat platform library and the gateway."""

from __future__ import annotations

import asyncio
import collections
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from platforms.text import markdown_balanced, split_message


def loop_time() -> float:
    """The running event loop's time: what adapters time their own waits and caches by, as
    the gateway does (gateway/clock.py), so a test that moves its loop's clock moves theirs."""
    return asyncio.get_running_loop().time()


@dataclass(frozen=True)
class ChatRef:
    """Where a reply goes: a platform chat, optionally a thread or forum topic in it."""

    platform: str
    chat_id: str
    thread_id: str | None = None
    group: bool = field(default=False, compare=False)  # paced as a group by the platform

    @property
    def key(self) -> str:
        base = f"{self.platform}:{self.chat_id}"
        return f"{base}:{self.thread_id}" if self.thread_id else base


# What the gateway can read; the other kinds (video, sticker, location...) it declines.
READABLE_KINDS = ("image", "document", "voice", "audio")


@dataclass(frozen=True)
class Attachment:
    """A file (or other non-text thing) a message carries, as the platform describes it.

    Nothing is downloaded when a message arrives: the gateway fetches it with
    `PlatformAdapter.download` in the chat's order, after gating (docs/architecture.md,
    "Attachments"). It is stored with the inbound row, so a restart can fetch it again.
    """

    kind: str  # image | document | voice | audio | video | sticker | other
    ref: str = ""  # what the adapter fetches it by (Telegram file id, Discord URL)
    name: str | None = None  # file name, when the platform gives one
    mime: str | None = None  # media type as the platform declares it (not trusted)
    size: int | None = None  # bytes, as the platform declares it; None: unknown
    caption: str | None = None  # this file's own description (Discord alt text)

    @property
    def readable(self) -> bool:
        return self.kind in READABLE_KINDS and bool(self.ref)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and v != ""}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Attachment:
        known = {k: data[k] for k in ("kind", "ref", "name", "mime", "size", "caption")
                 if k in data}
        return cls(**{"kind": "other", **known})


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
    attachments: tuple[Attachment, ...] = ()
    # The platform moved this chat to a new id (a Telegram group upgraded to a supergroup):
    # no words, only where the chat continues (docs/architecture.md, "Chats that move").
    moved_to: str | None = None
    # The author took this message back before it was answered: no words, only which one
    # (Discord's message delete); a queued message is then skipped.
    is_delete: bool = False
    # False: text that looks like `/word` but is not a command for us (a Discord guild
    # message not addressed to the bot, or naming no command of ours): plain text.
    may_command: bool = True
    # Mentioned the bot (or wrote in its own thread), whatever `require_mention` says;
    # None: as `addressed_to_bot`. Lets one chat require a mention its platform does not.
    mentioned: bool | None = None

    @property
    def chat(self) -> ChatRef:
        return ChatRef(self.platform, self.chat_id, self.thread_id, group=self.is_group)

    @property
    def chat_key(self) -> str:
        return self.chat.key


@dataclass(frozen=True)
class Chunk:
    """One platform message: its text and, on Telegram, its formatting entities."""

    text: str
    entities: tuple[dict[str, Any], ...] = ()
    # Meant for the asker alone (a refusal): a platform that can say things privately, such
    # as a Discord slash-command answer, does; the others send it as usual.
    private: bool = False
    # Names this message for good: the same key is the same message, however often it is
    # sent (a stored reply's part, a preview). A platform that can (Discord's nonce) drops a
    # second send of it; the others ignore it.
    key: str | None = None


@dataclass(frozen=True)
class SendLimits:
    """How fast a platform lets a bot send; the gateway's outbound budget keeps to it.

    Sends, edits and typing indicators all count. None means no limit of that kind.
    """

    per_chat_interval_s: float | None = None  # at most one message per chat this often
    per_group_per_minute: int | None = None  # and this many per minute in a group
    per_bot_per_second: int | None = None  # and this many per second over all chats


class SendError(Exception):
    """The platform did not take a message."""


class RateLimited(SendError):
    """Too many requests: nothing more to this chat for `retry_after` seconds."""

    def __init__(self, retry_after: float, message: str = "rate limited") -> None:
        super().__init__(f"{message} (retry after {retry_after:g} s)")
        self.retry_after = retry_after


class PlatformDown(SendError):
    """A transient failure (network, 5xx): worth trying again later."""


class SendUnknown(PlatformDown):
    """The request went out and no answer came: the platform may have taken it. Sending
    again may show it twice; editing again is harmless."""


class Undeliverable(SendError):
    """A permanent refusal (blocked by the user, chat gone, bad request): do not retry."""


class ChatMoved(SendError):
    """The chat lives under another id now (a Telegram group became a supergroup)."""

    def __init__(self, new_chat_id: str) -> None:
        super().__init__(f"the chat moved to {new_chat_id}")
        self.new_chat_id = new_chat_id


class PlatformRefused(Exception):
    """The platform will not let this bot connect as configured (a refused token, an intent
    not enabled, sharding required): trying again changes nothing until an operator fixes
    it. The message says what to fix, in one line."""


class DownloadError(Exception):
    """An attachment could not be fetched; the message says why in a few plain words."""


class FileTooLarge(DownloadError):
    """An attachment is over the size we (or the platform) allow a bot to fetch."""

    def __init__(self, limit: int, size: int | None = None) -> None:
        super().__init__(f"file of {size if size is not None else 'unknown'} bytes is over "
                         f"the {limit}-byte limit")
        self.limit = limit
        self.size = size


# The gateway's entry point. False: the message could not be stored (the database is
# out of reach) and nothing was said; a platform that can deliver it again should
# (a webhook answers 503, a poller does not confirm it). Otherwise it is in the ledger
# or was ignored on purpose.
Handler = Callable[[InboundMessage], Awaitable[bool | None]]


@dataclass(frozen=True)
class ResumePoint:
    """Where reading a chat's history resumes after the bot was away."""

    chat: ChatRef
    message_id: str  # the newest message of the chat the gateway stored
    received_at: float  # when it arrived (unix seconds)
    live: bool  # the chat has a live session


class PlatformAdapter(ABC):
    """A platform connection, built with the handler its messages go to.

    Lifecycle, in the words the rest of the project uses: `initialize()` (connect,
    learn who we are), `start()` (begin receiving), `stop()` (stop receiving),
    `shutdown()` (release everything). Startup work such as registering the command menu
    is a method of its own, `register_commands()`.
    """

    name: str = "platform"
    max_message_length: int = 4096
    # The most a bot may download from the platform (Telegram's Bot API: 20 MB); None: no
    # limit of the platform's own, only the configured one.
    max_download_bytes: int | None = None
    bot_username: str | None = None  # `/cmd@name` for another name is not for us
    limits: SendLimits = SendLimits()
    # Whether only one process at a time may receive for this bot (polling: two pollers
    # take updates from each other). Gateways sharing a database elect that one.
    exclusive: bool = False
    # Whether the platform delivers a message again when the handler could not store it
    # (Telegram's webhook and getUpdates do). When not, the gateway answers it instead.
    redelivers: bool = False
    # Whether a second send of a Chunk's key returns the message the first made (Discord's
    # nonce) instead of making another: then a message whose id was lost can be found again.
    keeps_keys: bool = False

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        # Events worth counting in metrics (e.g. "unparseable_updates"), read by the gateway
        # at scrape time.
        self.counters: collections.Counter[str] = collections.Counter()
        # Told when the connection ends for good while running (a PlatformRefused); set by
        # the gateway. The adapter is closed by then.
        self.on_refused: Callable[[PlatformRefused], None] | None = None
        # For a catch-up: each chat's newest stored message (its id, when it arrived, unix
        # seconds) and whether the chat has a live session; set by the gateway.
        self.resume_points: Callable[[], Awaitable[list[ResumePoint]]] | None = None
        # An exclusive receiver (a poller) asks before each call whether this process
        # still surely holds the right to receive, and calls `on_standby` when it stopped
        # because it does not; both set by the gateway.
        self.may_receive: Callable[[], bool] = lambda: True
        self.on_standby: Callable[[], None] = lambda: None

    async def initialize(self) -> None:  # noqa: B027 - optional
        """Connect and authenticate; nothing is received yet."""

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def stop(self) -> None: ...

    async def shutdown(self) -> None:  # noqa: B027 - optional
        """Release connections and files; the adapter is not used again."""

    def render(self, text: str) -> list[Chunk]:
        """The reply as the platform's messages, each within its size limit."""
        return [Chunk(part) for part in split_message(text, self.max_message_length)]

    @property
    def formatter(self) -> Callable[[str], list[Chunk]] | None:
        """A module-level function rendering like `render`, when rendering is costly or
        not linear in its input (a third-party Markdown converter): the gateway then runs
        it in a worker process with a time limit and falls back to `render_plain`
        (docs/architecture.md, "Untrusted work"). None: `render` runs where it is called."""
        return None

    def render_plain(self, text: str) -> list[Chunk]:
        """The reply's own characters, unformatted, in messages within the size limit."""
        return [Chunk(part) for part in split_message(text, self.max_message_length)]

    @abstractmethod
    async def send(self, chat: ChatRef, chunk: Chunk, reply_to: str | None = None) -> str | None:
        """Send one message; return its platform message id. Raises SendError kinds."""

    async def send_preview(self, chat: ChatRef, chunk: Chunk,
                           reply_to: str | None = None) -> str | None:
        """Send the first message of a reply shown while written ("edit" mode). Like
        `send`, but an adapter may wait longer for the answer: a preview whose message id
        never comes back could not be edited into the final reply, and would stay."""
        return await self.send(chat, chunk, reply_to)

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """An attachment's bytes. Raises FileTooLarge past `max_bytes` (or the platform's
        own limit) and DownloadError when the file cannot be fetched."""
        raise DownloadError(f"{self.name} cannot fetch files")

    async def check_admin(self, msg: InboundMessage) -> bool:
        """Whether the sender administers the chat, by the platform's own word; asked only
        when a command needs it (after the message took its place in the chat's order).
        By default what the adapter said when the message arrived."""
        return msg.is_admin_hint

    async def typing(self, chat: ChatRef) -> None:  # noqa: B027 - optional
        """Show a typing indicator where the platform has one."""

    # --- a reply shown while it is written (docs/architecture.md, "Streaming") ----------
    def stream_mode(self, chat: ChatRef) -> str | None:
        """How this chat sees a reply being written: "draft" (a native preview that is not
        a message), "edit" (a message edited as text arrives), "append" (text printed as
        it comes), or None (the reply arrives whole)."""
        return None

    def render_partial(self, text: str) -> list[Chunk]:
        """An unfinished reply as messages: formatted where its Markdown is complete."""
        return self.render(text) if markdown_balanced(text) else [
            Chunk(part) for part in split_message(text, self.max_message_length)]

    async def send_draft(self, chat: ChatRef, draft_id: int, chunk: Chunk) -> None:
        """Show `chunk` as the draft `draft_id` ("draft" mode). Raises SendError kinds."""
        raise Undeliverable(f"{self.name} has no drafts")

    async def edit(self, chat: ChatRef, message_id: str, chunk: Chunk) -> None:
        """Replace a sent message's text ("edit" mode, and a streamed reply's final form);
        an edit that changes nothing succeeds. Raises SendError kinds."""
        raise Undeliverable(f"{self.name} cannot edit messages")

    async def delete(self, chat: ChatRef, message_id: str) -> None:
        """Remove a message the bot sent (a preview the final reply did not need)."""
        raise Undeliverable(f"{self.name} cannot delete messages")

    async def append(self, chat: ChatRef, text: str) -> None:
        """Add text to the reply being written ("append" mode)."""
        raise Undeliverable(f"{self.name} cannot append")

    async def register_commands(self, commands: list[tuple[str, str]]) -> None:  # noqa: B027
        """Startup work such as setMyCommands or slash-command sync, before `start()`."""

    async def catch_up(self) -> None:  # noqa: B027 - optional
        """Hand over what was said while the bot was away, through the handler like live
        messages (the ledger drops repeats), then what arrived meanwhile. Called once
        started and what the last run left open is back in the chats' queues; where to
        start reading comes from `resume_points`."""

    async def delivered(self, chat: ChatRef, message_ids: tuple[str, ...]) -> None:  # noqa: B027
        """Everything the gateway will say about these inbound messages has been sent."""

    async def wait_closed(self) -> None:  # noqa: B027
        """Return when the platform ends by itself (console end of input); else never."""
        await asyncio.Event().wait()


PlatformFactory = Callable[[Handler], PlatformAdapter]
