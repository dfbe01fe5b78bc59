"""The fakes serve attachments the way the real services do, to the real client libraries over
sockets: Telegram's getFile and file downloads, Discord's attachment CDN, OpenAI's
transcription endpoint, and image content in OpenAI and Anthropic requests.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import struct
import zlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import anthropic
import discord
import openai
import pytest
from telegram import Bot, Update
from telegram.error import BadRequest

from tests.harness.discord_client import logged_in
from tests.harness.discord_payloads import AttachmentFile
from tests.harness.fake_anthropic import IMAGE_TOKENS as ANTHROPIC_IMAGE_TOKENS
from tests.harness.fake_anthropic import FakeAnthropic
from tests.harness.fake_discord import BOT_ID, FakeDiscord
from tests.harness.fake_openai import IMAGE_TOKENS as OPENAI_IMAGE_TOKENS
from tests.harness.fake_openai import FakeOpenAI
from tests.harness.fake_telegram import FakeTelegram
from tests.harness.telegram_updates import MAX_DOWNLOAD_BYTES, UpdateFactory

pytestmark = pytest.mark.timeout(20)
USER = "700000000000000001"
MB = 1024 * 1024


def png(width: int = 2, height: int = 1) -> bytes:
    """A real (tiny, grey) PNG."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0,
                                                            0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# --- Telegram: getFile and downloads -----------------------------------------------------------
@pytest.fixture
async def tg() -> AsyncIterator[FakeTelegram]:
    server = FakeTelegram()
    async with server:
        yield server


@pytest.fixture
async def bot(tg: FakeTelegram) -> AsyncIterator[Bot]:
    async with Bot(tg.token, base_url=tg.base_url, base_file_url=tg.base_file_url) as bot:
        yield bot


def parsed(update: dict[str, Any], bot: Bot) -> Any:
    message = Update.de_json(update, bot).message
    assert message is not None
    return message


async def test_a_registered_photo_is_fetched_with_get_file_and_downloaded(
        tg: FakeTelegram, bot: Bot) -> None:
    picture = png(40, 30)
    file_id = tg.add_file(picture, kind="photo", suffix=".png")
    message = parsed(tg.updates.photo("what is this?", file_id=file_id), bot)
    sizes = [p.file_size for p in message.photo]
    assert sizes == sorted(sizes) and len(set(sizes)) == 3 and sizes[-1] == len(picture)
    assert message.photo[-1].file_id == file_id and message.caption == "what is this?"
    telegram_file = await bot.get_file(message.photo[-1].file_id)
    assert telegram_file.file_id == file_id and telegram_file.file_size == len(picture)
    assert telegram_file.file_unique_id == message.photo[-1].file_unique_id
    assert telegram_file.file_path == f"{tg.base_file_url}{tg.token}/photos/" + \
        telegram_file.file_path.rsplit("/", 1)[1]
    assert bytes(await telegram_file.download_as_bytearray()) == picture
    assert (await tg.wait_for_call("/getFile")).form == {"file_id": file_id}


@pytest.mark.parametrize(("build", "field", "mime"), [
    (lambda u: u.photo(), "photo", None),
    (lambda u: u.document("report.pdf", "application/pdf", caption="read it"), "document",
     "application/pdf"),
    (lambda u: u.voice(5), "voice", "audio/ogg"),
    (lambda u: u.audio(10, title="Song"), "audio", "audio/mpeg"),
    (lambda u: u.sticker(), "sticker", None),
], ids=["photo", "document", "voice", "audio", "sticker"])
async def test_every_builder_registers_a_file_getfile_serves(
        tg: FakeTelegram, bot: Bot, build: Callable[[UpdateFactory], dict[str, Any]],
        field: str, mime: str | None) -> None:
    message = parsed(build(tg.updates), bot)
    media = getattr(message, field)
    media = media[-1] if isinstance(media, tuple) else media
    assert getattr(media, "mime_type", None) == mime
    data = await (await bot.get_file(media.file_id)).download_as_bytearray()
    assert len(data) == media.file_size > 0
    if field == "photo":
        assert data.startswith(b"\xff\xd8\xff")  # generated photos sniff as JPEG


