"""`threadline run` on Discord killed (SIGKILL) at random moments of long replies, sent whole
and streamed, and started again (issue 33): after the last start every message is
answered, no part of a reply shows twice at once, and nothing half-written stays.

Each reply is three paragraphs of about 1,700 characters: two would pass Discord's 2,000,
so every paragraph is a message of its own and a reply is three. Creates are answered late
(`answer_late`): a kill often lands after Discord made a message and before the bot learned
its id, where only the create's nonce (`enforce_nonce`) keeps a resend from posting it again.
"""

from __future__ import annotations

import asyncio
import random
import re
import signal
import sqlite3
from collections import Counter
from contextlib import closing
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from gateway.turns.worker import SKIPPED
from tests.harness.base import last_user_text
from tests.harness.cli import THREADLINE, cli_env
from tests.harness.discord_bot import discord_platform
from tests.harness.fake_discord import BOT_ID, FakeDiscord
from tests.harness.gateway import write_config
from tests.harness.waiting import while_moving

pytestmark = [pytest.mark.timing, pytest.mark.timeout(600)]
KILLS = 10  # per test: twenty in all
CHATS = 3
FIRST_USER = 700000000000000101
LATE_S = 0.4  # every create's answer comes this late (the message exists at once)
STREAMING = {"enabled": True, "min_interval_ms": 300}


def reply_to(label: str) -> str:
    """The model's answer to the question `label`: three paragraphs naming it."""
    return "\n\n".join(f"Answer to {label}, part {k}: "
                       + " ".join(f"word{k}{i % 10}" for i in range(240)) + "."
                       for k in range(3))


def parts(label: str) -> list[str]:
    return reply_to(label).split("\n\n")


def answer(body: dict[str, Any]) -> str:
    text = last_user_text(body["messages"])
    found = re.search(r"Q\d{3}", text)
    return reply_to(found.group()) if found else f"echo: {text}"


def is_note(content: str) -> bool:
    """A sentence in place of a reply: cut off by a restart, or skipped as poison."""
    return "cut off" in content.lower() or content.strip() == SKIPPED


def config_file(tmp_path: Path, fake_discord: FakeDiscord, model_url: str,
                streaming: bool) -> str:
    model = {"base_url": model_url, "max_output_tokens": 4000}  # room for the long answers
    return str(write_config(tmp_path, model=model,
                            platforms=discord_platform(fake_discord),
                            streaming=STREAMING if streaming else {"enabled": False}))


def log_file(tmp_path: Path, n: int) -> BinaryIO:
    return open(tmp_path / f"run-{n}.log", "wb")  # the child keeps its own copy open


async def start(tmp_path: Path, config: str, n: int) -> asyncio.subprocess.Process:
    """A `threadline run`; its stderr goes to run-N.log in tmp_path, to read after a failure."""
    with log_file(tmp_path, n) as log:
        return await asyncio.create_subprocess_exec(
            THREADLINE, "run", "--config", config, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=log, cwd=str(tmp_path),
            env=cli_env(tmp_path))


def settled(db: Path, asked: int) -> bool:
    """Every question is in the ledger, answered (or skipped as poison)."""
    if not db.exists():  # connecting would create it
        return False
    try:
        with closing(sqlite3.connect(db)) as conn:
            rows = conn.execute("SELECT status FROM inbound WHERE platform = 'discord'")
            statuses = [status for (status,) in rows]
    except sqlite3.Error:  # not created yet, or busy
        return False
    return len(statuses) == asked and all(s in ("answered", "failed") for s in statuses)


def shown(fake: FakeDiscord, chat: str) -> list[str]:
    """The bot's messages in the chat as they stand now (edited, deleted ones gone)."""
    return [m["content"].strip() for m in fake.history(chat) if m["author"]["id"] == BOT_ID]


def complete_parts(asked: list[str]) -> dict[str, tuple[str, int]]:
    """Each whole reply part -> (the question it answers, its position)."""
    return {part: (label, k) for label in asked for k, part in enumerate(parts(label))}


def unfinished(fake: FakeDiscord, chats: list[str], asked: list[str]) -> list[str]:
    """Half-written messages, and replies missing a part (or showing them out of order)."""
    complete = complete_parts(asked)
    found: list[str] = []
    for chat in chats:
        kept = [c for c in shown(fake, chat) if not is_note(c)]
        found += [f"half-written in {chat}: {c[:48]!r}..." for c in kept if c not in complete]
        seen = [complete[c] for c in kept if c in complete]
        for label in dict.fromkeys(label for label, _ in seen):
            order = list(dict.fromkeys(k for other, k in seen if other == label))
            if order != [0, 1, 2]:
                found.append(f"the reply to {label} shows parts {order}")
    return found


def repeated(fake: FakeDiscord, chats: list[str], asked: list[str]) -> list[str]:
    """Reply parts that show more than once."""
    complete = complete_parts(asked)
    counts = Counter(complete[c] for chat in chats for c in shown(fake, chat) if c in complete)
    return [f"{label} part {k} shows {n} times" for (label, k), n in counts.items() if n > 1]


def shown_twice(fake: FakeDiscord, asked: list[str]) -> list[str]:
    """Whole reply parts that stood twice in a chat at one moment, however briefly (a part
    sent anew beside the preview that already showed it, which a later delete removes).

    A part may be created twice one after the other: a turn a kill cut short loses its
    previews at the restart, before it runs again and shows the part anew."""
    complete = complete_parts(asked)
    return sorted({f"{chat}: {c.strip()[:48]}" for chat, c in fake.shown_twice
                   if c.strip() in complete})


