"""Where attachment files live: one directory per chat under the data directory.

A file is named by the hash of its bytes, so the same picture sent twice (or fetched
again after a restart) is kept once. A stored message refers to it by `ref`, the path
below the root ("<chat dir>/<hash>.<ext>"); nothing else about a chat reaches a path.
Files unused for the retention period are removed at startup (docs/architecture.md,
"Attachments"); using a file for a request counts as use.

With several processes on one PostgreSQL database the directory is each process's cache
and the database is the shelf every process reads: a file kept by one process is put on
the shelf, and a process that takes the chat over fetches what it misses before the model
sees the conversation (docs/scale-out.md, "Shared files").
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import os
import re
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from agent.attachments.parts import attachments_in
from agent.shelf import Shelf, write_whole
from agent.tools.budget import chat_directory

log = logging.getLogger(__name__)

_REF = re.compile(r"^[0-9a-f]{24}/[0-9a-f]{32}\.[a-z0-9]{1,8}$")
_CACHE_BYTES = 64 * 1024 * 1024  # encoded pictures kept in memory between requests


class AttachmentFiles:
    def __init__(self, root: Path, shelf: Shelf | None = None) -> None:
        self.root = root
        self.shelf = shelf
        self._here: set[str] = set()  # refs known to be in the directory
        self._encoded: OrderedDict[str, str] = OrderedDict()
        self._encoded_bytes = 0
        self._touched: dict[str, float] = {}  # a file in use is marked used once an hour

    def save(self, chat_key: str, data: bytes, suffix: str) -> str:
        """Keep `data` for the chat; return its ref. Written whole or not at all."""
        suffix = re.sub(r"[^a-z0-9]", "", suffix.lower())[:8] or "bin"
        chat = chat_directory(self.root, chat_key).name  # as saved tool outputs are kept
        ref = f"{chat}/{hashlib.sha256(data).hexdigest()[:32]}.{suffix}"
        path = self.root / ref
        if path.exists():
            os.utime(path)
            return ref
        write_whole(path, data)
        return ref

    async def keep(self, chat_key: str, data: bytes, suffix: str) -> str:
        """`save`, off the event loop, and on the shelf for the other processes."""
        ref = await asyncio.to_thread(self.save, chat_key, data, suffix)
        if self.shelf is not None:
            await self.shelf.put(ref, data)
        self._here.add(ref)
        return ref

    async def fetch_missing(self, messages: list[dict[str, Any]]) -> None:
        """Bring the pictures of `messages` this process lacks from the shelf (a chat that
        another process answered before). A file the shelf lacks too stays missing: the
        model is told it is gone."""
        if self.shelf is None:
            return
        for message in messages:
            for part in attachments_in(message.get("content")):
                ref = str(part.get("file") or "")
                if part.get("kind") != "image" or ref in self._here or ref in self._encoded:
                    continue
                path = self.path(ref)
                if path is None:
                    continue
                if not await asyncio.to_thread(path.is_file):
                    data = await self.shelf.get(ref)
                    if data is None:
                        continue
                    await asyncio.to_thread(write_whole, path, data)
                self._here.add(ref)

    def path(self, ref: str) -> Path | None:
        """The file a ref names, or None for a ref that is not one of ours."""
        return self.root / ref if _REF.match(ref or "") else None

    def read(self, ref: str) -> bytes | None:
        """The file's bytes, None when it is gone (past retention) or the ref is bad."""
        path = self.path(ref)
        if path is None:
            return None
        try:
            data = path.read_bytes()
        except OSError:
            return None
        self._touch(ref, force=True)
        return data

    def _touch(self, ref: str, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._touched.get(ref, -3600.0) < 3600.0:
            return
        self._touched[ref] = now
        path = self.path(ref)
        try:
            if path is not None:
                os.utime(path)
        except OSError:
            pass  # gone meanwhile: the next read says so

    def data_url(self, ref: str, mime: str) -> str | None:
        """The file as a base64 data URL (kept in memory for the next request)."""
        url = self._encoded.get(ref)
        if url is not None:
            self._encoded.move_to_end(ref)
            self._touch(ref)
            return url
        data = self.read(ref)
        if data is None:
            return None
        url = f"data:{mime};base64,{base64.b64encode(data).decode()}"
        self._encoded[ref] = url
        self._encoded_bytes += len(url)
        while self._encoded_bytes > _CACHE_BYTES and len(self._encoded) > 1:
            _, old = self._encoded.popitem(last=False)
            self._encoded_bytes -= len(old)
        return url

    def sweep(self, retention_s: float) -> int:
        """Remove files unused for `retention_s` seconds; how many went."""
        if retention_s <= 0 or not self.root.is_dir():
            return 0
        cutoff, removed = time.time() - retention_s, 0
        for path in self.root.glob("*/*"):
            try:
                if path.is_file() and path.stat().st_mtime < cutoff:
                    path.unlink()
                    removed += 1
            except OSError as exc:
                log.warning("could not remove old attachment %s: %s", path, exc)
        return removed
