"""The marks a summary leaves in a transcript: its prefix, the merge block, the system note.

Written here, found here, stripped here: every other module asks these functions whether
a message is (or carries) a summary.
"""

from __future__ import annotations

from typing import Any

from agent.compression.prompts import (
    MERGE_BEGIN,
    MERGE_END,
    OLDER_PREFIXES,
    SUMMARY_MARKER,
    SUMMARY_PREFIX,
    SYSTEM_NOTE,
)
from agent.messages import Message, content_text

SUMMARY_SCAN = 6  # an earlier summary sits within this many messages after the head


def with_prefix(body: str) -> str:
    return f"{SUMMARY_PREFIX}\n{body.strip()}"


def strip_prefix(text: str) -> str:
    """The body of a stored summary, whatever prefix (current or older) it carries."""
    for old in OLDER_PREFIXES:
        if text.startswith(old):
            return text[len(old):].lstrip()
    if text.startswith(SUMMARY_MARKER):
        _, _, rest = text.partition("\n")
        return rest.lstrip("\n")
    return text


def upgrade_prefix(text: str) -> str:
    """Give a stored summary the current prefix, replacing an older one."""
    return with_prefix(strip_prefix(text))


def is_summary_text(text: str) -> bool:
    return text.startswith(SUMMARY_MARKER) or text.startswith(OLDER_PREFIXES)


def split_summary(msg: Message) -> tuple[str | None, Any]:
    """(summary text, remaining content) of a message; (None, content) for an ordinary one.

    A summary is either a whole message starting with the prefix marker, or a block
    between MERGE_BEGIN and MERGE_END at the start of a real turn it had to share.
    """
    content = msg.get("content")
    first = content if isinstance(content, str) else None
    if isinstance(content, list) and content and isinstance(content[0], dict):
        first = content[0].get("text") if isinstance(content[0].get("text"), str) else None
    if first is None:
        return None, content
    if first.startswith(MERGE_BEGIN) and MERGE_END in first:
        inner, _, rest = first[len(MERGE_BEGIN):].partition(MERGE_END)
        if isinstance(content, list):
            return inner.strip(), content[1:]
        # merge_summary writes "\n\n" before the turn's own text: drop exactly that.
        return inner.strip(), rest[2:] if rest.startswith("\n\n") else rest.lstrip("\n")
    if msg.get("role") in ("user", "assistant") and is_summary_text(first):
        return first, None
    return None, content


def with_system_note(system: Message) -> Message:
    """The system message with the one-time compaction note; unchanged if already there."""
    content = system.get("content")
    if SYSTEM_NOTE in content_text(content):
        return system
    if isinstance(content, list):
        return {**system, "content": [*content, {"type": "text", "text": SYSTEM_NOTE}]}
    text = content or ""
    return {**system, "content": f"{text}\n\n{SYSTEM_NOTE}" if text else SYSTEM_NOTE}


def merge_summary(msg: Message, summary: str) -> Message:
    """`msg` with the summary in front of its own content, between clear markers."""
    block = f"{MERGE_BEGIN}\n{summary}\n{MERGE_END}"
    content = msg.get("content")
    if isinstance(content, list):
        return {**msg, "content": [{"type": "text", "text": block}, *content]}
    return {**msg, "content": f"{block}\n\n{content}" if content else block}


def fold_previous(messages: list[Message], head_end: int, tail_start: int,
                  middle: list[Message], tail: list[Message], remembered: str | None
                  ) -> tuple[str | None, list[Message], list[Message]]:
    """Take the earlier summary out of the transcript: (summary, middle, tail) without it.

    It sits right after the head, in the middle or (when the tail reaches back that far)
    in the tail. A summary merged into a real turn leaves that turn's own content behind.
    Without one in the transcript, the `remembered` summary is the base.
    """
    for i in range(head_end, min(head_end + SUMMARY_SCAN, len(messages))):
        summary, rest = split_summary(messages[i])
        if summary is None:
            continue
        previous = summary.replace(SYSTEM_NOTE, "").strip()
        msg = messages[i]
        empty = rest in (None, "", [])
        # What the turn itself said (and any tool calls it made) stays a turn.
        own = [] if empty and not msg.get("tool_calls") else [
            {**msg, "content": None if empty else rest}]
        if i < tail_start:
            at = i - head_end
            return previous, [*middle[:at], *own, *middle[at + 1:]], tail
        at = i - tail_start
        return previous, middle, [*tail[:at], *own, *tail[at + 1:]]
    return remembered, middle, tail
