"""Files made to be costly to read are read, or refused with a reason, within a bounded
time and memory; ordinary files are read as before. Each corpus file is read as the
gateway reads it, in a fresh process, so its peak memory is its own."""

from __future__ import annotations

import hashlib
import io
import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from PIL import GifImagePlugin, Image, ImageChops
from pypdf import PdfReader

from agent.attachments import images
from agent.attachments import pdf as pdf_module
from agent.attachments import text as text_module
from agent.attachments.read import Unreadable, model_image, read_text
from tests.harness import hostile_files
from tests.harness.hostile_files import CORPUS
from tests.harness.media import pdf

ROOT = Path(__file__).resolve().parents[2]
CPU_SECONDS = 10.0  # each file takes at most about a second here; the rest is margin
# Peak resident memory of the reading process, its interpreter and imports (40 MB)
# included: at most 75 MB here, but 230 MB for the 20 MB line, which decodes to 80 MB of
# text (one character outside the BMP makes Python keep four bytes a character) and is
# copied once to plain newlines. Parsing it as JSON would take 610 MB.
PEAK_MB = {"text_single_line": 300}
PEAK_MB_ELSE = 150
TOO_LARGE = "unreadable: the picture is too large to open (9400×9400 pixels)"
OUTCOMES = {
    "pdf_shared_stream": "unreadable: the PDF is too complex to read",
    "pdf_empty_pages": "unreadable: the PDF has no text layer (a scan?)",
    "pdf_deep_nesting": "unreadable: the PDF is damaged",
    "pdf_form_fanout": "unreadable: the PDF is too complex to read",
    "png_huge": TOO_LARGE,
    "jpeg_cmyk_huge": "image image/jpeg 1568x1568",
    "jpeg_progressive_huge": TOO_LARGE,
    "tiff_huge": TOO_LARGE,
    "gif_many_frames": "image image/jpeg 1568x1568",
    "text_single_line": "JSON 19999995 chars, clipped",
    "text_key_words": "text 100000 chars, whole",
}


