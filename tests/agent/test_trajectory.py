"""The offline trajectory compressor (issue 16) on generated ShareGPT files, its summaries
written by the fake OpenAI server through the real openai SDK."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.compression.trajectory import (
    SUMMARY_HEADER,
    TrajectorySettings,
    span_to_summarize,
    turn_tokens,
)
from agent.compression.trajectory_batch import compress_file, metrics_paths
from agent.providers.base import ProviderSettings
from agent.providers.factory import build_provider
from tests.harness.trajectories import write_entries

pytestmark = pytest.mark.timeout(60)
SETTINGS = TrajectorySettings(target_max_tokens=4_000, summary_target_tokens=200,
                              max_concurrent_requests=8, per_entry_timeout_s=10)
SUMMARY = ("## Active Task\nFinish the generated task.\n## Goal\nComplete the numbered task "
           "with the tools at hand.\n## Completed Actions\n1. Called the tools several times; "
           "their results were long lists of words about deploys, caches and queues.\n"
           "## Critical Context\nNothing secret was involved.")


def provider_for(fake):
    return build_provider(ProviderSettings(provider="openai", model="summary-model",
                                           base_url=fake.base_url, api_key="k",
                                           context_length=32_000, max_retries=0,
                                           timeout_s=5))


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def tokens(entry: dict) -> int:
    return sum(turn_tokens(t) for t in entry["conversations"])


async def run(tmp_path: Path, fake, settings: TrajectorySettings = SETTINGS, **kw):
    provider = provider_for(fake)
    try:
        return await compress_file(tmp_path / "in.jsonl", tmp_path / "out.jsonl", provider,
                                   settings, **kw)
    finally:
        await provider.aclose()


async def test_two_hundred_entries_fit_or_are_flagged(tmp_path, fake_openai):
    fake_openai.responder = lambda body: SUMMARY
    made = write_entries(tmp_path / "in.jsonl", 200)
    report = await run(tmp_path, fake_openai)
    out = read_jsonl(tmp_path / "out.jsonl")
    metrics = read_jsonl(metrics_paths(tmp_path / "out.jsonl")[0])
    assert len(out) == len(metrics) == 200 and report.problems == []
    compressed = 0
    for before, after, m in zip(made, out, metrics, strict=True):
        assert set(after) == set(before) and after["id"] == before["id"]
        if tokens(before) <= SETTINGS.target_max_tokens:
            assert after == before and m["status"] == "under_target"
            continue
        compressed += 1
        turns = after["conversations"]
        summaries = [i for i, t in enumerate(turns) if t["value"].startswith(SUMMARY_HEADER)]
        assert len(summaries) == 1 and turns[summaries[0]]["from"] == "human"
        assert turns[summaries[0] + 1]["from"] != "tool"  # no kept part starts with a tool
        assert turns[-4:] == before["conversations"][-4:]
        assert (tokens(after) <= SETTINGS.target_max_tokens) != m["still_over_limit"]
        assert m["tokens_after"] == tokens(after) and m["turns_removed"] > 0
    assert compressed >= 150
    # The span covers what the target needs: almost every entry fits after one summary.
    assert sum(m["still_over_limit"] for m in metrics) <= compressed // 10
    # The summarizer saw the turns, never bytes it should not: a summary prompt each.
    assert len(fake_openai.calls_to("/chat/completions")) >= compressed


async def test_the_totals_are_the_sums_of_the_entries(tmp_path, fake_openai):
    fake_openai.responder = lambda body: SUMMARY
    write_entries(tmp_path / "in.jsonl", 30)
    await run(tmp_path, fake_openai)
    lines_path, totals_path = metrics_paths(tmp_path / "out.jsonl")
    lines, totals = read_jsonl(lines_path), json.loads(totals_path.read_text())
    for key in ("tokens_before", "tokens_after", "turns_removed"):
        assert totals[key] == sum(m[key] for m in lines)
    assert totals["still_over_limit"] == sum(m["still_over_limit"] for m in lines)
    assert totals["entries"] == len(lines) == 30
    assert totals["compressed"] + totals["under_target"] == 30


async def test_failed_and_timed_out_summaries_leave_the_entry_whole(tmp_path, fake_openai):
    fake_openai.responder = lambda body: SUMMARY
    made = write_entries(tmp_path / "in.jsonl", 6, short_every=100)
    fake_openai.fail_next(500, times=1)  # the first entry's summary fails
    fake_openai.delay_next(3.0, times=1)  # the second one's stalls past the entry's time
    settings = TrajectorySettings(target_max_tokens=4_000, summary_target_tokens=200,
                                  max_concurrent_requests=1, per_entry_timeout_s=1.0)
    report = await run(tmp_path, fake_openai, settings)
    out = read_jsonl(tmp_path / "out.jsonl")
    assert out[0] == made[0] and out[1] == made[1]
    assert [p.split(":")[0] for p in report.problems] == ["line 1", "line 2"]
    assert "timed out" in report.problems[1]
    assert all(SUMMARY_HEADER not in json.dumps(e) for e in out[:2])
    assert all(SUMMARY_HEADER in json.dumps(e) for e in out[2:])
    assert report.final()["failed"] == 2 and len(out) == 6


async def test_the_summarizer_never_sees_more_requests_at_once_than_configured(
        tmp_path, fake_openai):
    fake_openai.responder = lambda body: SUMMARY
    fake_openai.answer_delay_s = 0.05
    write_entries(tmp_path / "in.jsonl", 40, short_every=100)
    settings = TrajectorySettings(target_max_tokens=4_000, summary_target_tokens=200,
                                  max_concurrent_requests=3, per_entry_timeout_s=10)
    await run(tmp_path, fake_openai, settings)
    assert fake_openai.peak_in_flight == 3


async def test_malformed_lines_are_reported_and_copied_through(tmp_path, fake_openai):
    fake_openai.responder = lambda body: SUMMARY
    good = write_entries(tmp_path / "good.jsonl", 2, short_every=100)
    bad = ['{"id": 1, "conversations": [', '{"id": 2}',
           '{"conversations": [{"from": "robot", "value": "beep"}]}']
    lines = [json.dumps(good[0]), *bad, json.dumps(good[1])]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    report = await run(tmp_path, fake_openai)
    out_lines = (tmp_path / "out.jsonl").read_text().splitlines()
    assert out_lines[1:4] == bad
    assert [p.split(":")[0] for p in report.problems] == ["line 2", "line 3", "line 4"]
    assert "not JSON" in report.problems[0] and "conversations" in report.problems[1]
    assert "'robot'" in report.problems[2]
    assert SUMMARY_HEADER in out_lines[0] and SUMMARY_HEADER in out_lines[4]
    assert report.final()["malformed"] == 3


def test_the_cut_never_leaves_a_tool_result_first_and_keeps_the_protected_turns():
    turns = ([{"from": "system", "value": "s"}, {"from": "human", "value": "h"},
              {"from": "gpt", "value": "g"}, {"from": "tool", "value": "t"}]
             + [{"from": r, "value": "x" * 4000} for r in ("gpt", "tool", "tool") * 5]
             + [{"from": "gpt", "value": "end"}] * 4)
    settings = TrajectorySettings(target_max_tokens=6_000, summary_target_tokens=100)
    start, end = span_to_summarize(turns, settings)
    assert start == 4 and turns[end]["from"] != "tool" and end <= len(turns) - 4
