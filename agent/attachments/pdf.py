"""A PDF's text, read with pypdf within limits on pages, bytes and time (see
agent/attachments/text.py and docs/architecture.md, "Attachments")."""

from __future__ import annotations

import io
import itertools
import logging
import operator
import re
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence

from pypdf import PageObject, PdfReader
from pypdf.errors import DependencyError

log = logging.getLogger(__name__)

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


class Unreadable(Exception):
    """Why a file cannot be read, as a phrase that fits "I can't read <name>: <reason>."."""


def pdf_text(data: bytes, max_chars: int) -> tuple[str, int, int | None]:
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
