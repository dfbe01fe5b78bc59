"""Token accounting: estimates over what the provider reads, cached once, O(1) fit checks."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.redact import REDACTED
from agent.tokens import (
    IMAGE_TOKENS,
    MESSAGE_OVERHEAD,
    Calibration,
    TokenCache,
    Transcript,
    estimate_message,
    estimate_text,
    estimate_tools,
)
from agent.usage import CanonicalUsage
from tests.harness.transcripts import chat, make_engine

SECRET = "sk-" + "AbCdEfGhIjKlMnOpQrStUvWx0123456789abcdefghijkl"


@pytest.mark.parametrize(("text", "tokens"), [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2),
                                              ("x" * 4_000, 1_000)])
def test_text_is_characters_over_four_rounded_up(text: str, tokens: int) -> None:
    assert estimate_text(text) == tokens


def test_message_counts_text_blocks_images_tool_calls_and_results() -> None:
    plain = {"role": "user", "content": "x" * 400}
    blocks = {"role": "user", "content": [
        {"type": "text", "text": "x" * 200}, {"type": "text", "text": "y" * 200},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 90_000}}]}
    args = json.dumps({"path": "/a/b.py", "body": "z" * 392})
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "write", "arguments": args}}]}
    result = {"role": "tool", "tool_call_id": "c1", "content": "r" * 398}
    assert estimate_message(plain) == 100 + MESSAGE_OVERHEAD
    # The image's base64 is not text the model reads: it counts a fixed 1,600.
    assert estimate_message(blocks) == 100 + IMAGE_TOKENS + MESSAGE_OVERHEAD
    assert estimate_message(call) == -(-(len("write") + len(args)) // 4) + MESSAGE_OVERHEAD
    assert estimate_message(result) == 100 + MESSAGE_OVERHEAD


def test_anthropic_style_blocks_are_counted_too() -> None:
    msg = {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "a" * 40}]},
        {"type": "tool_use", "id": "u", "name": "n", "input": {"q": "b" * 30}}]}
    assert estimate_message(msg) > 10 + MESSAGE_OVERHEAD


def test_tools_are_counted_as_their_json() -> None:
    tools = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]
    assert estimate_tools(tools) == estimate_text(json.dumps(tools, separators=(",", ":")))
    assert estimate_tools(None) == estimate_tools([]) == 0


class CountingRedactor:
    def __init__(self) -> None:
        self.seen: list[int] = []

    def __call__(self, msg: dict[str, Any]) -> dict[str, Any]:
        self.seen.append(id(msg))
        return {**msg, "content": str(msg.get("content")).replace(SECRET, REDACTED)}


def test_each_message_is_estimated_and_redacted_once() -> None:
    redactor = CountingRedactor()
    cache = TokenCache(redactor)
    msgs = [{"role": "user", "content": f"key {SECRET} {i}"} for i in range(50)]
    first = cache.total(msgs)
    assert cache.total(msgs) == first == sum(estimate_message(m) for m in msgs)
    assert [cache.redacted(m)["content"] for m in msgs[:2]] == [f"key {REDACTED} 0",
                                                                f"key {REDACTED} 1"]
    for _ in range(3):
        for m in msgs:
            cache.redacted(m)
    assert len(redactor.seen) == 50 == len(set(redactor.seen))


def test_a_cached_message_pins_its_id_so_a_new_dict_cannot_inherit_its_count() -> None:
    cache = TokenCache()
    small = {"role": "user", "content": "hi"}
    cache.tokens(small)
    small_id = id(small)
    del small  # the cache keeps it alive, so no new dict can take its id
    bigger = [{"role": "user", "content": "x" * 4_000} for _ in range(200)]
    assert all(id(m) != small_id for m in bigger)
    assert all(cache.tokens(m) == 1_000 + MESSAGE_OVERHEAD for m in bigger)


def test_discard_forgets_and_recounts() -> None:
    cache = TokenCache()
    msgs = chat(3)
    assert cache.total(msgs) == sum(estimate_message(m) for m in msgs)
    assert len(cache) == 0  # a one-off sum keeps nothing
    for msg in msgs:
        cache.tokens(msg)
    cache.discard(msgs[:5])
    assert len(cache) == len(msgs) - 5
    assert cache.total(msgs) == sum(estimate_message(m) for m in msgs)


def test_a_derived_value_leaves_with_its_message_and_never_passes_to_a_new_one() -> None:
    cache = TokenCache()
    msgs = chat(2)
    for msg in msgs:
        cache.derived(msg, "piece", lambda m: f"piece of {m['content']}")
    pieces = [f"piece of {m['content']}" for m in msgs]
    assert cache.values(msgs, "piece") == pieces
    cache.retain(msgs[1:])  # what a compaction keeps
    assert cache.values(msgs, "piece") == [None, *pieces[1:]]
    cache.discard(msgs[-1:])
    assert not cache.is_warm(msgs[-1], "piece")
    assert cache.values(msgs[1:], "piece") == [*pieces[1:-1], None]
    # A value computed for a message that was never estimated pins that message's id too.
    fresh = TokenCache()
    small = {"role": "user", "content": "hi"}
    fresh.derived(small, "piece", lambda m: "piece of hi")
    del small
    newcomers = [{"role": "user", "content": str(i)} for i in range(200)]
    assert fresh.values(newcomers, "piece") == [None] * 200


def test_calibration_learns_a_smoothed_clamped_ratio() -> None:
    cal = Calibration()
    assert cal.apply(1_000) == 1_000
    cal.observe(1_000, 1_500)  # first sample replaces the neutral ratio
    assert cal.ratio == pytest.approx(1.5)
    cal.observe(1_000, 1_000)
    assert 1.0 < cal.ratio < 1.5  # smoothed, not jumping to the newest sample
    cal.observe(10, 10_000)  # too small a request to learn from
    cal.observe(1_000, 0)
    assert 1.0 < cal.ratio < 1.5
    for _ in range(50):
        cal.observe(1_000, 100_000)
    assert cal.ratio == pytest.approx(Calibration.MAX_RATIO)  # never beyond the clamp
    assert cal.ratio <= Calibration.MAX_RATIO
    for _ in range(50):
        cal.observe(100_000, 1_000)
    assert cal.ratio == pytest.approx(Calibration.MIN_RATIO)
    assert cal.ratio >= Calibration.MIN_RATIO
    assert Calibration(float("nan")).ratio == 1.0


def test_transcript_keeps_a_running_total_through_appends_and_replacement() -> None:
    cache = TokenCache()
    msgs = chat(6)
    live = Transcript(cache, msgs[:3], system_prompt="s" * 400, tools=[{"name": "t"}])
    for m in msgs[3:]:
        live.append(m)
    assert live.total == sum(estimate_message(m) for m in msgs)
    overhead = 100 + MESSAGE_OVERHEAD + estimate_tools([{"name": "t"}])
    assert live.raw_estimate() == live.total + overhead
    assert list(live) == msgs and live[0] is msgs[0] and len(live) == len(msgs)
    kept = [msgs[0], *msgs[-4:]]
    live.replace(kept)
    assert live.total == sum(estimate_message(m) for m in kept)
    assert len(cache) == len(kept)  # the messages that left were dropped from the cache
    assert live.as_list() == kept


def test_ingest_redacts_and_runs_warmers_once() -> None:
    cache = TokenCache()
    warmed: list[int] = []
    cache.warmers.append(lambda m: warmed.append(id(m)))
    msg = {"role": "user", "content": f"token {SECRET}"}
    live = Transcript(cache, [msg])
    live.append(msg)
    assert warmed == [id(msg)]
    assert SECRET not in cache.redacted(msg)["content"]


def test_a_chat_far_from_compaction_is_only_estimated_until_it_nears_it() -> None:
    engine = make_engine(context_length=10_000, max_output_tokens=1_000)
    cache = engine.token_cache
    assert 0 < cache.warm_from < engine.threshold_tokens
    warmed: list[int] = []
    cache.warmers.append(lambda m: warmed.append(id(m)))
    live = engine.new_transcript()
    messages = chat(40, size=400)
    for msg in messages:
        live.append(msg)
        if live.total < cache.warm_from:
            assert warmed == []  # nothing redacted or rendered yet
        else:
            break
    assert live.total >= cache.warm_from
    # Crossing the line warms everything held so far, once; later messages as they come.
    assert sorted(warmed) == sorted(id(m) for m in live)
    live.append({"role": "user", "content": "one more"})
    assert len(warmed) == len(live)
    assert all(cache.is_warm(m, "piece") for m in live)


def test_engine_fit_check_uses_running_totals_and_calibration() -> None:
    engine = make_engine(context_length=10_000, max_output_tokens=1_000)
    live = engine.new_transcript(chat(4, size=2_000), system_prompt="sys")
    raw = live.raw_estimate()
    assert engine.raw_request_estimate(live) == raw
    assert engine.estimate_request(live) == raw
    assert engine.fits(live) is (raw < 9_000)
    engine.calibrate(raw, raw * 2)
    assert engine.estimate_request(live) == raw * 2
    # A plain list gives the same answer (slower: it sums cached counts).
    assert engine.raw_request_estimate(list(live)) == live.total


def test_trigger_reads_prompt_tokens_only() -> None:
    engine = make_engine()
    engine.update_from_response(CanonicalUsage(input_tokens=1_000, output_tokens=150_000,
                                               reasoning_tokens=140_000))
    assert engine.last_prompt_tokens == 1_000
    assert not engine.should_compress()
    engine.update_from_response(CanonicalUsage(input_tokens=10_000, cache_read_tokens=95_000))
    assert engine.should_compress()
