"""`threadline run` on Telegram killed (SIGKILL) at random moments and started again: every
message is answered once, and nothing stays half-written in a chat."""

from __future__ import annotations

import asyncio
import random
import signal
import sqlite3
from contextlib import closing

import pytest

from gateway.turns.worker import SKIPPED
from platforms.telegram.format import render
from tests.harness.cli import THREADLINE, cli_env
from tests.harness.gateway import write_config
from tests.harness.waiting import eventually, while_moving

pytestmark = [pytest.mark.timing, pytest.mark.timeout(900)]
CHATS = 10
FIRST_USER = 5560001
GROUP = -1005550777
BOT = "@threadline_bot"


def config_file(tmp_path, fake_telegram, model_url: str, **sections) -> str:
    platforms = {"console": {"enabled": False},
                 "telegram": {"enabled": True, "token": fake_telegram.token,
                              "base_url": fake_telegram.base_url,
                              "base_file_url": fake_telegram.base_file_url}}
    return str(write_config(tmp_path, model={"base_url": model_url}, platforms=platforms,
                            **sections))


async def start(tmp_path, config: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        THREADLINE, "run", "--config", config, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        cwd=str(tmp_path), env=cli_env(tmp_path))


async def started(tmp_path, config: str, fake_telegram) -> asyncio.subprocess.Process:
    """A new process, once it polls: its start-up is over (the database open, recovery
    begun). A kill timed from the spawn instead lands in start-up on a busy machine, where
    starting takes seconds, and every one of them might miss the traffic."""
    polls = len(fake_telegram.calls_to("/deleteWebhook"))
    proc = await start(tmp_path, config)
    await fake_telegram.wait_for_call("/deleteWebhook", polls + 1, timeout=120)
    return proc


def rows(db, sql: str, *params) -> list[tuple]:
    with closing(sqlite3.connect(db)) as conn:
        return [tuple(r) for r in conn.execute(sql, params)]


async def test_twenty_kills_while_ten_chats_talk_lose_and_repeat_nothing(
        tmp_path, fake_openai, fake_telegram):
    rng = random.Random(3207)
    fake_openai.answer_delay_s = 0.3  # turns are in flight when the kills land
    config = config_file(tmp_path, fake_telegram, fake_openai.base_url,
                         streaming={"enabled": False})
    db = tmp_path / "threadline.db"
    pushed: dict[int, list[int]] = {FIRST_USER + c: [] for c in range(CHATS)}

    async def talk(stop: asyncio.Event) -> None:
        n = 0
        while not stop.is_set():
            user = FIRST_USER + n % CHATS
            update = fake_telegram.updates.private_text(f"message {n}", user)
            pushed[user].append(update["message"]["message_id"])
            fake_telegram.push(update)
            n += 1
            await asyncio.sleep(0.05)

    stop = asyncio.Event()
    talking = asyncio.create_task(talk(stop))
    proc = await started(tmp_path, config, fake_telegram)
    try:
        for _ in range(20):
            await asyncio.sleep(rng.uniform(0.5, 3.0))  # into the traffic
            proc.kill()
            await proc.wait()
            proc = await started(tmp_path, config, fake_telegram)
        stop.set()
        await talking
        total = sum(len(ids) for ids in pushed.values())

        def done() -> int:
            return rows(db, "SELECT count(*) FROM inbound WHERE status IN "
                            "('answered', 'failed')")[0][0]

        # The backlog drains at the machine's pace: fail only when it stops draining.
        await while_moving(lambda: done() == total, done, stall=60,
                           what=lambda: rows(db, "SELECT status, count(*) FROM inbound "
                                                 "GROUP BY status"))
        await asyncio.sleep(1.5)  # room for a late duplicate
    finally:
        stop.set()
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 60)
    maybe = {(chunk_of[0], chunk_of[1]) for chunk_of in rows(
        db, "SELECT i.chat_id, i.message_id FROM deliveries d JOIN inbound i "
            "ON i.id = d.inbound_id WHERE d.maybe_sent = 1")}
    duplicates, skipped = [], 0
    for user in pushed:
        replies = fake_telegram.messages(user)
        targets = [r.reply_to for r in replies if r.reply_to is not None]
        skipped += len({r.reply_to for r in replies if r.text == SKIPPED})
        duplicates += [(user, t) for t in set(targets) if targets.count(t) > 1]
        # Answers keep the chat's order: each replies to a later message than the last.
        assert targets == sorted(targets), (user, targets)
    unexplained = [d for d in duplicates if (str(d[0]), str(d[1])) not in maybe]
    print(f"{total} messages, 20 kills: {len(duplicates)} duplicate(s), all marked maybe_sent;"
          f" {skipped} skipped as poison")
    assert not unexplained, unexplained
    assert rows(db, "SELECT count(*) FROM inbound WHERE status = 'failed'")[0][0] == skipped


async def test_a_kill_mid_stream_in_a_group_leaves_nothing_half_written(
        tmp_path, fake_openai, fake_telegram):
    reply = "\n\n".join(f"Part {n}. " + "words flowing slowly " * 60 for n in range(3))
    fake_openai.responder = lambda body: reply
    fake_openai.stream_delay_s = 0.05  # written over several seconds
    config = config_file(tmp_path, fake_telegram, fake_openai.base_url)
    expected = [c.text for c in render(reply)]
    proc = await start(tmp_path, config)
    try:
        fake_telegram.push(fake_telegram.updates.group_text(f"{BOT} tell me", GROUP))
        await fake_telegram.wait_for_messages(GROUP, 1, timeout=60)  # a preview is up
        await asyncio.sleep(1.0)  # and is being edited
        proc.kill()
        await proc.wait()
        assert fake_telegram.messages(GROUP)[0].text not in expected, "half-written"
        proc = await start(tmp_path, config)
        await eventually(lambda: [m.text for m in fake_telegram.messages(GROUP)] == expected,
                         timeout=120,
                         what=lambda: [m.text[:40] for m in fake_telegram.messages(GROUP)])
        await asyncio.sleep(2)  # nothing more comes
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 60)
    assert [m.text for m in fake_telegram.messages(GROUP)] == expected
