"""What the real Telegram adapter (python-telegram-bot against the fake Bot API) says a
message carries, and how fetching it succeeds or fails: the largest photo size, names and
types as declared, declined kinds, the Bot API's 20 MB limit, and plain-worded failures
that never leak the bot token."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from platforms.base import Attachment, DownloadError, FileTooLarge
from platforms.telegram.adapter import TelegramAdapter, TelegramSettings
from tests.harness.fake_telegram import FakeTelegram
from tests.harness.inbox import Inbox
from tests.harness.media import OGG, jpeg, pdf
from tests.harness.telegram_updates import UpdateFactory

pytestmark = pytest.mark.timeout(20)
USER = 5550021
MB = 1024 * 1024
BOT_API_LIMIT = 20 * MB


@pytest.fixture
async def telegram(fake_telegram: FakeTelegram
                   ) -> AsyncIterator[tuple[TelegramAdapter, Inbox]]:
    inbox = Inbox()
    adapter = TelegramAdapter(inbox, TelegramSettings(
        token=fake_telegram.token, base_url=fake_telegram.base_url,
        base_file_url=fake_telegram.base_file_url, poll_timeout_s=0.5))
    await adapter.initialize()
    await adapter.start()
    try:
        yield adapter, inbox
    finally:
        await adapter.stop()
        await adapter.shutdown()


def downloads(fake: FakeTelegram) -> list[str]:
    """Paths of file downloads (not API calls) the fake served."""
    return [c.path for c in fake.calls if c.path.startswith("/file/")]


async def test_a_captioned_photo_is_one_image_of_its_largest_size(
        fake_telegram: FakeTelegram, telegram: tuple[TelegramAdapter, Inbox]) -> None:
    adapter, inbox = telegram
    picture = jpeg(7, (640, 480))
    update = fake_telegram.push(fake_telegram.updates.photo(
        "what bird is this?", user_id=USER, data=picture))
    sizes = update["message"]["photo"]
    msg = await inbox.next()
    [image] = msg.attachments  # three sizes, one picture
    assert msg.text == "what bird is this?"
    assert image.ref == sizes[-1]["file_id"] != sizes[0]["file_id"]
    assert (image.kind, image.mime, image.size) == ("image", "image/jpeg", len(picture))
    assert image.readable
    assert await adapter.download(image, BOT_API_LIMIT) == picture
    assert (await fake_telegram.wait_for_call("/getFile")).form == {"file_id": image.ref}


def location(ups: UpdateFactory) -> dict[str, Any]:
    return ups.update(ups.message(chat_id=USER, user_id=USER,
                                  location={"latitude": 52.52, "longitude": 13.405}))


SCAN = pdf("Invoice 1042")


@pytest.mark.parametrize(("build", "expected", "body"), [
    (lambda ups: ups.document("Invoice 1042.pdf", "application/pdf", user_id=USER,
                              data=SCAN),
     ("document", "Invoice 1042.pdf", "application/pdf", len(SCAN)), SCAN),
    (lambda ups: ups.voice(2, user_id=USER, data=OGG),
     ("voice", "voice_{mid}.ogg", "audio/ogg", len(OGG)), OGG),
    (lambda ups: ups.sticker(user_id=USER), ("sticker", "sticker", None, None), None),
    (location, ("other", "location", None, None), None),
], ids=["document", "voice", "sticker", "location"])
async def test_each_kind_is_described_as_telegram_declares_it(
        fake_telegram: FakeTelegram, telegram: tuple[TelegramAdapter, Inbox],
        build: Callable[[UpdateFactory], dict[str, Any]],
        expected: tuple[str, str, str | None, int | None], body: bytes | None) -> None:
    adapter, inbox = telegram
    update = fake_telegram.push(build(fake_telegram.updates))
    [got] = (await inbox.next()).attachments
    kind, name, mime, size = expected
    assert (got.kind, got.mime) == (kind, mime)
    assert got.name == name.format(mid=update["message"]["message_id"])
    if body is None:  # declined: the gateway says so instead of fetching anything
        assert not got.readable
        assert kind != "other" or got.ref == ""  # a location has nothing to fetch
        return
    assert got.readable and got.size == size
    assert await adapter.download(got, BOT_API_LIMIT) == body


async def test_a_file_declared_over_20_mb_is_refused_without_asking_telegram(
        fake_telegram: FakeTelegram, telegram: tuple[TelegramAdapter, Inbox]) -> None:
    adapter, inbox = telegram
    huge = fake_telegram.add_file(b"%PDF-1.7 pretend", size=30 * MB, suffix=".pdf")
    fake_telegram.push(fake_telegram.updates.document("scan.pdf", "application/pdf",
                                                      user_id=USER, file_id=huge))
    [scan] = (await inbox.next()).attachments
    assert scan.size == 30 * MB
    with pytest.raises(FileTooLarge) as caught:
        await adapter.download(scan, 50 * MB)  # the configured cap is higher: 20 MB binds
    assert (caught.value.limit, caught.value.size) == (BOT_API_LIMIT, 30 * MB)
    assert fake_telegram.calls_to("getFile") == [] and downloads(fake_telegram) == []


async def test_getfile_saying_too_big_is_file_too_large_when_no_size_was_declared(
        fake_telegram: FakeTelegram, telegram: tuple[TelegramAdapter, Inbox]) -> None:
    adapter, _ = telegram
    huge = fake_telegram.add_file(b"PK\x03\x04 pretend", size=30 * MB, suffix=".zip")
    with pytest.raises(FileTooLarge) as caught:
        await adapter.download(Attachment("document", huge, "photos.zip"), 50 * MB)
    assert caught.value.limit == BOT_API_LIMIT
    assert len(fake_telegram.calls_to("getFile")) == 1 and downloads(fake_telegram) == []


async def test_an_invalid_file_id_fails_in_plain_words_without_the_token(
        fake_telegram: FakeTelegram, telegram: tuple[TelegramAdapter, Inbox]) -> None:
    adapter, _ = telegram
    with pytest.raises(DownloadError) as caught:
        await adapter.download(Attachment("document", "BQACAgIAAxkBAAIgone"), BOT_API_LIMIT)
    secret = fake_telegram.token.split(":", 1)[1]
    assert secret not in str(caught.value) and secret not in repr(caught.value)
    assert not isinstance(caught.value, FileTooLarge)
    assert str(caught.value) == "Telegram no longer has this file"
    assert fake_telegram.calls_to("getFile")  # Telegram was asked, and said no


async def test_getfile_failing_on_telegrams_side_is_a_download_error(
        fake_telegram: FakeTelegram, telegram: tuple[TelegramAdapter, Inbox]) -> None:
    adapter, _ = telegram
    notes = fake_telegram.add_file(b"# notes\n", suffix=".md")
    fake_telegram.fail_method_next("getFile", 500, "Internal Server Error")
    with pytest.raises(DownloadError) as caught:
        await adapter.download(Attachment("document", notes, "notes.md"), BOT_API_LIMIT)
    assert fake_telegram.token.split(":", 1)[1] not in str(caught.value)
    assert not isinstance(caught.value, FileTooLarge)
    assert str(caught.value) == "Telegram did not answer"
    # The failure was Telegram's, not the file's: asking again fetches it.
    assert await adapter.download(Attachment("document", notes), BOT_API_LIMIT) == b"# notes\n"
