"""The attachment part of a stored user message, and every way it is read as text.

A stored message never holds a file's bytes. A picture, document or voice note is one
content part `{"type": "attachment", "kind": ..., "file": <ref>, ...}` that names the file
kept under the data directory (`AttachmentFiles`) and carries what was read from it:

- image: `text` is its caption; a vision model gets the picture itself (present.py).
- file: `text` is the document's text (clipped to the cap), `chars` its full length.
- audio: `text` is the transcript.

Its `text` is what search indexes. The summarizer, `sessions show` and every other reader
of plain text see a short placeholder instead ("[image: caption]", "[file: name, N chars]").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

ATTACHMENT = "attachment"
KINDS = ("image", "file", "audio")


def attachment_part(kind: str, *, file: str, name: str, mime: str, size: int,
                    text: str = "", **extra: Any) -> dict[str, Any]:
    """A part for a stored message; `extra` holds kind-specific facts (chars, truncated...)."""
    if kind not in KINDS:
        raise ValueError(f"unknown attachment kind {kind!r}")
    part = {"type": ATTACHMENT, "kind": kind, "file": file, "name": name, "mime": mime,
            "bytes": size, **extra}
    if text:
        part["text"] = text
    return part


def is_attachment(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == ATTACHMENT


def attachments_in(content: Any) -> list[dict[str, Any]]:
    """The attachment parts of a content value (none for a string)."""
    return [p for p in content if is_attachment(p)] if isinstance(content, list) else []


def placeholder(part: dict[str, Any]) -> str:
    """The part as a line of text, never its contents."""
    kind, text = part.get("kind"), str(part.get("text") or "").strip()
    if kind == "image":
        return f"[image: {text}]" if text else "[image]"
    if kind == "file":
        chars = int(part.get("chars") or len(text))
        return f"[file: {part.get('name') or 'file'}, {chars:,} chars]"
    return f"[voice message: {text}]" if text else "[voice message]"


def build_content(text: str, parts: Iterable[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """A user message's content from its text and attachment parts.

    One picture that came with a caption of its own carries that caption: the picture
    and its words stay one thing ("[image: caption]"). Otherwise the text follows the
    attachments as a text part of its own.
    """
    parts = list(parts)
    if not parts:
        return text
    if text.strip() and len(parts) == 1 and parts[0].get("kind") == "image" \
            and not parts[0].get("text"):
        return [{**parts[0], "text": text}]
    return [*parts, {"type": "text", "text": text}] if text.strip() else parts


def model_chars(part: dict[str, Any]) -> tuple[int, int]:
    """(characters of text, pictures) a provider reads for the part, for the estimate."""
    text = str(part.get("text") or "")
    if part.get("kind") == "image":
        return len(text), 1
    return len(text) + len(str(part.get("name") or "")) + 48, 0  # 48: the header line
