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
import io
import itertools
import json
import logging
import operator
import re
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import PurePath

import filetype
from pypdf import PageObject, PdfReader
from pypdf.errors import DependencyError

log = logging.getLogger(__name__)

HEAD_SHARE = 0.8  # of a clipped text, the part kept from its beginning
JSON_SNIFF_CHARS = 1_000_000  # longer texts are called JSON by their first and last marks
# Limits on reading one PDF. pypdf parses content at 0.2 to 0.5 MB a second, about 5 ms for
# a plain page of text: an ordinary document fills 100,000 characters in well under a
# second. These stop files whose pages give little or no text for a great deal of work.
PDF_MAX_PAGES = 400  # pages read, from both ends together
PDF_EMPTY_RUN = 20  # pages in a row without text after which an end stops (a scan)
PDF_PAGE_BYTES = 256 * 1024  # decoded content one page may draw (its streams and forms)
PDF_SECONDS = 2.0  # for reading one PDF's pages, checked before each page and each operator
# Arrays and dictionaries nested deeper than this make pypdf hit Python's recursion limit
# (at about 300), from which it recovers by reparsing slowly, a warning at every level.
PDF_MAX_NESTING = 200
PDF_MAX_OBJECT_BYTES = 64 << 20  # inflated object streams scanned for their nesting
# Control bytes that plain text does not contain (tab, newlines, form feed, backspace and
# ESC, which coloured logs use, are allowed); a few are tolerated, a binary has many.
_CONTROL = bytes(b for b in range(32) if b not in b"\t\n\v\f\r\b\x1b") + b"\x7f"
_MACH_O = (b"\xfe\xed\xfa\xce", b"\xfe\xed\xfa\xcf", b"\xce\xfa\xed\xfe", b"\xcf\xfa\xed\xfe",
           b"\xca\xfe\xba\xbe")  # filetype knows ELF and MZ programs but not these
_ARCHIVES = {"zip", "tar", "rar", "gz", "bz2", "7z", "xz", "zst", "lz4", "lz", "lzo", "Z",
             "br", "cab", "ar", "deb", "rpm"}


class Unreadable(Exception):
    """Why a file cannot be read, as a phrase that fits "I can't read <name>: <reason>."."""


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
        text, chars, gap = _pdf_text(data, max_chars)
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


