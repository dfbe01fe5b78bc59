"""The model's Markdown as Telegram messages: plain text plus formatting entities.

Formatting travels as Bot API MessageEntity offsets over plain text, never as
MarkdownV2, so nothing is escaped by hand and a message may be cut anywhere: an entity
that crosses a cut is simply split into a part on each side.

What the model writes reaches the chat as written unless it is Markdown syntax: text
that only looks like HTML (`List<String>`, `a<b and c>d`) and pipes that are not a
spoiler (`a || b`) are escaped before the conversion, and the conversion is checked
afterwards: if the converted text lost a character the reply had, the reply goes out as
plain text instead. The converter is a third-party routine that is not linear on every
input, so the gateway runs `render` in a worker process with a time limit and falls back
to `render_plain` (docs/architecture.md, "Untrusted work").
"""

from __future__ import annotations

import logging
import re
import unicodedata
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Iterator
from itertools import accumulate
from typing import Any

import pyromark
import telegramify_markdown
from telegramify_markdown import MessageEntity, RenderConfig
from telegramify_markdown.converter import STANDARD_OPTIONS

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
    return _chunks(*_convert(markdown), limit)


def render_plain(markdown: str, limit: int = TELEGRAM_LIMIT) -> list[Chunk]:
    """The reply's own characters, unformatted, cut like `render` cuts (the fallback when
    formatting is not safe or takes too long)."""
    return _chunks(markdown, [], limit)


def _chunks(text: str, entities: list[MessageEntity], limit: int) -> list[Chunk]:
    if limit < 2:
        raise ValueError("limit must hold at least one character (2 UTF-16 units)")
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
        # object that any other code could change under us. No LaTeX conversion: it
        # rewrites what the model wrote (and its patterns are not linear).
        text, entities = telegramify_markdown.convert(
            protect(markdown), latex_escape=False, config=RenderConfig.isolated())
    except Exception:
        # A reply the converter cannot read still reaches the user, unformatted.
        logger.debug("Markdown conversion failed; sending plain text", exc_info=True)
        return markdown, []
    if not kept_all(markdown, text, entities):  # also: an empty rendering of real text
        logger.info("formatting would have lost part of a reply; sending it as plain text")
        return markdown, []
    return text, entities


# --- keeping what the model wrote --------------------------------------------------------
# CommonMark autolinks (`<https://example.com>`, `<someone@example.com>`): real syntax, kept.
_AUTOLINK = re.compile(r"<[A-Za-z][A-Za-z0-9+.-]{1,31}:[^\s<>]*>"
                       r"|<[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*>")
_ENTITY_REF = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
_SAFE_MARKS = frozenset("?,'\"/@%^{};")  # punctuation Markdown gives no meaning


def _significant(text: str) -> Iterator[str]:
    """The characters a rendering must keep: letters, digits, anything beyond ASCII that is
    not a space, and punctuation Markdown never consumes."""
    for ch in text:
        if ch.isalnum() or ch in _SAFE_MARKS or (ord(ch) > 127 and not ch.isspace()):
            yield ch


def kept_all(markdown: str, text: str, entities: Iterable[MessageEntity]) -> bool:
    """Whether the converted `text` (with the links and languages its entities carry) still
    holds every significant character of `markdown`, as many times. HTML entity
    references (`&amp;`) count as syntax: Markdown reads them as the character they name."""
    have = Counter(_significant(text))
    for entity in entities:
        for value in (entity.url, entity.language, entity.custom_emoji_id):
            if value:
                have.update(_significant(value))
    want = Counter(_significant(_ENTITY_REF.sub("", markdown)))
    return not want - have


def protect(markdown: str) -> str:
    """The Markdown with text that only looks like markup escaped, outside code.

    `<` is escaped (`\\<`), so `List<String>` or a line of HTML stays text instead of
    being read as an HTML tag and dropped; an autolink (`<https://...>`) stays a link.
    `||` pairs are escaped unless they enclose a spoiler on one line (`||hidden||`, no
    space just inside either pair), which becomes the converter's spoiler tags here, so
    its own spoiler pattern never runs.
    Escaping can change what is code: `<div> `a <b>`` is an HTML block as written and a
    paragraph with a code span once escaped, where a backslash would show. So the escaped
    text is parsed again and the backslashes that landed in its code are taken back out,
    unless that changes what is code once more (then the escaped text stands).
    Linear: three parses at most and a few passes over the text.
    """
    if "<" not in markdown and "||" not in markdown:
        return markdown
    data = markdown.encode("utf-8")
    out: list[str] = []
    marks: list[int] = []  # where the inserted backslashes sit, as character offsets
    length = cursor = 0
    for start, end in _code_regions(markdown):
        length = _protect_text(data[cursor:start].decode("utf-8"), out, marks, length)
        out.append(code := data[start:end].decode("utf-8"))
        length += len(code)
        cursor = end
    _protect_text(data[cursor:].decode("utf-8"), out, marks, length)
    escaped = "".join(out)
    return _unescape_code(escaped, marks) if marks else escaped


