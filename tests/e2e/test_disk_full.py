"""`threadline run` on Telegram while the database's disk fills under traffic and is then
freed: every message is answered once within 30 s of the space coming back, nobody hears
an apology, and the same process runs throughout (issue 37, acceptance point 4)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections import Counter
from contextlib import closing
from pathlib import Path

import pytest

from gateway.turns.worker import GENERIC_FAILURE
from tests.harness.cli import threadline
from tests.harness.gateway import write_config
from tests.harness.running import Running, answered
from tests.harness.small_disk import small_disk
from tests.harness.waiting import eventually

pytestmark = pytest.mark.timeout(300)
CHATS = 8
FIRST_USER = 5570001
EVERY_S = 0.05  # a message from one of the chats, round robin
ANSWERED_WITHIN_S = 30.0


def run_config(tmp_path: Path, fake_openai, fake_telegram, db: Path) -> str:
    platforms = {"console": {"enabled": False},
                 "telegram": {"enabled": True, "token": fake_telegram.token,
                              "base_url": fake_telegram.base_url,
                              "base_file_url": fake_telegram.base_file_url}}
    return str(write_config(tmp_path, model={"base_url": fake_openai.base_url},
                            platforms=platforms, storage={"path": str(db)}))


def rows(db: Path, sql: str) -> list[tuple]:
    with closing(sqlite3.connect(db)) as conn:
        return [tuple(r) for r in conn.execute(sql)]


class Traffic:
    """Users writing steadily, each message remembered by chat."""

    def __init__(self, fake_telegram) -> None:
        self.fake = fake_telegram
        self.pushed: dict[int, list[int]] = {FIRST_USER + c: [] for c in range(CHATS)}
        self.sent = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._talk())

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    async def _talk(self) -> None:
        while not self._stop.is_set():
            user = FIRST_USER + self.sent % CHATS
            update = self.fake.updates.private_text(f"message {self.sent}", user)
            self.pushed[user].append(update["message"]["message_id"])
            self.fake.push(update)
            self.sent += 1
            await asyncio.sleep(EVERY_S)


def settled(fake_telegram, db: Path, traffic: Traffic) -> bool:
    """Every pushed message taken from Telegram, stored, answered and its reply sent."""
    if fake_telegram.pending_updates:
        return False
    ledger = rows(db, "SELECT status, count(*) FROM inbound GROUP BY status")
    open_rows = rows(db, "SELECT count(*) FROM deliveries WHERE status = 'pending'")[0][0]
    return ledger == [("answered", traffic.sent + 1)] and not open_rows  # + the first one


def each_answered_once(fake_telegram, traffic: Traffic) -> None:
    """No apology, no message answered twice, and each chat's newest one answered."""
    replies = {user: fake_telegram.messages(user) for user in traffic.pushed}
    texts = [m.text for sent in replies.values() for m in sent]
    assert GENERIC_FAILURE not in texts  # nobody was told it failed
    twice = {user: [t for t, n in Counter(m.reply_to for m in sent).items() if n > 1]
             for user, sent in replies.items()}
    assert not any(twice.values()), twice
    assert len(texts) == len(set(texts)), [t for t, n in Counter(texts).items() if n > 1]
    for user, sent in replies.items():  # a batch's reply answers its newest message
        assert any(m.reply_to == max(traffic.pushed[user]) for m in sent), user


async def test_a_disk_filled_under_traffic_then_freed_answers_every_message_once(
        tmp_path, fake_openai, fake_telegram):
    fake_openai.answer_delay_s = 0.2  # turns are in flight when the disk fills
    with small_disk(tmp_path / "data", size_mb=24) as disk:
        db = disk.path / "threadline.db"
        config = run_config(tmp_path, fake_openai, fake_telegram, db)
        service = await Running.start(tmp_path, "run", "--config", config)
        traffic = Traffic(fake_telegram)
        try:
            started = time.monotonic()
            await answered(fake_telegram, "are you there?", user=FIRST_USER)
            traffic.start()
            await asyncio.sleep(2.0)  # a steady flow before the disk fills
            filled = disk.fill()
            full_at = time.monotonic()
            await service.wait_for_line("is full", timeout=30)  # the store met the full disk
            noticed = time.monotonic()
            await asyncio.sleep(4.0)  # messages keep coming while nothing can be stored
            calls_before_free = len(fake_openai.calls_to("/chat/completions"))
            disk.free()
            freed = time.monotonic()
            await asyncio.sleep(1.0)  # and a few more as the space comes back
            await traffic.stop()
            await eventually(lambda: settled(fake_telegram, db, traffic),
                             timeout=ANSWERED_WITHIN_S - (time.monotonic() - freed),
                             every=0.1, what=lambda: (
                                 rows(db, "SELECT status, count(*) FROM inbound GROUP BY "
                                          "status"), len(fake_telegram.pending_updates)))
            done = time.monotonic()
            await asyncio.sleep(2.0)  # room for a late duplicate or apology
            assert service.proc.returncode is None, service.log  # the same process all along
        finally:
            await traffic.stop()
            disk.free()
            code = await service.stop()
        assert code == 0, service.log
        maybe_twice = rows(db, "SELECT count(*) FROM deliveries WHERE maybe_sent = 1")[0][0]
    each_answered_once(fake_telegram, traffic)
    assert maybe_twice == 0  # no reply part was ever sent without knowing it was not before
    print(f"\n{traffic.sent} messages in {CHATS} chats; filler {filled >> 20} MB; the store "
          f"met the full disk {noticed - full_at:.1f} s after it filled; "
          f"{calls_before_free} model calls before freeing; all answered "
          f"{done - freed:.1f} s after freeing; {done - started:.1f} s in all")


async def test_doctor_says_when_the_database_disk_is_nearly_full(
        tmp_path, fake_openai, fake_telegram):
    with small_disk(tmp_path / "data", size_mb=120) as disk:
        config = run_config(tmp_path, fake_openai, fake_telegram, disk.path / "threadline.db")

        async def database_line() -> tuple[int, str, str]:
            ran = await threadline("doctor", "--config", config, home=tmp_path, timeout=60)
            [line] = [ln for ln in ran.out.splitlines() if ln[6:18].strip() == "database"]
            return ran.code, line, ran.out.strip().splitlines()[-1]

        code, line, end = await database_line()
        assert (code, end) == (0, "all good") and line.startswith("ok    "), line
        disk.take(30 * 1000 * 1000)  # about 96 MB left: room today, not for long
        code, line, end = await database_line()
        assert (code, end) == (1, "1 problem"), line
        assert line.startswith("FAIL  database") and f"the disk holding {disk.path}" in line
        assert "is nearly full: 9" in line and " MB free (7" in line, line
        disk.fill()
        code, line, end = await database_line()
        assert (code, end) == (1, "1 problem")
        assert "is nearly full: 0 bytes free (0.0% of 125.8 MB)" in line, line
