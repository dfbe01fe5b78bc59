"""Attachments through the whole gateway: real PTB and discord.py against the fakes, real
openai/anthropic SDKs against the fake models, a real SQLite file.

Acceptance (issue 15): 1 a photo reaches both models as image content plus its caption,
and the database holds a reference, not the bytes; 3 files over the limit get a reply
naming it and the next message works; 4 code and PDF are read, a long text is clipped
head and tail, a program is refused; 5 voice messages with and without transcription.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.harness.discord_bot import discord_config, discord_gateway
from tests.harness.fake_anthropic import base64_images as anthropic_images
from tests.harness.fake_openai import base64_images as openai_images
from tests.harness.gateway import close, config_for, started_gateway
from tests.harness.media import ELF, OGG, b64, database_holds, jpeg, pdf, stored_user_parts
from tests.harness.platform import RecordingPlatform
from tests.harness.telegram_gateway import telegram_config, telegram_gateway

pytestmark = pytest.mark.timeout(60)
USER = 5550001
MB = 1024 * 1024
CAPTION = "what is in this picture?"


def model_for(sdk: str, fake: Any) -> dict[str, Any]:
    if sdk == "anthropic":
        return {"provider": "anthropic", "name": "claude-sonnet-5", "api_key": "test-key",
                "base_url": fake.base_url}
    return {"name": "gpt-4o-mini", "base_url": fake.base_url}


def chat_bodies(fake: Any) -> list[dict[str, Any]]:
    return [c.json for c in fake.calls if c.method == "POST" and isinstance(c.json, dict)
            and "messages" in c.json]


def last_user_blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    user = [m for m in body["messages"] if m.get("role") == "user"][-1]
    content = user["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


async def say(fake_telegram: Any, update: dict[str, Any], count: int) -> list[str]:
    fake_telegram.push(update)
    sent = await fake_telegram.wait_for_messages(USER, count, timeout=20)
    return [m.text for m in sent]


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
async def test_a_photo_reaches_the_model_as_an_image_and_is_stored_by_reference(
        tmp_path, fake_telegram, fake_openai, fake_anthropic, sdk):
    fake = fake_openai if sdk == "openai" else fake_anthropic
    photo = jpeg(1)
    config = telegram_config(tmp_path, fake_telegram, fake.base_url, model=model_for(sdk, fake),
                             streaming={"enabled": False})
    file_id = fake_telegram.add_file(photo, kind="photo", suffix=".jpg")
    async with telegram_gateway(config):
        texts = await say(fake_telegram, fake_telegram.updates.photo(CAPTION, user_id=USER,
                                                                     file_id=file_id), 1)
    assert texts == [f"echo: {CAPTION}"]
    [body] = chat_bodies(fake)
    blocks = last_user_blocks(body)
    if sdk == "openai":
        assert openai_images(body) == 1
        assert blocks[0]["image_url"]["url"] == f"data:image/jpeg;base64,{b64(photo)}"
    else:
        assert anthropic_images(body) == 1
        assert blocks[0]["source"] == {"type": "base64", "media_type": "image/jpeg",
                                       "data": b64(photo)}
    assert blocks[1]["text"] == CAPTION
    db = Path(config.db_path)
    [part] = stored_user_parts(db)
    assert (part["kind"], part["text"], part["mime"]) == ("image", CAPTION, "image/jpeg")
    kept = db.parent / "attachments" / part["file"]
    assert kept.read_bytes() == photo
    assert not database_holds(db, photo)


async def test_a_telegram_file_past_the_bot_api_limit_is_declined_by_its_size(
        tmp_path, fake_telegram, fake_openai):
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url)
    big = fake_telegram.add_file(b"%PDF-1.7 pretend", size=30 * MB, suffix=".pdf")
    async with telegram_gateway(config):
        texts = await say(fake_telegram, fake_telegram.updates.document(
            "scan.pdf", "application/pdf", user_id=USER, file_id=big), 1)
        assert "20 MB" in texts[0] and "scan.pdf" in texts[0] and "30 MB" in texts[0]
        texts = await say(fake_telegram, fake_telegram.updates.private_text("still there?",
                                                                            USER), 2)
    assert texts[1] == "echo: still there?"
    assert not fake_telegram.calls_to("getFile")
    assert len(chat_bodies(fake_openai)) == 1


async def test_a_discord_file_over_the_configured_cap_is_declined_naming_the_cap(
        tmp_path, fake_discord, fake_openai):
    config = discord_config(tmp_path, fake_discord, fake_openai.base_url,
                            attachments={"max_mb": 1})
    dm = fake_discord.dm_channel(str(USER))
    async with discord_gateway(config):
        await fake_discord.user_message(dm, "", author_id=str(USER), attachments=[
            ("dump.log", b"x" * (2 * MB), "text/plain")])
        [refusal] = await fake_discord.wait_for_messages(dm, 1, timeout=20)
        assert "1 MB" in refusal.content and "dump.log" in refusal.content
        await fake_discord.user_message(dm, "and now?", author_id=str(USER))
        sent = await fake_discord.wait_for_messages(dm, 2, timeout=20)
    assert sent[1].content == "echo: and now?"
    assert not [c for c in fake_discord.calls if "/attachments/" in c.path]


async def test_a_declared_size_over_the_cap_is_refused_before_any_download(tmp_path,
                                                                          fake_openai):
    platform = RecordingPlatform()
    gateway = await started_gateway(config_for(tmp_path, fake_openai.base_url,
                                               attachments={"max_mb": 1}), [platform])
    try:
        big = replace(platform.attach("document", b"small after all", "big.txt"), size=5 * MB)
        await platform.say("", attachments=(big,))
        await platform.say("hello")
        await platform.wait_delivered(2)
    finally:
        await close(gateway)
    refusal, answer = platform.texts()
    assert refusal == "big.txt (5 MB) is too big: I can take files up to 1 MB."
    assert answer == "echo: hello" and platform.downloads == []


async def test_files_left_unread_by_a_crash_are_fetched_or_declined_after_restart(
        tmp_path, fake_openai):
    config = config_for(tmp_path, fake_openai.base_url)
    before = RecordingPlatform()
    gateway = await started_gateway(config, [before])
    note = before.attach("document", b"The spare key is under the BLUE_POT.\n", "note.txt")
    await gateway.store.ingest(
        platform="test", chat_id="1", message_id="77", chat_key="test:1", text="where?",
        sender_id="u1", sender_name="Ada",
        extra={"thread_id": None, "is_group": False, "attachments": [note.as_dict()]})
    sticker = before.attach("sticker", b"RIFF....WEBP", "sticker")
    await gateway.store.ingest(
        platform="test", chat_id="1", message_id="78", chat_key="test:1", text="",
        sender_id="u1", sender_name="Ada",
        extra={"thread_id": None, "is_group": False, "attachments": [sticker.as_dict()]})
    await close(gateway)
    after = RecordingPlatform()
    after.files = dict(before.files)
    gateway = await started_gateway(config, [after])
    try:
        await after.wait_delivered(2)
    finally:
        await close(gateway)
    [answer] = [t for t in after.texts() if t.startswith("echo:")]
    assert answer.startswith("echo: [file: note.txt") and "BLUE_POT" in answer
    [refusal] = [t for t in after.texts() if not t.startswith("echo:")]
    assert refusal.startswith("I can't open stickers")
    assert after.downloads == [note.ref]


async def test_code_and_pdf_are_answered_from_their_text(tmp_path, fake_telegram, fake_openai):
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url)
    code = b"def greet(name):\n    return f'hello {name}'  # GREETING_MARKER\n"
    paper = pdf("Quarterly report. Revenue grew by PDF_MARKER_42 percent.")
    async with telegram_gateway(config):
        await say(fake_telegram, fake_telegram.updates.document(
            "greet.py", "application/octet-stream", caption="what does this do?",
            user_id=USER, data=code), 1)
        await say(fake_telegram, fake_telegram.updates.document(
            "report.pdf", "application/pdf", user_id=USER, data=paper), 2)
    first, second = (last_user_blocks(b) for b in chat_bodies(fake_openai))
    assert "GREETING_MARKER" in first[0]["text"] and "greet.py" in first[0]["text"]
    assert first[-1]["text"] == "what does this do?"
    assert "PDF_MARKER_42" in second[0]["text"] and "report.pdf" in second[0]["text"]


async def test_a_long_text_is_clipped_head_and_tail_and_a_program_is_refused(
        tmp_path, fake_telegram, fake_openai):
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url)
    lines = [f"line {i:07d} of the log" for i in range(90_000)]
    log_text = ("HEAD_MARKER\n" + "\n".join(lines) + "\nTAIL_MARKER\n").encode()
    assert len(log_text) > 2 * MB
    async with telegram_gateway(config):
        texts = await say(fake_telegram, fake_telegram.updates.document(
            "server.log", "text/plain", caption="any errors?", user_id=USER, data=log_text), 2)
        assert "server.log" in texts[0] and "beginning" in texts[0]  # told, before the reply
        texts = await say(fake_telegram, fake_telegram.updates.document(
            "tool", "application/octet-stream", user_id=USER, data=ELF), 3)
    assert texts[2].startswith("I can't read tool:") and "program" in texts[2]
    [body] = chat_bodies(fake_openai)
    given = last_user_blocks(body)[0]["text"]
    assert "HEAD_MARKER" in given and "TAIL_MARKER" in given
    assert "line 0045000" not in given and "left out" in given
    assert len(given) <= 100_000 + 200


async def test_a_voice_message_is_answered_from_its_transcript(tmp_path, fake_telegram,
                                                               fake_openai):
    said = "remind me to water the tomatoes tomorrow"
    fake_openai.transcripts[hashlib.sha256(OGG).hexdigest()] = said
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url,
                             transcription={"model": "whisper-1",
                                            "base_url": fake_openai.base_url,
                                            "api_key": "test-key"})
    async with telegram_gateway(config):
        texts = await say(fake_telegram, fake_telegram.updates.voice(user_id=USER, data=OGG), 2)
    assert texts == [f'Heard: "{said}"', f"echo: (voice message) {said}"]
    [request] = fake_openai.transcriptions
    assert request.model == "whisper-1" and request.data == OGG


async def test_without_transcription_a_voice_message_gets_one_clear_sentence(
        tmp_path, fake_telegram, fake_openai):
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url)
    async with telegram_gateway(config):
        texts = await say(fake_telegram, fake_telegram.updates.voice(user_id=USER, data=OGG), 1)
        texts = await say(fake_telegram, fake_telegram.updates.private_text("ok", USER), 2)
    assert texts[0].startswith("I can't listen to voice messages here")
    assert texts[0].count(".") <= 2 and texts[1] == "echo: ok"
    assert not fake_telegram.calls_to("getFile") and len(chat_bodies(fake_openai)) == 1
