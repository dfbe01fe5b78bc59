"""The deterministic fallback summary, used when the summary model cannot be reached.

No model is involved: the newest requests, the tools used and what they returned, paths
and error lines are pulled out of the (redacted) compacted turns verbatim.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from agent.compression.markers import strip_prefix, with_prefix
from agent.compression.prompts import SUMMARY_PREFIX
from agent.compression.render import key_arguments, recent_user_requests, truncate_middle
from agent.compression.summarizer import ACTIVE_TASK, section_body, trim_to
from agent.messages import content_text
from agent.tokens import Message, TokenCache

MAX_CHARS = 8_000
SCAN_MESSAGES = 400  # the newest turns are the ones worth extracting; bounds the work
USER_ASKS = 5
TOOL_LINES = 25
PATHS = 30
ERROR_LINES = 15
LINE_CHARS = 200

_PATH = re.compile(r"(?<![\w/.:@-])(?:~|\.{1,2})?/?(?:[\w.-]+/)+[\w.-]*\w")
_ERROR = re.compile(r"\b(?:error|exception|traceback|failed|failure|fatal|denied|"
                    r"not found|no such file)\b", re.IGNORECASE)


def _one_line(text: str, limit: int = LINE_CHARS) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return "(no output)"


def _tool_lines(span: Sequence[Message], cache: TokenCache) -> list[str]:
    calls: dict[str, str] = {}
    lines: list[str] = []
    for msg in span:
        red = cache.redacted(msg)
        if red.get("role") == "assistant":
            for call in red.get("tool_calls") or ():
                fn = call.get("function") or {}
                key = key_arguments(fn.get("arguments"))
                calls[str(call.get("id"))] = f"{fn.get('name') or 'tool'}({key})"
        elif red.get("role") == "tool":
            name = calls.get(str(red.get("tool_call_id")), "tool")
            lines.append(f"- {name}: {_one_line(content_text(red.get('content')))}")
    return lines[-TOOL_LINES:]


def _paths_and_errors(span: Sequence[Message], cache: TokenCache) -> tuple[list[str], list[str]]:
    paths: dict[str, None] = {}
    errors: dict[str, None] = {}
    for msg in span:
        text = truncate_middle(content_text(cache.redacted(msg).get("content")))
        for match in _PATH.findall(text):
            last = match.rsplit("/", 1)[-1]
            if len(match) <= LINE_CHARS and (match[0] in "/~." or "." in last):
                paths[match] = None
        for line in text.splitlines():
            if _ERROR.search(line):
                errors[_one_line(line)] = None
    return list(paths)[-PATHS:], list(errors)[-ERROR_LINES:]


def _section(title: str, lines: Sequence[str], cap: int) -> str:
    return f"## {title}\n" + (trim_to("\n".join(lines), cap) if lines else "None.")


def extractive_summary(span: Sequence[Message], cache: TokenCache, *, task: str,
                       previous: str | None = None, max_chars: int = MAX_CHARS) -> str:
    """A prefixed summary of `span` built without a model, at most `max_chars` long."""
    recent = span[-SCAN_MESSAGES:]
    asks = reversed(recent_user_requests(recent, cache, USER_ASKS))
    paths, errors = _paths_and_errors(recent, cache)
    parts = [
        "## Active Task\n" + task,
        "## Note\nCondensed without the summary model: an extract of the compacted turns, "
        "not a full summary.",
        _section("Recent User Asks", [f"- {_one_line(a, 300)}" for a in asks], 1_500),
    ]
    if previous:
        earlier = strip_prefix(previous)
        old_task = section_body(earlier, ACTIVE_TASK)
        if old_task:  # superseded by the Active Task above
            earlier = earlier.replace(old_task, "(superseded)", 1)
        parts.append(_section("Earlier Summary (condensed)", [earlier], 2_500))
    parts += [
        _section("Tools Used", _tool_lines(recent, cache), 1_500),
        _section("Relevant Files", [f"- {p}" for p in paths], 800),
        _section("Errors Seen", [f"- {e}" for e in errors], 1_200),
    ]
    body = "\n\n".join(parts)
    return with_prefix(trim_to(body, max_chars - len(SUMMARY_PREFIX) - 1))
