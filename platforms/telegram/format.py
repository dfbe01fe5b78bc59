"""The model's Markdown as Telegram messages: plain text plus formatting entities.

Formatting travels as Bot API MessageEntity offsets over plain text, never as
MarkdownV2, so nothing is escaped by hand and a message may be cut anywhere: an entity
that crosses a cut is simply split into a part on each side.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from bisect import bisect_right
from collections.abc import Iterator
from itertools import accumulate
from typing import Any

import telegramify_markdown
from telegramify_markdown import MessageEntity, RenderConfig

from platforms.base import Chunk

logger = logging.getLogger(__name__)

TELEGRAM_LIMIT = 4096  # UTF-16 code units per message, the unit Telegram counts in

# Where a cut may fall, best first: after a blank line, a line end, a space.
_BOUNDARIES = ("\n\n", "\n", " ")
_VISIBLE = re.compile(r"\S")
_ZWJ = "\u200d"


def render(markdown: str, limit: int = TELEGRAM_LIMIT) -> list[Chunk]:
    """The reply as Telegram messages of at most `limit` UTF-16 code units each.

    Each chunk's entities lie inside it, with offsets counted from the chunk's start.
    An entity crossing a cut continues in the next chunk as the same kind of entity
    with the same attributes, so a code block is closed and reopened in its language.
    Cuts fall after a blank line, else a line end, else a space (passing over one that
    would leave a chunk under a quarter full), and never inside a character sequence
    held together by a joiner, mark or skin-tone modifier.

    Joining the chunks' texts gives the converted text exactly, with one exception:
    Telegram refuses a blank message, so whitespace that cannot share a chunk with a
    visible character is dropped. A text with no visible character gives no chunks;
    otherwise a drop takes a run of whitespace at least (limit - 1) / 2 units long,
    such as blank lines or padding in a code block or table. If the converter fails
    on the input, the Markdown itself is sent as plain text.
    """
    if limit < 2:
        raise ValueError("limit must hold at least one character (2 UTF-16 units)")
    text, entities = _convert(markdown)
    # units[i] is where text[i] starts in UTF-16; astral characters take two units.
    units = [0, *accumulate(2 if ord(ch) > 0xFFFF else 1 for ch in text)]
    return [
        Chunk(text[start:end], _clip(entities, units[start], units[end]))
        for start, end in _spans(text, units, limit)
        if text[start:end].strip()
    ]


def plain(chunk: Chunk) -> Chunk:
    """The same text without formatting, for a chunk Telegram could not parse."""
    return Chunk(chunk.text)


def _convert(markdown: str) -> tuple[str, list[MessageEntity]]:
    try:
        # An isolated config: the library's default one is a process-wide mutable
        # object that any other code could change under us.
        return telegramify_markdown.convert(markdown, config=RenderConfig.isolated())
    except Exception:
        # A reply the converter cannot read still reaches the user, unformatted.
        logger.debug("Markdown conversion failed; sending plain text", exc_info=True)
        return markdown, []


def _spans(text: str, units: list[int], limit: int) -> Iterator[tuple[int, int]]:
    """Consecutive (start, end) index pairs covering `text`, each within `limit` units."""
    last_visible = len(text.rstrip()) - 1
    start = 0
    while start < len(text):
        end = bisect_right(units, units[start] + limit) - 1  # the most that fits
        if end < len(text):
            end = _cut(text, units, start, end, last_visible, limit)
        yield start, end
        start = end


def _cut(text: str, units: list[int], start: int, end: int, last: int, limit: int) -> int:
    """Where the chunk starting at `start` ends, given that `text[start:end]` fits."""
    first = _VISIBLE.search(text, start, end)
    # The chunk must keep a visible character, and so must the rest after it;
    # otherwise one of them would be a blank message.
    low = first.end() if first else end
    high = min(end, last)
    if low > high:
        return end  # only whitespace can go here; render drops the blank chunk
    # A boundary that leaves the chunk under a quarter full is not worth honouring.
    floor = max(low, bisect_right(units, units[start] + limit // 4))
    for boundary in _BOUNDARIES:
        at = text.rfind(boundary, max(start, floor - len(boundary)), high)
        if at >= 0:
            return at + len(boundary)
    for at in range(high, low - 1, -1):
        if not _inside_sequence(text, at):
            return at
    return high


def _inside_sequence(text: str, at: int) -> bool:
    """Whether a cut before text[at] would split one visible character in two."""
    after = ord(text[at])
    return (
        text[at - 1] == _ZWJ
        or text[at] == _ZWJ
        or unicodedata.category(text[at]) in ("Mn", "Mc", "Me")  # combining marks, VS16
        or 0x1F3FB <= after <= 0x1F3FF  # skin-tone modifiers
        or 0xE0020 <= after <= 0xE007F  # tag characters of subdivision flags
    )


def _clip(entities: list[MessageEntity], low: int, high: int) -> tuple[dict[str, Any], ...]:
    """The parts of `entities` between UTF-16 offsets low and high, counted from low."""
    parts = []
    for entity in entities:
        start = max(entity.offset, low)
        end = min(entity.offset + entity.length, high)
        if start < end:
            parts.append(entity.to_dict() | {"offset": start - low, "length": end - start})
    return tuple(parts)
