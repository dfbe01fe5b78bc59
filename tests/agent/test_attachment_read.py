"""What a downloaded file is and what the model is given of it: judged by content, text
decoded and clipped, PDFs read or refused with a reason, pictures made fit for vision APIs.
Every file here is a real one, made on the fly with fpdf2, pypdf, Pillow, zipfile and wave."""

from __future__ import annotations

import base64
import io
import random
import re
import tarfile
import wave
import zipfile

import pytest
from fpdf import FPDF
from PIL import Image
from pypdf import PdfReader, PdfWriter

from agent.attachments import images
from agent.attachments import pdf as pdf_module
from agent.attachments.read import FileText, Unreadable, model_image, read_text, sniff

MAX_BYTES = 3_932_160  # 3.75 MiB: what the vision APIs take once base64 (5 MiB)


# --- files made on the fly ----------------------------------------------------------------
def pdf(*pages: str, picture: bool = False) -> bytes:
    doc = FPDF()
    doc.set_font("helvetica", size=11)
    for text in pages:
        doc.add_page()
        if text:
            doc.multi_cell(0, 5, text)
    if picture:
        doc.add_page()
        doc.image(Image.new("RGB", (60, 40), (200, 30, 30)), x=10, y=10, w=60)
    return bytes(doc.output())


def encrypted(data: bytes, user: str, owner: str | None = None) -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user, owner_password=owner)  # RC4-128: pypdf needs no extra package
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def picture(size: tuple[int, int], fmt: str, **save) -> bytes:
    image = Image.new("RGB", size, (30, 120, 200))
    out = io.BytesIO()
    image.save(out, fmt, **save)
    return out.getvalue()


def gradient(size: tuple[int, int], fmt: str = "JPEG", **save) -> bytes:
    out = io.BytesIO()
    Image.radial_gradient("L").resize(size).convert("RGB").save(out, fmt, **save)
    return out.getvalue()


def opened(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def zip_of(**files: str) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return out.getvalue()


def wav() -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(bytes(1600))
    return out.getvalue()


def webm() -> bytes:
    """A WebM (Matroska) header: EBML magic and the "webm" DocType element."""
    return b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01\x42\x82\x84webm" + bytes(64)


ELF = b"\x7fELF\x02\x01\x01\x00" + bytes(56)
MZ = b"MZ\x90\x00\x03\x00\x00\x00\x04\x00\x00\x00\xff\xff" + bytes(50)
MACH_O = b"\xcf\xfa\xed\xfe\x07\x00\x00\x01" + bytes(56)
NOISE = random.Random(7).randbytes(4096)
PNG = picture((64, 48), "PNG")
# The HEIC "ftyp" box a phone writes; Pillow reads HEIC only with the pillow-heif plugin.
HEIC = b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + bytes(64)


def refusal(data: bytes, name: str | None = None, mime: str | None = None) -> str:
    with pytest.raises(Unreadable) as caught:
        read_text(data, name, mime, 10_000)
    return str(caught.value)


# --- sniff: by content first ----------------------------------------------------------------
def test_a_png_sent_as_a_text_document_is_a_picture() -> None:
    assert sniff(PNG, "photo.txt", "text/plain") == "image"


def test_random_bytes_named_like_text_are_binary() -> None:
    assert sniff(NOISE, "notes.txt", "text/plain") == "binary"
    without_nul = NOISE.replace(b"\x00", b"")  # still full of other control bytes
    assert sniff(without_nul, "notes.txt", "text/plain") == "binary"


def test_python_declared_as_octet_stream_is_text_and_reads_as_python() -> None:
    source = b"def greet(name):\n    return f'hello {name}'\n"
    assert sniff(source, "greet.py", "application/octet-stream") == "text"
    read = read_text(source, "greet.py", "application/octet-stream", 1_000)
    assert (read.kind, read.mime, read.text) == ("Python", "text/x-python", source.decode())


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "GIF", "WEBP", "BMP", "TIFF"])
def test_every_common_picture_format_is_an_image_whatever_it_is_called(fmt: str) -> None:
    assert sniff(picture((20, 10), fmt), "scan.dat", "application/octet-stream") == "image"