async def test_builders_carry_given_files_and_keep_their_shapes(tg: FakeTelegram,
                                                                bot: Bot) -> None:
    update = tg.updates.voice(7, data=b"OggS voice")
    assert update["message"]["voice"]["duration"] == 7
    voice = parsed(update, bot).voice
    assert voice.file_size == 10 and voice.mime_type == "audio/ogg"
    assert await (await bot.get_file(voice.file_id)).download_as_bytearray() == b"OggS voice"
    doc_id = tg.add_file(b"a,b\n1,2\n", suffix=".csv")
    document = parsed(tg.updates.document("data.csv", "text/csv", file_id=doc_id,
                                          caption="@threadline_bot sum it"), bot)
    assert document.document.file_name == "data.csv" and document.document.file_size == 8
    assert list(document.parse_caption_entities().values()) == ["@threadline_bot"]
    with pytest.raises(ValueError, match="no file"):
        tg.updates.voice(file_id="never-registered")
    with pytest.raises(ValueError, match="not both"):
        tg.updates.document(file_id=doc_id, data=b"x")


async def test_getfile_refuses_a_file_over_20_mb_by_its_claimed_size(tg: FakeTelegram,
                                                                     bot: Bot) -> None:
    huge = tg.add_file(b"just a few bytes", size=30 * MB)
    message = parsed(tg.updates.document("big.zip", "application/zip", file_id=huge), bot)
    assert message.document.file_size == 30 * MB
    with pytest.raises(BadRequest, match="(?i)file is too big"):
        await bot.get_file(huge)
    edge = tg.add_file(b"edge", size=MAX_DOWNLOAD_BYTES)
    assert (await bot.get_file(edge)).file_size == 20 * MB  # the limit itself is allowed
    with pytest.raises(BadRequest, match="(?i)file is too big"):
        await bot.get_file(tg.add_file(b"edge", size=MAX_DOWNLOAD_BYTES + 1))


async def test_an_unknown_file_id_is_invalid_and_an_unknown_path_is_404(tg: FakeTelegram,
                                                                        bot: Bot) -> None:
    with pytest.raises(BadRequest, match="(?i)invalid file_id"):
        await bot.get_file("AgACAgIAAxkBAAInope")
    tg.files["set-directly"] = b"raw"  # the dict still works as a registry
    assert await (await bot.get_file("set-directly")).download_as_bytearray() == b"raw"
    async with aiohttp.ClientSession() as session, session.get(
            f"{tg.base_file_url}{tg.token}/photos/file_999.jpg") as response:
        assert response.status == 404


# --- Discord: the attachment CDN ---------------------------------------------------------------
@pytest.fixture
async def dc(discord_endpoints: FakeDiscord) -> FakeDiscord:
    discord_endpoints.heartbeat_interval_ms = 250
    return discord_endpoints


def channel_in(fake: FakeDiscord) -> str:
    guild = fake.add_guild("home")
    channel = fake.add_channel(guild, "general")
    fake.add_member(guild, USER, name="alice")
    return channel


class Reader(discord.Client):
    def __init__(self) -> None:
        intents = discord.Intents.default()
        intents.message_content = True
        super().__init__(intents=intents, guild_ready_timeout=0.05)
        self.inbox: asyncio.Queue[discord.Message] = asyncio.Queue()

    async def on_message(self, message: discord.Message) -> None:
        if message.author.id != int(BOT_ID):
            self.inbox.put_nowait(message)


@asynccontextmanager
async def connected(fake: FakeDiscord) -> AsyncIterator[Reader]:
    client = Reader()
    async with logged_in(fake, client):
        yield client


