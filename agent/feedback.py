"""What a manual /compress tells the user (docs/architecture.md, "When compaction runs")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from agent.context_engine import CompressionReport
from agent.redact import redact
from agent.tokens import estimate_messages

FeedbackKind = Literal["noop", "aborted", "fallback_used", "compressed"]
Estimate = Callable[[list[dict[str, Any]]], int]

_FALLBACK_NOTE = ("The summary model was unavailable, so a simpler extractive summary was "
                  "used and some detail was condensed.")
_DENSE_NOTE = ("Fewer messages, but a higher rough estimate: the summary is denser than the "
               "turns it replaced. The numbers are estimates, not the provider's count.")


@dataclass(frozen=True)
class Feedback:
    kind: FeedbackKind
    headline: str
    token_line: str = ""
    note: str = ""
    warnings: tuple[str, ...] = ()

    def render(self) -> str:
        """A short multi-line chat message; empty parts are left out."""
        lines = [self.headline]
        lines += [part for part in (self.token_line, self.note) if part]
        lines += [f"⚠️ {warning}" for warning in self.warnings]
        return "\n".join(lines)


def _messages(count: int) -> str:
    return f"{count:,} message" + ("" if count == 1 else "s")


def _tokens(count: int) -> str:
    return f"~{count:,}"


def build_feedback(before: list[dict[str, Any]], after: list[dict[str, Any]],
                   report: CompressionReport | None,
                   estimate: Estimate = estimate_messages) -> Feedback:
    """Turn a compaction's before/after transcripts and its report into user feedback."""
    # Notices and errors may quote provider text; redact again rather than trust the source.
    warnings = tuple(redact(n) for n in report.notices) if report else ()

    if report is not None and report.outcome == "aborted":
        reason = redact(report.error or "").strip()
        return Feedback(
            kind="aborted",
            headline="Compression aborted: the conversation is unchanged.",
            note=f"Reason: {reason}" if reason else "",
            warnings=warnings,
        )

    # Identity first: engines return the input list when they did nothing, and an
    # element-wise comparison of a long history is only needed when they did not.
    if after is before or after == before:
        return Feedback(
            kind="noop",
            headline=f"Nothing to compress yet: {_messages(len(before))}",
            token_line=f"Rough estimate: {_tokens(estimate(before))} tokens",
            warnings=warnings,
        )

    tokens_before, tokens_after = estimate(before), estimate(after)
    fallback = report is not None and report.outcome == "fallback_used"
    headline = f"Compressed: {len(before):,} → {_messages(len(after))}"
    if report is not None and report.focus_topic:
        headline += f" (focus: {redact(report.focus_topic)})"
    notes = []
    if fallback:
        notes.append(_FALLBACK_NOTE)
    if len(after) < len(before) and tokens_after > tokens_before:
        notes.append(_DENSE_NOTE)
    return Feedback(
        kind="fallback_used" if fallback else "compressed",
        headline=headline,
        token_line=f"Rough estimate: {_tokens(tokens_before)} → {_tokens(tokens_after)} tokens",
        note=" ".join(notes),
        warnings=warnings,
    )