def test_a_heic_photo_is_an_image() -> None:
    assert sniff(HEIC, "IMG_0001.HEIC", None) == "image"


def test_a_pdf_is_a_pdf_even_when_the_platform_calls_it_something_else() -> None:
    assert sniff(pdf("hello"), "download", "application/octet-stream") == "pdf"
    assert sniff(b"\xef\xbb\xbfjunk\n" + pdf("hello"), None, None) == "pdf"  # junk before it


def test_a_text_that_mentions_the_pdf_header_is_text() -> None:
    source = b'# Writes a PDF by hand\nHEADER = b"%PDF-1.4"\n'
    assert sniff(source, "make_pdf.py", None) == "text"
    assert read_text(source, "make_pdf.py", None, 1_000).kind == "Python"


@pytest.mark.parametrize("text", [
    '<svg xmlns="http://www.w3.org/2000/svg"><circle r="4"/></svg>',
    "<!DOCTYPE html><html><body>hi</body></html>",
    '<?xml version="1.0"?><root/>',
])
def test_svg_html_and_xml_are_text(text: str) -> None:
    assert sniff(text.encode(), "drawing", "image/svg+xml") == "text"


@pytest.mark.parametrize("text", ["BMW service notes: oil changed.", "MZ tour of the city",
                                  "ID3 tags in my music library"])
def test_text_that_starts_like_a_binary_magic_number_is_still_text(text: str) -> None:
    assert sniff(text.encode(), None, None) == "text"


@pytest.mark.parametrize("data", [ELF, MZ, MACH_O, zip_of(**{"a.txt": "hi"})])
def test_programs_and_archives_are_binary_whatever_they_are_named(data: bytes) -> None:
    assert sniff(data, "readme.txt", "text/plain") == "binary"


def test_a_tar_of_text_files_is_an_archive_though_it_is_mostly_text() -> None:
    text = ("All work and no play makes Jack a dull boy.\n" * 20_000).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        entry = tarfile.TarInfo("jack.txt")
        entry.size = len(text)
        archive.addfile(entry, io.BytesIO(text))
    # Too few NULs to count as binary by the share of control bytes alone.
    assert out.getvalue().count(0) < len(out.getvalue()) / 50
    assert sniff(out.getvalue(), "jack.txt", "text/plain") == "binary"
    assert refusal(out.getvalue(), "jack.txt") == "it is a TAR archive"


def test_sound_is_audio_and_a_shared_container_follows_what_the_sender_says() -> None:
    assert sniff(wav(), "memo.wav", None) == "audio"
    assert sniff(webm(), "voice.webm", "audio/webm") == "audio"
    assert sniff(webm(), "voice.ogg", None) == "audio"  # by the name: .ogg is a sound type
    assert sniff(webm(), "clip.webm", "video/webm") == "video"
    assert sniff(webm(), None, None) == "video"


# --- read_text: text files --------------------------------------------------------------------
@pytest.mark.parametrize(("data", "expected"), [
    ("\ufeffnaïve café ☕\nline two\n".encode(), "naïve café ☕\nline two\n"),
    ("\ufeffUTF-16 LE: Grüße 你好\n".encode("utf-16-le"), "UTF-16 LE: Grüße 你好\n"),
    ("\ufeffUTF-16 BE: Grüße 你好\n".encode("utf-16-be"), "UTF-16 BE: Grüße 你好\n"),
    ("Crème brûlée à la française, “quoted”\n".encode("cp1252"),
     "Crème brûlée à la française, “quoted”\n"),
    ("Straße, Ærø, señor\n".encode("latin-1"), "Straße, Ærø, señor\n"),
], ids=["utf-8 BOM", "utf-16 LE BOM", "utf-16 BE BOM", "windows-1252", "latin-1"])
def test_text_is_decoded_in_its_own_encoding_without_the_bom(data: bytes, expected: str) -> None:
    assert sniff(data, "notes.txt", None) == "text"
    read = read_text(data, "notes.txt", None, 1_000)
    assert read == FileText(expected, len(expected), False, "text", "text/plain")