async def test_user_attachments_are_served_by_the_fake_cdn(dc: FakeDiscord) -> None:
    channel = channel_in(dc)
    picture = png(3, 2)
    async with connected(dc):  # events need a gateway session
        mid = await dc.user_message(channel, "look", author_id=USER, attachments=[
            ("cat.png", picture, "image/png"), ("notes.txt", b"hello notes"),
            AttachmentFile("big.bin", b"tiny", "application/octet-stream", size=30 * MB)])
    cat, notes, big = dc.stored[mid]["attachments"]
    assert cat["url"].startswith(f"{dc.url}/attachments/{channel}/{cat['id']}/cat.png?ex=")
    assert (cat["content_type"], cat["size"], cat["width"], cat["height"]) == \
        ("image/png", len(picture), 3, 2)
    assert notes["content_type"] == "text/plain; charset=utf-8" and "width" not in notes
    assert big["size"] == 30 * MB
    async with aiohttp.ClientSession() as session:
        for url, body, kind in [(cat["url"], picture, "image/png"),
                                (notes["proxy_url"], b"hello notes", "text/plain"),
                                (big["url"], b"tiny", "application/octet-stream")]:
            async with session.get(url) as response:
                assert response.status == 200 and response.content_type == kind
                assert await response.read() == body
        dc.fail_attachment_next(404)
        async with session.get(cat["url"]) as response:
            assert response.status == 404
        missing = cat["url"].replace(cat["id"], "1")
        async with session.get(missing) as response:
            assert response.status == 404
    assert dc.attachment_urls(mid) == [cat["url"], notes["url"], big["url"]]


async def test_discord_py_reads_attachments_from_the_fake(dc: FakeDiscord) -> None:
    channel = channel_in(dc)
    voice_bytes = b"OggS" + bytes(range(200))
    async with connected(dc) as client:
        await dc.user_message(channel, "a file", author_id=USER,
                              attachments=[("report.pdf", b"%PDF-1.7 fake", None)])
        await dc.user_message(channel, author_id=USER, attachments=[AttachmentFile(
            "voice-message.ogg", voice_bytes, duration_secs=2.5)])
        async with asyncio.timeout(5):
            document, voice = await client.inbox.get(), await client.inbox.get()
        pdf = document.attachments[0]
        assert (pdf.filename, pdf.content_type, pdf.size) == ("report.pdf",
                                                              "application/pdf", 13)
        assert await pdf.read() == b"%PDF-1.7 fake"
        assert await pdf.read(use_cached=True) == b"%PDF-1.7 fake"
        note = voice.attachments[0]
        assert voice.flags.voice and note.is_voice_message() and note.duration == 2.5
        assert note.content_type == "audio/ogg" and await note.read() == voice_bytes
        dc.fail_attachment_next(404)
        with pytest.raises(discord.NotFound):
            await pdf.read()
        # What the bot uploads is on the CDN too.
        sent = await client.get_channel(int(channel)).send(  # type: ignore[union-attr]
            "here", file=discord.File(io.BytesIO(b"answer"), "answer.txt"))
        assert sent.attachments[0].content_type == "text/plain; charset=utf-8"
        assert await sent.attachments[0].read() == b"answer"
        with pytest.raises(discord.HTTPException) as caught:  # over the 10 MiB upload limit
            await sent.channel.send(file=discord.File(io.BytesIO(bytes(10 * MB + 1)), "a.bin"))
        assert caught.value.status == 413 and caught.value.code == 40005


# --- OpenAI: transcription ---------------------------------------------------------------------
@pytest.fixture
async def oa() -> AsyncIterator[tuple[FakeOpenAI, openai.AsyncOpenAI]]:
    server = FakeOpenAI(api_key="sk-test")
    async with server, openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-test",
                                          max_retries=0) as client:
        yield server, client


