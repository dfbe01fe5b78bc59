"""Splitting long replies for platforms with a message size limit."""

from __future__ import annotations

import re
from collections.abc import Callable

# A fence line: blanks, then ```. Only blanks, never line breaks, before it: with `\s*`
# every line start of a run of blank lines re-read the whole run (quadratic).
_FENCE = re.compile(r"^[ \t]*```(\S*)", re.MULTILINE)
FENCE_CLOSE = "\n```"
_FENCE_BLOCK = re.compile(r"^[ \t]*```.*?^[ \t]*```[^\n]*$", re.MULTILINE | re.DOTALL)


def utf16_len(text: str) -> int:
    """Telegram measures messages in UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def _open_fence(chunk: str, current: str | None) -> str | None:
    """The language of the code fence still open at the end of `chunk` ('' if no language)."""
    for match in _FENCE.finditer(chunk):
        current = None if current is not None else match.group(1)
    return current


def _bare_opener_start(text: str, cut: int, fence: str | None) -> int:
    """Move a cut that would end a chunk on a fence opener (with nothing after it) to
    before that opener, so no chunk ends with an empty code block."""
    piece = text[:cut]
    openers = list(_FENCE.finditer(piece))
    if not openers or _open_fence(piece, fence) is None:
        return cut
    start = openers[-1].start()
    if piece[openers[-1].end():].strip() or start <= cut // 4:
        return cut
    return start


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
        cut = _bare_opener_start(rest, _cut_point(rest, max(room, 1)), fence)
        piece, rest = rest[:cut], rest[cut:]
        still_open = _open_fence(piece, fence)
        chunk = prefix + piece
        if still_open is not None:
            # The close takes the place of the piece's own line break, if it has one.
            chunk = chunk.removesuffix("\n") + FENCE_CLOSE
        chunks.append(chunk)
        fence = still_open
    return chunks


_INLINE_PAIRS = ("**", "__", "~~", "`")


def _link_open(text: str) -> bool:
    """Whether the last line holds a link's text or address still being written (`[...`
    with no `]` after it, or `](...` with no `)`). Found from the end: linear, where a
    pattern tried at every `[` re-read the rest of the line each time."""
    line = text.removesuffix("\n")
    line = line[line.rfind("\n") + 1:]
    if line.rfind("[") > line.rfind("]"):
        return True
    address = line.rfind("](")
    return address >= 0 and ")" not in line[address + 2:]


def markdown_balanced(text: str) -> bool:
    """Whether a reply cut off mid-way still reads as whole Markdown: code fences closed,
    inline markers paired and no link half written. An unfinished text that is not gets
    shown plain until it is, so half a marker never turns the rest of a message bold."""
    fences = len(_FENCE.findall(text))
    if fences % 2:
        return False
    outside = _FENCE_BLOCK.sub("", text)
    if _link_open(outside):
        return False
    for marker in _INLINE_PAIRS:
        count = outside.count(marker)
        if count % 2:
            return False
        outside = outside.replace(marker, "")  # "**" is not two "*" pairs, nor "`" in it
    return True
