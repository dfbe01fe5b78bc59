"""The compaction algorithm step by step (docs/architecture.md, "Thresholds and budgets", "The compaction itself"): thresholds, the one cut,
the cheap tail pass, assembly and summary role, pair sanitation and validation."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.compression.assemble import sanitize_pairs, summary_role, validation_error
from agent.compression.cut import lighten_tail
from agent.compression.markers import merge_summary, split_summary
from agent.compression.prompts import STUB_TOOL_RESULT, SUMMARY_PREFIX, SYSTEM_NOTE
from tests.harness.transcripts import (
    ScriptedProvider,
    all_text,
    assert_valid,
    assistant,
    call,
    chat,
    make_engine,
    result,
    text_of,
    user,
)

Message = dict[str, Any]
SYSTEM = {"role": "system", "content": "You are helpful."}


# --- thresholds and budgets -------------------------------------------------------------
@pytest.mark.parametrize(("window", "max_out", "threshold", "tail"), [
    (200_000, 0, 100_000, 20_000),
    (128_000, 4_096, 64_000, 12_800),  # 50% would be under the 64K floor
    (64_000, 1_024, int(0.85 * 62_976), int(int(0.85 * 62_976) * 0.2)),  # floor reaches it
    (8_192, 1_024, int(0.85 * 7_168), int(int(0.85 * 7_168) * 0.2)),
])
def test_thresholds_follow_the_window(window: int, max_out: int, threshold: int,
                                      tail: int) -> None:
    engine = make_engine(window, max_output_tokens=max_out)
    assert engine.threshold_tokens == threshold
    assert engine.tail_token_budget == tail


def test_update_model_recomputes_for_a_smaller_window() -> None:
    engine = make_engine(200_000, max_output_tokens=0)
    engine.update_model("small", 32_000, max_output_tokens=2_000)
    assert engine.context_length == 32_000
    assert engine.threshold_tokens == int(0.85 * 30_000)
    assert engine.get_status().threshold_tokens == engine.threshold_tokens


@pytest.mark.parametrize(("window", "span", "summary_window", "budget"), [
    (200_000, 100_000, 200_000, 10_000),  # 20% of the span, capped at 5% of the window
    (200_000, 5_000, 200_000, 2_000),  # the floor
    (1_000_000, 400_000, 1_000_000, 12_000),  # the absolute cap
    (8_192, 50_000, 8_192, 409),  # bounds cross on small windows: the upper one wins
    (200_000, 100_000, 4_096, 1_024),  # never over a quarter of the summary model's window
])
def test_summary_budget(window: int, span: int, summary_window: int, budget: int) -> None:
    assert make_engine(window).summary_budget(span, summary_window) == budget


def test_should_compress_uses_the_threshold_and_status_caps_usage() -> None:
    engine = make_engine(200_000, max_output_tokens=0)
    assert not engine.should_compress(99_999)
    assert engine.should_compress(100_000)
    engine.last_prompt_tokens = 250_000
    assert engine.get_status().usage_percent == 100.0


def test_preflight_counts_system_messages_and_tools_with_calibration() -> None:
    engine = make_engine(200_000, max_output_tokens=0)
    msgs = [SYSTEM, user("x" * 300_000)]  # ~75K tokens
    tools = [{"type": "function", "function": {"name": "t", "description": "d" * 100_000}}]
    assert not engine.should_compress_preflight(msgs)
    assert engine.should_compress_preflight(msgs, tools)  # + ~25K tokens of tool schemas
    engine.calibrate(75_000, 105_000)  # the provider counts 1.4× our estimate
    assert engine.should_compress_preflight(msgs)


# --- too small, head and tail ------------------------------------------------------
async def test_too_small_transcripts_are_returned_unchanged() -> None:
    provider = ScriptedProvider()
    engine = make_engine(8_000, provider)
    msgs = [SYSTEM, *chat(1, system=None), user("more"), assistant("sure")]  # 7 = 3 + 4
    assert not engine.has_content_to_compress(msgs)
    out = await engine.compress(msgs, force=True)
    assert out == msgs and engine.last_report.outcome == "noop" and not provider.requests


async def test_nothing_to_compress_when_the_tail_covers_the_middle() -> None:
    engine = make_engine(200_000)
    msgs = chat(5, size=10)
    assert not engine.has_content_to_compress(msgs)
    assert await engine.compress(msgs) == msgs
    assert engine.has_content_to_compress(chat(40, size=3_000))


async def test_head_is_system_and_first_exchange_then_only_system() -> None:
    provider = ScriptedProvider()
    engine = make_engine(8_000, provider, max_output_tokens=256)
    msgs = chat(12, size=300)
    out = await engine.compress(msgs)
    # system + first exchange, pushed past the tool result of the first call
    assert out[0]["content"] == msgs[0]["content"] + "\n\n" + SYSTEM_NOTE
    assert out[1:4] == msgs[1:4]
    assert SUMMARY_PREFIX in text_of(out[4]["content"])
    assert "T-ask-0" not in provider.requests[0][1]["content"]
    out2 = await engine.compress([*out, *chat(8, size=300, system=None, tag="N")])
    assert out2[0] is out[0]  # the note is already there: the same system message
    assert SUMMARY_PREFIX in text_of(out2[1]["content"])
    # The first exchange is no longer protected: it went to the summarizer this time.
    assert not any(m is msgs[1] for m in out2)
    assert "T-ask-0" in provider.requests[-1][1]["content"]


async def test_a_summary_merged_into_a_tool_calling_turn_keeps_the_calls() -> None:
    provider = ScriptedProvider()
    engine = make_engine(8_000, provider, max_output_tokens=256, protect_last_n=0)
    head = [{"role": "system", "content": "sys"}, user("first"), assistant("reply")]
    calling = merge_summary(assistant(None, [call("m1", path="/m")]), f"{SUMMARY_PREFIX}\nold")
    msgs = [*head, calling, result("m1", "data"), *chat(10, size=300, system=None)]
    engine.compression_count = 1
    out = await engine.compress(msgs)
    assert engine.last_report.outcome == "compressed"
    assert_valid(out)
    prompt = provider.requests[0][1]["content"]
    assert "<checkpoint>\nold\n</checkpoint>" in prompt  # the merged summary is the base
    assert 'tool result: read_file (path="/m")' in prompt  # and the call it shared survived


async def test_tail_keeps_the_latest_request_with_its_reply_and_never_starts_with_a_result() -> None:
    engine = make_engine(8_000, max_output_tokens=256, protect_last_n=0)
    big = "z" * 30_000  # a latest turn far over the tail budget is still kept whole
    msgs = [*chat(8, size=300), user("final ask"),
            assistant(None, [call("f1", path="/a"), call("f2", path="/b")]),
            result("f1", big), result("f2", "small"), assistant("final answer")]
    out = await engine.compress(msgs)
    assert out[-5:] == msgs[-5:]
    summary_at = next(i for i, m in enumerate(out) if SUMMARY_PREFIX in text_of(m["content"]))
    assert out[summary_at + 1]["role"] != "tool"
    assert_valid(out)


async def test_every_cut_position_gives_valid_output() -> None:
    msgs = [SYSTEM]
    for i in range(6):  # parallel calls, so a cut can fall between results of one group
        msgs += [user(f"ask {i} " + "u" * 200),
                 assistant(None, [call(f"a{i}", path=f"/p{i}"), call(f"b{i}", path=f"/q{i}")]),
                 result(f"a{i}", "r" * 300), result(f"b{i}", "s" * 300),
                 assistant(f"done {i} " + "d" * 200)]
    for budget in range(0, 4_000, 37):
        engine = make_engine(200_000, protect_last_n=0)
        engine.tail_token_budget = budget
        out = await engine.compress(msgs)
        assert_valid(out)


# --- the cheap tail pass -----------------------------------------------------------------
def test_older_duplicate_results_become_pointers_and_long_arguments_shrink() -> None:
    long_args = {"path": "/x.py", "content": "c" * 2_000, "n": 3}
    same = "identical output " * 30
    tail = [user("one"), assistant(None, [call("c1", "write", **long_args)]), result("c1", same),
            assistant("ok"),
            user("two"), assistant(None, [call("c2", "write", **long_args)]), result("c2", same),
            assistant("done")]
    out = lighten_tail(tail, latest_turn=4)
    assert out[4:] == tail[4:] and all(a is b for a, b in zip(out[4:], tail[4:], strict=True))
    assert out[2]["content"].startswith("[identical to a newer tool result")
    args = json.loads(out[1]["tool_calls"][0]["function"]["arguments"])
    assert args["path"] == "/x.py" and args["n"] == 3
    assert args["content"].startswith("c" * 200) and len(args["content"]) < 260
    assert out[0] is tail[0] and out[3] is tail[3]
    assert tail[2]["content"] == same  # the input is untouched


# --- assembly: note, role, merge, pairs, validation -----------------------------------
@pytest.mark.parametrize(("head_roles", "tail_role", "expected"), [
    (["system", "user", "assistant"], "user", None),  # user collides; assistant too: merge
    (["system", "user", "assistant", "tool"], "user", "assistant"),  # flipped
    (["system", "user", "assistant", "tool"], "assistant", "user"),
    (["system"], "assistant", "user"),
    (["system"], "user", None),  # an assistant right after the system prompt: merge
    ([], "user", None),
    (["user"], "assistant", None),
    (["user"], "user", "assistant"),
])
def test_summary_role(head_roles: list[str], tail_role: str, expected: str | None) -> None:
    head = [{"role": r, "content": "x"} for r in head_roles]
    assert summary_role(head, [{"role": tail_role, "content": "y"}]) == expected


@pytest.mark.parametrize("content", ["the turn", [{"type": "text", "text": "the turn"}], None])
def test_a_merged_summary_leaves_the_turn_recoverable(content: Any) -> None:
    msg = {"role": "assistant" if content is None else "user", "content": content}
    merged = merge_summary(msg, f"{SUMMARY_PREFIX}\nbody")
    summary, rest = split_summary(merged)
    assert summary == f"{SUMMARY_PREFIX}\nbody"
    assert rest == (content if content is not None else "")


def test_pair_sanitation_drops_orphans_and_stubs_missing_results() -> None:
    msgs = [user("hi"), result("gone", "orphan"),
            assistant(None, [call("k1"), call("k2")]), result("k2", "two"), assistant("done")]
    out = sanitize_pairs(msgs)
    assert [m.get("tool_call_id") for m in out if m["role"] == "tool"] == ["k2", "k1"]
    assert out[-2]["content"] == STUB_TOOL_RESULT
    assert_valid(out)


def test_validation_catches_broken_transcripts() -> None:
    last = user("latest")
    assert validation_error([SYSTEM, assistant("hi"), last], 1, last)
    assert validation_error([user("a"), result("x", "y"), last], 1, last)
    assert validation_error([user("a"), user("summary"), user("other")], 1, last)
    assert validation_error([user("summary"), last], 0, last) is None


async def test_a_list_content_system_prompt_gets_the_note_once() -> None:
    engine = make_engine(8_000, max_output_tokens=256)
    system = {"role": "system", "content": [{"type": "text", "text": "Be brief."}]}
    out = await engine.compress([system, *chat(12, size=300, system=None)])
    assert out[0]["content"][0] == system["content"][0]
    assert all_text(out).count(SYSTEM_NOTE) == 1


async def test_compress_takes_a_live_transcript_and_forgets_what_it_removed() -> None:
    engine = make_engine(8_000, max_output_tokens=256)
    live = engine.new_transcript(chat(12, size=300))
    cached = len(engine.token_cache)
    out = await engine.compress(live)
    assert isinstance(out, list) and engine.last_report.outcome == "compressed"
    assert len(engine.token_cache) < cached
    live.replace(out)
    assert live.total == engine.token_cache.total(out) == engine.last_report.tokens_after


@pytest.mark.parametrize("earlier_summary", [False, True])
async def test_a_plain_list_is_sized_as_its_transcript_would_be(earlier_summary: bool) -> None:
    # A plain list's middle is counted while it is rendered (render.raw_pieces); its size,
    # and the summary budget drawn from the middle, must be what a live Transcript says.
    msgs = chat(120, size=400)  # a middle past COLD_OFFLOAD: rendered in a worker thread
    if earlier_summary:  # a continuation: the earlier summary sits in the middle
        msgs = [*await make_engine().compress(msgs), *chat(120, size=400, system=None,
                                                           tag="N")]
        assert any(split_summary(m)[0] is not None for m in msgs[:6])
    runs = []
    for live in (False, True):
        provider = ScriptedProvider()
        engine = make_engine(provider=provider)
        given = engine.new_transcript(json.loads(json.dumps(msgs))) if live else \
            json.loads(json.dumps(msgs))
        await engine.compress(given)
        report = engine.last_report
        assert report is not None and report.outcome == "compressed"
        runs.append((report.tokens_before, report.tokens_after, provider.max_tokens))
    assert runs[0] == runs[1]
    assert runs[0][0] == make_engine().token_cache.total(msgs)
