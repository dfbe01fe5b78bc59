"""Real files for attachment tests: pictures (Pillow), PDFs (fpdf2), programs, audio."""

from __future__ import annotations

import base64
import io
import sqlite3
from pathlib import Path
from typing import Any

from PIL import Image

ELF = b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 8 + b"\x02\x00\x3e\x00" + bytes(range(256)) * 8
OGG = b"OggS\x00\x02" + b"\x00" * 20 + b"OpusHead" + bytes(range(200))


def jpeg(index: int = 0, size: tuple[int, int] = (64, 48)) -> bytes:
    """A small real JPEG whose colour depends on `index` (so each one is a new file)."""
    colour = ((index * 37) % 256, (index * 91) % 256, (index * 53) % 256)
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, "JPEG", quality=80)
    return out.getvalue()


def pdf(*pages: str) -> bytes:
    """A real PDF with one page per text."""
    from fpdf import FPDF

    doc = FPDF()
    doc.set_font("Helvetica", size=12)
    for text in pages:
        doc.add_page()
        doc.multi_cell(0, 8, text)
    return bytes(doc.output())


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def database_holds(db: Path, data: bytes) -> bool:
    """Whether any column of any row holds the bytes, raw or in base64 (any 3-byte phase)."""
    needles = [data[:48]] + [b64(data[i:i + 48])[:40].encode() for i in range(3)]
    con = sqlite3.connect(db)
    try:
        tables = [t for (t,) in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '%fts%'")]
        for table in tables:
            for row in con.execute(f"SELECT * FROM {table}"):  # noqa: S608 - test code
                for value in row:
                    blob = value if isinstance(value, bytes) else str(value).encode()
                    if any(n in blob for n in needles):
                        return True
    finally:
        con.close()
    return False


def stored_user_parts(db: Path) -> list[dict[str, Any]]:
    """Every attachment part of every stored user message, oldest first."""
    import json

    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT content FROM messages WHERE role = 'user' AND "
                           "content_format = 1 ORDER BY id").fetchall()
    finally:
        con.close()
    return [p for (content,) in rows for p in json.loads(content)
            if isinstance(p, dict) and p.get("type") == "attachment"]
