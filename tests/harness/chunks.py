"""Checks on a reply split into platform messages: fences balanced, text rejoined."""

from __future__ import annotations

import re

_REOPEN = re.compile(r"^```\S*\n")


def fence_lines(chunk: str) -> int:
    """Lines that open or close a code block (a fence starts its line)."""
    return sum(1 for line in chunk.splitlines() if line.lstrip().startswith("```"))


def rejoin(chunks: list[str]) -> str:
    """Undo the fence lines the splitter added to close and reopen code blocks.

    An added close takes the place of the line break the chunk ended with, so it is put
    back as a line break (chunks cut mid-line inside code gain one: that is the only
    liberty the splitter takes).
    """
    out = []
    for i, chunk in enumerate(chunks):
        if i > 0 and chunks[i - 1].endswith("\n```") and _REOPEN.match(chunk):
            chunk = _REOPEN.sub("", chunk, count=1)
        if i < len(chunks) - 1 and chunk.endswith("\n```") and _REOPEN.match(chunks[i + 1]):
            chunk = chunk[: -len("```")]
        out.append(chunk)
    return "".join(out)
