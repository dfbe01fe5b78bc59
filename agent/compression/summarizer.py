"""Writing the handoff summary: bounded chunked requests, validation, grounding, the prefix."""

from __future__ import annotations

import bisect
import itertools
import logging
import re
from collections.abc import Sequence

from agent.compression.markers import strip_prefix, with_prefix
from agent.compression.prompts import (
    SECTIONS,
    active_task_missing,
    base_instructions,
    request_frame,
)
from agent.compression.render import fit_chars
from agent.context_engine import UsageSink
from agent.errors import EmptyReplyError
from agent.providers.base import Provider
from agent.redact import redact
from agent.tokens import CHARS_PER_TOKEN, MESSAGE_OVERHEAD, estimate_text

log = logging.getLogger(__name__)

MIN_WORDS = 20
TASK_CHARS = 3_000  # an Active Task longer than this is head/tail-cut (a pasted document)
MIN_CHUNK_CHARS = 1_000  # below this the summary window is too small to be useful
_SEPARATOR = "\n\n"

_KNOWN = "|".join(re.escape(name) for name in SECTIONS)
# A heading line: markdown "#", a bold line, or a bare known section name with an optional colon.
_HEADING = re.compile(
    rf"^[ \t]*(?:#{{1,6}}[ \t]+.*|\*\*[^*\n]+\*\*[ \t]*:?[ \t]*|(?:{_KNOWN})[ \t]*:)[ \t]*$",
    re.MULTILINE | re.IGNORECASE)
ACTIVE_TASK = re.compile(r"active[ \t]+task", re.IGNORECASE)


class SummaryTooSmallWindow(EmptyReplyError):
    """The summary model's window cannot hold even one turn next to the instructions."""


# --- validation and grounding ------------------------------------------------------------
def check_reply(text: str) -> str:
    """Reject an empty or near-empty reply; the raw text otherwise."""
    words = len(text.split())
    if words < MIN_WORDS:
        raise EmptyReplyError(f"the summary reply was too short ({words} words)")
    return text.strip()


def trim_to(text: str, max_chars: int) -> str:
    """Cut at the last section heading, else paragraph, else line that fits."""
    if len(text) <= max_chars:
        return text
    window = text[:max_chars]
    starts = [m.start() for m in _HEADING.finditer(window) if m.start() > 0]
    for cut in (starts[-1] if starts else -1, window.rfind("\n\n"), window.rfind("\n")):
        if cut > max_chars // 3:
            return window[:cut].rstrip()
    return window.rstrip()


def _sections(text: str) -> list[tuple[int, int, str]]:
    """(heading start, body start, heading line) for every heading."""
    return [(m.start(), m.end(), m.group(0)) for m in _HEADING.finditer(text)]


def section_body(text: str, name_pattern: re.Pattern[str]) -> str | None:
    heads = _sections(text)
    for i, (_, body_start, line) in enumerate(heads):
        if name_pattern.search(line):
            end = heads[i + 1][0] if i + 1 < len(heads) else len(text)
            return text[body_start:end].strip()
    return None


def ground_active_task(text: str, task: str) -> str:
    """Put `task` (verbatim) under Active Task, replacing what the model wrote there."""
    heads = _sections(text)
    for i, (start, _body, line) in enumerate(heads):
        if ACTIVE_TASK.search(line):
            end = heads[i + 1][0] if i + 1 < len(heads) else len(text)
            return f"{text[:start]}## Active Task\n{task}\n\n{text[end:].lstrip()}".rstrip()
    return f"## Active Task\n{task}\n\n{text.lstrip()}".rstrip()


def task_text(request: str | None, previous: str | None) -> str:
    """The grounded Active Task: the newest request, else what the last summary said."""
    if request:
        return fit_chars(request, TASK_CHARS)
    if previous:
        body = section_body(strip_prefix(previous), ACTIVE_TASK)
        if body:
            return body
    return active_task_missing()


# --- the summarizer ------------------------------------------------------------------------
class Summarizer:
    """Runs the summary model over the compacted span, oldest first, in bounded chunks."""

    def __init__(self, provider: Provider, *, window: int, budget: int,
                 usage_sink: UsageSink | None = None) -> None:
        self.provider = provider
        self.window = window
        self.budget = budget
        self.usage_sink = usage_sink
        self.instructions = base_instructions(budget)
        # Every request must leave `budget` tokens of the window for the reply.
        self.prompt_limit = window - budget

    def _request_chars(self, previous: str | None, focus: str | None) -> int:
        """Characters left for turns once instructions, wrapper and summary are counted."""
        before, after = request_frame(previous, focus)
        fixed_tokens = estimate_text(self.instructions) + 2 * MESSAGE_OVERHEAD
        return (self.prompt_limit - fixed_tokens) * CHARS_PER_TOKEN - len(before) - len(after)

    @staticmethod
    def _next_chunk(pieces: Sequence[str], ends: Sequence[int], start: int,
                    room: int) -> tuple[list[str], int]:
        """The pieces from `start` that fit in `room` characters, with the separators
        between them, ready to join; always at least one.

        `ends[i]` is the length of pieces[:i + 1] with a separator after each, so the cut is
        found by bisection instead of a Python loop over every turn (the last piece of a
        chunk has no separator after it, hence the one added to the room).
        """
        offset = ends[start - 1] if start else 0
        stop = bisect.bisect_right(ends, offset + room + len(_SEPARATOR), lo=start)
        if stop == start:  # one turn larger than the whole room: cut it to fit
            return [fit_chars(pieces[start], room)], start + 1
        parts = [_SEPARATOR] * (2 * (stop - start) - 1)
        parts[::2] = pieces[start:stop]
        return parts, stop

    async def summarize(self, pieces: Sequence[str], previous: str | None,
                        focus: str | None) -> tuple[str, int]:
        """(raw checked summary body, chunks used). Raises ProviderError kinds on failure."""
        running = strip_prefix(previous) if previous else None
        focus = redact(focus) if focus else None
        chunks = 0
        start = 0
        if not pieces:
            raise ValueError("nothing to summarize")
        # C-level loops: a compaction hands over ~2,000 pieces.
        ends = list(itertools.accumulate(map(len(_SEPARATOR).__add__, map(len, pieces))))
        while start < len(pieces):
            if running is not None:
                running = trim_to(running, self.budget * CHARS_PER_TOKEN)
            room = self._request_chars(running, focus)
            if room < MIN_CHUNK_CHARS:
                raise SummaryTooSmallWindow(
                    f"the summary model's {self.window}-token window is too small")
            turns, start = self._next_chunk(pieces, ends, start, room)
            # The request is hundreds of thousands of characters: built in one join, not a
            # join of the turns and then a copy into the prompt around them.
            before, after = request_frame(running, focus)
            prompt = "".join([before, *turns, after])
            reply = await self._call(prompt)
            running = trim_to(check_reply(reply), 2 * self.budget * CHARS_PER_TOKEN)
            chunks += 1
        assert running is not None
        return running, chunks

    async def _call(self, prompt: str) -> str:
        messages = [{"role": "system", "content": self.instructions},
                    {"role": "user", "content": prompt}]
        completion = await self.provider.complete(messages, max_tokens=self.budget)
        if self.usage_sink is not None:
            self.usage_sink(completion.model or self.provider.model, "summary", completion.usage)
        return completion.text


def finish_summary(body: str, task: str) -> str:
    """Ground Active Task, redact, and prefix: the text that is stored and sent."""
    return with_prefix(redact(ground_active_task(body, task)))
