"""Splitting long replies for platforms with a message size limit."""

from __future__ import annotations

import re
from collections.abc import Callable

_FENCE = re.compile(r"^\s*```(\S*)", re.MULTILINE)
FENCE_CLOSE = "\n```"


def utf16_len(text: str) -> int:
    """Telegram measures messages in UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def _open_fence(chunk: str, current: str | None) -> str | None:
    """The language of the code fence still open at the end of `chunk` ('' if no language)."""
    for match in _FENCE.finditer(chunk):
        current = None if current is not None else match.group(1)
    return current


def _cut_point(text: str, room: int) -> int:
    window = text[:room]
    for sep in ("\n\n", "\n", " "):
        at = window.rfind(sep)
        if at > room // 4:  # do not make tiny chunks just to honour a boundary
            return at + len(sep)
    return room


def split_message(text: str, limit: int, measure: Callable[[str], int] = len) -> list[str]:
    """Split at paragraph, then line, then word boundaries; keep code fences balanced.

    Every chunk measures at most `limit`; joining the chunks (minus the fence lines added
    to close and reopen code blocks) gives back the text: nothing lost, nothing repeated.
    """
    if measure(text) <= limit:
        return [text] if text else []
    chunks: list[str] = []
    fence: str | None = None
    rest = text
    while rest:
        prefix = f"```{fence}\n" if fence is not None else ""
        if measure(prefix + rest) <= limit:
            chunks.append(prefix + rest)
            break
        room = limit - measure(prefix) - measure(FENCE_CLOSE)
        # measure() may count more than len(): shrink the room until the piece fits.
        while room > 1 and measure(rest[:room]) > limit - measure(prefix) - measure(FENCE_CLOSE):
            room = max(1, room - max(1, room // 16))
        cut = _cut_point(rest, max(room, 1))
        piece, rest = rest[:cut], rest[cut:]
        still_open = _open_fence(piece, fence)
        chunk = prefix + piece
        if still_open is not None:
            chunk = chunk.rstrip("\n") + FENCE_CLOSE
        chunks.append(chunk)
        fence = still_open
    return chunks
