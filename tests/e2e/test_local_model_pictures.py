"""Acceptance 2 of issue 15, with the real embedded model: it cannot see pictures, so the
chat is told so once, and each caption is answered."""

from __future__ import annotations

import json
import sqlite3

import pytest

from tests.harness.media import jpeg
from tests.harness.telegram_gateway import telegram_config, telegram_gateway

pytestmark = [pytest.mark.model, pytest.mark.timing, pytest.mark.timeout(300)]
USER = 5550003
NOTICE = "This model can't see pictures"


async def test_the_local_model_says_once_it_cannot_see_and_answers_the_captions(
        tmp_path, fake_telegram):
    config = telegram_config(tmp_path, fake_telegram, "http://127.0.0.1:9",
                             model={"provider": "local", "name": "SmolLM2-135M-Instruct",
                                    "max_output_tokens": 24},
                             streaming={"enabled": False})
    async with telegram_gateway(config):
        for n, caption in enumerate(["Say hello to my cat.", "Name one colour."]):
            file_id = fake_telegram.add_file(jpeg(n), kind="photo", suffix=".jpg")
            fake_telegram.push(fake_telegram.updates.photo(caption, user_id=USER,
                                                           file_id=file_id))
            await fake_telegram.wait_for_messages(USER, 2 + n, timeout=240)
    texts = [m.text for m in fake_telegram.messages(USER)]
    assert sum(NOTICE in t for t in texts) == 1 and NOTICE in texts[0]
    replies = texts[1:]
    assert len(replies) == 2 and all(r.strip() and NOTICE not in r for r in replies)
    db = sqlite3.connect(config.db_path)
    users = [json.loads(c) for (c,) in db.execute(
        "SELECT content FROM messages WHERE role = 'user' ORDER BY id")]
    assert [u[0]["text"] for u in users] == ["Say hello to my cat.", "Name one colour."]
    assert db.execute("SELECT count(*) FROM inbound WHERE status = 'answered'").fetchone() == (2,)
