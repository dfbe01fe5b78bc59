"""Long polling through the real Telegram adapter (python-telegram-bot against the fake Bot
API): an unreadable update is skipped, never fatal; an update is confirmed to Telegram only
once its handler returned; outages are waited out with growing pauses; stop and start."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from platforms.base import InboundMessage
from platforms.telegram.adapter import TelegramAdapter, TelegramSettings
from platforms.telegram.polling import Trouble
from tests.harness.fake_telegram import FakeTelegram
from tests.harness.fixtures import free_port
from tests.harness.waiting import eventually

pytestmark = pytest.mark.timeout(30)
USER = 5550031
SECRET = "s3cret-token"


class Gateway:
    """Stands in for the gateway's handler: keeps each message; can hold one back (as a
    slow ledger write would) or fail on one."""

    def __init__(self) -> None:
        self.arrived: asyncio.Queue[InboundMessage] = asyncio.Queue()
        self.entered: list[str] = []
        self.hold: dict[str, asyncio.Event] = {}
        self.fail_on: set[str] = set()

    async def __call__(self, msg: InboundMessage) -> None:
        self.entered.append(msg.text)
        if msg.text in self.hold:
            await self.hold[msg.text].wait()
        if msg.text in self.fail_on:
            raise RuntimeError("the handler broke")
        self.arrived.put_nowait(msg)

    async def next(self, timeout: float = 5.0) -> InboundMessage:  # noqa: ASYNC109
        async with asyncio.timeout(timeout):
            return await self.arrived.get()


@pytest.fixture
async def polling(fake_telegram: FakeTelegram
                  ) -> AsyncIterator[tuple[TelegramAdapter, Gateway]]:
    gateway = Gateway()
    adapter = TelegramAdapter(gateway, TelegramSettings(
        token=fake_telegram.token, base_url=fake_telegram.base_url,
        base_file_url=fake_telegram.base_file_url))  # the 10 s long poll of production
    await adapter.initialize()
    await adapter.start()
    try:
        yield adapter, gateway
    finally:
        await adapter.stop()
        await adapter.shutdown()


def polls(fake: FakeTelegram) -> int:
    return len(fake.calls_to("/getUpdates"))


def confirmed(fake: FakeTelegram, update: dict[str, Any]) -> bool:
    """Whether a getUpdates call has confirmed the update (an offset past its id)."""
    return max(fake.poll_offsets(), default=0) > update["update_id"]


def lines_about(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if text in r.getMessage()]


async def test_an_unreadable_update_is_skipped_once_and_the_next_one_answered(
        fake_telegram: FakeTelegram, polling: tuple[TelegramAdapter, Gateway],
        caplog: pytest.LogCaptureFixture) -> None:
    adapter, gateway = polling
    await fake_telegram.wait_for_call("/getUpdates")  # polling, nothing pending
    bad = fake_telegram.push(fake_telegram.updates.unparseable("my password is hunter2",
                                                               USER))
    pushed = time.monotonic()
    good = fake_telegram.push(fake_telegram.updates.private_text("hello after it", USER))
    msg = await gateway.next(timeout=2)
    assert msg.text == "hello after it" and time.monotonic() - pushed < 2
    await eventually(lambda: confirmed(fake_telegram, good), timeout=2)
    assert fake_telegram.pending_updates == []  # the unreadable one is confirmed too
    [line] = lines_about(caplog, str(bad["update_id"]))
    assert line.levelno == logging.WARNING and "bytes" in line.getMessage()
    assert "hunter2" not in caplog.text
    assert adapter.counters["unparseable_updates"] == 1
    before = polls(fake_telegram)
    await asyncio.sleep(1.5)
    assert polls(fake_telegram) - before <= 5  # long polls parked by the fake, no busy loop
    assert len(lines_about(caplog, str(bad["update_id"]))) == 1


async def test_an_update_is_confirmed_only_once_its_handler_returned(
        fake_telegram: FakeTelegram, polling: tuple[TelegramAdapter, Gateway]) -> None:
    _, gateway = polling
    gateway.hold["slow to store"] = stored = asyncio.Event()
    slow = fake_telegram.push(fake_telegram.updates.private_text("slow to store", USER))
    await eventually(lambda: gateway.entered == ["slow to store"], timeout=2)
    await asyncio.sleep(1.0)  # time for any number of polls
    # A crash now must not lose it: Telegram still holds it and would send it again.
    assert not confirmed(fake_telegram, slow)
    assert slow in fake_telegram.pending_updates
    stored.set()
    assert (await gateway.next()).text == "slow to store"
    await eventually(lambda: confirmed(fake_telegram, slow), timeout=2)
    assert fake_telegram.pending_updates == []


async def test_a_handler_that_raises_skips_that_update_only(
        fake_telegram: FakeTelegram, polling: tuple[TelegramAdapter, Gateway],
        caplog: pytest.LogCaptureFixture) -> None:
    adapter, gateway = polling
    gateway.fail_on.add("this one breaks")
    broken = fake_telegram.push(fake_telegram.updates.private_text("this one breaks", USER))
    after = fake_telegram.push(fake_telegram.updates.private_text("this one works", USER))
    assert (await gateway.next()).text == "this one works"
    await eventually(lambda: confirmed(fake_telegram, after), timeout=2)
    [line] = lines_about(caplog, str(broken["update_id"]))
    assert line.levelno == logging.WARNING and "RuntimeError" in line.getMessage()
    assert "this one breaks" not in line.getMessage()
    assert adapter.counters["failed_updates"] == 1


async def test_an_outage_is_waited_out_with_growing_pauses_and_nothing_is_lost(
        fake_telegram: FakeTelegram, polling: tuple[TelegramAdapter, Gateway],
        caplog: pytest.LogCaptureFixture) -> None:
    _, gateway = polling
    caplog.set_level(logging.INFO, logger="platforms.telegram")
    await fake_telegram.wait_for_call("/getUpdates")
    fake_telegram.fail_method_for("getUpdates", 502, seconds=3.0)
    before = polls(fake_telegram)
    texts = [f"sent during the outage {n}" for n in range(5)]
    for text in texts:
        fake_telegram.push(fake_telegram.updates.private_text(text, USER))
        await asyncio.sleep(0.4)
    got = [(await gateway.next(timeout=10)).text for _ in texts]
    assert got == texts
    # Pauses of 0.5, 1 and 2 s: four calls over the 3 s (a steady 0.5 s would make seven),
    # not one per round trip.
    assert polls(fake_telegram) - before <= 5, polls(fake_telegram) - before
    [failed] = [r for r in caplog.records if r.levelno >= logging.WARNING]  # one line
    assert "getUpdates failed: Bad Gateway" in failed.getMessage()
    assert lines_about(caplog, "getUpdates works again")


async def test_flood_control_on_get_updates_waits_what_telegram_asked(
        fake_telegram: FakeTelegram, polling: tuple[TelegramAdapter, Gateway]) -> None:
    _, gateway = polling
    await fake_telegram.wait_for_call("/getUpdates")
    fake_telegram.rate_limit_next(2.0, method="getUpdates")
    count = polls(fake_telegram)
    await fake_telegram.wait_for_call("/getUpdates", count + 1)  # answered 429
    limited = time.monotonic()
    fake_telegram.push(fake_telegram.updates.private_text("after the flood", USER))
    assert (await gateway.next(timeout=5)).text == "after the flood"
    assert time.monotonic() - limited >= 1.8


async def test_a_revoked_token_stops_polling_with_one_error(
        fake_telegram: FakeTelegram, polling: tuple[TelegramAdapter, Gateway],
        caplog: pytest.LogCaptureFixture) -> None:
    await fake_telegram.wait_for_call("/getUpdates")
    fake_telegram.fail_method_for("getUpdates", 401, seconds=60)
    await eventually(lambda: lines_about(caplog, "refused the bot token"), timeout=3)
    before = polls(fake_telegram)
    await asyncio.sleep(1.0)
    assert polls(fake_telegram) == before
    [line] = lines_about(caplog, "refused the bot token")
    assert line.levelno == logging.ERROR


async def test_stop_cuts_a_parked_poll_short_and_start_polls_again(
        fake_telegram: FakeTelegram, polling: tuple[TelegramAdapter, Gateway]) -> None:
    adapter, gateway = polling
    fake_telegram.queue.poll_cap = 30.0  # a poll parks as long as the adapter asks
    first = fake_telegram.push(fake_telegram.updates.private_text("before the stop", USER))
    assert (await gateway.next()).text == "before the stop"
    await fake_telegram.wait_for_call("/getUpdates", polls(fake_telegram) + 1)  # parked
    stopping = time.monotonic()
    await adapter.stop()
    assert time.monotonic() - stopping < 1.0
    assert confirmed(fake_telegram, first)
    await adapter.start()
    fake_telegram.push(fake_telegram.updates.private_text("after the start", USER))
    assert (await gateway.next()).text == "after the start"


async def test_stopping_while_a_message_is_stored_finishes_and_confirms_it(
        fake_telegram: FakeTelegram, polling: tuple[TelegramAdapter, Gateway]) -> None:
    adapter, gateway = polling
    gateway.hold["being stored"] = stored = asyncio.Event()
    held = fake_telegram.push(fake_telegram.updates.private_text("being stored", USER))
    later = fake_telegram.push(fake_telegram.updates.private_text("not yet handed", USER))
    await eventually(lambda: gateway.entered == ["being stored"], timeout=2)
    stopping = asyncio.create_task(adapter.stop())
    await asyncio.sleep(0.3)
    assert not stopping.done()  # the message being stored is not cut off
    stored.set()
    await stopping
    assert gateway.entered == ["being stored"]  # the rest of the batch waits for next time
    assert confirmed(fake_telegram, held) and fake_telegram.pending_updates == [later]


async def test_a_webhook_drops_a_body_that_is_not_an_update_with_200(
        fake_telegram: FakeTelegram, caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    gateway = Gateway()
    adapter = TelegramAdapter(gateway, TelegramSettings(
        token=fake_telegram.token, base_url=fake_telegram.base_url,
        base_file_url=fake_telegram.base_file_url, mode="webhook",
        webhook_url="https://bot.example.com/tg", listen="127.0.0.1", port=port,
        secret_token=SECRET))
    url = f"http://127.0.0.1:{port}/tg"
    await adapter.initialize()
    await adapter.start()
    try:
        statuses = [await fake_telegram.post_update(url, {"hello": 1}, SECRET),
                    await _post_bytes(url, b"[1, 2]"),
                    await _post_bytes(url, b"\xffnot json at all"),
                    await fake_telegram.post_update(
                        url, fake_telegram.updates.unparseable("secret words", USER), SECRET),
                    await fake_telegram.post_update(
                        url, fake_telegram.updates.private_text("a real one", USER), SECRET)]
        assert (await gateway.next()).text == "a real one"
    finally:
        await adapter.stop()
        await adapter.shutdown()
    assert statuses == [200] * 5
    assert len(lines_about(caplog, "skipped")) == 4
    assert "Traceback" not in caplog.text and "secret words" not in caplog.text
    assert adapter.counters["unparseable_updates"] == 4


async def _post_bytes(url: str, body: bytes) -> int:
    async with aiohttp.ClientSession() as session, session.post(
            url, data=body, headers={"X-Telegram-Bot-Api-Secret-Token": SECRET,
                                     "Content-Type": "application/json"}) as response:
        return response.status


def test_a_failure_that_goes_on_is_one_line_then_a_summary_a_minute(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="platforms.telegram")
    now = [0.0]
    trouble = Trouble(clock=lambda: now[0])
    for _ in range(121):  # a failed call every second for two minutes
        trouble.seen("NetworkError", "Bad Gateway", 1.0)
        now[0] += 1.0
    trouble.over()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4, lines  # the start, two summaries, the end
    assert "getUpdates failed: Bad Gateway" in lines[0]
    assert "(60 times since the last line)" in lines[1]
    assert "works again after 121 failed calls" in lines[3]
