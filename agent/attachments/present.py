"""Attachments as a model reads them, made for each request from the stored parts.

A vision model gets each picture as image content (an OpenAI `image_url` data URL, which
the Anthropic provider turns into a base64 image block) followed by its caption; at most
MAX_IMAGES of the newest pictures go with one request, with at most MAX_IMAGE_CHARS of
base64 in all. A model that cannot see pictures, a picture past those limits, or one
whose file is gone, gets a one-line note instead. A
document becomes its text between a header and an end line; a voice note, its transcript.

A picture a tool returned (an MCP tool's) is kept and stored the same way, in the tool's
result. Chat APIs take pictures from the user only, so each request shows it in a user
message right after the run of tool results it came in; the result keeps its words and
says where the picture went.
"""

from __future__ import annotations

from typing import Any

from agent.attachments.files import AttachmentFiles
from agent.attachments.parts import attachments_in, is_attachment

Message = dict[str, Any]

MAX_IMAGES = 50  # pictures sent with one request, newest first (Anthropic takes 100)
MAX_IMAGE_CHARS = 20_000_000  # and their base64 in all: Anthropic refuses requests > 32 MB
NOT_SEEN = "[a picture was attached here; this model cannot see pictures]"
GONE = "[a picture was attached here; its file is no longer kept]"
OLDER = "[an earlier picture, not sent again with this request]"
LIFTED = "[the picture is shown in the next message]"
TOOL_PICTURES = "(pictures from the tool results above)"
_LIFT = "_lift"  # marks a tool result's part that moves to the user message after it


class _Pictures:
    """How many more pictures this request may carry (counted from the newest)."""

    def __init__(self, files: AttachmentFiles | None, vision: bool, left: int) -> None:
        self.files, self.vision, self.left = files, vision, left
        self.room = MAX_IMAGE_CHARS

    def part(self, part: dict[str, Any]) -> dict[str, Any]:
        if not self.vision or self.files is None:
            return _text(NOT_SEEN)
        if self.left <= 0:
            return _text(OLDER)
        url = self.files.data_url(str(part.get("file") or ""),
                                  str(part.get("mime") or "image/jpeg"))
        if url is None:
            return _text(GONE)
        if len(url) > self.room:
            self.left = 0  # older pictures would not fit either: keep the order simple
            return _text(OLDER)
        self.left -= 1
        self.room -= len(url)
        return {"type": "image_url", "image_url": {"url": url}}


def for_model(messages: list[Message], files: AttachmentFiles | None, *, vision: bool,
              max_images: int = MAX_IMAGES) -> list[Message]:
    """The messages with every attachment part made into parts a provider takes; the
    same list when there are none."""
    if not any(attachments_in(m.get("content")) for m in messages):
        return messages
    pictures = _Pictures(files, vision, max_images)
    out: list[Message] = []
    lifted = False
    for message in reversed(messages):  # the newest pictures are the ones sent
        content = message.get("content")
        if attachments_in(content):
            groups = [_part(p, pictures) if is_attachment(p) else [p]
                      for p in reversed(content)]
            if message.get("role") == "tool":
                groups = [_lifted(g) for g in groups]
                lifted = True
            message = {**message, "content": [p for g in reversed(groups) for p in g]}
        out.append(message)
    out.reverse()
    return _pictures_after_tools(out) if lifted else out


def _lifted(group: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A tool result's picture (and its caption) marked to move; a note in its place."""
    if not group or group[0].get("type") != "image_url":
        return group  # a note: this model does not see it, or it is gone
    return [_text(LIFTED), *({**p, _LIFT: True} for p in group)]


def _pictures_after_tools(messages: list[Message]) -> list[Message]:
    """Each run of tool results followed by one user message with their pictures; each
    result's content left as plain words."""
    out: list[Message] = []
    shown: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content")
        if message.get("role") == "tool" and isinstance(content, list):
            shown += [{k: v for k, v in p.items() if k != _LIFT} for p in content if p.get(_LIFT)]
            words = [str(p.get("text") or "") for p in content
                     if not p.get(_LIFT) and p.get("type") == "text"]
            message = {**message, "content": "\n".join(w for w in words if w)}
        elif shown and message.get("role") != "tool":
            out.append({"role": "user", "content": [_text(TOOL_PICTURES), *shown]})
            shown = []
        out.append(message)
    if shown:
        out.append({"role": "user", "content": [_text(TOOL_PICTURES), *shown]})
    return out


def _part(part: dict[str, Any], pictures: _Pictures) -> list[dict[str, Any]]:
    kind, text = part.get("kind"), str(part.get("text") or "")
    if kind == "image":
        return [pictures.part(part), *([_text(text)] if text else [])]
    if kind == "file":
        name = part.get("name") or "file"
        clipped = ", clipped" if part.get("truncated") else ""
        chars = int(part.get("chars") or len(text))
        return [_text(f"[file: {name} ({part.get('mime') or 'text'}, {chars:,} characters"
                      f"{clipped})]\n{text}\n[end of {name}]")]
    return [_text(f"(voice message) {text}" if text else "(a voice message without words)")]


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}
