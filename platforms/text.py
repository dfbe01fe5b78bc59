"""Splitting long replies for platforms with a message size limit."""

from __future__ import annotations

import re
import unicodedata
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


# Characters that show nothing: with only these (and blanks) a message says nothing.
_BLANK_LOOKING = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def visible(text: str) -> bool:
    """Whether the text shows anything: zero-width and other format characters, blanks,
    and the letters that render as blank (Hangul fillers, the braille blank) do not."""
    return any(not ch.isspace() and ch not in _BLANK_LOOKING
               and unicodedata.category(ch) not in ("Cf", "Cc", "Cn", "Zs", "Zl", "Zp")
               for ch in text)


_INLINE = re.compile(r"\*\*|__|~~|\|\||`|\*|_")


def _opens(text: str, at: int, marker: str) -> bool:
    """A single `*`/`_` counts only where it can emphasize: before a non-blank, and `_`
    not inside a word (snake_case)."""
    after = text[at + 1:at + 2]
    if not after or after.isspace():
        return False
    return marker == "*" or at == 0 or not text[at - 1].isalnum()


def _closes(text: str, at: int, marker: str) -> bool:
    before = text[at - 1:at]
    if not before or before.isspace():
        return False
    after = text[at + 1:at + 2]
    return marker == "*" or not after or not after.isalnum()


def _open_inline(chunk: str, carried: list[str]) -> list[str]:
    """Inline markers (bold, italic, strike, spoiler, code) still open at the end of the
    chunk, outermost first, given those open at its start. Code fences are skipped."""
    stack, in_fence = list(carried), False
    for line in chunk.split("\n"):
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for match in _INLINE.finditer(line):
            marker, at = match.group(), match.start()
            if stack and stack[-1] == "`" and marker != "`":
                continue  # inside inline code nothing else is a marker
            single = marker in ("*", "_")  # emphasis only next to a word
            if marker in stack:
                if not single or _closes(line, at, marker):
                    del stack[stack.index(marker):]
            elif not single or _opens(line, at, marker):
                stack.append(marker)
    return stack


def keep_inline(chunks: list[str]) -> list[str]:
    """Close inline Markdown still open at the end of a chunk and reopen it at the start
    of the next, as code fences are (each chunk then reads as whole Markdown). Adds at
    most INLINE_ROOM characters to a chunk: split with that much room to spare."""
    kept, carried = [], []
    for chunk in chunks:
        still = _open_inline(chunk, carried)
        if "".join(still) and len("".join(still)) * 2 > INLINE_ROOM:
            still = []  # a run of unmatched markers: leave the text as written
        kept.append("".join(carried) + chunk + "".join(reversed(still)))
        carried = still
    return kept


INLINE_ROOM = 24  # characters keep_inline may add to one chunk (reopen + close)