def test_windows_and_old_mac_newlines_become_plain_newlines() -> None:
    read = read_text(b"one\r\ntwo\rthree\n", "a.txt", None, 100)
    assert read.text == "one\ntwo\nthree\n" and read.chars == 14


def test_an_empty_file_is_refused() -> None:
    assert refusal(b"", "empty.txt") == "the file is empty"
    assert refusal(b" \n\n", "blank.md") == "the file is empty"


@pytest.mark.parametrize(("name", "kind", "mime"), [
    ("a.py", "Python", "text/x-python"), ("README.md", "Markdown", "text/markdown"),
    ("data.json", "JSON", "application/json"), ("t.csv", "CSV", "text/csv"),
    ("c.yaml", "YAML", "application/yaml"), ("pyproject.toml", "TOML", "application/toml"),
    ("app.js", "JavaScript", "text/javascript"), ("app.ts", "TypeScript", "text/x-typescript"),
    ("m.c", "C", "text/x-c"), ("m.h", "C", "text/x-c"), ("m.cpp", "C++", "text/x-c++"),
    ("main.go", "Go", "text/x-go"), ("lib.rs", "Rust", "text/x-rust"),
    ("A.java", "Java", "text/x-java"), ("run.sh", "shell script", "text/x-shellscript"),
    ("q.sql", "SQL", "application/sql"), ("i.html", "HTML", "text/html"),
    ("f.xml", "XML", "application/xml"), ("app.log", "log", "text/plain"),
    ("NOTES.MD", "Markdown", "text/markdown"), ("n.txt", "text", "text/plain"),
    ("notes.weird", "text", "text/plain"),
])
def test_the_kind_comes_from_the_extension(name: str, kind: str, mime: str) -> None:
    read = read_text(b"x = 1\n", name, "application/octet-stream", 100)
    assert (read.kind, read.mime) == (kind, mime)


@pytest.mark.parametrize(("text", "mime", "kind"), [
    ('{"a": [1, 2]}', None, "JSON"),
    ("#!/usr/bin/env python3\nprint(1)\n", None, "Python"),
    ("#!/bin/sh\necho hi\n", None, "shell script"),
    ("<!doctype html><p>hi</p>", None, "HTML"),
    ("{not json", None, "text"),
    ("a,b\n1,2\n", "text/csv", "CSV"),
])
def test_without_an_extension_the_kind_comes_from_the_declared_type_or_content(
        text: str, mime: str | None, kind: str) -> None:
    assert read_text(text.encode(), "upload", mime, 100).kind == kind


def test_an_unknown_declared_text_type_is_kept() -> None:
    read = read_text(b"print('hi')", "script", "text/x-lua; charset=utf-8", 100)
    assert (read.kind, read.mime) == ("text", "text/x-lua")


# --- clipping ---------------------------------------------------------------------------------
NOTE = re.compile(r"\n\[… (about )?([\d,]+) of (about )?([\d,]+) characters left out here: "
                  r"the file is too long to read whole …\]\n")


def test_a_long_file_keeps_its_head_and_tail_and_says_how_much_is_left_out() -> None:
    lines = [f"line {i:07d} " + "x" * 66 + "\n" for i in range(25_000)]  # 80 chars each
    whole = "".join(lines)
    assert len(whole) == 2_000_000
    read = read_text(whole.encode(), "big.log", None, 100_000)
    assert read.truncated and read.chars == 2_000_000 and len(read.text) <= 100_000
    head, note, tail = NOTE.split(read.text)[0], NOTE.search(read.text), NOTE.split(read.text)[-1]
    assert note is not None and not note.group(1) and not note.group(3)
    left, total = (int(note.group(n).replace(",", "")) for n in (2, 4))
    assert total == 2_000_000 and left == total - len(head) - len(tail)
    assert whole.startswith(head) and whole.endswith(tail)
    assert head.startswith("line 0000000") and tail.endswith(lines[-1])
    assert 0.7 < len(head) / (len(head) + len(tail)) < 0.9  # about 80% head, 20% tail
    assert head.endswith("x") and tail.startswith("line ")  # cut on line boundaries
    assert len(read.text) > 99_000  # the room is used, not wasted


