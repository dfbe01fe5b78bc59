"""A document's text for the model: decoded, named, and clipped to fit.

Text files are decoded as UTF-8 (a BOM is fine), UTF-16 with a BOM, or a legacy 8-bit
code page when the bytes look like text; PDFs are read with pypdf. Anything else is
refused with a phrase saying what it is. Text longer than the cap keeps its head and its
tail with a one-line note between them (docs/architecture.md, "Attachments").

Reading costs time in proportion to the file, never more: a long text is decoded once and
copied at most once more (to plain newlines); a PDF is read from both ends only while its
pages give text, each page's content is measured before pypdf parses it, the whole
reading has a deadline, and a PDF whose objects nest too deep for pypdf is refused
before pypdf reads it.
"""

from __future__ import annotations

import codecs
import json
import logging
import re
from dataclasses import dataclass
from pathlib import PurePath

import filetype

from agent.attachments.pdf import Unreadable, pdf_text

log = logging.getLogger(__name__)

HEAD_SHARE = 0.8  # of a clipped text, the part kept from its beginning
JSON_SNIFF_CHARS = 1_000_000  # longer texts are called JSON by their first and last marks
# Control bytes that plain text does not contain (tab, newlines, form feed, backspace and
# ESC, which coloured logs use, are allowed); a few are tolerated, a binary has many.
_CONTROL = bytes(b for b in range(32) if b not in b"\t\n\v\f\r\b\x1b") + b"\x7f"
_MACH_O = (b"\xfe\xed\xfa\xce", b"\xfe\xed\xfa\xcf", b"\xce\xfa\xed\xfe", b"\xcf\xfa\xed\xfe",
           b"\xca\xfe\xba\xbe")  # filetype knows ELF and MZ programs but not these
_ARCHIVES = {"zip", "tar", "rar", "gz", "bz2", "7z", "xz", "zst", "lz4", "lz", "lzo", "Z",
             "br", "cab", "ar", "deb", "rpm"}


@dataclass(frozen=True)
class FileText:
    text: str  # whole, or head + note + tail when clipped
    chars: int  # characters of the whole extracted text
    truncated: bool
    kind: str  # a short human type: "PDF", "Python", "Markdown", "text"...
    mime: str


_PDF = ("PDF", "application/pdf")
_PLAIN = ("text", "text/plain")
_KINDS: dict[str, tuple[str, str]] = {
    "py": ("Python", "text/x-python"), "pyi": ("Python", "text/x-python"),
    "md": ("Markdown", "text/markdown"), "markdown": ("Markdown", "text/markdown"),
    "json": ("JSON", "application/json"), "jsonl": ("JSON Lines", "application/jsonl"),
    "csv": ("CSV", "text/csv"), "tsv": ("TSV", "text/tab-separated-values"),
    "yaml": ("YAML", "application/yaml"), "yml": ("YAML", "application/yaml"),
    "toml": ("TOML", "application/toml"), "ini": ("INI", "text/plain"),
    "js": ("JavaScript", "text/javascript"), "mjs": ("JavaScript", "text/javascript"),
    "ts": ("TypeScript", "text/x-typescript"), "tsx": ("TypeScript", "text/x-typescript"),
    "c": ("C", "text/x-c"), "h": ("C", "text/x-c"), "cpp": ("C++", "text/x-c++"),
    "cc": ("C++", "text/x-c++"), "hpp": ("C++", "text/x-c++"), "go": ("Go", "text/x-go"),
    "rs": ("Rust", "text/x-rust"), "java": ("Java", "text/x-java"),
    "rb": ("Ruby", "text/x-ruby"), "php": ("PHP", "text/x-php"),
    "sh": ("shell script", "text/x-shellscript"), "bash": ("shell script", "text/x-shellscript"),
    "sql": ("SQL", "application/sql"), "html": ("HTML", "text/html"),
    "htm": ("HTML", "text/html"), "css": ("CSS", "text/css"), "xml": ("XML", "application/xml"),
    "svg": ("SVG", "image/svg+xml"), "log": ("log", "text/plain"), "txt": _PLAIN,
}
_BY_MIME = {kind[1]: kind for kind in _KINDS.values() if kind[1] != "text/plain"}
_SHOWN = re.compile(r"\S")


def read_text(data: bytes, name: str | None, declared_mime: str | None,
              max_chars: int) -> FileText:
    """The text of a text or PDF file, clipped to `max_chars`; Unreadable otherwise."""
    gap = None
    if is_pdf(data):
        text, chars, gap = pdf_text(data, max_chars)
        kind = _PDF
    else:
        text = decode(data)
        if text is None:
            raise Unreadable(what_binary(data))
        if "\r" in text:  # each replacement frees the text it was made from
            text = text.replace("\r\n", "\n")
            if "\r" in text:
                text = text.replace("\r", "\n")
        if not text or text.isspace():
            raise Unreadable("the file is empty")
        chars, kind = len(text), _kind(text, name, declared_mime)
    clipped, truncated = clip(text, max_chars, chars, gap)
    return FileText(clipped, chars, truncated, *kind)


def is_pdf(data: bytes) -> bool:
    # Readers accept the header anywhere in the first kilobyte (some files start with
    # junk), but a text file that merely mentions it is text.
    at = data.find(b"%PDF-", 0, 1024)
    return at == 0 or (at > 0 and decode(data) is None)