async def test_transcription_answers_like_openai_and_records_the_request(
        oa: tuple[FakeOpenAI, Any]) -> None:
    fake, client = oa
    audio = b"OggS" + bytes(400)
    result = await client.audio.transcriptions.create(
        model="whisper-1", file=("voice.oga", audio, "audio/ogg"), language="en")
    assert result.text == "transcribed: voice.oga (404 bytes)"
    assert result.usage is not None and result.usage.type == "duration"
    fake.transcripts["memo.mp3"] = "by name"
    fake.transcripts[hashlib.sha256(b"known").hexdigest()] = "by hash"
    named = await client.audio.transcriptions.create(
        model="whisper-1", file=("memo.mp3", b"ID3 memo", "audio/mpeg"))
    hashed = await client.audio.transcriptions.create(
        model="whisper-1", file=("other.wav", b"known", "audio/wav"), response_format="text")
    assert (named.text, hashed.strip()) == ("by name", "by hash")
    fake.transcriber = lambda data, name: f"{name}:{data[:4].decode()}"
    called = await client.audio.transcriptions.create(
        model="gpt-4o-transcribe", file=("x.webm", b"webm-bytes", "audio/webm"))
    assert called.text == "x.webm:webm"
    seen = [(t.filename, t.size, t.model, t.response_format) for t in fake.transcriptions]
    assert seen == [("voice.oga", 404, "whisper-1", "json"), ("memo.mp3", 8, "whisper-1", "json"),
                    ("other.wav", 5, "whisper-1", "text"),
                    ("x.webm", 10, "gpt-4o-transcribe", "json")]
    assert fake.transcriptions[0].language == "en" and fake.transcriptions[0].data == audio


async def test_transcription_refuses_like_openai(oa: tuple[FakeOpenAI, Any]) -> None:
    fake, client = oa
    with pytest.raises(openai.BadRequestError, match="Invalid file format"):
        await client.audio.transcriptions.create(model="whisper-1",
                                                 file=("voice", b"OggS", "audio/ogg"))
    with pytest.raises(openai.BadRequestError, match="too short"):
        await client.audio.transcriptions.create(model="whisper-1",
                                                 file=("v.ogg", b"", "audio/ogg"))
    with pytest.raises(openai.BadRequestError, match="not compatible"):
        await client.audio.transcriptions.create(
            model="gpt-4o-mini-transcribe", file=("v.ogg", b"x", "audio/ogg"),
            response_format="srt")
    fake.fail_next(500)
    with pytest.raises(openai.InternalServerError):
        await client.audio.transcriptions.create(model="whisper-1",
                                                 file=("v.ogg", b"x", "audio/ogg"))
    async with openai.AsyncOpenAI(base_url=fake.base_url, api_key="wrong",
                                  max_retries=0) as intruder:
        with pytest.raises(openai.AuthenticationError):
            await intruder.audio.transcriptions.create(model="whisper-1",
                                                       file=("v.ogg", b"x", "audio/ogg"))
    assert fake.transcriptions == []


# --- images in model requests ------------------------------------------------------------------
async def test_openai_takes_valid_images_and_counts_them(oa: tuple[FakeOpenAI, Any]) -> None:
    fake, client = oa
    data_url = f"data:image/png;base64,{b64(png())}"
    reply = await client.chat.completions.create(model="fake-model", messages=[
        {"role": "user", "content": [{"type": "text", "text": "what is it"},
                                     {"type": "image_url", "image_url": {"url": data_url}}]}])
    assert reply.usage.prompt_tokens == 3 + OPENAI_IMAGE_TOKENS
    await client.chat.completions.create(model="fake-model", messages=[
        {"role": "user", "content": "just text"}])
    await client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}])
    assert fake.images_seen == 2
    assert fake.requests_with_images() == [0]
    assert fake.requests_with_images(urls=True) == [0, 2]