@pytest.mark.parametrize("cap", [1, 50, 99, 100, 150, 1_000, 4_999])
def test_a_clipped_text_never_exceeds_the_cap(cap: int) -> None:
    text = "".join(f"{i} " for i in range(2_000))
    read = read_text(text.encode(), "n.txt", None, cap)
    assert read.truncated and len(read.text) <= cap and read.chars == len(text)


def test_a_text_that_fits_is_whole() -> None:
    text = "a" * 500
    assert read_text(text.encode(), "a.txt", None, 500) == FileText(text, 500, False, "text",
                                                                      "text/plain")


# --- read_text: what cannot be read -------------------------------------------------------------
@pytest.mark.parametrize(("data", "reason"), [
    (ELF, "it is a program (an executable)"),
    (MZ, "it is a program (an executable)"),
    (MACH_O, "it is a program (an executable)"),
    (zip_of(**{"a.txt": "hello"}), "it is a ZIP archive"),
    (zip_of(**{"[Content_Types].xml": "<Types/>", "_rels/.rels": "<r/>",
               "word/document.xml": "<w/>"}), "it is an office document (DOCX)"),
    (PNG, "it is a picture"),
    (NOISE, "it is not a text file (it holds binary data)"),
], ids=["elf", "mz", "mach-o", "zip", "docx", "png", "noise"])
def test_binaries_are_refused_with_what_they_are(data: bytes, reason: str) -> None:
    assert refusal(data, "notes.txt", "text/plain") == reason


# --- read_text: PDFs ------------------------------------------------------------------------------
def test_a_pdf_gives_the_text_of_every_page_with_a_blank_line_between() -> None:
    read = read_text(pdf("The first page says hello.", "The second page says goodbye."),
                     "report.pdf", None, 10_000)
    assert read == FileText("The first page says hello.\n\nThe second page says goodbye.",
                            57, False, "PDF", "application/pdf")


def test_a_password_protected_pdf_is_refused() -> None:
    locked = encrypted(pdf("secret plans"), user="hunter2")
    assert refusal(locked, "plans.pdf") == "the PDF is password-protected"


def test_a_pdf_locked_only_against_editing_is_read() -> None:
    restricted = encrypted(pdf("open to read, closed to edit"), user="", owner="boss")
    assert read_text(restricted, "r.pdf", None, 1_000).text == "open to read, closed to edit"


