"""What an MCP tool call returned, as the loop takes it: words, and pictures apart.

Text parts are the words, joined by newlines. Structured content is written as JSON
when the result has no text (the protocol asks servers to send its JSON as text too, so
a text part is taken to say it already). Pictures are handed back as bytes for the host to keep like a picture a
user sent; audio and links to resources are named, not fetched.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types

MAX_PICTURES = 4  # per call: more are named, not kept


@dataclass(frozen=True)
class Picture:
    data: bytes
    mime: str


@dataclass(frozen=True)
class McpOutput:
    text: str
    pictures: tuple[Picture, ...] = field(default=())
    error: bool = False  # the server says the call failed (isError); `text` says why


def read_result(result: types.CallToolResult) -> McpOutput:
    texts: list[str] = []
    pictures: list[Picture] = []
    for part in result.content:
        if isinstance(part, types.TextContent):
            texts.append(part.text)
        elif isinstance(part, types.ImageContent):
            picture = _picture(part.data, part.mime_type)
            if picture is not None and len(pictures) < MAX_PICTURES:
                pictures.append(picture)
            else:
                texts.append(f"[a picture ({part.mime_type}) that could not be shown]")
        elif isinstance(part, types.AudioContent):
            texts.append(f"[audio ({part.mime_type}), not played here]")
        elif isinstance(part, types.ResourceLink):
            texts.append(f"[resource: {part.name} <{part.uri}>]")
        elif isinstance(part, types.EmbeddedResource):
            texts.append(_resource(part.resource))
    structured = result.structured_content
    if structured is not None and not texts:
        texts.append(json.dumps(structured, ensure_ascii=False, sort_keys=True))
    return McpOutput("\n".join(texts), tuple(pictures), error=bool(result.is_error))


def _picture(data: str, mime: str) -> Picture | None:
    try:
        return Picture(base64.b64decode(data, validate=True), mime)
    except (binascii.Error, ValueError):
        return None


def _resource(resource: Any) -> str:
    text = getattr(resource, "text", None)
    if isinstance(text, str):
        return text
    blob = getattr(resource, "blob", "") or ""
    return (f"[binary resource <{resource.uri}> ({resource.mime_type or 'unknown type'}, "
            f"about {len(blob) * 3 // 4:,} bytes), not shown]")

