"""OpenAI-format chat messages: the one way to read their text, whatever their shape."""

from __future__ import annotations

from typing import Any

from agent.attachments.parts import is_attachment, placeholder

Message = dict[str, Any]

IMAGE_PLACEHOLDER = "[image]"
_IMAGE_TYPES = ("image_url", "image", "input_image")


def content_text(content: Any) -> str:
    """The text of a content value of any shape; images become a short placeholder.

    A string is itself; a list of parts joins its text parts (and the content of nested
    tool-result blocks) with newlines, an attachment standing as its placeholder
    ("[image: caption]", "[file: name, N chars]"); anything else is its string form.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict):
                if is_attachment(part):
                    parts.append(placeholder(part))
                elif part.get("type") in _IMAGE_TYPES:
                    parts.append(IMAGE_PLACEHOLDER)
                elif isinstance(part.get("text"), str):
                    parts.append(part["text"])
                elif "content" in part:
                    parts.append(content_text(part["content"]))
        return "\n".join(p for p in parts if p)
    return str(content)


def public_keys(value: dict[str, Any]) -> dict[str, Any]:
    """The dict without our bookkeeping keys ("_..."), which strict APIs reject as unknown."""
    return {k: v for k, v in value.items() if not str(k).startswith("_")}
