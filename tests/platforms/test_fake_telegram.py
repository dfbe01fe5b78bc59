"""The fake Telegram server speaks the Bot API well enough for the real python-telegram-bot:
every test drives PTB over a real socket and checks what PTB accepts, parses and raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dtm
import importlib.util
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from telegram import Bot, LinkPreviewOptions, MessageEntity, ReplyParameters
from telegram.error import BadRequest, Conflict, InvalidToken, NetworkError, RetryAfter, TimedOut
from telegram.ext import Updater

from tests.harness.base import FakeServer
from tests.harness.fake_telegram import DEFAULT_TOKEN, FakeTelegram, Webhook
from tests.harness.fixtures import free_port
from tests.harness.telegram_app import Running, build_app, running_app
from tests.harness.telegram_updates import DEFAULT_USER_ID, utf16_len

USER = DEFAULT_USER_ID
GROUP = -1001234567890
ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(20)


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    server = FakeTelegram()
    async with server:  # stop() always runs, and releases parked polls at once
        yield server


@pytest.fixture
async def polling(fake: FakeTelegram) -> AsyncIterator[Running]:
    async with running_app(fake) as running:
        yield running


@pytest.fixture
async def bot(fake: FakeTelegram) -> AsyncIterator[Bot]:
    """A bare PTB Bot (no polling) for request/response checks."""
    async with Bot(fake.token, base_url=fake.base_url,
                   base_file_url=fake.base_file_url) as bot:
        yield bot


# --- updates in -------------------------------------------------------------------------
async def test_a_pushed_private_text_reaches_a_message_handler(
        fake: FakeTelegram, polling: Running) -> None:
    assert polling.app.bot.username == "threadline_bot"  # from getMe during initialize
    fake.push(fake.updates.private_text("hello there"))
    update = await polling.next()
    assert update.message is not None and update.message.text == "hello there"
    assert update.effective_chat is not None and update.effective_chat.type == "private"
    assert update.effective_user is not None and update.effective_user.id == USER
    assert [c.path.rsplit("/", 1)[-1] for c in fake.calls[:2]] == ["getMe", "deleteWebhook"]


async def test_a_push_wakes_a_parked_long_poll_at_once(
        fake: FakeTelegram, polling: Running) -> None:
    await fake.wait_for_call("getUpdates")
    await asyncio.sleep(0.1)  # the poll is parked now; without a wake-up it returns at 0.5 s
    started = time.monotonic()
    fake.push(fake.updates.private_text("quick"))
    await polling.next()
    assert time.monotonic() - started < 0.25


async def test_updates_arrive_once_in_order_and_are_confirmed(
        fake: FakeTelegram, polling: Running) -> None:
    pushed = [fake.push(fake.updates.private_text(f"m{i}")) for i in range(5)]
    got = [await polling.next() for _ in pushed]
    assert [u.update_id for u in got] == [u["update_id"] for u in pushed]
    assert [u.message.text for u in got if u.message] == ["m0", "m1", "m2", "m3", "m4"]
    for _ in range(20):  # the next poll's offset confirms them
        if not fake.pending_updates:
            break
        await asyncio.sleep(0.05)
    assert fake.pending_updates == []
    with pytest.raises(asyncio.TimeoutError):
        await polling.next(timeout=0.2)
    assert fake.poll_conflicts == 0


async def test_an_offset_confirms_what_came_before_it(fake: FakeTelegram, bot: Bot) -> None:
    ids = [fake.push(fake.updates.private_text(t))["update_id"] for t in ("a", "b", "c")]
    assert [u.update_id for u in await bot.get_updates()] == ids  # offset 0 confirms nothing
    assert [u.update_id for u in await bot.get_updates(offset=ids[1])] == ids[1:]
    assert [u.update_id for u in await bot.get_updates(offset=-1)] == ids[2:]
    assert await bot.get_updates(offset=ids[2] + 1) == ()
    assert fake.pending_updates == []


async def test_group_updates_carry_utf16_entities_that_ptb_resolves(
        fake: FakeTelegram, polling: Running) -> None:
    sent = await polling.app.bot.send_message(GROUP, "earlier answer")
    text = "🙂 hey @threadline_bot, /new@threadline_bot please"
    fake.push(fake.updates.group_text(text, reply_to_bot=True, thread_id=7, is_forum=True))
    message = (await polling.next()).message
    assert message is not None
    assert set(message.parse_entities(["mention"]).values()) == {"@threadline_bot"}
    assert set(message.parse_entities(["bot_command"]).values()) == {"/new@threadline_bot"}
    assert message.reply_to_message is not None
    assert message.reply_to_message.message_id == sent.message_id
    assert message.reply_to_message.from_user is not None
    assert message.reply_to_message.from_user.id == fake.bot_id
    assert (message.message_thread_id, message.is_topic_message) == (7, True)
    assert message.chat.type == "supergroup" and message.chat.is_forum


async def test_entity_helpers_count_utf16_units(fake: FakeTelegram, polling: Running) -> None:
    text = "𝄞🙂 /start then @threadline_bot"
    entities = [fake.updates.command(text, "start"), fake.updates.mention(text)]
    assert entities[0]["offset"] == 5 and entities[1]["offset"] == 17
    fake.push(fake.updates.group_text(text, entities=entities))
    message = (await polling.next()).message
    assert message is not None
    assert list(message.parse_entities().values()) == ["/start", "@threadline_bot"]


@pytest.mark.parametrize(("build", "probe", "expected"), [
    (lambda u: u.photo("look @threadline_bot"),
     lambda m: (m.photo[-1].width, list(m.parse_caption_entities().values())),
     (1280, ["@threadline_bot"])),
    (lambda u: u.photo(), lambda m: (len(m.photo), m.caption), (3, None)),
    (lambda u: u.sticker("🦊"), lambda m: m.sticker.emoji, "🦊"),
    (lambda u: u.voice(4), lambda m: m.voice.mime_type, "audio/ogg"),
    (lambda u: u.private_text("in a topic", thread_id=3),
     lambda m: (m.message_thread_id, m.is_topic_message, m.chat.type), (3, True, "private")),
], ids=["photo-caption", "photo", "sticker", "voice", "private-thread"])
async def test_every_builder_makes_an_update_ptb_parses(
        fake: FakeTelegram, polling: Running, build: Any, probe: Any, expected: Any) -> None:
    fake.push(build(fake.updates))
    assert probe((await polling.next()).message) == expected


async def test_an_edit_keeps_the_message_id(fake: FakeTelegram, polling: Running) -> None:
    original = fake.push(fake.updates.private_text("frist"))
    fake.push(fake.updates.edited_text(original, "first"))
    first, edit = await polling.next(), await polling.next()
    assert edit.edited_message is not None and edit.edited_message.text == "first"
    assert first.message is not None
    assert edit.edited_message.message_id == first.message.message_id
    assert edit.edited_message.edit_date is not None


# --- messages out -----------------------------------------------------------------------
async def test_send_message_with_utf16_entities_is_recorded(
        fake: FakeTelegram, bot: Bot) -> None:
    asked = fake.updates.private_text("what?")["message"]
    text = "🙂 bold and @threadline_bot"
    bold = MessageEntity(MessageEntity.BOLD, offset=3, length=4)  # the emoji is 2 units
    message = await bot.send_message(
        USER, text, entities=[bold], reply_parameters=ReplyParameters(asked["message_id"]),
        link_preview_options=LinkPreviewOptions(is_disabled=True))
    assert message.parse_entity(message.entities[0]) == "bold"
    assert message.reply_to_message and message.reply_to_message.text == "what?"
    [sent] = fake.messages(USER)
    assert (sent.message_id, sent.text, sent.reply_to) == (message.message_id, text,
                                                           asked["message_id"])
    assert sent.entities == [{"type": "bold", "offset": 3, "length": 4}]
    assert sent.link_preview == {"is_disabled": True}
    assert fake.calls_to("sendMessage")[0].form["chat_id"] == str(USER)  # JSON-encoded int


async def test_a_reply_to_an_unknown_message_needs_permission(
        fake: FakeTelegram, bot: Bot) -> None:
    with pytest.raises(BadRequest, match="Message to be replied not found"):
        await bot.send_message(USER, "re?", reply_parameters=ReplyParameters(424242))
    await bot.send_message(USER, "re!", reply_parameters=ReplyParameters(
        424242, allow_sending_without_reply=True))
    assert [(m.text, m.reply_to) for m in fake.messages(USER)] == [("re!", None)]


@pytest.mark.parametrize(("text", "entity", "expected"), [
    # Offsets counted in code points: the bold span ends inside the emoji.
    ("Hi 🙂", {"type": "bold", "offset": 3, "length": 1}, "can't parse entities"),
    # Offsets counted in UTF-8 bytes: the span runs past the end of the text.
    ("🙂 hi", {"type": "italic", "offset": 5, "length": 2}, "can't parse entities"),
    ("plain", {"type": "sparkle", "offset": 0, "length": 5}, "can't parse entities"),
    ("🙂" * 2049, None, "message is too long"),  # 2049 characters but 4098 UTF-16 units
    ("  \n", None, "message text is empty"),
])
async def test_telegram_rules_reject_bad_text_and_entities(
        fake: FakeTelegram, bot: Bot, text: str, entity: dict[str, Any] | None,
        expected: str) -> None:
    entities = [MessageEntity(**entity)] if entity else None
    with pytest.raises(BadRequest) as caught:
        await bot.send_message(USER, text, entities=entities)
    # PTB strips "Bad Request: " and capitalizes the rest.
    assert expected.capitalize() in str(caught.value)
    assert fake.messages(USER) == []


async def test_the_longest_allowed_text_counts_utf16_units(
        fake: FakeTelegram, bot: Bot) -> None:
    await bot.send_message(USER, "🙂" * 2048)
    assert utf16_len(fake.messages(USER)[0].text) == 4096


async def test_rejected_entities_then_a_plain_resend_goes_through(
        fake: FakeTelegram, bot: Bot) -> None:
    fake.reject_entities_next()
    await bot.send_message(USER, "plain text does not use up the rejection")
    bold = MessageEntity(MessageEntity.BOLD, offset=3, length=2)
    with pytest.raises(BadRequest, match="byte offset 5"):
        await bot.send_message(USER, "🙂 hi", entities=[bold])
    await bot.send_message(USER, "🙂 hi")
    assert [(m.text, m.entities) for m in fake.messages(USER)][1:] == [("🙂 hi", [])]


async def test_rate_limit_raises_retry_after_with_the_fraction(
        fake: FakeTelegram, bot: Bot, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")  # else PTB warns on every retry_after read
    fake.rate_limit_next(0.25, times=2)
    for _ in range(2):
        with pytest.raises(RetryAfter) as caught:
            await bot.send_message(USER, "hi")
        assert caught.value.retry_after == dtm.timedelta(seconds=0.25)
    await bot.send_chat_action(USER, "typing")  # other methods are not limited
    await bot.send_message(USER, "hi")
    assert len(fake.messages(USER)) == 1


async def test_a_request_cut_off_during_a_delay_is_not_accepted(
        fake: FakeTelegram, bot: Bot) -> None:
    fake.delay_next(0.4)
    with pytest.raises(TimedOut):
        await bot.send_message(USER, "slow", read_timeout=0.1)
    await asyncio.sleep(0.45)  # the fake finishes its delay and finds the client gone
    assert fake.messages(USER) == []
    await bot.send_message(USER, "again")
    assert [m.text for m in fake.messages(USER)] == ["again"]


async def test_base_injections_skip_polling(fake: FakeTelegram, polling: Running) -> None:
    await fake.wait_for_call("getUpdates")
    fake.fail_next(500)
    await fake.wait_for_call("getUpdates", len(fake.calls_to("getUpdates")) + 1)
    with pytest.raises(NetworkError, match="injected failure 500"):
        await polling.app.bot.send_message(USER, "hi")  # the poll did not take the failure
    assert fake.messages(USER) == []


async def test_a_method_failure_hits_only_that_method(fake: FakeTelegram, bot: Bot) -> None:
    fake.fail_method_next("getUpdates", 502)
    await bot.send_message(USER, "unaffected")
    with pytest.raises(NetworkError, match="Bad Gateway"):
        await bot.get_updates()
    assert await bot.get_updates() == ()


async def test_edits_follow_telegram_rules(fake: FakeTelegram, bot: Bot) -> None:
    sent = await bot.send_message(USER, "draft")
    edited = await bot.edit_message_text("final", USER, sent.message_id)
    assert not isinstance(edited, bool) and edited.edit_date is not None
    assert fake.messages(USER)[0].text == "final"
    with pytest.raises(BadRequest, match="not modified"):
        await bot.edit_message_text("final", USER, sent.message_id)
    with pytest.raises(BadRequest, match="not found"):
        await bot.edit_message_text("x", USER, 999_999)
    with pytest.raises(BadRequest, match="parse entities"):
        await bot.edit_message_text("🙂", USER, sent.message_id,
                                    entities=[MessageEntity("bold", 0, 1)])
    assert [m.text for m in fake.edits(USER)] == ["final"]


async def test_chat_actions_commands_and_members(fake: FakeTelegram, bot: Bot) -> None:
    await bot.send_chat_action(GROUP, "typing", message_thread_id=7)
    [action] = fake.chat_actions(GROUP)
    assert (action.action, action.thread_id) == ("typing", 7)
    with pytest.raises(BadRequest):
        await bot.send_chat_action(GROUP, "dancing")
    await bot.set_my_commands([("new", "Start over"), ("help", "What I can do")])
    assert [c["command"] for c in fake.commands] == ["new", "help"]
    assert [c.command for c in await bot.get_my_commands()] == ["new", "help"]
    with pytest.raises(BadRequest):
        await bot.set_my_commands([("New", "capitals are not allowed")])
    fake.admins[GROUP].add(11)
    fake.owners[GROUP] = 12
    statuses = [(await bot.get_chat_member(GROUP, u)).status for u in (11, 12, 13)]
    assert statuses == ["administrator", "creator", "member"]
    fake.fail_chat_member_next(400)
    with pytest.raises(BadRequest, match="Chat not found"):
        await bot.get_chat_member(GROUP, 11)
    fake.fail_chat_member_next(500)
    with pytest.raises(NetworkError):
        await bot.get_chat_member(GROUP, 11)


async def test_a_wrong_token_is_unauthorized(fake: FakeTelegram) -> None:
    app = build_app(fake, token="987654321:AAWrongTokenWrongTokenWrongToken000")
    with pytest.raises(InvalidToken):
        await app.initialize()
    await app.shutdown()


# --- polling edge cases -----------------------------------------------------------------
async def test_stop_releases_a_parked_poll_at_once(fake: FakeTelegram, bot: Bot) -> None:
    poll = asyncio.create_task(bot.get_updates(timeout=30))
    await fake.wait_for_call("getUpdates")
    started = time.monotonic()
    await fake.stop()
    with contextlib.suppress(NetworkError):
        assert await poll == ()
    assert time.monotonic() - started < 0.3


async def test_a_second_poller_terminates_the_first(fake: FakeTelegram, bot: Bot) -> None:
    first = asyncio.create_task(bot.get_updates(timeout=5))
    await fake.wait_for_call("getUpdates")
    # A second Bot: one Bot's getUpdates pool holds one connection, so it cannot overlap.
    async with Bot(fake.token, base_url=fake.base_url) as second:
        await second.get_updates(timeout=0)
    with pytest.raises(Conflict, match="terminated by other getUpdates"):
        await first
    assert fake.poll_conflicts == 1


# --- webhooks ---------------------------------------------------------------------------
async def test_webhook_settings_are_recorded_and_block_polling(
        fake: FakeTelegram, bot: Bot) -> None:
    with pytest.raises(BadRequest, match="https url must be provided"):
        await bot.set_webhook("http://127.0.0.1:9/hook")
    await bot.set_webhook("https://bot.example/hook", secret_token="s3cret-_")
    assert fake.webhook == Webhook("https://bot.example/hook", secret_token="s3cret-_")
    assert (await bot.get_webhook_info()).url == "https://bot.example/hook"
    with pytest.raises(Conflict, match="webhook is active"):
        await bot.get_updates()
    await bot.delete_webhook()
    assert fake.webhook.url == "" and await bot.get_updates() == ()


async def test_post_update_sends_the_secret_header(fake: FakeTelegram) -> None:
    class Receiver(FakeServer):
        def routes(self) -> list[web.RouteDef]:
            return [web.post("/hook", self.ok)]

        async def ok(self, request: web.Request) -> web.Response:
            return web.Response(text="ok")

    async with Receiver() as receiver:
        update = fake.updates.private_text("via webhook")
        assert await fake.post_update(f"{receiver.url}/hook", update, "s3cret") == 200
        assert await fake.post_update(f"{receiver.url}/hook", update) == 200
    with_secret, without = receiver.calls
    assert with_secret.headers["x-telegram-bot-api-secret-token"] == "s3cret"
    assert "x-telegram-bot-api-secret-token" not in without.headers
    assert with_secret.json == update


@pytest.mark.skipif(importlib.util.find_spec("tornado") is None,
                    reason="PTB's webhook server needs its `webhooks` extra (tornado), "
                           "which is not installed in this venv")
async def test_ptb_webhook_checks_the_secret(fake: FakeTelegram) -> None:
    port = free_port()

    def start(updater: Updater) -> Awaitable[object]:
        return updater.start_webhook(listen="127.0.0.1", port=port, url_path="hook",
                                     webhook_url="https://bot.example/hook",
                                     secret_token="right-secret")

    async with running_app(fake, start) as running:
        assert fake.webhook.secret_token == "right-secret"
        url = f"http://127.0.0.1:{port}/hook"
        for secret in ("wrong-secret", None):
            assert await fake.post_update(url, fake.updates.private_text("x"), secret) == 403
        update = fake.updates.private_text("through the hook")
        assert await fake.post_update(url, update, "right-secret") == 200
        got = await running.next()
        assert got.message is not None and got.message.text == "through the hook"
        assert running.seen.empty()  # the refused updates were never processed


# --- script mode ------------------------------------------------------------------------
async def test_runs_as_a_script_that_ptb_can_use() -> None:
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.harness.fake_telegram", "--port", str(port),
        stdout=subprocess.PIPE, cwd=ROOT)
    try:
        line = await asyncio.wait_for(process.stdout.readline(), 10)  # type: ignore[union-attr]
        assert f"127.0.0.1:{port}" in line.decode()
        async with Bot(DEFAULT_TOKEN, base_url=f"http://127.0.0.1:{port}/bot") as script_bot:
            assert script_bot.username == "threadline_bot"
            await script_bot.send_message(USER, "from a subprocess")
    finally:
        process.terminate()
        await process.wait()
