"""Reading the room (issue 36, acceptance 2 and 3): unaddressed group messages are kept and
shown with the next mention, never causing a model call; wake words and free-response
topics address the bot. The real python-telegram-bot against the fake Bot API."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from agent.tokens import estimate_text
from gateway.turns.groups import ROOM_CLOSE, ROOM_OPEN
from gateway.turns.speakers import label
from tests.harness.telegram_gateway import telegram_config, telegram_gateway
from tests.harness.waiting import eventually

GROUP = -1001234567890
ALICE, BOB, OTHER_BOT = 5550011, 5550012, 5550099
BOT = "@threadline_bot"
SECRET = "sk-proj-" + "Q7x" * 12


def model_requests(fake_openai) -> list[list[dict[str, Any]]]:
    return [c.json["messages"] for c in fake_openai.calls_to("/chat/completions")]


def observed(db: Path) -> int:
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute("SELECT count(*) FROM observed").fetchone()[0]


def room_block(messages: list[dict[str, Any]]) -> list[str] | None:
    """The lines of the room block in a request (None when it has none)."""
    blocks = [str(m["content"]) for m in messages
              if m["role"] == "user" and str(m["content"]).startswith(ROOM_OPEN)]
    if not blocks:
        return None
    lines = blocks[-1].splitlines()
    assert lines[-1] == ROOM_CLOSE
    return lines[1:-1]


def chatter(fake_telegram, n: int, user: int, *, bot: bool = False) -> None:
    update = fake_telegram.updates.group_text(f"chatter {n:02d}", GROUP, user, entities=[])
    update["message"]["from"]["is_bot"] = bot
    fake_telegram.push(update)


def room(tmp_path: Path, fake_openai, fake_telegram, **context: Any):
    return telegram_config(tmp_path, fake_telegram, fake_openai.base_url,
                           streaming={"enabled": False},
                           telegram={"group_context": context} if context else None)


async def test_thirty_unaddressed_messages_reach_the_next_mention_across_a_restart(
        tmp_path, fake_openai, fake_telegram) -> None:
    config = room(tmp_path, fake_openai, fake_telegram, enabled=True, max_messages=20)
    db = tmp_path / "threadline.db"
    async with telegram_gateway(config):
        for n in range(30):
            chatter(fake_telegram, n, ALICE if n % 2 else BOB)
        chatter(fake_telegram, 99, OTHER_BOT, bot=True)  # never kept
        secret = fake_telegram.updates.group_text(f"my key is {SECRET}", GROUP, BOB,
                                                  entities=[])
        fake_telegram.push(secret)
        await eventually(lambda: observed(db) == 31, what=lambda: observed(db))
        assert not model_requests(fake_openai), "chatter never causes a model call"
    async with telegram_gateway(config):  # a restart between the chatter and the mention
        fake_telegram.push(fake_telegram.updates.group_text(f"{BOT} what was said?", GROUP,
                                                            ALICE))
        await fake_telegram.wait_for_messages(GROUP, 1, timeout=30)
        chatter(fake_telegram, 30, BOB)
        await eventually(lambda: observed(db) == 32)
        fake_telegram.push(fake_telegram.updates.group_text(f"{BOT} and now?", GROUP, ALICE))
        await fake_telegram.wait_for_messages(GROUP, 2, timeout=30)
    first, second = model_requests(fake_openai)
    lines = room_block(first)
    assert lines is not None and len(lines) == 20  # max_messages, the newest
    assert [line.rsplit(" ", 1)[-1] for line in lines[:-1]] == \
        [f"{n:02d}" for n in range(11, 30)], "the newest, oldest first"
    assert lines[-1].endswith("my key is [REDACTED]") and SECRET not in str(first)
    assert all(not line.endswith("chatter 99") for line in lines), "bots are never kept"
    assert lines[0].startswith(label("telegram", str(ALICE), f"User {ALICE}"))
    assert first[-1]["content"].endswith("what was said?")  # the block comes before it
    assert [line.rsplit(" ", 1)[-1] for line in room_block(second) or []] == ["30"], \
        "only what was said since the last mention, never twice"


async def test_the_block_keeps_to_max_tokens_and_is_absent_when_room_context_is_off(
        tmp_path, fake_openai, fake_telegram) -> None:
    for context in ({"enabled": True, "max_tokens": 150}, {}):
        fake_openai.calls.clear()
        home = tmp_path / ("on" if context else "off")
        home.mkdir()
        config = room(home, fake_openai, fake_telegram, **context)
        async with telegram_gateway(config):
            for n in range(30):
                chatter(fake_telegram, n, ALICE)
            fake_telegram.push(fake_telegram.updates.group_text(f"{BOT} hi", GROUP, ALICE))
            await eventually(lambda: bool(model_requests(fake_openai)), timeout=30)
        [request] = model_requests(fake_openai)
        lines = room_block(request)
        if not context:
            assert lines is None and "chatter" not in str(request)
            continue
        assert lines is not None and 3 <= len(lines) < 30
        assert lines[-1].endswith("chatter 29")  # the newest are the ones kept
        block = "\n".join([ROOM_OPEN, *lines, ROOM_CLOSE])
        assert estimate_text(block) + len(lines) <= 150


async def test_a_wake_word_and_a_free_response_topic_address_the_bot(
        tmp_path, fake_openai, fake_telegram) -> None:
    topic = f"telegram:{GROUP}:7"
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url,
                             streaming={"enabled": False},
                             telegram={"wake_words": ["Threadie"], "free_response": [topic]})
    ups = fake_telegram.updates
    async with telegram_gateway(config):
        fake_telegram.push(ups.group_text("the threadies are late", GROUP, ALICE, entities=[]))
        fake_telegram.push(ups.group_text("hey THREADIE, what is 2+2?", GROUP, ALICE,
                                          entities=[]))
        fake_telegram.push(ups.group_text("in topic nine", GROUP, ALICE, entities=[],
                                          thread_id=9, is_forum=True))
        fake_telegram.push(ups.group_text("in topic seven", GROUP, ALICE, entities=[],
                                          thread_id=7, is_forum=True))
        replies = await fake_telegram.wait_for_messages(GROUP, 2, timeout=30)
        fake_telegram.push(ups.group_text(f"{BOT} done?", GROUP, ALICE))
        await fake_telegram.wait_for_messages(GROUP, 3, timeout=30)
    said = sorted(str(r[-1]["content"]).split("]: ", 1)[1] for r in model_requests(fake_openai))
    assert said == [f"{BOT} done?", "hey THREADIE, what is 2+2?", "in topic seven"]
    assert {r.thread_id for r in replies} == {None, 7}
