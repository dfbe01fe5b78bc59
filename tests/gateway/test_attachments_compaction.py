"""Acceptance 6 of issue 15: a conversation of 40 pictures compacts. No summarizer request
carries a picture's bytes, every request the fake Anthropic validated was taken, and the
fit estimate counts the pictures (their text alone would never fill the window). A
compacted picture stays retrievable: `threadline sessions show` names its file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.attachments.parts import attachments_in
from tests.harness.cli import threadline
from tests.harness.fake_anthropic import base64_images
from tests.harness.gateway import (
    close,
    config_for,
    is_summary_request,
    started_gateway,
    summarizing_responder,
)
from tests.harness.media import b64, jpeg
from tests.harness.platform import RecordingPlatform

pytestmark = pytest.mark.timeout(120)
USER = 5550002
PICTURES = 40
IMAGE_COST = 1_600  # our estimate of one picture for Claude


def contents(paths: list[str]) -> list[bytes]:
    return [Path(path).read_bytes() for path in paths]


@pytest.fixture
def platform() -> RecordingPlatform:
    return RecordingPlatform()


async def test_forty_pictures_compact_without_bytes_in_any_summary(tmp_path, fake_anthropic,
                                                                  platform):
    fake_anthropic.responder = summarizing_responder
    photos = [jpeg(i) for i in range(PICTURES)]
    config = config_for(
        tmp_path, fake_anthropic.base_url,
        model={"provider": "anthropic", "name": "claude-sonnet-5", "context_length": 40_000},
        compression={"protect_last_n": 6})
    gateway = await started_gateway(config, [platform])
    try:
        for i, photo in enumerate(photos):
            await platform.say(f"picture number {i}", attachments=(
                platform.attach("image", photo, f"p{i}.jpg", "image/jpeg"),))
            await platform.wait_delivered(i + 1)
        session, agent = await gateway.conversations.view("test:1")
        live = agent.messages.as_list()
        estimate = agent.engine.raw_request_estimate(agent.messages)
    finally:
        await close(gateway)
    texts = platform.texts()
    # Every turn was answered (besides, the chat is told how often it was compacted).
    assert [t for t in texts if t.startswith("echo:")] == [
        f"echo: picture number {i}" for i in range(PICTURES)]
    assert not [t for t in texts if not t.startswith(("echo:", "This conversation has"))]
    assert session.compression_count >= 1

    bodies = [c.json for c in fake_anthropic.calls if isinstance(c.json, dict)
              and "messages" in c.json]
    summaries = [b for b in bodies if is_summary_request(b)]
    assert summaries
    for body in summaries:
        dumped = json.dumps(body)
        assert base64_images(body) == 0 and '"image"' not in dumped
        assert not any(b64(photo)[:60] in dumped for photo in photos)
        assert "[image: picture number" in dumped  # the placeholder stands in

    live_pictures = sum(len(attachments_in(m.get("content"))) for m in live)
    assert 0 < live_pictures < PICTURES
    chats = [b for b in bodies if not is_summary_request(b)]
    assert base64_images(chats[-1]) >= live_pictures  # the kept ones still go as pictures
    text_only = sum(len(json.dumps(m)) for m in live) // 4
    assert estimate >= live_pictures * IMAGE_COST > text_only

    shown = await threadline("sessions", "show", session.parent_session_id or "", "--config",
                             str(config.source), home=tmp_path)
    assert shown.code == 0, shown.err
    kept = [line.rsplit(" ", 1)[1] for line in shown.out.splitlines()
            if line.strip().startswith("attached image")]
    assert kept and all(data in photos for data in contents(kept))
