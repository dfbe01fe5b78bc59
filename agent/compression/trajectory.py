"""Offline compression of one training trajectory (ShareGPT: `conversations` of
`{"from", "value"}` turns) to fit a training window (docs/architecture.md, "Trajectories").

The protected head (the first system, human, gpt and tool turns) and the last four turns
stay; middle turns are taken from the start of the region between them until the entry
would fit with a summary in their place (else the whole region), never leaving a tool
turn first after the cut; the span becomes one `human` turn holding the summary. The
summary comes from the compressor's own Summarizer, on turns redacted and head/tail-cut
as the live compressor renders them; sizes are the compressor's rough estimate.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agent.compression.render import truncate_middle
from agent.compression.summarizer import Summarizer
from agent.redact import redact
from agent.tokens import MESSAGE_OVERHEAD, estimate_text

ROLES = ("system", "human", "gpt", "tool")
SUMMARY_HEADER = "[Summary of earlier turns in this conversation]"


@dataclass(frozen=True)
class TrajectorySettings:
    target_max_tokens: int = 15_250
    summary_target_tokens: int = 750
    protect_last_n: int = 4
    max_concurrent_requests: int = 50
    per_entry_timeout_s: float = 300.0


class Malformed(ValueError):
    """A line that is not a ShareGPT entry; the message says what is wrong with it."""


@dataclass(frozen=True)
class EntryMetrics:
    tokens_before: int
    tokens_after: int
    turns_removed: int
    still_over_limit: bool
    status: str  # compressed | under_target | uncompressible | failed
    error: str | None = None

    @property
    def ratio(self) -> float:
        return round(self.tokens_after / self.tokens_before, 4) if self.tokens_before else 1.0

    def as_dict(self) -> dict[str, Any]:
        out = {"tokens_before": self.tokens_before, "tokens_after": self.tokens_after,
               "turns_removed": self.turns_removed, "ratio": self.ratio,
               "still_over_limit": self.still_over_limit, "status": self.status}
        return {**out, "error": self.error} if self.error else out


def parse_entry(line: str) -> dict[str, Any]:
    """The entry on one JSONL line; Malformed says why it is not one."""
    try:
        entry = json.loads(line)
    except ValueError as exc:
        raise Malformed(f"not JSON ({exc.msg})") from None
    turns = entry.get("conversations") if isinstance(entry, dict) else None
    if not isinstance(turns, list):
        raise Malformed("no `conversations` list")
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise Malformed(f"turn {i} has no text `value`")
        if turn.get("from") not in ROLES:
            raise Malformed(f"turn {i} has the unknown role {turn.get('from')!r}")
    return entry


def turn_tokens(turn: dict[str, Any]) -> int:
    return estimate_text(turn["value"]) + MESSAGE_OVERHEAD


def span_to_summarize(turns: list[dict[str, Any]], settings: TrajectorySettings
                      ) -> tuple[int, int] | None:
    """[start, end) of the turns to replace, or None when nothing may go."""
    tokens = [turn_tokens(t) for t in turns]
    firsts = [next((i for i, t in enumerate(turns) if t["from"] == role), -1) for role in ROLES]
    start = max(firsts) + 1
    stop = len(turns) - settings.protect_last_n
    if start >= stop:
        return None
    need = sum(tokens) - settings.target_max_tokens + settings.summary_target_tokens
    end, covered = start, 0
    while end < stop and covered < need:
        covered += tokens[end]
        end += 1
    while end < len(turns) and turns[end]["from"] == "tool":  # a tool result needs its call
        end += 1
    return start, end


def render(turns: list[dict[str, Any]]) -> list[str]:
    """The turns as the summarizer reads them: redacted, long bodies cut in the middle."""
    return [f"### {t['from']}\n{truncate_middle(redact(t['value']))}" for t in turns]


async def compress_entry(entry: dict[str, Any], settings: TrajectorySettings,
                         summarizer: Summarizer) -> tuple[dict[str, Any], EntryMetrics]:
    """The entry to write and its metrics. Raises what the summarizer raises: the caller
    writes the entry unchanged then."""
    turns = entry["conversations"]
    before = sum(turn_tokens(t) for t in turns)
    if before <= settings.target_max_tokens:
        return entry, EntryMetrics(before, before, 0, False, "under_target")
    span = span_to_summarize(turns, settings)
    if span is None:
        return entry, EntryMetrics(before, before, 0, True, "uncompressible",
                                   "nothing between the protected turns")
    start, end = span
    body, _ = await summarizer.summarize(render(turns[start:end]), None, None)
    summary = {"from": "human", "value": f"{SUMMARY_HEADER}\n{redact(body).strip()}"}
    kept = [*turns[:start], summary, *turns[end:]]
    after = sum(turn_tokens(t) for t in kept)
    return ({**entry, "conversations": kept},
            EntryMetrics(before, after, end - start, after > settings.target_max_tokens,
                         "compressed"))