# Made with pypdf's writer.encrypt("", owner_password="owner", algorithm="AES-128"), which
# needs the `cryptography` package: an AES PDF anyone may open, as many restricted PDFs are.
AES_PDF = base64.b64decode(
    "JVBERi0xLjMKJeLjz9MKMSAwIG9iago8PAovUHJvZHVjZXIgPDZlYTlmMWMxZjg0MjQ4NDFjYTZhOTI1MDBiZjdl"
    "YjJkZDBkZTU3OWRkNTMwNTRkZjBiZWJiMDIwZGRiNGJhNmU+Cj4+CmVuZG9iagoyIDAgb2JqCjw8Ci9UeXBlIC9Q"
    "YWdlcwovQ291bnQgMQovS2lkcyBbIDQgMCBSIF0KPj4KZW5kb2JqCjMgMCBvYmoKPDwKL1R5cGUgL0NhdGFsb2cK"
    "L1BhZ2VzIDIgMCBSCj4+CmVuZG9iago0IDAgb2JqCjw8Ci9UeXBlIC9QYWdlCi9SZXNvdXJjZXMgPDwKL0ZvbnQg"
    "PDwKL0YxIDUgMCBSCj4+Cj4+Ci9NZWRpYUJveCBbIDAuMCAwLjAgMjAwIDIwMCBdCi9QYXJlbnQgMiAwIFIKL0Nv"
    "bnRlbnRzIDYgMCBSCj4+CmVuZG9iago1IDAgb2JqCjw8Ci9UeXBlIC9Gb250Ci9TdWJ0eXBlIC9UeXBlMQovQmFz"
    "ZUZvbnQgL0hlbHZldGljYQo+PgplbmRvYmoKNiAwIG9iago8PAovTGVuZ3RoIDgwCj4+CnN0cmVhbQqupeqCcwpA"
    "496zIRMIHOyGtY6BF0zqQAAIaFbZ0E435MBRNWuSv6c9JBAHirXuV8OMsZDEU7+Wrke5AEiIjPq4KL8waasxPuVU"
    "xRwmpfAULQplbmRzdHJlYW0KZW5kb2JqCjcgMCBvYmoKPDwKL1YgNAovUiA0Ci9MZW5ndGggMTI4Ci9QIDQyOTQ5"
    "NjcyOTIKL0ZpbHRlciAvU3RhbmRhcmQKL08gPDU2NmZhODczZWUzM2M3OTdjZDNiOTA0ZmRhZGY4MTRhZmEzNGRm"
    "OWEzOGY2ZWQ0MWI5ODRlMmM2ZGEyYWE2ZjU+Ci9VIDxmMWE1Y2JiZjQ4ZDE2OThiOGRjMGUzM2FlMzg5ZTg5ZDI4"
    "YmY0ZTVlNGU3NThhNDE2NDAwNGU1NmZmZmEwMTA4PgovQ0YgPDwKL1N0ZENGIDw8Ci9BdXRoRXZlbnQgL0RvY09w"
    "ZW4KL0NGTSAvQUVTVjIKL0xlbmd0aCAxNgo+Pgo+PgovU3RtRiAvU3RkQ0YKL1N0ckYgL1N0ZENGCj4+CmVuZG9i"
    "agp4cmVmCjAgOAowMDAwMDAwMDAwIDY1NTM1IGYgCjAwMDAwMDAwMTUgMDAwMDAgbiAKMDAwMDAwMDExMyAwMDAw"
    "MCBuIAowMDAwMDAwMTcyIDAwMDAwIG4gCjAwMDAwMDAyMjEgMDAwMDAgbiAKMDAwMDAwMDM1MyAwMDAwMCBuIAow"
    "MDAwMDAwNDIzIDAwMDAwIG4gCjAwMDAwMDA1NTMgMDAwMDAgbiAKdHJhaWxlcgo8PAovU2l6ZSA4Ci9Sb290IDMg"
    "MCBSCi9JbmZvIDEgMCBSCi9JRCBbIDw0MDIyNzU1MjMwNzdlZmMyNWMzMDc2MjE1OTdmZGI5ZT4gPDQwMjI3NTUy"
    "MzA3N2VmYzI1YzMwNzYyMTU5N2ZkYjllPiBdCi9FbmNyeXB0IDcgMCBSCj4+CnN0YXJ0eHJlZgo4NjAKJSVFT0YK"
)


def test_an_aes_pdf_anyone_may_open_is_read_or_refused_by_what_pypdf_can_decrypt() -> None:
    try:
        import cryptography  # noqa: F401
    except ImportError:  # not a dependency of Threadline today
        assert refusal(AES_PDF, "r.pdf") == "the PDF is encrypted in a way I can't open"
    else:
        assert read_text(AES_PDF, "r.pdf", None, 1_000).text == "Locked but readable"


def test_a_pdf_without_text_is_refused_as_a_probable_scan() -> None:
    assert refusal(pdf(picture=True), "scan.pdf") == "the PDF has no text layer (a scan?)"


SHORT_PDF = pdf("fine so far")


