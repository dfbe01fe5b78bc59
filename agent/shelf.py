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
    process writing the same file never leaves half of it), readable by its owner only
    (it holds what people sent and what tools read), whatever the umask."""
    private_dirs(path.parent)
    partial = path.with_name(f".{path.name}.{os.getpid()}.part")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(partial, path)


def private_dirs(path: Path) -> None:
    """Create `path` and its missing parents, each 0700 (`mkdir -p` would give the
    parents the umask's mode)."""
    missing: list[Path] = []
    while not path.is_dir() and path != path.parent:
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:  # another process made it meanwhile, or made a file
            if not directory.is_dir():
                raise
