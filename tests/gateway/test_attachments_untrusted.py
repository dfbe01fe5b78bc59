"""Reading a file costs its own chat alone: over its budget it is declined by name, /stop
reaches it (and kills the reading), and other chats are answered meanwhile
(docs/architecture.md, "Untrusted work")."""

from __future__ import annotations

import asyncio

import pytest

from gateway.turns.worker import STOPPED
from tests.harness.gateway import close, config_for, started_gateway
from tests.harness.hostile_files import pdf_form_fanout
from tests.harness.platform import RecordingPlatform

pytestmark = pytest.mark.timeout(120)
COSTLY = "form-fanout.pdf"  # about a second of CPU in the reader


def gateway_config(tmp_path, fake_openai, budget_s: float):
    return config_for(tmp_path, fake_openai.base_url,
                      attachments={"read_timeout_s": budget_s, "readers": 1})


async def test_a_file_over_its_budget_is_declined_by_name_and_the_chat_goes_on(
        tmp_path, fake_openai):
    platform = RecordingPlatform()
    gw = await started_gateway(gateway_config(tmp_path, fake_openai, 0.2), [platform])
    try:
        pdf = platform.attach("document", pdf_form_fanout(), COSTLY, "application/pdf")
        await platform.say("", chat_id="7", attachments=(pdf,))
        await platform.wait_delivered(1, timeout=60)
        await platform.say("still there?", chat_id="7")
        await platform.wait_delivered(2, timeout=60)
    finally:
        await close(gw)
    declined, answer = platform.texts("test:7")
    assert declined == (f"I can't read {COSTLY}: it would take too long to open (over 0.2 s), "
                        "so I skipped it.")
    assert answer == "echo: still there?"
    assert gw.reader.pool.outcomes["over_budget"] == 1


async def test_stop_reaches_a_file_being_read_and_other_chats_are_answered(
        tmp_path, fake_openai):
    platform = RecordingPlatform()
    platform.slow_downloads = asyncio.Event()  # never set: this file takes forever to fetch
    gw = await started_gateway(gateway_config(tmp_path, fake_openai, 600), [platform])
    try:
        slow = platform.attach("document", b"a few words", "notes.txt", "text/plain")
        await platform.say("read this", chat_id="8", attachments=(slow,))
        await asyncio.wait_for(platform.downloading.wait(), 30)
        await platform.say("hello", chat_id="9")  # another chat, answered meanwhile
        await platform.wait_delivered(1, timeout=30)
        assert platform.texts("test:9") == ["echo: hello"]
        await platform.say("/stop", chat_id="8")
        await platform.wait_delivered(3, timeout=30)
    finally:
        await close(gw)
    assert sorted(platform.texts("test:8")) == sorted([STOPPED, "Stopping."])
    assert len(fake_openai.calls_to("/chat/completions")) == 1, \
        "the stopped message never reached the model"
