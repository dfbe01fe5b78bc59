"""A turn when the database's disk fills: the chat waits in place without asking the model
again, and once space is freed the message is answered once, with no apology; a batch
whose store keeps failing it waits longer each time."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from gateway.service.app import Gateway
from gateway.turns import outages
from gateway.turns.jobs import MessageJob, Running
from gateway.turns.outages import Outages
from gateway.turns.worker import GENERIC_FAILURE
from platforms.base import ChatRef
from storage.errors import StoreUnavailable
from storage.models import InboundRecord
from tests.harness.gateway import close, config_for, started_gateway
from tests.harness.platform import RecordingPlatform
from tests.harness.small_disk import SmallDisk, small_disk
from tests.harness.waiting import eventually

CHAT = "test:1"


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    with small_disk(tmp_path / "data", size_mb=4) as mounted:
        yield mounted


@pytest.fixture
async def gateway(tmp_path: Path, disk: SmallDisk, fake_openai) -> AsyncIterator[
        tuple[Gateway, RecordingPlatform]]:
    config = config_for(tmp_path, fake_openai.base_url,
                        storage={"path": str(disk.path / "threadline.db")})
    platform = RecordingPlatform()
    started = await started_gateway(config, [platform])
    try:
        yield started, platform
    finally:
        disk.free()  # a clean stop records itself in the database
        await close(started)


def model_calls(fake_openai) -> int:
    return len(fake_openai.calls_to("/chat/completions"))


async def test_a_reply_that_cannot_be_stored_waits_for_space_then_comes_once(
        gateway, disk: SmallDisk, fake_openai, caplog: pytest.LogCaptureFixture) -> None:
    _, platform = gateway
    await platform.say("hello")
    await platform.wait_delivered(1)
    fake_openai.answer_delay_s = 0.5  # the disk fills while the model writes its answer
    caplog.set_level(logging.WARNING, logger="gateway")
    note = platform.attach("document", b"The spare key is under the BLUE_POT.\n", "note.txt")
    await platform.say("where is the key?", attachments=(note,))
    await fake_openai.wait_for_call("/chat/completions", count=2)
    disk.fill()
    await eventually(lambda: "is full" in caplog.text, timeout=5, what=lambda: caplog.text)
    assert "the disk holding" in caplog.text  # told as a full disk, not as a broken store
    fake_openai.answer_delay_s = 0.0
    await asyncio.sleep(2.0)  # two checks of the store meanwhile; each finds it full
    # Nothing is done again before the store takes writes: no download, no model call.
    assert platform.downloads == [note.ref]
    assert model_calls(fake_openai) == 2
    assert len(platform.texts(CHAT)) == 1  # and nothing is said meanwhile
    disk.free()
    await platform.wait_delivered(2, timeout=15)
    await asyncio.sleep(0.5)  # room for a second answer or a late apology
    assert model_calls(fake_openai) == 3  # the lost turn, once more
    texts = platform.texts(CHAT)
    assert len(texts) == 2 and GENERIC_FAILURE not in texts, texts
    assert texts[1].startswith("echo: [file: note.txt") and "BLUE_POT" in texts[1]


class FillingPlatform(RecordingPlatform):
    """A platform that takes a reply just as the disk fills: the reply is out, and the
    ledger has yet to learn it."""

    def __init__(self, disk: SmallDisk) -> None:
        super().__init__()
        self.disk = disk
        self.fill_on_send = False

    async def record_send(self, chat: ChatRef, text: str, reply_to: str | None) -> str:
        sent = await super().record_send(chat, text, reply_to)
        if self.fill_on_send:
            self.fill_on_send = False
            self.disk.fill()
        return sent


async def test_a_reply_sent_as_the_disk_fills_is_recorded_later_and_never_sent_again(
        tmp_path: Path, disk: SmallDisk, fake_openai,
        caplog: pytest.LogCaptureFixture) -> None:
    config = config_for(tmp_path, fake_openai.base_url,
                        storage={"path": str(disk.path / "threadline.db")})
    platform = FillingPlatform(disk)
    started = await started_gateway(config, [platform])
    try:
        await platform.say("hello")
        await platform.wait_delivered(1)
        caplog.set_level(logging.WARNING, logger="gateway")
        platform.fill_on_send = True
        await platform.say("and now?")
        await eventually(lambda: caplog.records, timeout=5)  # the ledger write failed
        await asyncio.sleep(1.0)
        disk.free()
        await platform.wait_delivered(2, timeout=15)
        await asyncio.sleep(1.0)  # room for the same reply a second time
    finally:
        disk.free()
        await close(started)
    assert platform.texts(CHAT) == ["echo: hello", "echo: and now?"]
    assert model_calls(fake_openai) == 2


# --- the waits of one batch, against a store that reads but will not take the turn -------


class Ledger:
    """The store seam, scripted: it reads; whether it takes a write is up to the test."""

    def __init__(self, record: InboundRecord) -> None:
        self.record = record
        self.writable = True
        self.checks = 0

    async def put_setting(self, key: str, value: str) -> None:
        self.checks += 1
        if not self.writable:
            raise StoreUnavailable("store x.db: the disk holding /srv is full")

    async def inbound(self, ids: list[int]) -> list[InboundRecord]:
        return [self.record] if self.record.id in ids else []


class Forgetful:
    def forget(self, chat_key: str) -> None:
        return None


class Worker(Outages):
    """Outages around a turn that fails (the store refused its write) `failures` times."""

    def __init__(self, ledger: Ledger, failures: int) -> None:
        self.store = ledger  # type: ignore[assignment]
        self.conversations = Forgetful()  # type: ignore[assignment]
        self.may_act = lambda chat_key: True
        self.forfeit = lambda chat_key, first: None
        self.failures = failures
        self.turns: list[float] = []

    async def _answer(self, chat_key: str, running: Running) -> None:
        self.turns.append(time.monotonic())
        if len(self.turns) <= self.failures:
            raise StoreUnavailable("store x.db: the disk holding /srv is full")


def batch() -> tuple[Ledger, Running]:
    record = InboundRecord(7, "test", "1", "m7", CHAT, "hi", "u1", "Ada", time.time(),
                           "pending")
    return Ledger(record), Running([MessageJob(ChatRef("test", "1"), record)])


async def test_a_batch_the_store_keeps_refusing_waits_longer_each_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outages, "FIRST_PAUSE_S", 0.02)
    monkeypatch.setattr(outages, "LONGEST_PAUSE_S", 0.16)
    ledger, running = batch()
    worker = Worker(ledger, failures=5)
    await asyncio.wait_for(worker._answer_through_outages(CHAT, running), 5)
    gaps = [later - earlier for earlier, later in itertools.pairwise(worker.turns)]
    assert len(gaps) == 5 and ledger.checks == 5
    for gap, pause in zip(gaps, (0.02, 0.04, 0.08, 0.16, 0.16), strict=True):
        assert gap >= pause, gaps  # never sooner than its pause; no faster once at the top


async def test_a_batch_runs_again_only_once_the_store_takes_a_write(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outages, "FIRST_PAUSE_S", 0.01)
    monkeypatch.setattr(outages, "LONGEST_PAUSE_S", 0.04)
    ledger, running = batch()
    ledger.writable = False  # it reads (the rows are there), it writes nothing
    worker = Worker(ledger, failures=1)
    answering = asyncio.create_task(worker._answer_through_outages(CHAT, running))
    await eventually(lambda: ledger.checks >= 6, timeout=5)
    assert len(worker.turns) == 1  # no turn (and no model call) while writes fail
    ledger.writable = True
    await asyncio.wait_for(answering, 5)
    assert len(worker.turns) == 2
