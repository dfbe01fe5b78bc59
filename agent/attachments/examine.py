"""One downloaded file, judged and read in one go: the job a reader worker process runs.

The gateway hands this function the bytes and gets back a picture as a vision API takes
it, or a document's text; everything it costs (sniffing, decoding, PDF parsing) happens in
the worker, whose time and memory the gateway bounds (docs/architecture.md, "Untrusted
work"). Pure and synchronous; the result is small and crosses the process boundary.
"""

from __future__ import annotations

from agent.attachments.read import FileText, ModelImage, Unreadable, model_image, read_text, sniff

PROBE_CHARS = 1_000  # a binary is read this far only to say what it is


def examine(data: bytes, name: str | None, mime: str | None, kind: str,
            max_chars: int) -> ModelImage | FileText | str:
    """A picture (ModelImage), a document's text (FileText), or "audio" for the caller to
    transcribe; Unreadable, naming what the file is, for anything else."""
    what = "audio" if kind in ("voice", "audio") else sniff(data, name, mime)
    if what == "image":
        return model_image(data)
    if what in ("text", "pdf"):
        return read_text(data, name, mime, max_chars)
    if what == "audio":
        return "audio"
    if what == "video":
        raise Unreadable("it is a video")
    # The reader names what it is ("a program", "a ZIP archive"...) as it refuses.
    read_text(data, name, mime, PROBE_CHARS)
    raise Unreadable("it is not a text, PDF or picture file")
