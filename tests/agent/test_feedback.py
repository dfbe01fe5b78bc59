"""What a user reads after /compress (docs/architecture.md, "When compaction runs")."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from agent.context_engine import CompressionReport
from agent.feedback import Feedback, build_feedback
from agent.redact import REDACTED


def rough(messages: list[dict[str, Any]]) -> int:
    return sum(len(str(m.get("content") or "")) for m in messages) // 4


def history(count: int, size: int = 400) -> list[dict[str, Any]]:
    roles = ("user", "assistant")
    return [{"role": roles[i % 2], "content": f"turn {i} " + "x" * size} for i in range(count)]


def report(outcome: str, before: list, after: list, **kw: Any) -> CompressionReport:
    return CompressionReport(outcome=outcome, messages_before=len(before),
                             messages_after=len(after), tokens_before=rough(before),
                             tokens_after=rough(after), **kw)


def test_nothing_changed_says_so_with_the_message_count() -> None:
    before = history(5)
    fb = build_feedback(before, before, report("noop", before, before), rough)
    assert fb.kind == "noop"
    assert fb.headline == "Nothing to compress yet: 5 messages"
    assert fb.render().splitlines()[0] == "Nothing to compress yet: 5 messages"


def test_an_equal_copy_is_still_nothing_to_compress() -> None:
    before = history(3)
    fb = build_feedback(before, [dict(m) for m in before], None, rough)
    assert fb.kind == "noop"


def test_compressed_reports_messages_and_tokens_with_separators() -> None:
    before = history(2_400, size=2_000)
    after = [before[0], {"role": "user", "content": "summary " * 200}] + before[-20:]
    fb = build_feedback(before, after, report("compressed", before, after), rough)
    assert fb.kind == "compressed"
    assert fb.headline == "Compressed: 2,400 → 22 messages"
    assert fb.token_line == f"Rough estimate: ~{rough(before):,} → ~{rough(after):,} tokens"
    assert "~1,2" in fb.token_line  # 2,400 × ~500 tokens shows its thousands separators
    assert fb.note == ""
    text = fb.render()
    assert text.splitlines() == [fb.headline, fb.token_line]


def test_fewer_but_denser_messages_get_an_explanation() -> None:
    before = [{"role": "user", "content": "hi"}] * 10
    after = [{"role": "user", "content": "a dense summary " * 40}]
    fb = build_feedback(before, after, report("compressed", before, after), rough)
    assert fb.kind == "compressed"
    assert rough(after) > rough(before)
    assert "denser" in fb.note and fb.note in fb.render()


def test_abort_shows_the_reason_without_the_secret() -> None:
    before = history(30)
    key = "sk-ant-api03-" + "AbCdEf_ghIJkl-MNopQRstu-VWxyz0123456789"
    rep = report("aborted", before, before,
                 error=f"The summary model rejected key {key} (401).",
                 notices=(f"Operator: check the key {key}.",))
    fb = build_feedback(before, before, rep, rough)
    assert fb.kind == "aborted"
    assert "unchanged" in fb.headline
    text = fb.render()
    assert key not in text and "api03" not in text
    assert f"rejected key {REDACTED} (401)" in text
    assert fb.warnings == (f"Operator: check the key {REDACTED}.",)


def test_fallback_summary_is_announced() -> None:
    before = history(40)
    after = before[:1] + [{"role": "user", "content": "extractive summary"}] + before[-10:]
    rep = report("fallback_used", before, after, notices=("Compacted 3 times; /new starts fresh.",))
    fb = build_feedback(before, after, rep, rough)
    assert fb.kind == "fallback_used"
    assert fb.headline == "Compressed: 40 → 12 messages"
    assert "extractive" in fb.note
    assert fb.render().splitlines()[-1] == "⚠️ Compacted 3 times; /new starts fresh."


def test_focus_topic_appears_in_the_headline() -> None:
    before = history(30)
    after = before[:1] + before[-5:]
    rep = report("compressed", before, after, focus_topic="database migration")
    fb = build_feedback(before, after, rep, rough)
    assert fb.headline == "Compressed: 30 → 6 messages (focus: database migration)"


def test_feedback_is_a_frozen_value() -> None:
    fb = Feedback(kind="noop", headline="x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        fb.headline = "y"  # type: ignore[misc]
