"""The real adapters describe attachments and fetch them: python-telegram-bot against the
fake Bot API (getFile, the 20 MB limit, file downloads), discord.py against the fake
Discord and its CDN. Each adapter runs alone with a handler that records what it reports.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from platforms.base import (
    Attachment,
    DownloadError,
    FileTooLarge,
    InboundMessage,
    PlatformAdapter,
)
from platforms.discord.adapter import DiscordAdapter, DiscordSettings
from platforms.telegram.adapter import TelegramAdapter, TelegramSettings
from tests.harness.discord_bot import GUILD_READY_S
from tests.harness.media import OGG, jpeg

pytestmark = pytest.mark.timeout(30)
TG_USER = 5550009
DC_USER = "700000000000000009"
MB = 1024 * 1024


class Inbox:
    def __init__(self) -> None:
        self.messages: list[InboundMessage] = []
        self._changed = asyncio.Condition()

    async def __call__(self, msg: InboundMessage) -> None:
        async with self._changed:
            self.messages.append(msg)
            self._changed.notify_all()

    async def wait(self, count: int) -> list[InboundMessage]:
        async with asyncio.timeout(10), self._changed:
            await self._changed.wait_for(lambda: len(self.messages) >= count)
        return self.messages


@asynccontextmanager
async def running(adapter: PlatformAdapter) -> AsyncIterator[PlatformAdapter]:
    await adapter.initialize()
    await adapter.start()
    await adapter.catch_up()  # as the gateway does once started: live messages flow
    try:
        yield adapter
    finally:
        await adapter.stop()
        await adapter.shutdown()


@asynccontextmanager
async def telegram(fake) -> AsyncIterator[tuple[PlatformAdapter, Inbox]]:
    inbox = Inbox()
    async with running(TelegramAdapter(inbox, TelegramSettings(
            token=fake.token, base_url=fake.base_url, base_file_url=fake.base_file_url,
            poll_timeout_s=0.5))) as adapter:
        yield adapter, inbox


@asynccontextmanager
async def discord_adapter(fake) -> AsyncIterator[tuple[PlatformAdapter, Inbox]]:
    inbox = Inbox()
    async with running(DiscordAdapter(inbox, DiscordSettings(
            token=fake.token, api_base=fake.api_base, gateway_url=fake.gateway_url,
            guild_ready_timeout=GUILD_READY_S))) as adapter:
        yield adapter, inbox


async def test_telegram_reports_files_and_fetches_exactly_their_bytes(fake_telegram):
    photo = jpeg(3, (320, 240))
    photo_id = fake_telegram.add_file(photo, kind="photo", suffix=".jpg")
    ups = fake_telegram.updates
    async with telegram(fake_telegram) as (adapter, inbox):
        fake_telegram.push(ups.photo("look", user_id=TG_USER, file_id=photo_id))
        fake_telegram.push(ups.document("notes.md", "text/markdown", user_id=TG_USER,
                                        data=b"# Notes\n"))
        fake_telegram.push(ups.voice(user_id=TG_USER, data=OGG))
        fake_telegram.push(ups.sticker(user_id=TG_USER))
        got = await inbox.wait(4)
        [image], [doc], [voice], [sticker] = (m.attachments for m in got)
        assert (image.kind, image.ref, image.size, got[0].text) == (
            "image", photo_id, len(photo), "look")  # the largest size, not a thumbnail
        assert (doc.kind, doc.name, doc.mime, doc.size) == ("document", "notes.md",
                                                            "text/markdown", 8)
        assert (voice.kind, voice.mime) == ("voice", "audio/ogg")
        assert sticker.kind == "sticker" and not sticker.readable
        assert await adapter.download(image, 20 * MB) == photo
        assert await adapter.download(doc, 20 * MB) == b"# Notes\n"
        assert await adapter.download(voice, 20 * MB) == OGG


async def test_telegram_refuses_past_the_bot_api_limit_and_says_why_fetches_fail(
        fake_telegram):
    big = fake_telegram.add_file(b"%PDF-1.7", size=30 * MB, suffix=".pdf")
    async with telegram(fake_telegram) as (adapter, _):
        declared = Attachment("document", big, "scan.pdf", "application/pdf", 30 * MB)
        with pytest.raises(FileTooLarge) as caught:
            await adapter.download(declared, 50 * MB)
        assert caught.value.limit == 20 * MB and not fake_telegram.calls_to("getFile")
        with pytest.raises(FileTooLarge):  # no size given: getFile says "file is too big"
            await adapter.download(Attachment("document", big, "scan.pdf"), 50 * MB)
        small = fake_telegram.add_file(b"x" * 4000, suffix=".txt")
        with pytest.raises(FileTooLarge) as caught:  # the configured cap, when lower
            await adapter.download(Attachment("document", small), 1000)
        assert caught.value.limit == 1000
        assert not [c for c in fake_telegram.calls if "/file/" in c.path]  # nothing fetched
        with pytest.raises(DownloadError) as gone:
            await adapter.download(Attachment("document", "no-such-file-id"), 20 * MB)
        fake_telegram.fail_method_next("getFile", 502, "Bad Gateway")
        with pytest.raises(DownloadError) as down:
            await adapter.download(Attachment("document", small), 20 * MB)
    assert str(gone.value) == "Telegram no longer has this file"
    assert str(down.value) == "Telegram did not answer"
    assert fake_telegram.token not in str(gone.value) + str(down.value)


async def test_discord_reports_attachments_and_fetches_them_from_the_cdn(fake_discord):
    dm = fake_discord.dm_channel(DC_USER)
    picture = jpeg(4)
    async with discord_adapter(fake_discord) as (adapter, inbox):
        await fake_discord.user_message(dm, "see these", author_id=DC_USER, attachments=[
            ("cat.jpg", picture, "image/jpeg"), ("main.py", b"print(1)\n", None),
            ("song.mp3", b"ID3" + bytes(300), "audio/mpeg")])
        [msg] = await inbox.wait(1)
        image, code, song = msg.attachments
        assert (image.kind, image.name, image.size) == ("image", "cat.jpg", len(picture))
        assert image.ref.startswith(fake_discord.cdn_base)
        assert (code.kind, song.kind) == ("document", "audio")
        assert await adapter.download(image, 20 * MB) == picture
        assert await adapter.download(code, 20 * MB) == b"print(1)\n"
        cdn_calls = len([c for c in fake_discord.calls if "/attachments/" in c.path])
        with pytest.raises(FileTooLarge) as caught:
            await adapter.download(image, 100)
        assert caught.value.limit == 100 and caught.value.size == len(picture) > 100
        assert len([c for c in fake_discord.calls if "/attachments/" in c.path]) == cdn_calls
        fake_discord.fail_attachment_next(404)
        with pytest.raises(DownloadError, match="no longer has"):
            await adapter.download(image, 20 * MB)
        fake_discord.fail_attachment_next(503)
        with pytest.raises(DownloadError, match="did not answer"):
            await adapter.download(code, 20 * MB)
