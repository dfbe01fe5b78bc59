"""sendMessageDraft, deleteMessage(s) and the per-chat timeline of the fake Telegram server,
driven by the real python-telegram-bot over a socket."""

from __future__ import annotations

import datetime as dtm
from collections.abc import AsyncIterator

import pytest
from telegram import Bot, MessageEntity, ReplyParameters
from telegram.error import BadRequest, NetworkError, RetryAfter

from tests.harness.fake_telegram import FakeTelegram
from tests.harness.telegram_updates import DEFAULT_USER_ID

USER = DEFAULT_USER_ID
GROUP = -1001234567890
pytestmark = pytest.mark.timeout(20)


@pytest.fixture(autouse=True)
def timedelta_retry_after(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")  # else PTB warns on every retry_after read


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


@pytest.fixture
async def bot(fake: FakeTelegram) -> AsyncIterator[Bot]:
    async with Bot(fake.token, base_url=fake.base_url,
                   base_file_url=fake.base_file_url) as bot:
        yield bot


# --- sendMessageDraft -------------------------------------------------------------------
async def test_a_draft_is_recorded_and_is_not_a_message(fake: FakeTelegram, bot: Bot) -> None:
    assert await bot.send_message_draft(USER, 7) is True  # no text: "Thinking..."
    bold = MessageEntity(MessageEntity.BOLD, offset=3, length=4)  # the emoji is 2 units
    assert await bot.send_message_draft(USER, 7, "🙂 bold so far", entities=[bold],
                                        message_thread_id=3) is True
    first, second = await fake.wait_for_drafts(USER, 2, timeout=1)
    assert (first.draft_id, first.text, first.entities) == (7, "", [])
    assert (second.chat_id, second.text, second.thread_id) == (USER, "🙂 bold so far", 3)
    assert second.entities == [{"type": "bold", "offset": 3, "length": 4}]
    assert first.at <= second.at
    assert fake.messages(USER) == [] and fake.messages() == []
    with pytest.raises(AssertionError, match="2 draft"):
        await fake.wait_for_drafts(USER, 3, timeout=0.05)


async def test_a_draft_outside_a_private_chat_is_refused(fake: FakeTelegram, bot: Bot) -> None:
    with pytest.raises(BadRequest, match="(?i)textdraft_peer_invalid"):
        await bot.send_message_draft(GROUP, 1, "hello group")
    assert fake.drafts(GROUP) == [] and fake.timeline(GROUP) == []


async def test_draft_id_zero_is_refused(fake: FakeTelegram, bot: Bot) -> None:
    with pytest.raises(BadRequest, match="(?i)draft_id must be non-zero"):
        await bot.send_message_draft(USER, 0, "hi")
    assert fake.drafts(USER) == []


async def test_a_draft_follows_the_text_rules(fake: FakeTelegram, bot: Bot) -> None:
    with pytest.raises(BadRequest, match="(?i)message is too long"):
        await bot.send_message_draft(USER, 1, "🙂" * 2049)  # 4098 UTF-16 units
    with pytest.raises(BadRequest, match="(?i)can't parse entities"):
        await bot.send_message_draft(USER, 1, "Hi 🙂",
                                     entities=[MessageEntity("bold", 3, 1)])  # splits 🙂
    fake.reject_entities_next()
    with pytest.raises(BadRequest, match="byte offset 0"):
        await bot.send_message_draft(USER, 1, "**half", parse_mode="MarkdownV2")
    await bot.send_message_draft(USER, 1, "🙂" * 2048)
    assert [len(d.text) for d in fake.drafts(USER)] == [2048]


async def test_an_entity_rejection_can_spare_drafts(fake: FakeTelegram, bot: Bot) -> None:
    fake.reject_entities_next(method="sendMessage")
    await bot.send_message_draft(USER, 1, "**bold so far**", parse_mode="Markdown")
    with pytest.raises(BadRequest, match="(?i)can't parse entities"):
        await bot.send_message(USER, "**bold**", parse_mode="Markdown")
    await bot.send_message(USER, "**bold**", parse_mode="Markdown")
    assert len(fake.drafts(USER)) == len(fake.messages(USER)) == 1


async def test_injected_failures_hit_drafts(fake: FakeTelegram, bot: Bot) -> None:
    fake.rate_limit_next(0.25, method="sendMessageDraft")
    await bot.send_message(USER, "sendMessage is not limited")
    with pytest.raises(RetryAfter) as caught:
        await bot.send_message_draft(USER, 5, "partial")
    assert caught.value.retry_after == dtm.timedelta(seconds=0.25)
    fake.fail_method_next("sendMessageDraft", 502)
    with pytest.raises(NetworkError, match="Bad Gateway"):
        await bot.send_message_draft(USER, 5, "partial")
    await bot.send_message_draft(USER, 5, "partial")
    assert [d.text for d in fake.drafts(USER)] == ["partial"]


# --- deleteMessage(s) -------------------------------------------------------------------
async def test_delete_message_removes_it_once(fake: FakeTelegram, bot: Bot) -> None:
    keep = await bot.send_message(USER, "keep")
    gone = await bot.send_message(USER, "gone")
    assert await bot.delete_message(USER, gone.message_id) is True
    assert [m.text for m in fake.messages(USER)] == ["keep"]
    assert fake.deleted(USER) == [gone.message_id]
    with pytest.raises(BadRequest, match="(?i)message to delete not found"):
        await bot.delete_message(USER, gone.message_id)
    with pytest.raises(BadRequest, match="(?i)message to delete not found"):
        await bot.delete_message(USER, 999_999)
    with pytest.raises(BadRequest, match="(?i)message to edit not found"):
        await bot.edit_message_text("back?", USER, gone.message_id)
    with pytest.raises(BadRequest, match="(?i)message to be replied not found"):
        await bot.send_message(USER, "re", reply_parameters=ReplyParameters(gone.message_id))
    assert fake.deleted(USER) == [gone.message_id]
    assert [m.message_id for m in fake.messages(USER)] == [keep.message_id]


async def test_delete_messages_skips_unknown_ids(fake: FakeTelegram, bot: Bot) -> None:
    sent = [await bot.send_message(USER, f"m{i}") for i in range(3)]
    pushed = fake.push(fake.updates.private_text("delete me"))["message"]["message_id"]
    ids = [sent[0].message_id, 999_999, sent[2].message_id, pushed]
    assert await bot.delete_messages(USER, ids) is True
    assert [m.text for m in fake.messages(USER)] == ["m1"]
    assert fake.deleted(USER) == [sent[0].message_id, sent[2].message_id, pushed]
    with pytest.raises(BadRequest):
        await bot.delete_messages(USER, [])


# --- timeline ---------------------------------------------------------------------------
async def test_the_timeline_lists_accepted_calls_in_order(
        fake: FakeTelegram, bot: Bot) -> None:
    await bot.send_chat_action(USER, "typing")
    await bot.send_message_draft(USER, 9, "part")
    fake.rate_limit_next(0.1, method="sendMessageDraft")
    with pytest.raises(RetryAfter):
        await bot.send_message_draft(USER, 9, "refused")
    await bot.send_message_draft(USER, 9, "partial")
    sent = await bot.send_message(USER, "partial answer")
    await bot.edit_message_text("partial answer, done", USER, sent.message_id)
    await bot.delete_message(USER, sent.message_id)
    await bot.send_message(GROUP, "elsewhere")
    timeline = fake.timeline(USER)
    assert [method for method, _ in timeline] == [
        "sendChatAction", "sendMessageDraft", "sendMessageDraft", "sendMessage",
        "editMessageText", "deleteMessage"]
    times = [call.at for call in timeline]
    assert times == sorted(times)
    assert timeline[1] == ("sendMessageDraft", fake.drafts(USER)[0].at)
    assert timeline[4].at == fake.edits(USER)[0].edited_at
    assert [call.method for call in fake.timeline(GROUP)] == ["sendMessage"]