def writes_of(fake: FakeDiscord, doubled: list[str]) -> list[tuple[Any, ...]]:
    """For a failure's message: each write of a doubled part (id, how, when, nonce) and
    whether its message was deleted since."""
    heads = {d.split(": ", 1)[1] for d in doubled}
    return [(m.id, m.via, round(m.at, 3), m.nonce, m.id in fake.deleted)
            for m in fake.messages() if m.content.strip()[:48] in heads]


async def kill_at_random_moments(tmp_path: Path, fake: FakeDiscord, config: str,
                                 chats: list[str], rng: random.Random) -> list[str]:
    """KILLS runs, each asked two questions and killed a random moment later; the labels
    asked, in order."""
    asked: list[str] = []
    for cycle in range(KILLS):
        proc = await start(tmp_path, config, cycle)
        try:
            await fake.wait_identified(cycle + 1, timeout=60)
            for chat in rng.sample(chats, 2):
                label = f"Q{len(asked):03d}"
                asked.append(label)
                user = fake.channels[chat]["recipients"][0]["id"]
                await fake.user_message(chat, f"question {label}", author_id=user)
            await asyncio.sleep(rng.uniform(0.5, 4.0))  # somewhere in the replies
        finally:
            proc.kill()
            await proc.wait()
    return asked


@pytest.mark.parametrize("streaming", [False, True], ids=["whole", "streamed"])
async def test_kills_mid_reply_leave_no_repeat_and_nothing_half_written(
        tmp_path, fake_openai, fake_discord, streaming):
    fake_openai.responder = answer
    fake_openai.answer_delay_s = 0.3
    fake_openai.stream_chunk_chars, fake_openai.stream_delay_s = 60, 0.015  # ~1.3 s a reply
    fake_discord.answer_late("/messages", LATE_S, times=1_000_000)
    chats = [fake_discord.dm_channel(str(FIRST_USER + n)) for n in range(CHATS)]
    config = config_file(tmp_path, fake_discord, fake_openai.base_url, streaming)
    db = tmp_path / "threadline.db"
    asked = await kill_at_random_moments(tmp_path, fake_discord, config, chats,
                                         random.Random(3300 + streaming))
    proc = await start(tmp_path, config, KILLS)
    try:
        # At the machine's pace: fail only when the ledger and the chats stop changing.
        await while_moving(lambda: settled(db, len(asked))
                           and not unfinished(fake_discord, chats, asked),
                           lambda: (rows(db), [shown(fake_discord, c) for c in chats]),
                           stall=90, every=0.25,
                           what=lambda: (unfinished(fake_discord, chats, asked), rows(db)))
        await asyncio.sleep(2)  # room for a late repeat, if there were one
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 60)
    notes = sum(is_note(c) for chat in chats for c in shown(fake_discord, chat))
    created = Counter(m.content.strip() for m in fake_discord.messages() if m.via == "channel")
    again = sum(n - 1 for c, n in created.items() if c in complete_parts(asked))
    print(f"{len(asked)} questions, {KILLS} kills: {len(fake_discord.nonce_replays)} create(s) "
          f"replayed by nonce, {notes} note(s) instead of a reply, {again} whole part(s) "
          f"created again after a restart removed the first")
    assert not unfinished(fake_discord, chats, asked)
    assert not repeated(fake_discord, chats, asked)
    assert not shown_twice(fake_discord, asked), writes_of(fake_discord, shown_twice(
        fake_discord, asked))
    assert settled(db, len(asked)), rows(db)


def rows(db: Path) -> list[tuple[Any, ...]]:
    """The ledger's counts by status, for a failure's message."""
    try:
        with closing(sqlite3.connect(db)) as conn:
            return list(conn.execute("SELECT status, count(*) FROM inbound GROUP BY status"))
    except sqlite3.Error as exc:
        return [(str(exc),)]


async def test_a_preview_whose_id_a_kill_lost_is_gone_when_its_message_is_skipped(
        tmp_path, fake_openai, fake_discord):
    """Killed twice while its first preview's create waits for its answer (the message
    exists, its id never came back), the question is skipped as poison: the skip finds that
    preview again by its key and removes it, and only the notice stays."""
    fake_openai.responder = answer
    fake_openai.stream_chunk_chars, fake_openai.stream_delay_s = 60, 0.05
    fake_discord.answer_late("/messages", 30.0, times=2)  # the two previews' creates
    [chat] = [fake_discord.dm_channel(str(FIRST_USER))]
    config = config_file(tmp_path, fake_discord, fake_openai.base_url, streaming=True)
    for run in range(2):
        proc = await start(tmp_path, config, run)
        try:
            await fake_discord.wait_identified(run + 1, timeout=60)
            if run == 0:
                user = fake_discord.channels[chat]["recipients"][0]["id"]
                await fake_discord.user_message(chat, "question Q000", author_id=user)
            await while_moving(lambda n=run: len(shown(fake_discord, chat)) > n
                               or len(fake_discord.nonce_replays) > n - 1 >= 0,
                               lambda: len(fake_discord.calls), stall=60)
        finally:
            proc.kill()  # the create is done, its answer still on the way
            await proc.wait()
    assert shown(fake_discord, chat), "a half-written preview is on screen"
    proc = await start(tmp_path, config, 2)
    try:
        await while_moving(lambda: shown(fake_discord, chat) == [SKIPPED],
                           lambda: shown(fake_discord, chat), stall=60,
                           what=lambda: shown(fake_discord, chat))
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 60)
