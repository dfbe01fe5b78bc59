"""Attachment parts: how a stored message holds a file, how plain-text readers see it, how
each request shows it to a model, where its file is kept, and what it costs in tokens."""

from __future__ import annotations

import base64
import os
import time

import pytest

from agent.attachments.files import AttachmentFiles
from agent.attachments.parts import attachment_part, build_content, placeholder
from agent.attachments.present import GONE, NOT_SEEN, OLDER, for_model
from agent.messages import content_text
from agent.tokens import IMAGE_NOTE_TOKENS, TokenCache, estimate_message, image_tokens

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 40


def picture(files: AttachmentFiles, data: bytes = PNG, chat: str = "telegram:1") -> dict:
    ref = files.save(chat, data, "png")
    return attachment_part("image", file=ref, name="p.png", mime="image/png", size=len(data))


def document(text: str = "print('hi')\n", chars: int | None = None) -> dict:
    return attachment_part("file", file="0" * 24 + "/" + "1" * 32 + ".py", name="hello.py",
                           mime="text/x-python", size=len(text), text=text,
                           chars=chars or len(text), truncated=chars is not None)


def test_one_picture_carries_its_caption_and_reads_as_image_caption(tmp_path):
    files = AttachmentFiles(tmp_path)
    content = build_content("what bird is this?", [picture(files)])
    assert isinstance(content, list) and len(content) == 1
    assert content_text(content) == "[image: what bird is this?]"
    assert "base64" not in str(content) and "PNG" not in str(content)


def test_several_attachments_keep_the_text_as_a_part_of_its_own(tmp_path):
    files = AttachmentFiles(tmp_path)
    content = build_content("compare these", [picture(files), picture(files, PNG + b"2"),
                                              document()])
    assert content_text(content).splitlines() == [
        "[image]", "[image]", "[file: hello.py, 12 chars]", "compare these"]
    assert build_content("plain", []) == "plain"


def test_placeholders_name_the_file_and_its_full_length_never_its_text():
    clipped = document("head … tail", chars=2_000_000)
    assert placeholder(clipped) == "[file: hello.py, 2,000,000 chars]"
    voice = attachment_part("audio", file="x", name="v.ogg", mime="audio/ogg", size=9,
                            text="call mum at six")
    assert placeholder(voice) == "[voice message: call mum at six]"


def test_a_vision_model_gets_the_picture_as_a_data_url_then_the_caption(tmp_path):
    files = AttachmentFiles(tmp_path)
    message = {"role": "user", "content": build_content("what is it?", [picture(files)])}
    sent = for_model([message], files, vision=True)
    image, caption = sent[0]["content"]
    assert image["type"] == "image_url"
    assert image["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert caption == {"type": "text", "text": "what is it?"}
    assert message["content"][0]["type"] == "attachment"  # the stored form is untouched


def test_a_model_that_cannot_see_reads_a_note_and_the_caption(tmp_path):
    files = AttachmentFiles(tmp_path)
    message = {"role": "user", "content": build_content("what is it?", [picture(files)])}
    sent = for_model([message], files, vision=False)
    assert sent[0]["content"] == [{"type": "text", "text": NOT_SEEN},
                                  {"type": "text", "text": "what is it?"}]


def test_only_the_newest_pictures_are_sent_and_a_lost_file_is_a_note(tmp_path):
    files = AttachmentFiles(tmp_path)
    messages = [{"role": "user", "content": [picture(files, PNG + bytes([i]))]}
                for i in range(4)]
    sent = for_model(messages, files, vision=True, max_images=2)
    kinds = [m["content"][0].get("text") or m["content"][0]["type"] for m in sent]
    assert kinds == [OLDER, OLDER, "image_url", "image_url"]
    os.remove(files.path(messages[3]["content"][0]["file"]))
    fresh = AttachmentFiles(tmp_path)  # nothing cached in memory
    assert for_model(messages[3:], fresh, vision=True)[0]["content"][0]["text"] == GONE


def test_a_document_is_its_text_between_a_header_and_an_end_line():
    sent = for_model([{"role": "user", "content": build_content("", [document()])}],
                     None, vision=True)
    text = sent[0]["content"][0]["text"]
    assert text.startswith("[file: hello.py (text/x-python, 12 characters)]\nprint('hi')")
    assert text.endswith("[end of hello.py]")


def test_messages_without_attachments_are_passed_through_as_the_same_list():
    messages = [{"role": "user", "content": "hi"}]
    assert for_model(messages, None, vision=True) is messages


def test_files_are_kept_once_by_content_and_refs_cannot_leave_the_root(tmp_path):
    files = AttachmentFiles(tmp_path)
    first = files.save("telegram:1", PNG, "png")
    assert files.save("telegram:1", PNG, "png") == first
    assert files.read(first) == PNG
    assert "telegram" not in first and len(list(tmp_path.rglob("*.png"))) == 1
    for bad in ("../etc/passwd", "/etc/passwd", first.replace(".png", "/../x.png")):
        assert files.path(bad) is None and files.read(bad) is None


def test_the_sweep_removes_files_unused_past_retention_and_keeps_used_ones(tmp_path):
    files = AttachmentFiles(tmp_path)
    old, used = files.save("c", b"old", "txt"), files.save("c", b"used", "txt")
    month_ago = time.time() - 31 * 86_400
    for ref in (old, used):
        os.utime(files.path(ref), (month_ago, month_ago))
    assert files.read(used) == b"used"  # a read is a use
    assert files.sweep(30 * 86_400) == 1
    assert files.read(old) is None and files.read(used) == b"used"
    assert files.sweep(0) == 0  # 0 keeps everything


@pytest.mark.parametrize(("provider", "vision", "cost"), [
    ("anthropic", True, 1_600), ("openai", True, 765), ("local", False, IMAGE_NOTE_TOKENS),
    ("openai", False, IMAGE_NOTE_TOKENS)])
def test_the_estimate_counts_each_picture_at_the_providers_constant(tmp_path, provider,
                                                                   vision, cost):
    files = AttachmentFiles(tmp_path)
    pictures = [picture(files, PNG + bytes([i])) for i in range(3)]
    message = {"role": "user", "content": build_content("look", pictures)}
    without = estimate_message({"role": "user", "content": build_content("look", [])})
    assert image_tokens(provider, vision) == cost
    assert TokenCache(image_cost=cost).tokens(message) == without + 3 * cost


def test_pictures_stop_at_the_byte_budget_of_one_request(tmp_path, monkeypatch):
    from agent.attachments import present

    files = AttachmentFiles(tmp_path)
    messages = [{"role": "user", "content": [picture(files, PNG * 50 + bytes([i]))]}
                for i in range(4)]
    one = len(files.data_url(messages[0]["content"][0]["file"], "image/png"))
    monkeypatch.setattr(present, "MAX_IMAGE_CHARS", one * 2 + 10)
    sent = for_model(messages, files, vision=True)
    kinds = [m["content"][0].get("text") or m["content"][0]["type"] for m in sent]
    assert kinds == [OLDER, OLDER, "image_url", "image_url"]
