"""Putting a compacted transcript together: note, summary role, tool-pair sanitation, checks."""

from __future__ import annotations

from collections.abc import Sequence

from agent.compression.markers import merge_summary, split_summary, with_system_note
from agent.compression.prompts import STUB_TOOL_RESULT, SYSTEM_NOTE
from agent.tokens import Message

_OTHER = {"user": "assistant", "assistant": "user"}


def summary_role(head: Sequence[Message], tail: Sequence[Message]) -> str | None:
    """'user' or 'assistant' for a separate summary message; None: merge into tail[0]."""
    last_head = head[-1].get("role") if head else None
    only_system = last_head is None or (len(head) == 1 and last_head == "system")
    role = "user" if only_system or last_head in ("assistant", "tool") else "assistant"
    first_tail = tail[0].get("role") if tail else None
    if role != first_tail:
        return role
    flipped = _OTHER[role]
    # An assistant message straight after the system prompt breaks providers that need
    # the conversation to open with a user turn, so that flip collides with the head too.
    if flipped == last_head or (flipped == "assistant" and only_system):
        return None
    return flipped


def assemble(head: Sequence[Message], summary: str, tail: Sequence[Message]) -> list[Message]:
    """Head (system note added once), then the summary, then the tail."""
    out = list(head)
    if out and out[0].get("role") == "system":
        out[0] = with_system_note(out[0])
    else:
        summary = f"{summary}\n\n{SYSTEM_NOTE}"  # no system prompt to carry the note
    role = summary_role(head, tail)
    if role is None:
        return [*out, merge_summary(tail[0], summary), *tail[1:]]
    return [*out, {"role": role, "content": summary}, *tail]


def _stub(call_id: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": STUB_TOOL_RESULT}


def sanitize_pairs(messages: Sequence[Message]) -> list[Message]:
    """Drop results without their call; give calls without a result a short stub result."""
    out: list[Message] = []
    i, n = 0, len(messages)
    while i < n:
        msg = messages[i]
        i += 1
        role = msg.get("role")
        if role == "tool":
            continue  # not directly after its call: an orphan
        out.append(msg)
        calls = msg.get("tool_calls") if role == "assistant" else None
        if not calls:
            continue
        wanted = [str(c.get("id")) for c in calls if isinstance(c, dict)]
        seen: set[str] = set()
        while i < n and messages[i].get("role") == "tool":
            call_id = str(messages[i].get("tool_call_id"))
            if call_id in wanted and call_id not in seen:
                out.append(messages[i])
                seen.add(call_id)
            i += 1
        out.extend(_stub(call_id) for call_id in wanted if call_id not in seen)
    return out


def _is_same_turn(kept: Message, original: Message) -> bool:
    if kept is original:
        return True
    summary, rest = split_summary(kept)
    return summary is not None and rest == original.get("content")


def validation_error(messages: Sequence[Message], summary_index: int,
                     last_user: Message | None) -> str | None:
    """Why `messages` is not a valid compacted transcript, or None when it is."""
    if not messages:
        return "the result is empty"
    roles = [m.get("role") for m in messages]
    first = 1 if roles[0] == "system" else 0
    if first < len(roles) and roles[first] != "user":
        return f"the conversation opens with {roles[first]!r}, not a user turn"
    open_calls: set[str] = set()
    for msg, role in zip(messages, roles, strict=True):
        if role == "tool":
            if str(msg.get("tool_call_id")) not in open_calls:
                return "a tool result has no call before it"
            continue
        open_calls = {str(c.get("id")) for c in msg.get("tool_calls") or ()
                      if isinstance(c, dict)}
    if last_user is not None and not any(
            _is_same_turn(m, last_user) for m in messages[summary_index:]):
        return "the newest user message is missing after the summary"
    return None
