"""One cut of one transcript: the head and tail a compaction keeps, the middle it folds
(docs/architecture.md, "The compaction itself").

The cut itself is `agent.compression.cut.find_cut`; this module turns it into a `Plan`: the
earlier summary taken out of the middle, the tail's cheap pass, and the token counts the
compaction reports.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.compression.cut import Cut, find_cut, head_size, lighten_tail
from agent.compression.markers import SUMMARY_SCAN, fold_previous, split_summary
from agent.tokens import Message, TokenCache

SMALL_TRANSCRIPT_EXTRA = 4  # "too small": at most protect_first_n + 4 messages


@dataclass(frozen=True)
class CutLimits:
    """The engine's settings a cut obeys."""

    protect_first_n: int
    protect_last_n: int
    tail_budget: int  # tokens the verbatim tail may hold
    count_cap: int  # the tail never counts past this many tokens


@dataclass(frozen=True)
class Plan:
    """One cut of one transcript, shared by every phase of a compaction."""

    head: list[Message]
    middle: list[Message]
    tail: list[Message]  # after the cheap pass
    middle_tokens: int | None  # None until counted while rendered (a plain list's middle)
    edge_tokens: int  # the head and the tail before the cheap pass
    turns: list[Message]  # the middle without an earlier summary
    previous: str | None  # the earlier summary found in the middle (or remembered)
    last_user: Message | None  # the newest user message, which must survive verbatim


def _cut(messages: list[Message], cache: TokenCache, limits: CutLimits,
         compacted: bool) -> Cut | None:
    compacted = compacted or any(split_summary(m)[0] is not None
                                 for m in messages[:SUMMARY_SCAN])
    has_system = bool(messages) and messages[0].get("role") == "system"
    first_n = (1 if has_system else 0) if compacted else limits.protect_first_n
    if len(messages) <= first_n + SMALL_TRANSCRIPT_EXTRA:
        return None
    head_end = head_size(messages, limits.protect_first_n, compacted)
    cut = find_cut(messages, cache.tokens, head_end=head_end, tail_budget=limits.tail_budget,
                   protect_last_n=limits.protect_last_n, count_cap=limits.count_cap)
    return None if cut.middle_empty else cut


def make_plan(messages: list[Message], cache: TokenCache, limits: CutLimits, *,
              compacted: bool, remembered: str | None, total: int | None = None,
              light: bool = False) -> Plan | None:
    """The plan for `messages`, or None when there is nothing to fold.

    `compacted`: the engine compacted this conversation before (its `remembered` summary is
    the base when none is found in the transcript). `total`: the transcript's size when
    known (a Transcript); otherwise the middle is counted later, while it is rendered.
    `light` skips the tail's cheap pass (a yes/no question about the plan).
    """
    cut = _cut(messages, cache, limits, compacted)
    if cut is None:
        return None
    head = messages[:cut.head_end]
    middle = messages[cut.head_end:cut.tail_start]
    original_tail = messages[cut.tail_start:]
    previous, turns, tail = fold_previous(messages, cut.head_end, cut.tail_start, middle,
                                          original_tail, remembered)
    if not turns:
        return None  # only an earlier summary in the middle: nothing new to fold in
    if not light:
        latest = cut.last_user - cut.tail_start if cut.last_user >= cut.tail_start else 0
        tail = lighten_tail(tail, latest - (len(original_tail) - len(tail)))
    last_user = messages[cut.last_user] if cut.last_user >= cut.head_end else None
    edge_tokens = cache.total(head) + cache.total(original_tail)
    middle_tokens = None if total is None else total - edge_tokens
    return Plan(head, middle, tail, middle_tokens, edge_tokens, turns, previous, last_user)