# --- the corpus --------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(CORPUS))
def test_each_hostile_file_is_read_or_refused_within_its_time_and_memory(
        name: str, tmp_path: Path) -> None:
    filename, make = CORPUS[name]
    path = tmp_path / filename
    path.write_bytes(make())
    try:
        done = subprocess.run([sys.executable, "-m", "tests.harness.hostile_files", name,
                               str(path)], cwd=ROOT, capture_output=True, text=True,
                              timeout=100, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading {filename} was still going after 100 s")
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["outcome"] == OUTCOMES[name]
    assert result["cpu_s"] < CPU_SECONDS, result
    assert result["peak_mb"] < PEAK_MB.get(name, PEAK_MB_ELSE), result


def test_the_corpus_is_what_it_says_and_the_same_every_time() -> None:
    for name, (_, make) in CORPUS.items():
        again = make.__wrapped__()  # type: ignore[attr-defined]  # past functools.cache
        assert hashlib.sha256(again).digest() == hashlib.sha256(make()).digest(), name
    for name in ("png_huge", "jpeg_cmyk_huge", "jpeg_progressive_huge", "tiff_huge"):
        with Image.open(io.BytesIO(CORPUS[name][1]())) as picture:  # reads the header only
            assert picture.size == (9400, 9400), name
    assert Image.open(io.BytesIO(hostile_files.jpeg_cmyk_huge())).mode == "CMYK"
    assert Image.open(io.BytesIO(hostile_files.jpeg_progressive_huge())).info["progressive"]
    gif = hostile_files.gif_many_frames()
    assert gif.count(b"\x21\xf9\x04") == 10_000  # one graphic control block a frame
    for name in ("pdf_shared_stream", "pdf_empty_pages"):
        assert len(PdfReader(io.BytesIO(CORPUS[name][1]())).pages) == 2_000, name
    assert len(hostile_files.pdf_shared_stream()) < 32_000
    line = hostile_files.text_single_line()
    assert len(line) >= 19_900_000 and line.count(b"\n") == 1 and line.endswith(b"\r\n")


# --- pictures ----------------------------------------------------------------------------
def photo(size: tuple[int, int], **save) -> bytes:
    out = io.BytesIO()
    Image.radial_gradient("L").resize(size).convert("RGB").save(out, "JPEG", **save)
    return out.getvalue()


def test_a_photo_is_decoded_scaled_down_and_still_fits_1568_pixels() -> None:
    image = model_image(photo((6000, 4000)))
    decoded = Image.open(io.BytesIO(image.data))
    assert (image.mime, decoded.size) == ("image/jpeg", (1568, 1045))


def test_a_small_upright_png_is_kept_byte_for_byte() -> None:
    out = io.BytesIO()
    Image.new("RGBA", (300, 200), (10, 200, 30, 128)).save(out, "PNG")
    assert model_image(out.getvalue()).data == out.getvalue()


def test_a_picture_over_the_pixel_cap_is_refused_before_it_is_decoded(monkeypatch) -> None:
    out = io.BytesIO()
    Image.new("RGB", (2000, 1000), (1, 2, 3)).save(out, "PNG")
    garbage = b"not zlib data" * 10  # where the compressed pixels should be
    broken = out.getvalue()[:33] + struct.pack(">I", len(garbage)) + b"IDAT" + garbage \
        + struct.pack(">I", zlib.crc32(b"IDAT" + garbage))
    with pytest.raises(Unreadable, match="^the picture is damaged$"):
        model_image(broken)  # decoding it fails...
    monkeypatch.setattr(images, "MAX_PIXELS", 1_000_000)
    with pytest.raises(Unreadable, match=r"^the picture is too large to open "
                                         r"\(2000×1000 pixels\)$"):
        model_image(broken)  # ...so over the cap it was never decoded


def test_a_progressive_jpeg_is_held_to_the_pixel_cap_and_a_baseline_one_is_not(
        monkeypatch) -> None:
    monkeypatch.setattr(images, "MAX_PIXELS", 5_000_000)
    with pytest.raises(Unreadable, match=r"\(5000×3400 pixels\)"):
        model_image(photo((5000, 3400), progressive=True))  # libjpeg keeps every coefficient
    image = model_image(photo((5000, 3400)))  # decoded at half size: 4.25 megapixels
    assert (image.width, image.height) == (1568, 1066)


@pytest.mark.parametrize("mode", ["P", "RGBA", "CMYK"])
@pytest.mark.parametrize("size", [(1568, 1307), (300, 250)], ids=["resampled", "reduced first"])
def test_a_picture_scaled_a_band_at_a_time_matches_one_scaled_whole(
        mode: str, size: tuple[int, int]) -> None:
    grey = Image.radial_gradient("L").resize((2400, 2000))
    picture = {"P": grey.convert("RGB").quantize(64),
               "RGBA": Image.merge("RGBA", [grey, grey.rotate(90), grey, grey.rotate(180)]),
               "CMYK": Image.merge("CMYK", [grey, grey.rotate(90), grey, grey])}[mode]
    target = "RGBA" if mode == "RGBA" else "RGB"
    whole = picture.convert(target)
    whole.thumbnail(size, Image.Resampling.LANCZOS)
    banded = images.scaled(picture, size, (0, 0, 2400, 2000), target)
    assert banded.size == whole.size
    if mode == "RGBA":  # a colour under alpha near 0 swings on a rounding: compare as drawn
        banded, whole = banded.convert("RGBa"), whole.convert("RGBa")
    assert max(high for _, high in ImageChops.difference(banded, whole).getextrema()) <= 1


def test_a_big_sideways_photo_is_scaled_then_turned_upright() -> None:
    wide = Image.new("RGB", (3000, 2000), (200, 20, 20))
    wide.paste((20, 20, 200), (0, 0, 1500, 2000))  # blue on the left half
    exif = wide.getexif()
    exif[0x0112] = 6  # "rotate 90° clockwise to view": the left half ends on top
    out = io.BytesIO()
    wide.save(out, "JPEG", exif=exif)
    image = model_image(out.getvalue())
    decoded = Image.open(io.BytesIO(image.data)).convert("RGB")
    assert (image.width, image.height) == decoded.size == (1045, 1568)
    assert decoded.getpixel((500, 100))[2] > 150 and decoded.getpixel((500, 1400))[0] > 150


def test_an_animated_gif_is_read_from_its_first_frame_without_counting_frames(
        monkeypatch) -> None:
    def refuse(*_: object) -> None:
        raise AssertionError("the reader went past the first frame")

    monkeypatch.setattr(GifImagePlugin.GifImageFile, "n_frames", property(refuse))
    monkeypatch.setattr(GifImagePlugin.GifImageFile, "is_animated", property(refuse))
    monkeypatch.setattr(GifImagePlugin.GifImageFile, "seek",
                        lambda self, frame: refuse() if frame else None)
    image = model_image(hostile_files.gif_many_frames())
    assert (image.mime, image.width, image.height) == ("image/jpeg", 1568, 1568)


# --- PDFs --------------------------------------------------------------------------------
NOTE = "characters left out here"


def test_a_short_pdf_still_gives_every_page() -> None:
    read = read_text(pdf("first page", "second page", "third page"), "r.pdf", None, 10_000)
    assert read.text == "first page\n\nsecond page\n\nthird page" and not read.truncated


def test_pages_without_text_stop_an_end_and_the_other_end_is_still_read(monkeypatch) -> None:
    monkeypatch.setattr(pdf_module, "PDF_EMPTY_RUN", 3)
    read = read_text(pdf(*[""] * 10, "the appendix", "the end"), "scan.pdf", None, 10_000)
    assert read.truncated and NOTE in read.text  # the user is told pages were left out
    assert read.text.endswith("the appendix\n\nthe end")


def test_a_page_too_heavy_to_parse_stops_its_end_and_the_user_is_told(monkeypatch) -> None:
    heavy = "heavy " * 300  # one page of 2.6 KB of content
    monkeypatch.setattr(pdf_module, "PDF_PAGE_BYTES", 2_000)
    read = read_text(pdf("page one", heavy, "page three", "page four"), "r.pdf", None, 10_000)
    assert read.text.startswith("page one") and read.text.endswith("page three\n\npage four")
    assert read.truncated and NOTE in read.text and "heavy" not in read.text
    with pytest.raises(Unreadable, match="^the PDF is too complex to read$"):
        read_text(pdf(heavy), "r.pdf", None, 10_000)


def test_a_pdf_out_of_time_is_refused_as_too_complex(monkeypatch) -> None:
    monkeypatch.setattr(pdf_module, "PDF_SECONDS", 0.0)
    with pytest.raises(Unreadable, match="^the PDF is too complex to read$"):
        read_text(pdf("fine, but no time to read it"), "r.pdf", None, 10_000)


def in_object_stream(page: bytes) -> bytes:
    """A one-page PDF 1.5 whose page dictionary is compressed in an object stream."""
    held = b"3 0 " + page
    objects = [b"<</Type/Catalog/Pages 2 0 R>>", b"<</Type/Pages/Count 1/Kids[3 0 R]>>", None,
               b"<</Length 35>>stream\nBT /F1 12 Tf 72 720 Td (deep) Tj ET\nendstream",
               b"<</Type/Font/Subtype/Type1/BaseFont/Helvetica>>",
               b"<</Type/ObjStm/N 1/First 4/Filter/FlateDecode/Length %d>>stream\n%s\n"
               b"endstream" % (len(zlib.compress(held)), zlib.compress(held))]
    out, rows = bytearray(b"%PDF-1.5\n"), [struct.pack(">BIH", 0, 0, 65535)]
    for number, body in enumerate(objects, 1):
        if body is None:  # object 3: the first in object stream 6
            rows.append(struct.pack(">BIH", 2, 6, 0))
            continue
        rows.append(struct.pack(">BIH", 1, len(out), 0))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    rows.append(struct.pack(">BIH", 1, len(out), 0))
    table = b"".join(rows)
    out += (b"7 0 obj\n<</Type/XRef/Size 8/W[1 4 2]/Root 1 0 R/Length %d>>stream\n%s\n"
            b"endstream\nendobj\nstartxref\n%d\n%%%%EOF\n" % (len(table), table, len(out)))
    return bytes(out)


def test_objects_nested_too_deep_are_refused_as_damaged_even_when_compressed() -> None:
    page = (b"<</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]/Contents 4 0 R"
            b"/Resources<</Font<</F1 5 0 R>>>>")
    shallow = in_object_stream(page + b"/Nested [<</K [0]>>]>>")
    assert read_text(shallow, "r.pdf", None, 1_000).text == "deep"  # read from the stream
    deep = in_object_stream(page + b"/Nested " + b"[<</K " * 20_000 + b"0" + b">>]" * 20_000
                            + b">>")
    assert len(deep) < 5_000
    with pytest.raises(Unreadable, match="^the PDF is damaged$"):
        read_text(deep, "r.pdf", None, 1_000)


# --- text --------------------------------------------------------------------------------
def test_a_long_json_text_is_named_by_its_ends_without_parsing_it(monkeypatch) -> None:
    monkeypatch.setattr(text_module, "JSON_SNIFF_CHARS", 100)
    records = ("[" + '{"id": 1},\n' * 50 + '{"id": 2}]\n').encode()
    assert read_text(records, None, None, 100_000).kind == "JSON"
    assert read_text(b"[not json], just words\n" * 20, None, None, 100_000).kind == "text"


def test_a_long_single_line_keeps_its_head_and_tail_and_its_length() -> None:
    line = b"x" * 3_000_000 + "\U0001f9f5".encode() + b"\r\n"
    read = read_text(line, "one-line.txt", None, 10_000)
    assert read.chars == 3_000_002 and read.truncated and len(read.text) <= 10_000
    assert read.text.startswith("xxx") and read.text.endswith("x\U0001f9f5\n")