@pytest.mark.parametrize(("url", "role", "match"), [
    ("data:image/bmp;base64,Qk0=", "user", "unsupported image"),
    ("data:image/png;base64,aGVs*bG8=", "user", "invalid base64"),  # lenient: "hello"
    ("data:image/png;base64,", "user", "invalid base64"),
    ("ftp://example.com/cat.png", "user", "invalid format"),
    ("https://example.com/cat.png", "system", "only allowed for messages with role 'user'"),
], ids=["bmp", "bad-base64", "empty", "ftp", "system-role"])
async def test_openai_refuses_bad_images(oa: tuple[FakeOpenAI, Any], url: str, role: str,
                                         match: str) -> None:
    fake, client = oa
    with pytest.raises(openai.BadRequestError, match=match) as caught:
        await client.chat.completions.create(model="fake-model", messages=[
            {"role": role, "content": [{"type": "image_url", "image_url": {"url": url}}]},
            {"role": "user", "content": "hi"}])
    assert caught.value.body["type"] == "invalid_request_error"  # type: ignore[index]
    assert fake.images_seen == 0 and fake.usages == []


@pytest.fixture
async def an() -> AsyncIterator[tuple[FakeAnthropic, anthropic.AsyncAnthropic]]:
    server = FakeAnthropic()
    async with server, anthropic.AsyncAnthropic(base_url=server.url, api_key="k",
                                                max_retries=0) as client:
        yield server, client


def image_block(data: str, media_type: str = "image/png") -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type,
                                        "data": data}}


async def test_anthropic_takes_valid_images_and_counts_them(
        an: tuple[FakeAnthropic, Any]) -> None:
    fake, client = an
    reply = await client.messages.create(model="claude-fake", max_tokens=50, messages=[
        {"role": "user", "content": [image_block(b64(png())),
                                     {"type": "text", "text": "what is it"}]}])
    assert reply.usage.input_tokens == 3 + ANTHROPIC_IMAGE_TOKENS
    await client.messages.create(model="claude-fake", max_tokens=50, messages=[
        {"role": "user", "content": "summarize our chat"}])
    tool_use = {"type": "tool_use", "id": "t1", "name": "look", "input": {}}
    await client.messages.create(model="claude-fake", max_tokens=50, messages=[
        {"role": "user", "content": "look"}, {"role": "assistant", "content": [tool_use]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
            image_block(b64(b"\xff\xd8\xff\xe0 jpeg"), "image/jpeg")]}]}])
    await client.messages.create(model="claude-fake", max_tokens=50, messages=[
        {"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": "https://example.com/b.png"}},
            {"type": "text", "text": "and this?"}]}])
    assert fake.images_seen == 4
    assert fake.requests_with_images() == [0, 2]  # base64 bytes; the URL-only one is not
    assert fake.requests_with_images(urls=True) == [0, 2, 3]
    assert fake.usages[2]["input_tokens"] >= 2 * ANTHROPIC_IMAGE_TOKENS


@pytest.mark.parametrize(("block", "match"), [
    (image_block(b64(png()), "image/bmp"), "Input should be 'image/jpeg'"),
    (image_block("aGVs bG8="), "invalid base64"),  # a lenient decoder skips the space
    (image_block(b64(png()), "image/jpeg"), "appears to be a image/png image"),
    (image_block("A" * (5 * MB + 4)), "exceeds 5 MB"),
    ({"type": "image", "source": {"type": "url", "url": "file:///etc/passwd"}}, "valid URL"),
    ({"type": "document", "source": {"type": "base64", "media_type": "text/plain",
                                     "data": b64(b"x")}}, "application/pdf"),
], ids=["bmp", "bad-base64", "mismatch", "too-big", "url", "document"])
async def test_anthropic_refuses_bad_images(an: tuple[FakeAnthropic, Any],
                                            block: dict[str, Any], match: str) -> None:
    fake, client = an
    with pytest.raises(anthropic.BadRequestError, match=match):
        await client.messages.create(model="claude-fake", max_tokens=50, messages=[
            {"role": "user", "content": [block, {"type": "text", "text": "hi"}]}])
    assert fake.images_seen == 0 and fake.usages == []