def _pdf_text(data: bytes, max_chars: int) -> tuple[str, int, int | None]:
    """The PDF's text, its length, and where its unread middle lies (None: all was read).
    A long PDF is read from both ends, enough for the head and the tail that clipping
    keeps, within the limits above; its length is then estimated from the pages read."""
    try:
        if _nesting(data) > PDF_MAX_NESTING:
            raise Unreadable("the PDF is damaged")
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise Unreadable("the PDF is password-protected")
        pages = reader.pages
        count = len(pages)
        reading = _Reading()
        head = reading.end(pages, range(count), max_chars, PDF_MAX_PAGES // 2)
        tail = reading.end(pages, range(count - 1, len(head) - 1, -1), max_chars // 2,
                           PDF_MAX_PAGES - len(head))
    except Unreadable:
        raise
    except DependencyError as exc:  # AES needs the `cryptography` package
        raise Unreadable("the PDF is encrypted in a way I can't open") from exc
    except Exception as exc:  # pypdf raises many kinds of error on a broken file
        log.info("could not read a PDF: %r", exc)
        raise Unreadable("the PDF is damaged") from exc
    first, last = _joined(head), _joined(tail[::-1])
    if not (first or last):
        raise Unreadable(_TOO_COMPLEX if reading.cut else "the PDF has no text layer (a scan?)")
    read = len(head) + len(tail)
    if read == count:
        text = "\n\n".join(p for p in (first, last) if p)
        return text, len(text), None
    text = first + last  # clip puts its note between them
    return text, max(len(text) + 1, len(text) * count // read), len(first)


_TOO_COMPLEX = "the PDF is too complex to read"
_SHOWS_TEXT = re.compile(rb"T[jJ]|Do|['\"]")  # the operators that can put text on a page


class _OutOfTime(Exception):
    """Raised from within pypdf's text extraction when a PDF's reading time is up."""


class _Reading:
    """One PDF's pages, read within PDF_SECONDS and PDF_PAGE_BYTES a page."""

    def __init__(self) -> None:
        self.deadline = time.monotonic() + PDF_SECONDS
        self.cut = False  # a page was left unread for what it would cost

    def end(self, pages: Sequence[PageObject], order: Iterable[int], want: int,
            most: int) -> list[str]:
        """The texts of pages taken in `order` until more than `want` characters are read,
        `most` pages are, PDF_EMPTY_RUN in a row give none, or one would cost too much."""
        texts: list[str] = []
        chars = blank = 0
        for index in order:
            if chars > want or len(texts) >= most or blank >= PDF_EMPTY_RUN:
                break
            text = self.page(pages[index])
            if text is None:
                break
            texts.append(text)
            chars, blank = chars + len(text), 0 if text.strip() else blank + 1
        return texts

    def page(self, page: PageObject) -> str | None:
        """The page's text; None when it is too heavy or the time is up."""
        content = None if time.monotonic() > self.deadline else _content(page)
        if content is None or \
                len(content) + _forms_bytes(page, PDF_PAGE_BYTES - len(content)) > PDF_PAGE_BYTES:
            self.cut = True
            return None
        if not _SHOWS_TEXT.search(content):
            return ""
        try:
            return page.extract_text(visitor_operand_before=self.check) or ""
        except _OutOfTime:
            self.cut = True
            return None

    def check(self, *_: object) -> None:
        """pypdf calls this before each operator. Raised inside a form, _OutOfTime is caught
        by pypdf, which goes on to the page's next operator, where it is raised again."""
        if time.monotonic() > self.deadline:
            raise _OutOfTime


def _content(page: PageObject) -> bytes | None:
    """The page's content streams, decoded and joined; None past PDF_PAGE_BYTES."""
    contents = _resolved(page.get("/Contents"))
    parts, size = [], 0
    for stream in contents if isinstance(contents, list) else [contents]:
        parts.append(getattr(_resolved(stream), "get_data", bytes)())  # no stream: no text
        size += len(parts[-1])
        if size > PDF_PAGE_BYTES:
            return None
    return b"\n".join(parts)


def _forms_bytes(page: PageObject, room: int) -> int:
    """The decoded size of the forms the page can draw, each counted once (plus 256 bytes),
    until past `room`. pypdf parses a form each time it is drawn: the deadline bounds that."""
    total, seen, pending = 0, set(), [page.get("/Resources")]
    while pending and total <= room:
        resources = _resolved(pending.pop())
        xobjects = _resolved(resources.get("/XObject")) if isinstance(resources, dict) else None
        for form in map(_resolved, xobjects.values() if isinstance(xobjects, dict) else ()):
            if id(form) in seen or not isinstance(form, dict) or form.get("/Subtype") != "/Form":
                continue
            seen.add(id(form))
            total += 256 + len(form.get_data())
            pending.append(form.get("/Resources"))
            if total > room:
                break
    return total


def _resolved(value: object) -> object:
    return value.get_object() if value is not None else None  # type: ignore[attr-defined]


_STREAM = re.compile(rb">>\s*stream(?:\r\n|\r|\n)")
_NOT_MARK = bytes(b for b in range(256) if b not in b"[]<>")
_STEP = bytes.maketrans(b"[]", b"\x02\x00")  # a level's change, plus one


def _nesting(data: bytes) -> int:
    """How deep arrays and dictionaries nest in the PDF's objects, at most (brackets in
    strings count too). A dictionary's "<<" and ">>" count as "[" and "]" (a hex string's
    "<" and ">" are dropped); innermost pairs are removed a few levels deep, which leaves
    an ordinary file nothing; in what is left, the level's greatest rise is measured."""
    marks = b"".join(syntax.translate(None, _NOT_MARK).replace(b"<<", b"[")
                     .replace(b">>", b"]").translate(None, b"<>") for syntax in _syntax(data))
    passes = 0
    while passes < 8 and b"[]" in marks:
        marks, passes = marks.replace(b"[]", b""), passes + 1
    levels = itertools.chain((0,), map(operator.sub, itertools.accumulate(marks.translate(_STEP)),
                                       itertools.count(1)))
    now, low = itertools.tee(levels)
    return passes + max(map(operator.sub, now, itertools.accumulate(low, min)))


def _syntax(data: bytes) -> Iterator[bytes]:
    """The PDF's object syntax as pypdf parses it: the file outside its streams, and its
    object streams inflated (Unreadable past PDF_MAX_OBJECT_BYTES in all)."""
    at, room = 0, PDF_MAX_OBJECT_BYTES
    while (found := _STREAM.search(data, at)) is not None:
        yield data[at:found.start()]
        end = data.find(b"endstream", found.end())
        end = len(data) if end < 0 else end
        if b"/ObjStm" in data[data.rfind(b"obj", 0, found.start()):found.start()]:
            try:
                inflated = zlib.decompressobj().decompress(data[found.end():end], room + 1)
            except zlib.error:  # not Flate, or broken: pypdf reads or refuses it
                inflated = b""
            if len(inflated) > room:
                raise Unreadable(_TOO_COMPLEX)
            room -= len(inflated)
            yield inflated
        at = end
    yield data[at:]


def _joined(pages: list[str]) -> str:
    pages = [p.replace("\r\n", "\n").replace("\r", "\n").strip() for p in pages]
    return "\n\n".join(p for p in pages if p)
