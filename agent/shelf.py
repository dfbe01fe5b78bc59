"""Files every gateway process can read: the protocol the stores' shelves meet.

With one process (SQLite) there is no shelf: files stay in directories beside the
database. With several processes on PostgreSQL, attachments and saved tool outputs are
also put on the database's shelf (storage/postgres/files.py), and a process that lacks a
file fetches it from there (docs/scale-out.md, "Shared files").
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol


class Shelf(Protocol):
    async def put(self, key: str, data: bytes) -> None:
        """Keep `data` under `key` (the same key always holds the same bytes)."""

    async def get(self, key: str) -> bytes | None:
        """The bytes kept under `key`, or None when there are none (never kept, or past
        the retention period)."""


def write_whole(path: Path, data: bytes) -> None:
    """Keep a file in a process's directory, whole or not at all (a kill or a second
    process writing the same file never leaves half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = path.with_name(f".{path.name}.{os.getpid()}.part")
    partial.write_bytes(data)
    os.replace(partial, path)
