"""Files a hostile user might send: small to upload, costly for a naive reader to open.

Each generator returns the same bytes on every call (no clock, no randomness) and is
made at test time, so nothing large is kept in git. The big pictures are written by hand
(PNG, TIFF, GIF and JPEG are simple containers) so that making a 9400×9400 picture costs
kilobytes of memory, not the hundreds of megabytes Pillow would need to encode one; only
the progressive JPEG is Pillow's. Beyond the files issue 31 lists, the corpus has a page
that draws one heavy form thousands of times and a progressive JPEG.

`python -m tests.harness.hostile_files NAME FILE` reads FILE as the gateway reads an
attachment and prints one JSON line: what came out, CPU seconds and peak memory. The
tests and bench/attachments_hostile.py run it in a fresh process per file.
"""

from __future__ import annotations

import io
import json
import resource
import struct
import sys
import time
import zlib
from collections.abc import Callable
from functools import cache
from pathlib import Path

SIDE = 9400  # pixels: 88 megapixels, just under Pillow's decompression-bomb limit
PAGES = 2_000
# "()'": move to the next line and show an empty string. Per token it is the costliest
# operator for pypdf's text extraction, and it shows nothing. pypdf 7 parses at most
# 2,000,000 tokens per content stream, so the stream stays just under that.
SHOW_NOTHING = b"()' "
SHOW_NOTHING_REPEATS = 999_990
DEPTH = 50_000  # containers nested in one PDF object, arrays and dictionaries alternating
FORM_DRAWS = 5_000
GIF_FRAMES = 10_000
GIF_SIDE = 2_000  # larger than the vision limit (1,568), so the first frame is re-encoded
TEXT_BYTES = 20_000_000


