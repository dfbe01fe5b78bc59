"""A reply of only whitespace is the provider's empty answer everywhere: what the user is
told, what is stored and what is counted agree."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import pytest

from agent.errors import EmptyReplyError
from tests.harness.gateway import close, config_for, started_gateway
from tests.harness.platform import RecordingPlatform


@pytest.mark.parametrize("blank", [" ", "\n\n", " \t \n"])
async def test_a_blank_reply_is_an_empty_answer(tmp_path, fake_openai, blank):
    fake_openai.responder = lambda body: blank
    platform = RecordingPlatform()
    gw = await started_gateway(config_for(tmp_path, fake_openai.base_url), [platform])
    try:
        await platform.say("hello")
        await platform.wait_delivered(1)
    finally:
        await close(gw)
    assert platform.texts() == [EmptyReplyError.user_message]
    with closing(sqlite3.connect(tmp_path / "threadline.db")) as db:
        said = db.execute("SELECT content FROM messages WHERE role = 'assistant'").fetchall()
        [(status,)] = db.execute("SELECT status FROM inbound").fetchall()
    assert said == [] and status == "failed"
