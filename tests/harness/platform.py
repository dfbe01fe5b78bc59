"""A platform at the network edge: records what the gateway sends, feeds it messages.

`RecordingPlatform()` stands in for the chat service. Handed to the gateway as a platform
factory, it is called with the gateway's handler and returns the adapter the gateway
drives; the test keeps the recorder, which says what users say and logs what they get.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass

from platforms.base import (
    Attachment,
    ChatRef,
    Chunk,
    DownloadError,
    FileTooLarge,
    Handler,
    InboundMessage,
    PlatformAdapter,
    PlatformDown,
)


@dataclass(frozen=True)
class Sent:
    chat_key: str
    text: str
    reply_to: str | None


class _RecordingAdapter(PlatformAdapter):
    def __init__(self, handler: Handler, recorder: RecordingPlatform) -> None:
        super().__init__(handler)
        self.recorder = recorder
        self.name = recorder.name
        self.bot_username = recorder.bot_username
        self.max_message_length = recorder.max_message_length

    async def start(self) -> None:
        for text in self.recorder.on_start:  # like piped input, there the moment we run
            await self.recorder.say(text)

    async def stop(self) -> None:
        return None

    async def send(self, chat: ChatRef, chunk: Chunk, reply_to: str | None = None) -> str:
        return await self.recorder.record_send(chat, chunk.text, reply_to)

    async def delivered(self, chat: ChatRef, message_ids: tuple[str, ...]) -> None:
        await self.recorder.record_delivered(message_ids)

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        self.recorder.downloads.append(attachment.ref)
        if self.recorder.slow_downloads is not None:  # a file server that takes its time
            self.recorder.downloading.set()
            await self.recorder.slow_downloads.wait()
        data = self.recorder.files.get(attachment.ref)
        if data is None:
            raise DownloadError("no such file")
        if len(data) > max_bytes:
            raise FileTooLarge(max_bytes, len(data))
        return data

    async def register_commands(self, commands: list[tuple[str, str]]) -> None:
        self.recorder.menu = list(commands)


class RecordingPlatform:
    """Stands in for a chat service: `say()` delivers a user message, `sent` logs replies."""

    def __init__(self, name: str = "test", *, bot_username: str | None = "threadline_bot",
                 max_message_length: int = 4096) -> None:
        self.name = name
        self.bot_username = bot_username
        self.max_message_length = max_message_length
        self.failing_sends = 0  # the next N sends fail like a platform outage would
        self.fail_after = None  # int: that many more sends succeed, then failing_sends apply
        self.sent: list[Sent] = []
        self.delivered_ids: list[str] = []
        self.menu: list[tuple[str, str]] = []  # what register_commands announced
        self.files: dict[str, bytes] = {}  # what attachments download, by ref
        self.downloads: list[str] = []  # refs the gateway fetched, in order
        # While set to an Event, downloads wait for it (and `downloading` says one started).
        self.slow_downloads: asyncio.Event | None = None
        self.downloading = asyncio.Event()
        self.on_start: list[str] = []  # messages that arrive as the adapter starts
        self.adapter: _RecordingAdapter | None = None
        self._changed = asyncio.Condition()
        self._ids = itertools.count(1)

    def __call__(self, handler: Handler) -> PlatformAdapter:
        """The platform factory the gateway calls with its handler."""
        self.adapter = _RecordingAdapter(handler, self)
        return self.adapter

    @property
    def handler(self) -> Handler:
        assert self.adapter is not None, "hand the recorder to a gateway first"
        return self.adapter.handler

    async def record_send(self, chat: ChatRef, text: str, reply_to: str | None) -> str:
        if self.fail_after:
            self.fail_after -= 1
        elif self.failing_sends:
            self.failing_sends -= 1
            raise PlatformDown("the platform is unreachable")
        async with self._changed:
            self.sent.append(Sent(chat.key, text, reply_to))
            self._changed.notify_all()
        return f"out-{len(self.sent)}"

    def attach(self, kind: str, data: bytes, name: str, mime: str | None = None
               ) -> Attachment:
        """An attachment a message can carry (`say(..., attachments=(...,))`), its bytes
        served by this platform's download."""
        ref = f"file-{len(self.files) + 1}"
        self.files[ref] = data
        return Attachment(kind, ref, name, mime, len(data))

    async def record_delivered(self, message_ids: tuple[str, ...]) -> None:
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
        await self.handler(msg)
        return msg

    async def wait_delivered(self, count: int, timeout: float = 10.0) -> None:  # noqa: ASYNC109
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: len(self.delivered_ids) >= count)

    def texts(self, chat_key: str | None = None) -> list[str]:
        return [s.text for s in self.sent if chat_key is None or s.chat_key == chat_key]