# --- PDF --------------------------------------------------------------------------------
def _pdf(objects: list[bytes]) -> bytes:
    """A PDF of `objects` numbered from 1 (the first is the catalog), with its xref table."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<</Size %d/Root 1 0 R>>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1,
                                                                         xref)
    return bytes(out)


def _stream(data: bytes) -> bytes:
    packed = zlib.compress(data, 9)
    return b"<</Length %d/Filter/FlateDecode>>stream\n%s\nendstream" % (len(packed), packed)


_CATALOG = b"<</Type/Catalog/Pages 2 0 R>>"
_FONT = b"<</Type/Font/Subtype/Type1/BaseFont/Helvetica>>"


@cache
def pdf_shared_stream() -> bytes:
    """2,000 page entries, all the same page, whose one content stream (4 MB inflated from
    a few KB) is a million text operators that show nothing."""
    content = b"BT /F1 12 Tf\n" + SHOW_NOTHING * SHOW_NOTHING_REPEATS + b"ET\n"
    return _pdf([
        _CATALOG,
        b"<</Type/Pages/Count %d/Kids[%s]>>" % (PAGES, b"3 0 R " * PAGES),
        b"<</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]/Resources<</Font<</F1 5 0 R>>>>"
        b"/Contents 4 0 R>>",
        _stream(content),
        _FONT,
    ])


@cache
def pdf_empty_pages() -> bytes:
    """2,000 pages with nothing on them."""
    first = 3
    kids = b" ".join(b"%d 0 R" % n for n in range(first, first + PAGES))
    page = b"<</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]/Resources<<>>>>"
    return _pdf([_CATALOG, b"<</Type/Pages/Count %d/Kids[%s]>>" % (PAGES, kids)]
                + [page] * PAGES)


@cache
def pdf_deep_nesting() -> bytes:
    """One page whose dictionary holds arrays and dictionaries nested 50,000 deep, and a
    content stream that shows text."""
    opening = b"".join(b"[" if level % 2 == 0 else b"<</K " for level in range(DEPTH))
    closing = b"".join(b"]" if level % 2 == 0 else b">>" for level in reversed(range(DEPTH)))
    return _pdf([
        _CATALOG,
        b"<</Type/Pages/Count 1/Kids[3 0 R]>>",
        b"<</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]/Resources<</Font<</F1 5 0 R>>>>"
        b"/Contents 4 0 R/Nested " + opening + b"0" + closing + b">>",
        _stream(b"BT /F1 12 Tf 72 720 Td (deep) Tj ET\n"),
        _FONT,
    ])


@cache
def pdf_form_fanout() -> bytes:
    """One page that draws the same form 5,000 times (pypdf's own cap on draws a page); the
    form holds 200 KB of text operators that show nothing, about a second's parsing."""
    form = zlib.compress(b"BT /F1 12 Tf\n" + SHOW_NOTHING * 50_000 + b"ET\n", 9)
    return _pdf([
        _CATALOG,
        b"<</Type/Pages/Count 1/Kids[3 0 R]>>",
        b"<</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]/Resources<</Font<</F1 5 0 R>>"
        b"/XObject<</X 6 0 R>>>>/Contents 4 0 R>>",
        _stream(b"/X Do\n" * FORM_DRAWS),
        _FONT,
        b"<</Type/XObject/Subtype/Form/BBox[0 0 612 792]/Resources<</Font<</F1 5 0 R>>>>"
        b"/Length %d/Filter/FlateDecode>>stream\n%s\nendstream" % (len(form), form),
    ])


# --- pictures ---------------------------------------------------------------------------
def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


@cache
def png_huge() -> bytes:
    """A 9400×9400 RGB PNG of one colour: 265 MB of pixels in a few hundred KB.

    Compressing 265 MB takes seconds, so 47 rows are compressed once and their deflate
    blocks repeated: a full flush makes each copy independent of what came before. The
    checksum at the end is then worked out over the rows it stands for."""
    row = b"\x00" + bytes((30, 120, 200)) * SIDE  # filter byte "none", then the pixels
    block, blocks = row * 47, SIDE // 47  # 47 × 200 rows
    packer = zlib.compressobj(9)
    first = packer.compress(block) + packer.flush(zlib.Z_FULL_FLUSH)  # with zlib's header
    again = packer.compress(block) + packer.flush(zlib.Z_FULL_FLUSH)
    end = packer.flush()  # an empty final block, and a checksum of two blocks only
    checksum = 1
    for _ in range(blocks):
        checksum = zlib.adler32(block, checksum)
    idat = first + again * (blocks - 1) + end[:-4] + struct.pack(">I", checksum)
    header = struct.pack(">IIBBBBB", SIDE, SIDE, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", idat)
            + _chunk(b"IEND", b""))


def _segment(marker: int, body: bytes) -> bytes:
    return struct.pack(">BBH", 0xFF, marker, len(body) + 2) + body


@cache
def jpeg_cmyk_huge() -> bytes:
    """A 9400×9400 baseline CMYK JPEG of one grey. Every block's DC difference and AC run
    is the one 1-bit Huffman code "0", so each 4-block MCU is one zero byte."""
    one_code = bytes([1] + [0] * 15) + b"\x00"  # one code of length 1, for symbol 0
    components = b"".join(bytes([n, 0x11, 0]) for n in range(1, 5))  # 1×1 sampling, table 0
    mcus = ((SIDE + 7) // 8) ** 2
    return b"".join([
        b"\xff\xd8",
        _segment(0xEE, b"Adobe" + struct.pack(">HHHB", 100, 0, 0, 0)),  # no colour transform
        _segment(0xDB, b"\x00" + b"\x01" * 64),  # quantization table 0: all ones
        _segment(0xC0, struct.pack(">BHHB", 8, SIDE, SIDE, 4) + components),
        _segment(0xC4, b"\x00" + one_code),  # DC table 0
        _segment(0xC4, b"\x10" + one_code),  # AC table 0: the code means end of block
        _segment(0xDA, b"\x04" + b"".join(bytes([n, 0x00]) for n in range(1, 5))
                 + b"\x00\x3f\x00"),
        bytes(mcus),
        b"\xff\xd9",
    ])


@cache
def jpeg_progressive_huge() -> bytes:
    """A 9400×9400 progressive greyscale JPEG. Decoding it even at 1/8 scale makes libjpeg
    hold all its coefficients (176 MB). Pillow encodes it from an 88 MB picture."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("L", (SIDE, SIDE), 90).save(out, "JPEG", quality=50, progressive=True)
    return out.getvalue()


@cache
def tiff_huge() -> bytes:
    """A 9400×9400 RGB TIFF in Deflate-compressed strips of 64 rows."""
    rows_per_strip = 64
    row = bytes((200, 60, 30)) * SIDE
    strips, sizes = bytearray(), []
    full = zlib.compress(row * rows_per_strip, 9)  # every strip but the last is this one
    for top in range(0, SIDE, rows_per_strip):
        rows = min(rows_per_strip, SIDE - top)
        packed = full if rows == rows_per_strip else zlib.compress(row * rows, 9)
        sizes.append(len(packed))
        strips += packed + b"\x00" * (len(packed) % 2)  # TIFF wants even offsets
    count = len(sizes)
    # Layout: header (8), strips, bits-per-sample, strip offsets, strip sizes, the IFD.
    bits_at = 8 + len(strips)
    offsets_at = bits_at + 6
    sizes_at = offsets_at + 4 * count
    ifd_at = sizes_at + 4 * count
    offsets, at = [], 8
    for size in sizes:
        offsets.append(at)
        at += size + size % 2
    entries = [  # (tag, type, count, value): type 3 is SHORT, 4 is LONG
        (256, 4, 1, SIDE), (257, 4, 1, SIDE), (258, 3, 3, bits_at), (259, 3, 1, 8),
        (262, 3, 1, 2), (273, 4, count, offsets_at), (277, 3, 1, 3),
        (278, 4, 1, rows_per_strip), (279, 4, count, sizes_at), (284, 3, 1, 1),
    ]
    ifd = struct.pack("<H", len(entries)) + b"".join(
        struct.pack("<HHI", tag, kind, n) + (struct.pack("<HH", value, 0)
                                             if kind == 3 and n == 1
                                             else struct.pack("<I", value))
        for tag, kind, n, value in entries) + struct.pack("<I", 0)
    return (b"II*\x00" + struct.pack("<I", ifd_at) + bytes(strips)
            + struct.pack("<HHH", 8, 8, 8) + struct.pack(f"<{count}I", *offsets)
            + struct.pack(f"<{count}I", *sizes) + ifd)


@cache
def gif_many_frames() -> bytes:
    """A 2000×2000 GIF of 10,000 frames, each one pixel somewhere on the canvas."""
    header = b"GIF89a" + struct.pack("<HHBBB", GIF_SIDE, GIF_SIDE, 0xF1, 0, 0)
    palette = bytes((255, 255, 255, 200, 30, 30, 30, 30, 200, 0, 0, 0))  # 4 colours
    loop = b"\x21\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00"  # loop for ever
    frames = bytearray()
    for n in range(GIF_FRAMES):
        x, y = (n * 7919) % GIF_SIDE, (n * 104729) % GIF_SIDE
        colour = 1 + n % 2
        frames += b"\x21\xf9\x04\x04\x02\x00\x00\x00"  # keep the last frame, 20 ms
        frames += b"\x2c" + struct.pack("<HHHHB", x, y, 1, 1, 0)
        # LZW, minimum code size 2: CLEAR (4), the colour, END (5), three bits each.
        frames += b"\x02\x02" + struct.pack("<H", 4 | colour << 3 | 5 << 6) + b"\x00"
    return header + palette + loop + bytes(frames) + b"\x3b"


# --- text -------------------------------------------------------------------------------
@cache
def text_single_line() -> bytes:
    """20 MB of JSON on one line: an array of 6.7 million empty objects (half a gigabyte
    once parsed), ending in a character outside the BMP (so the decoded text takes four
    bytes a character) and a Windows line ending."""
    record = b"{},"
    end = '{"note":"\U0001f9f5"}]\r\n'.encode()
    return b"[" + record * ((TEXT_BYTES - len(end) - 1) // len(record)) + end


@cache
def text_key_words() -> bytes:
    """100,000 characters of words that look like the start of a secret, run together."""
    return (b"tokenpassword=secret:" * 5_000)[:100_000]


CORPUS: dict[str, tuple[str, Callable[[], bytes]]] = {
    "pdf_shared_stream": ("shared-stream.pdf", pdf_shared_stream),
    "pdf_empty_pages": ("empty-pages.pdf", pdf_empty_pages),
    "pdf_deep_nesting": ("deep-nesting.pdf", pdf_deep_nesting),
    "pdf_form_fanout": ("form-fanout.pdf", pdf_form_fanout),
    "png_huge": ("huge.png", png_huge),
    "jpeg_cmyk_huge": ("huge-cmyk.jpg", jpeg_cmyk_huge),
    "jpeg_progressive_huge": ("huge-progressive.jpg", jpeg_progressive_huge),
    "tiff_huge": ("huge.tif", tiff_huge),
    "gif_many_frames": ("many-frames.gif", gif_many_frames),
    "text_single_line": ("records.ndjson", text_single_line),
    "text_key_words": ("key-words.txt", text_key_words),
}


# --- reading one file as the gateway does, in this process --------------------------------
MAX_TEXT_CHARS = 100_000  # attachments.max_text_chars by default


def read_as_gateway(data: bytes, name: str) -> str:
    """What the gateway makes of a file (gateway/turns/attachments.py, `_read_one`), in words."""
    from agent.attachments.read import Unreadable, model_image, read_text, sniff

    try:
        what = sniff(data, name, None)
        if what == "image":
            image = model_image(data)
            return f"image {image.mime} {image.width}x{image.height}"
        if what in ("text", "pdf"):
            text = read_text(data, name, None, MAX_TEXT_CHARS)
            clipped = "clipped" if text.truncated else "whole"
            return f"{text.kind} {text.chars} chars, {clipped}"
        if what in ("audio", "video"):
            return what
        read_text(data, name, None, 1_000)
        return "binary"
    except Unreadable as exc:
        return f"unreadable: {exc}"


def peak_mb() -> float:
    """This process's peak resident memory in MB. Not ru_maxrss: Linux carries into a
    child the peak of the parent that spawned it (a test process holding the corpus), while
    /proc's VmHWM counts only the program the child runs."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:  # not Linux: ru_maxrss, in KiB, or bytes on macOS
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / (1 << 20 if sys.platform == "darwin" else 1 << 10)
    return int(status.partition("VmHWM:")[2].split()[0]) / 1024


def measure(name: str, path: Path) -> dict[str, object]:
    """Read the file at `path` as corpus item `name`; CPU seconds and peak memory (MB)."""
    import agent.attachments.read  # noqa: F401  (imports are not the reader's work)

    data = path.read_bytes()
    before = peak_mb()
    started = time.process_time()
    outcome = read_as_gateway(data, CORPUS[name][0])
    cpu = time.process_time() - started
    return {"name": name, "outcome": outcome, "cpu_s": round(cpu, 3),
            "peak_mb": round(peak_mb(), 1), "baseline_mb": round(before, 1)}


if __name__ == "__main__":
    # A runaway reader fails with MemoryError here rather than taking the machine's memory.
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    print(json.dumps(measure(sys.argv[1], Path(sys.argv[2]))))
