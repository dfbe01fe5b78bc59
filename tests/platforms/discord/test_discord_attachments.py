"""What the real Discord adapter (discord.py against the fake Discord and its CDN) says a
message carries, and how fetching it succeeds or fails: kinds from the declared content
type, the alt text as the file's caption, the size cap checked before any download, and
CDN failures in plain words."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator

import pytest
from PIL import Image

from platforms.base import Attachment, DownloadError, FileTooLarge
from platforms.discord.adapter import DiscordAdapter, DiscordSettings
from tests.harness.discord_bot import GUILD_READY_S
from tests.harness.discord_payloads import AttachmentFile
from tests.harness.fake_discord import FakeDiscord
from tests.harness.inbox import Inbox
from tests.harness.media import OGG

pytestmark = pytest.mark.timeout(20)
USER = "700000000000000021"
MB = 1024 * 1024


def png(size: tuple[int, int] = (3, 2)) -> bytes:
    out = io.BytesIO()
    Image.new("L", size, 128).save(out, "PNG")
    return out.getvalue()


PNG = png()


@pytest.fixture
async def discord(fake_discord: FakeDiscord) -> AsyncIterator[tuple[DiscordAdapter, Inbox]]:
    inbox = Inbox()
    adapter = DiscordAdapter(inbox, DiscordSettings(
        token=fake_discord.token, api_base=fake_discord.api_base,
        gateway_url=fake_discord.gateway_url, guild_ready_timeout=GUILD_READY_S))
    await adapter.initialize()
    await adapter.start()
    await adapter.catch_up()  # nothing to read: live messages flow from here
    try:
        yield adapter, inbox
    finally:
        await adapter.stop()
        await adapter.shutdown()


def cdn_requests(fake: FakeDiscord) -> int:
    return len([c for c in fake.calls if c.path.startswith("/attachments/")])


async def sent(fake: FakeDiscord, inbox: Inbox, *files: AttachmentFile | tuple[object, ...]
               ) -> tuple[str, tuple[Attachment, ...]]:
    """A DM from the user carrying `files`: (message id, what the adapter reported)."""
    mid = await fake.user_message(fake.dm_channel(USER), "have a look", author_id=USER,
                                  attachments=files)
    msg = await inbox.next()
    assert msg.message_id == mid
    return mid, msg.attachments


async def test_a_picture_with_alt_text_is_an_image_captioned_by_it(
        fake_discord: FakeDiscord, discord: tuple[DiscordAdapter, Inbox]) -> None:
    adapter, inbox = discord
    mid, [image] = await sent(fake_discord, inbox, AttachmentFile(
        "heron.png", PNG, "image/png", description="a grey heron on one leg"))
    assert image.ref == fake_discord.attachment_urls(mid)[0]
    assert (image.kind, image.name, image.mime, image.size, image.caption) == (
        "image", "heron.png", "image/png", len(PNG), "a grey heron on one leg")
    assert await adapter.download(image, 20 * MB) == PNG
    assert cdn_requests(fake_discord) == 1


async def test_kinds_follow_the_declared_content_type(
        fake_discord: FakeDiscord, discord: tuple[DiscordAdapter, Inbox]) -> None:
    adapter, inbox = discord
    script, song = b"print('hello')\n", b"ID3\x04\x00" + bytes(300)
    _, (code, music) = await sent(fake_discord, inbox, ("hello.py", script, None),
                                  ("song.mp3", song, "audio/mpeg"))
    assert (code.kind, code.name, code.caption) == ("document", "hello.py", None)
    assert (music.kind, music.mime, music.size) == ("audio", "audio/mpeg", len(song))
    assert await adapter.download(code, 20 * MB) == script
    assert await adapter.download(music, 20 * MB) == song
    _, [voice] = await sent(fake_discord, inbox, AttachmentFile(
        "voice-message.ogg", OGG, duration_secs=1.5))
    assert (voice.kind, voice.mime) == ("voice", "audio/ogg")  # recorded in the app
    assert await adapter.download(voice, 20 * MB) == OGG


async def test_a_file_over_the_cap_is_refused_before_any_download(
        fake_discord: FakeDiscord, discord: tuple[DiscordAdapter, Inbox]) -> None:
    adapter, inbox = discord
    _, [big] = await sent(fake_discord, inbox,
                          AttachmentFile("backup.tar", b"tiny", size=30 * MB))
    with pytest.raises(FileTooLarge) as caught:
        await adapter.download(big, 20 * MB)
    assert (caught.value.limit, caught.value.size) == (20 * MB, 30 * MB)
    assert cdn_requests(fake_discord) == 0
    # A size that understates the file: the bytes themselves are measured too.
    _, [sly] = await sent(fake_discord, inbox, ("sly.bin", bytes(5000), None, 100))
    with pytest.raises(FileTooLarge) as caught:
        await adapter.download(sly, 1000)
    assert (caught.value.limit, caught.value.size) == (1000, 5000)


@pytest.mark.parametrize(("status", "said"), [
    (404, "Discord no longer has this file"),
    (403, "Discord no longer has this file"),  # the signed URL expired
    (503, "Discord did not answer"),
])
async def test_a_failed_cdn_download_is_a_download_error_in_plain_words(
        fake_discord: FakeDiscord, discord: tuple[DiscordAdapter, Inbox], status: int,
        said: str) -> None:
    adapter, inbox = discord
    _, [notes] = await sent(fake_discord, inbox, ("notes.txt", b"buy milk\n", None))
    fake_discord.fail_attachment_next(status)
    with pytest.raises(DownloadError) as caught:
        await adapter.download(notes, 20 * MB)
    assert not isinstance(caught.value, FileTooLarge) and str(caught.value) == said
    assert await adapter.download(notes, 20 * MB) == b"buy milk\n"  # the failure passed