def _unescape_code(escaped: str, marks: list[int]) -> str:
    regions = _code_regions(escaped)
    taken = set(_in_regions(escaped, marks, regions))
    if not taken:
        return escaped
    kept = "".join(ch for at, ch in enumerate(escaped) if at not in taken)
    return kept if len(_code_regions(kept)) == len(regions) else escaped


def _in_regions(text: str, marks: list[int], regions: list[tuple[int, int]]) -> Iterator[int]:
    """The marks (sorted character offsets) inside the byte ranges `regions`, one pass."""
    if not regions:
        return
    region = byte = at = 0
    for mark in marks:
        byte += len(text[at:mark].encode("utf-8"))
        at = mark
        while region < len(regions) and regions[region][1] <= byte:
            region += 1
        if region == len(regions):
            return
        if regions[region][0] <= byte:
            yield mark


def _code_regions(markdown: str) -> list[tuple[int, int]]:
    """UTF-8 byte ranges the parser reads as code (spans and blocks), in order."""
    regions: list[tuple[int, int]] = []
    for payload, where in pyromark.events_with_range(markdown, options=STANDARD_OPTIONS):
        if not isinstance(payload, dict):
            continue
        start = payload.get("Start")
        if "Code" in payload or (isinstance(start, dict) and "CodeBlock" in start):
            if not regions or where["start"] >= regions[-1][1]:
                regions.append((where["start"], where["end"]))
    return regions


def _protect_text(text: str, out: list[str], marks: list[int], length: int) -> int:
    """Append the escaped lines of `text` to `out`; returns the new length of the output."""
    for number, line in enumerate(text.split("\n")):
        if number:
            out.append("\n")
            length += 1
        length = _protect_line(line, out, marks, length)
    return length


def _protect_line(line: str, out: list[str], marks: list[int], length: int) -> int:
    if "<" not in line and "||" not in line:
        out.append(line)
        return length + len(line)
    spoilers = _spoiler_pairs(line)
    at = 0
    while at < len(line):
        ch = line[at]
        if at in spoilers:
            out.append(spoilers[at])
            length += len(spoilers[at])
            at += 2
            continue
        if ch == "<" and (link := _AUTOLINK.match(line, at)) is not None:
            out.append(link.group())
            length += len(link.group())
            at = link.end()
            continue
        if ch == "<" or (ch == "|" and line.startswith("||", at)):
            if not _escaped(line, at):
                marks.append(length)
                out.append("\\")
                length += 1
            if ch == "|":  # both pipes of the pair, each escaped
                out.append("|\\|")
                length += 3
                at += 2
                continue
        out.append(ch)
        length += 1
        at += 1
    return length


def _spoiler_pairs(line: str) -> dict[int, str]:
    """Where a spoiler opens and closes in the line: {index of "||": the tag}."""
    marks: list[int] = []
    at = line.find("||")
    while at >= 0:
        marks.append(at)
        at = line.find("||", at + 2)
    found: dict[int, str] = {}
    opener: int | None = None
    for at in marks:
        if _escaped(line, at):
            continue
        before = line[at - 1] if at else " "
        after = line[at + 2] if at + 2 < len(line) else " "
        if opener is not None and not before.isspace() and at > opener + 2:
            found[opener], found[at] = "<tg-spoiler>", "</tg-spoiler>"
            opener = None
        elif not after.isspace() and after != "|":
            opener = at
    return found


def _escaped(line: str, at: int) -> bool:
    """Whether line[at] follows an odd number of backslashes (already escaped)."""
    slashes = 0
    while at - slashes > 0 and line[at - slashes - 1] == "\\":
        slashes += 1
    return slashes % 2 == 1


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
