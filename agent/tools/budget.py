"""The tool-output budget: big results go to a file, and the context gets a preview.

Per result, output above clamp(window x 4 x 0.15, 8,000, 100,000) characters is saved;
per assistant turn, if all results together pass clamp(window x 4 x 0.30, 16,000,
200,000), the largest of those still in context are saved until the rest fits. A saved
result is replaced by a block saying its size, its file id, how to read it back
(`read_saved_output`) and its first 1,500 characters. The reading tool's own output is
never saved (that would loop). Files live in one directory per chat and are removed
after a retention period (docs/architecture.md, "Tools"); with several processes they go
on the shared shelf as well, and a process that lacks one reads it from there
(docs/scale-out.md, "Shared files").
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.shelf import Shelf, write_whole
from agent.tools.registry import Tool

log = logging.getLogger(__name__)

PREVIEW_CHARS = 1_500
READ_LIMIT = 8_000  # what one read returns by default
RETENTION_S = 30 * 24 * 3600.0
_FILE_ID = re.compile(r"^[0-9a-f]{32}\.txt$")
_ID_SHAPE = "0" * 32 + ".txt"  # as long as every file id


def _clamp(value: float, low: int, high: int) -> int:
    return int(min(max(value, low), high))


def chat_directory(root: Path, chat_key: str) -> Path:
    """One directory per chat, named by a hash: no chat key reaches a path."""
    return root / hashlib.sha256(chat_key.encode()).hexdigest()[:24]


@dataclass
class OutputBudget:
    directory: Path  # this chat's directory
    window: int  # the model's context window, in tokens
    shelf: Shelf | None = None  # shared by every process, when there are several
    _unshared: list[str] = field(default_factory=list)  # saved, not yet on the shelf

    @property
    def per_result(self) -> int:
        return _clamp(self.window * 4 * 0.15, 8_000, 100_000)

    @property
    def per_turn(self) -> int:
        return _clamp(self.window * 4 * 0.30, 16_000, 200_000)

    def apply(self, results: list[tuple[Tool | None, dict[str, Any]]]) -> list[dict[str, Any]]:
        """The tool messages to add to the transcript, big outputs replaced by previews."""
        messages = [message for _, message in results]
        savable = [i for i, (tool, message) in enumerate(results)
                   if (tool is None or tool.saves_output) and isinstance(message["content"], str)]
        for i in savable:
            if len(messages[i]["content"]) > self.per_result:
                messages[i] = self._saved(messages[i])
        by_size = sorted(savable, key=lambda i: len(messages[i]["content"]), reverse=True)
        for i in by_size:
            if sum(len(str(m["content"])) for m in messages) <= self.per_turn:
                break
            text = messages[i]["content"]
            # Saving only helps a result longer than the block that would replace it.
            if not text.startswith("[Saved output") and len(_block(text, _ID_SHAPE)) < len(text):
                messages[i] = self._saved(messages[i])
        return messages

    def _saved(self, message: dict[str, Any]) -> dict[str, Any]:
        text: str = message["content"]
        file_id = f"{uuid.uuid4().hex}.txt"
        write_whole(self.directory / file_id, text.encode("utf-8"))
        if self.shelf is not None:
            self._unshared.append(file_id)
        return {**message, "content": _block(text, file_id)}

    def _key(self, file_id: str) -> str:
        return f"{self.directory.name}/{file_id}"

    async def share(self) -> None:
        """Put the outputs saved since the last call on the shelf."""
        while self.shelf is not None and self._unshared:
            file_id = self._unshared[0]
            data = (self.directory / file_id).read_bytes()
            await self.shelf.put(self._key(file_id), data)
            self._unshared.pop(0)

    async def _fetch(self, file_id: str) -> None:
        """Bring a saved output this process lacks from the shelf."""
        path = self.directory / file_id
        if self.shelf is None or not _FILE_ID.match(file_id or "") or path.is_file():
            return
        data = await self.shelf.get(self._key(file_id))
        if data is not None:
            write_whole(path, data)

    def read(self, file_id: str, offset: int = 0, limit: int = READ_LIMIT) -> str:
        """Exactly text[offset:offset + limit] of a saved output of this chat."""
        if not _FILE_ID.match(file_id or ""):
            return f"Error: {file_id!r} is not a saved output id."
        path = self.directory / file_id
        if not path.is_file():
            return f"Error: there is no saved output {file_id} in this chat."
        text = path.read_text(encoding="utf-8")
        offset = max(0, int(offset))
        return text[offset:offset + max(1, int(limit))]

    def reader(self) -> Tool:
        async def run(arguments: dict[str, Any]) -> str:
            await self._fetch(str(arguments.get("file", "")))
            return self.read(str(arguments.get("file", "")), arguments.get("offset", 0) or 0,
                             arguments.get("limit", READ_LIMIT) or READ_LIMIT)

        return Tool("read_saved_output", "Read part of a tool output that was saved to a "
                    "file because it was too long to keep in the conversation.", run, {
                        "type": "object", "required": ["file"], "properties": {
                            "file": {"type": "string", "description": "the saved output id"},
                            "offset": {"type": "integer", "minimum": 0,
                                       "description": "first character to return"},
                            "limit": {"type": "integer", "minimum": 1,
                                      "description": "how many characters to return"}}},
                    saves_output=False)


def _block(text: str, file_id: str) -> str:
    return (f"[Saved output: {len(text):,} characters, too long to keep here. File "
            f"{file_id}; read any part with read_saved_output(file=\"{file_id}\", "
            f"offset=0, limit={READ_LIMIT}). It begins:]\n{text[:PREVIEW_CHARS]}")


def clean_old_outputs(root: Path, retention_s: float = RETENTION_S) -> int:
    """Remove saved outputs older than the retention period; how many went."""
    if not root.is_dir():
        return 0
    cutoff, removed = time.time() - retention_s, 0
    for path in root.glob("*/*.txt"):
        try:
            if path.stat().st_mtime < cutoff:
                path.unlink()
                removed += 1
        except OSError as exc:
            log.warning("could not remove old tool output %s: %s", path, exc)
    return removed
