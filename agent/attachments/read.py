"""What a downloaded file is, and what a model is given of it.

Platforms misfile things (a PNG sent "as a document", a .py file declared
application/octet-stream), so a file is judged by its bytes first and by its name and
declared type only where the bytes leave a choice. Pure and synchronous: the gateway
calls these through asyncio.to_thread.
"""

from __future__ import annotations

import mimetypes

import filetype

from agent.attachments.images import ModelImage, model_image
from agent.attachments.text import FileText, Unreadable, decode, is_pdf, read_text

__all__ = ["FileText", "ModelImage", "Unreadable", "model_image", "read_text", "sniff"]

_MEDIA = ("image", "audio", "video")


def sniff(data: bytes, name: str | None, declared_mime: str | None) -> str:
    """What the file is, judged by content: "image", "pdf", "text", "audio", "video" or
    "binary"."""
    if is_pdf(data):
        return "pdf"
    # Text first: a text file may begin with letters another format uses as its magic
    # number ("BM" is a bitmap's, "MZ" a program's), but no real binary decodes as text.
    if decode(data) is not None:
        return "text"
    match = filetype.guess(data)
    family = match.mime.partition("/")[0] if match else ""
    if family not in _MEDIA:
        return "binary"
    if family == "image":
        return "image"
    # Audio and video share containers (WebM, MP4, Ogg): the sender's word says which,
    # its declared type first, then the file's name.
    for mime in (declared_mime, mimetypes.guess_type(name or "")[0]):
        said = (mime or "").partition("/")[0]
        if said in ("audio", "video"):
            return said
    return family
