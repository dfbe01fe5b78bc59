"""Who said what in a group chat (docs/groups.md, "Speakers").

In a group every user message the model sees, and the stored copy that summaries and
`history_search` read, starts with its sender: `[Alice · 7f3a]: text`. The name is the
display name the platform gave; the four hex digits are a hash of the platform's user id,
so two Alices stay apart and a renamed user keeps the same id. A name is data, never
markup: brackets become parentheses and line breaks and other control characters become
spaces, so no name can close the label early or start a line of its own. Private chats
have one speaker and stay unlabelled.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from agent.attachments.parts import build_content
from gateway.turns.turn_records import new_message
from storage.models import InboundRecord, NewMessage

MAX_NAME = 48  # characters of a display name kept in a label
_BRACKETS = str.maketrans("[]", "()")


def short_id(platform: str, user_id: str | None) -> str:
    return hashlib.sha256(f"{platform}:{user_id or ''}".encode()).hexdigest()[:4]


def clean_name(name: str | None) -> str:
    """A display name fit to stand in a label: one line, no brackets, at most MAX_NAME."""
    text = (name or "").translate(_BRACKETS)
    text = "".join(c if c.isprintable() else " " for c in text)
    text = " ".join(text.split())
    if len(text) > MAX_NAME:
        text = text[:MAX_NAME - 1] + "…"
    return text or "someone"


def label(platform: str, user_id: str | None, name: str | None) -> str:
    return f"[{clean_name(name)} · {short_id(platform, user_id)}]"


def said(record: InboundRecord) -> str:
    """The row's text as the model reads it: labelled with its sender in a group."""
    if not record.extra.get("is_group"):
        return record.text
    return f"{label(record.platform, record.sender_id, record.sender_name)}: {record.text}"


def user_message(record: InboundRecord, parts: Iterable[dict[str, Any]]) -> NewMessage:
    """The stored user message for one ledger row, with its attachments' parts."""
    return new_message({"role": "user", "content": build_content(said(record), parts)},
                       answered=False, platform_message_id=record.message_id,
                       sender_id=record.sender_id, sender_name=record.sender_name)