@pytest.mark.parametrize("data", [
    SHORT_PDF[:300],
    SHORT_PDF[: len(SHORT_PDF) // 2],
    b"%PDF-1.7\n" + NOISE,
    b"%PDF-",
], ids=["cut early", "cut in half", "garbage", "header only"])
def test_a_damaged_pdf_is_refused(data: bytes) -> None:
    assert refusal(data, "broken.pdf") == "the PDF is damaged"


def test_a_long_pdf_is_read_from_both_ends_and_its_length_estimated() -> None:
    body = "words " * 80  # about 500 characters a page
    pages = [f"start of page {n}. {body}end of page {n}." for n in range(1, 41)]
    read = read_text(pdf(*pages), "book.pdf", None, 1_500)
    whole = len("\n\n".join(pages))
    assert read.truncated and len(read.text) <= 1_500
    assert read.text.startswith("start of page 1.") and read.text.endswith("end of page 40.")
    note = NOTE.search(read.text)
    assert note is not None and note.group(1) and note.group(3)  # "about": not all was read
    assert abs(read.chars - whole) < whole * 0.1
    assert int(note.group(4).replace(",", "")) == read.chars


def test_a_pdf_of_many_pages_stops_at_the_page_cap_and_still_has_its_end(monkeypatch) -> None:
    monkeypatch.setattr(pdf_module, "PDF_MAX_PAGES", 6)  # 2,000 real pages take minutes
    read = read_text(pdf(*(f"page {n}." for n in range(1, 21))), "many.pdf", None, 100_000)
    head, tail = NOTE.split(read.text)[0], NOTE.split(read.text)[-1]
    assert head == "page 1.\n\npage 2.\n\npage 3."
    assert tail == "page 18.\n\npage 19.\n\npage 20."
    note = NOTE.search(read.text)
    assert read.truncated and note is not None and note.group(1)  # pages 4 to 17 unread
    read_chars = len(head) + len(tail)
    assert read.chars == read_chars * 20 // 6  # estimated from the six pages read
    assert int(note.group(2).replace(",", "")) == read.chars - len(head) - len(tail)


# --- model_image ------------------------------------------------------------------------------
def test_a_big_photo_is_scaled_to_1568_pixels_and_still_decodes() -> None:
    image = model_image(gradient((4000, 3000)))
    assert (image.mime, image.width, image.height) == ("image/jpeg", 1568, 1176)
    assert opened(image.data).size == (1568, 1176) and opened(image.data).format == "JPEG"
    assert len(image.data) <= MAX_BYTES


@pytest.mark.parametrize(("fmt", "mime"), [("PNG", "image/png"), ("JPEG", "image/jpeg"),
                                           ("WEBP", "image/webp"), ("GIF", "image/gif")])
def test_a_picture_within_the_limits_is_kept_byte_for_byte(fmt: str, mime: str) -> None:
    data = picture((64, 48), fmt)
    assert model_image(data) == images.ModelImage(data, mime, 64, 48)


def test_a_phone_jpeg_with_a_second_image_appended_is_kept_as_a_jpeg() -> None:
    out = io.BytesIO()
    Image.new("RGB", (50, 40)).save(out, "MPO", save_all=True,
                                     append_images=[Image.new("RGB", (50, 40))])
    assert model_image(out.getvalue()) == images.ModelImage(out.getvalue(), "image/jpeg", 50, 40)


@pytest.mark.parametrize("fmt", ["BMP", "TIFF", "ICO"])
def test_other_formats_become_jpeg(fmt: str) -> None:
    image = model_image(picture((40, 30), fmt))
    assert image.mime == "image/jpeg" and opened(image.data).format == "JPEG"


def test_a_big_transparent_png_stays_a_transparent_png() -> None:
    fading = Image.new("RGBA", (2400, 1600), (200, 30, 30, 255))
    fading.putalpha(Image.linear_gradient("L").resize((2400, 1600)))  # clear at the top
    out = io.BytesIO()
    fading.save(out, "PNG")
    image = model_image(out.getvalue())
    decoded = opened(image.data)
    assert (image.mime, decoded.format, decoded.size) == ("image/png", "PNG", (1568, 1045))
    assert decoded.mode == "RGBA" and decoded.getchannel("A").getextrema()[0] < 255


def test_a_big_png_that_is_wholly_opaque_becomes_a_jpeg() -> None:
    out = io.BytesIO()
    Image.radial_gradient("L").resize((2000, 1000)).convert("RGBA").save(out, "PNG")
    assert opened(out.getvalue()).mode == "RGBA"  # an alpha channel, every pixel opaque
    image = model_image(out.getvalue())
    assert (image.mime, image.width, image.height) == ("image/jpeg", 1568, 784)


def test_a_sideways_photo_is_turned_upright() -> None:
    upright = Image.new("RGB", (80, 40), (10, 10, 10))
    exif = upright.getexif()
    exif[0x0112] = 6  # "rotate 90° clockwise to view"
    out = io.BytesIO()
    upright.save(out, "JPEG", exif=exif)
    image = model_image(out.getvalue())
    assert (image.width, image.height) == (40, 80) and opened(image.data).size == (40, 80)
    assert opened(image.data).getexif().get(0x0112, 1) == 1


def test_a_heavy_photo_within_the_edge_is_reencoded_under_the_byte_limit() -> None:
    out = io.BytesIO()
    Image.effect_noise((1568, 1568), 100).convert("RGB").save(out, "JPEG", quality=100)
    assert len(out.getvalue()) > MAX_BYTES
    image = model_image(out.getvalue())
    assert len(image.data) <= MAX_BYTES and opened(image.data).size == (1568, 1568)


def test_a_transparent_picture_that_stays_too_heavy_is_made_smaller(monkeypatch) -> None:
    monkeypatch.setattr(images, "MAX_BYTES", 60_000)  # the real cap takes seconds of noise
    noise = Image.merge("RGBA", [Image.effect_noise((300, 300), 120) for _ in range(4)])
    out = io.BytesIO()
    noise.save(out, "PNG")
    image = model_image(out.getvalue())
    assert image.mime == "image/png" and len(image.data) <= 60_000
    assert opened(image.data).size == (image.width, image.height) and image.width < 300


def test_a_small_animated_gif_keeps_its_frames() -> None:
    frames = [Image.new("RGB", (32, 32), c) for c in ("red", "green", "blue")]
    out = io.BytesIO()
    frames[0].save(out, "GIF", save_all=True, append_images=frames[1:], duration=100)
    image = model_image(out.getvalue())
    assert image.data == out.getvalue() and opened(image.data).n_frames == 3


def test_a_big_animated_gif_becomes_its_first_frame() -> None:
    frames = [Image.new("RGB", (2000, 100), c) for c in ((255, 0, 0), (0, 0, 255))]
    out = io.BytesIO()
    frames[0].save(out, "GIF", save_all=True, append_images=frames[1:], duration=100)
    image = model_image(out.getvalue())
    decoded = opened(image.data)
    assert (image.mime, decoded.size, getattr(decoded, "n_frames", 1)) == \
        ("image/jpeg", (1568, 78), 1)
    red, green, blue = decoded.getpixel((10, 10))
    assert red > 200 and blue < 50  # the first frame, not the second


CUT_JPEG = gradient((400, 300))[:2_500]  # its header is whole, its picture is not


@pytest.mark.parametrize("data", [CUT_JPEG, PNG[:60], PNG[:20] + bytes(200),
                                  b"\xff\xd8\xff\xe0" + NOISE],
                         ids=["cut jpeg", "cut png", "png header, no picture", "jpeg, noise"])
def test_a_damaged_picture_is_refused(data: bytes) -> None:
    with pytest.raises(Unreadable, match="^the picture is damaged$"):
        model_image(data)


def test_a_picture_in_a_format_pillow_cannot_open_says_so() -> None:
    with pytest.raises(Unreadable, match="^it is a picture in HEIC format, which I can't open$"):
        model_image(HEIC)


def test_a_decompression_bomb_is_refused_before_it_is_decoded(monkeypatch) -> None:
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1_000)
    with pytest.raises(Unreadable, match="^the picture has too many pixels to open$"):
        model_image(picture((100, 100), "PNG"))  # 10,000 pixels: Pillow's own error
    with pytest.warns(Image.DecompressionBombWarning), \
            pytest.raises(Unreadable, match="^the picture has too many pixels to open$"):
        model_image(picture((40, 40), "PNG"))  # 1,600 pixels: Pillow only warns
