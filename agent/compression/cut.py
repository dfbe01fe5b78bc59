"""Where a transcript is cut (head | middle | tail), and the cheap pass over the kept tail.

One budget, one boundary: the cut computed here is used by every later phase.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agent.tokens import Message

MIN_TAIL = 3
OVERRUN = 1.5  # a single oversized message may take the tail this far past its budget
LONG_ARGS = 500
ARG_VALUE_KEEP = 200
MIN_DEDUP_CHARS = 200  # shorter duplicate results cost less than the pointer's clarity


@dataclass(frozen=True)
class Cut:
    head_end: int  # messages[:head_end] is kept verbatim at the start
    tail_start: int  # messages[tail_start:] is kept at the end
    last_user: int  # index of the newest user message, -1 when there is none

    @property
    def middle_empty(self) -> bool:
        return self.tail_start <= self.head_end


def head_size(messages: Sequence[Message], protect_first_n: int, compacted: bool) -> int:
    """System prompt + first exchange; only the system prompt once the chain was compacted."""
    has_system = bool(messages) and messages[0].get("role") == "system"
    if compacted:
        end = 1 if has_system else 0
    else:
        # protect_first_n counts the system prompt; without one, keep the first exchange.
        end = protect_first_n if has_system else max(protect_first_n - 1, 0)
    end = min(end, len(messages))
    while end < len(messages) and messages[end].get("role") == "tool":
        end += 1  # never start the middle with results whose call stays in the head
    return end


def _last_user(messages: Sequence[Message]) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return -1


def find_cut(messages: Sequence[Message], tokens: Callable[[Message], int], *,
             head_end: int, tail_budget: int, protect_last_n: int, count_cap: int) -> Cut:
    """Walk back from the end, spending cached token counts until the tail budget is used.

    The last MIN_TAIL messages are always kept; protect_last_n more only while the tail
    stays under `count_cap` tokens, so twenty huge tool results cannot make the compacted
    transcript larger than the window it must fit.
    """
    n = len(messages)
    room = n - head_end
    # Always leave a middle to compress.
    min_tail = max(0, min(MIN_TAIL, room - 1))
    protected = max(0, min(max(MIN_TAIL, protect_last_n), room - 1))
    start, spent = n, 0
    while start > head_end:
        cost = tokens(messages[start - 1])
        taken = n - start
        if (taken < min_tail or spent + cost <= tail_budget
                or (taken < protected and spent + cost <= count_cap)):
            spent += cost
            start -= 1
            continue
        if spent + cost <= tail_budget * OVERRUN:
            start -= 1  # one oversized message rather than a split one
        break
    # Never cut inside an assistant + tool-results group: pull the cut before the assistant.
    while head_end < start < n and messages[start].get("role") == "tool":
        start -= 1
    last_user = _last_user(messages)
    if head_end <= last_user < start:
        start = last_user  # the newest request and the reply it got stay verbatim
    return Cut(head_end=head_end, tail_start=max(start, head_end), last_user=last_user)


# --- the cheap pass (no model) ---------------------------------------------------------
def _shorten(value: Any) -> Any:
    if isinstance(value, str) and len(value) > ARG_VALUE_KEEP:
        return f"{value[:ARG_VALUE_KEEP]}…[{len(value) - ARG_VALUE_KEEP} more characters cut]"
    if isinstance(value, list):
        return [_shorten(v) for v in value]
    if isinstance(value, dict):
        return {k: _shorten(v) for k, v in value.items()}
    return value


def _shorten_calls(msg: Message) -> Message:
    """Cut long string values of long tool-call arguments, keeping the arguments valid JSON."""
    calls = msg.get("tool_calls") or []
    new_calls: list[Any] = []
    changed = False
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        raw = fn.get("arguments") if isinstance(fn, dict) else None
        if isinstance(raw, str) and len(raw) > LONG_ARGS:
            try:
                parsed = json.loads(raw)
                short = (json.dumps(_shorten(parsed), ensure_ascii=False)
                         if isinstance(parsed, dict | list) else raw)
            except (ValueError, RecursionError):  # not JSON, or nested too deep for the
                short = raw  # parser or for _shorten: leave it alone rather than break it
            if len(short) < len(raw):
                call = {**call, "function": {**fn, "arguments": short}}
                changed = True
        new_calls.append(call)
    return {**msg, "tool_calls": new_calls} if changed else msg


def lighten_tail(tail: Sequence[Message], latest_turn: int) -> list[Message]:
    """Dedupe older tool results and shorten older long arguments; the latest turn is untouched.

    `latest_turn` is the index (in `tail`) where the newest user turn starts. Messages that
    do not change are returned as the same objects.
    """
    out = list(tail)
    newer: set[str] = set()
    for i in range(len(out) - 1, -1, -1):
        msg = out[i]
        role = msg.get("role")
        if role == "tool":
            content = msg.get("content")
            if not isinstance(content, str) or len(content) < MIN_DEDUP_CHARS:
                continue
            if i < latest_turn and content in newer:
                out[i] = {**msg, "content": "[identical to a newer tool result further down; "
                                            "omitted here]"}
            newer.add(content)
        elif role == "assistant" and i < latest_turn and msg.get("tool_calls"):
            out[i] = _shorten_calls(msg)
    return out