def decode(data: bytes) -> str | None:
    """The bytes as text, or None when they do not look like text."""
    if data.startswith(codecs.BOM_UTF8):
        codec = "utf-8-sig"
    elif data[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
        codec = "utf-16"
    else:
        codec = "utf-8"
    try:
        text = data.decode(codec)
    except UnicodeDecodeError:
        if codec != "utf-8":
            return None
        text = _legacy(data)
    if "\x00" in text:  # text never holds one; a tar of text files has a few
        return None
    return text if _few_controls(data if codec == "utf-8" else text) else None


def _few_controls(source: bytes | str) -> bool:
    """At most one control byte in fifty, counted in UTF-8 a megabyte at a time (so a long
    text is never copied whole)."""
    controls = size = 0
    for at in range(0, len(source), 1 << 20):
        piece = source[at:at + (1 << 20)]
        raw = piece.encode("utf-8", "surrogatepass") if isinstance(piece, str) else piece
        size += len(raw)
        controls += len(raw) - len(raw.translate(None, _CONTROL))
    return controls * 50 <= size


def _legacy(data: bytes) -> str:
    try:
        return data.decode("cp1252")  # Latin-1 with Windows' quotes and dashes
    except UnicodeDecodeError:
        return data.decode("latin-1")


def what_binary(data: bytes) -> str:
    """What a file that is not text is, as a phrase for Unreadable."""
    match = filetype.guess(data)
    ext = match.extension if match else ""
    if data[:4] in _MACH_O or ext in ("exe", "elf", "wasm"):
        return "it is a program (an executable)"
    if match is None:
        return "it is not a text file (it holds binary data)"
    label = ext.upper()
    if match in filetype.image_matchers:
        return "it is a picture"
    if match in filetype.audio_matchers:
        return "it is a sound recording"
    if match in filetype.video_matchers:
        return "it is a video"
    if match in filetype.font_matchers:
        return "it is a font"
    if match in filetype.document_matchers:
        return f"it is an office document ({label})"
    if ext in _ARCHIVES:
        article = "an" if label[0] in "AEFHILMNORSX" else "a"  # the letters' names
        return f"it is {article} {label} archive"
    return f"it is a binary file ({label}), not text"


def _kind(text: str, name: str | None, declared_mime: str | None) -> tuple[str, str]:
    suffix = PurePath(name or "").suffix.lower().lstrip(".")
    declared = (declared_mime or "").partition(";")[0].strip().lower()
    if suffix in _KINDS:
        return _KINDS[suffix]
    if declared in _BY_MIME:
        return _BY_MIME[declared]
    shown = _SHOWN.search(text)  # where the text starts, past any blank lines
    at = shown.start() if shown else len(text)
    start = text[at:at + 200].lower()
    if start.startswith("#!"):
        shebang = start.partition("\n")[0]
        return _KINDS["py"] if "python" in shebang else _KINDS["sh"] if "sh" in shebang \
            else _PLAIN
    if start.startswith(("<!doctype html", "<html")):
        return _KINDS["html"]
    if start.startswith(("<?xml", "<svg")):
        return _KINDS["svg"] if "<svg" in start else _KINDS["xml"]
    if start[:1] in ("{", "[") and _is_json(text, start[0]):
        return _KINDS["json"]
    return ("text", declared) if declared.startswith("text/") else _PLAIN


def _is_json(text: str, first: str) -> bool:
    if len(text) > JSON_SNIFF_CHARS:  # parsing it whole could take gigabytes: judge its ends
        return text[-256:].rstrip().endswith("}" if first == "{" else "]")
    try:
        json.loads(text)
        return True
    except (ValueError, RecursionError):  # RecursionError: nested too deep
        return False


def clip(text: str, max_chars: int, chars: int | None = None,
         gap: int | None = None) -> tuple[str, bool]:
    """`text` whole when it fits, else its head and tail around a one-line note; never
    longer than `max_chars`. A long PDF read from both ends passes `gap`, where its unread
    middle lies in `text`, and `chars`, its estimated whole length."""
    whole = len(text) if chars is None else chars
    if whole <= max_chars and gap is None:
        return text, False
    about = "" if gap is None else "about "

    def note(left: int) -> str:
        return (f"\n[… {about}{left:,} of {about}{whole:,} characters left out here: "
                "the file is too long to read whole …]\n")

    room = max_chars - len(note(whole))  # `left` never has more digits than `whole`
    if room < 2:
        return text[:max_chars], True
    first, last = (text, text) if gap is None else (text[:gap], text[gap:])
    keep_tail = room - int(room * HEAD_SHARE)
    if gap is not None:  # a short end leaves its room to the beginning
        keep_tail = min(keep_tail, len(last))
    head = first[:min(len(first), room - keep_tail)]
    tail = last[len(last) - keep_tail:] if keep_tail else ""
    # Where text was cut, end the head and start the tail on a line boundary when one is near.
    cut = head.rfind("\n", len(head) * 4 // 5)
    head = head[:cut] if 0 < cut and len(head) < len(first) else head
    cut = tail.find("\n", 0, len(tail) // 5)
    tail = tail[cut + 1:] if cut >= 0 and len(tail) < len(last) else tail
    return head + note(whole - len(head) - len(tail)) + tail, True
