"""/usage and `sessions list --json`: exactly the tokens the providers reported, over a
chat's whole chain (retries, summaries, restarts), priced per model."""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest

from gateway.cli import sessions as sessions_cli
from gateway.turns.pricing import Price, cost, cost_line, estimate
from storage.models import TokenCounts, UsageRecord, UsageTotals
from tests.harness.gateway import (
    close,
    config_for,
    started_gateway,
    summarizing_responder,
)
from tests.harness.platform import RecordingPlatform
from tests.harness.witness import Witness, WitnessAnthropic, WitnessOpenAI

CHAT = "test:1"
WINDOW = 8192


def counts_from_chat(u: dict[str, Any]) -> TokenCounts:
    """Chat Completions usage, by hand: prompt_tokens includes the cached part."""
    details = u.get("prompt_tokens_details") or {}
    read = details.get("cached_tokens") or 0
    write = details.get("cache_write_tokens") or u.get("cache_write_tokens") or 0
    reasoning = (u.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return TokenCounts(input_tokens=u["prompt_tokens"] - read - write,
                       output_tokens=u["completion_tokens"], cache_read_tokens=read,
                       cache_write_tokens=write, reasoning_tokens=reasoning)


def counts_from_anthropic(u: dict[str, Any]) -> TokenCounts:
    """Anthropic usage, by hand: input_tokens excludes cache reads and writes."""
    thinking = (u.get("output_tokens_details") or {}).get("thinking_tokens") or 0
    return TokenCounts(input_tokens=u["input_tokens"], output_tokens=u["output_tokens"],
                       cache_read_tokens=u.get("cache_read_input_tokens") or 0,
                       cache_write_tokens=u.get("cache_creation_input_tokens") or 0,
                       reasoning_tokens=thinking)


@dataclass(frozen=True)
class Shape:
    """One provider wire shape: its fake, its config, and how its usage reads."""

    fake: Callable[[], Witness]
    provider: str
    chat_model: str
    summary_model: str
    counts: Callable[[dict[str, Any]], TokenCounts]


SHAPES = {
    "chat-completions": Shape(WitnessOpenAI, "openai", "fake-model", "fake-summarizer",
                              counts_from_chat),
    # A Claude name: prompt caching applies, so the requests carry cache_control markers.
    "anthropic": Shape(WitnessAnthropic, "anthropic", "claude-fake", "claude-summarizer",
                       counts_from_anthropic),
}

# USD per million tokens, chosen so that any token count costs an exact multiple of
# $0.0001: the printed $X.XXXX then never sits on a rounding edge. The summarizer gives no
# cache prices: they default to input x 0.1 and input x 1.25.
CHAT_PRICE = {"input": 300, "output": 1500, "cache_read": 100, "cache_write": 400}
SUMMARY_PRICE = {"input": 2000, "output": 2400}
SUMMARY_CACHE = {"cache_read": 200, "cache_write": 2500}


def summed(counts: list[TokenCounts]) -> UsageTotals:
    return UsageTotals(
        input_tokens=sum(c.input_tokens for c in counts),
        output_tokens=sum(c.output_tokens for c in counts),
        cache_read_tokens=sum(c.cache_read_tokens for c in counts),
        cache_write_tokens=sum(c.cache_write_tokens for c in counts),
        reasoning_tokens=sum(c.reasoning_tokens for c in counts),
        calls=len(counts))


def hand_cost(counts: TokenCounts, price: dict[str, int]) -> Decimal:
    return (Decimal(counts.input_tokens * price["input"])
            + Decimal(counts.output_tokens * price["output"])
            + Decimal(counts.cache_read_tokens * price["cache_read"])
            + Decimal(counts.cache_write_tokens * price["cache_write"])) / 1_000_000


def usage_lines(text: str) -> dict[str, str]:
    assert text.startswith("Usage in this conversation (since the last /new"), text
    return dict(line.split(": ", 1) for line in text.splitlines()[1:])


@pytest.fixture(params=sorted(SHAPES))
async def shape_and_fake(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Shape, Any]]:
    shape = SHAPES[request.param]
    fake = shape.fake()
    fake.responder = summarizing_responder
    await fake.start()
    try:
        yield shape, fake
    finally:
        await fake.stop()


async def say(platform: RecordingPlatform, text: str, **kw: Any) -> str:
    """Send one message and wait for its one reply."""
    delivered = len(platform.delivered_ids)
    await platform.say(text, **kw)
    await platform.wait_delivered(delivered + 1)
    return platform.texts()[-1]


async def list_json(store: Any, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    capsys.readouterr()
    args = argparse.Namespace(action="list", chat_key=CHAT, json=True)
    assert await sessions_cli.run(store, args) == 0
    return json.loads(capsys.readouterr().out)


async def test_usage_sums_what_the_provider_reported_across_retry_summary_and_restart(
        tmp_path, shape_and_fake, capsys):
    shape, fake = shape_and_fake
    config = config_for(
        tmp_path, fake.base_url,
        model={"provider": shape.provider, "name": shape.chat_model, "max_retries": 1,
               "context_length": WINDOW},
        auxiliary={"compression": {"provider": shape.provider, "model": shape.summary_model}},
        compression={"protect_last_n": 4},
        prices={shape.chat_model: CHAT_PRICE, shape.summary_model: SUMMARY_PRICE})
    platform = RecordingPlatform()
    gw = await started_gateway(config, [platform])
    try:
        for i in range(5):
            reply = await say(platform, f"question {i} " + "q" * 2400)
            assert reply.startswith(f"echo: question {i} ")
        # The service fails once; the SDK retries and the turn still gets its answer.
        requests_before = len(fake.calls)
        fake.fail_next(500, headers={"retry-after-ms": "20"})
        assert (await say(platform, "after a hiccup")) == "echo: after a hiccup"
        assert [c.headers["x-stainless-retry-count"]
                for c in fake.calls[requests_before:]] == ["0", "1"]
        compressed = await say(platform, "/compress")
        assert "Compressed:" in compressed, compressed
        await say(platform, "after compaction")
    finally:
        await close(gw)

    again = RecordingPlatform()  # a restart: a new gateway on the same store
    gw = await started_gateway(config, [again])
    try:
        # New message ids: the store remembers the old ones and would ignore a repeat.
        reply = await say(again, "after restart", message_id="r1")
        assert reply == "echo: after restart"
        report = usage_lines(await say(again, "/usage", message_id="r2"))
        listed = await list_json(gw.store, capsys)
    finally:
        await close(gw)

    reported = fake.reported
    summaries = [r for r in reported if r.summary]
    assert summaries and {r.model for r in summaries} == {shape.summary_model}
    assert {r.model for r in reported if not r.summary} == {shape.chat_model}
    # The failed attempt reported nothing and is no call: one call per answered request.
    assert len(fake.calls) == len(reported) + 1
    totals = summed([shape.counts(r.usage) for r in reported])
    assert totals.input_tokens > 0 and totals.output_tokens > 0

    assert report["Input"] == f"{totals.input_tokens:,}"
    assert report["Cache read"] == f"{totals.cache_read_tokens:,}"
    assert report["Cache write"] == f"{totals.cache_write_tokens:,}"
    assert report["Output"] == f"{totals.output_tokens:,}"
    assert report["Reasoning"] == f"{totals.reasoning_tokens:,} (part of output)"
    assert report["Calls"] == f"{totals.calls:,}"
    prompt = totals.input_tokens + totals.cache_read_tokens + totals.cache_write_tokens
    assert report["Cache hit rate"] == f"{100 * totals.cache_read_tokens / prompt:.1f}%"

    # Context fill: the last call's prompt (everything it read), not a sum over calls.
    last = shape.counts(reported[-1].usage)
    last_prompt = last.input_tokens + last.cache_read_tokens + last.cache_write_tokens
    assert not reported[-1].summary and last_prompt < prompt
    assert report["Context fill"].startswith(f"{last_prompt:,} / {WINDOW:,} (")

    # Each model's calls at that model's prices, worked out here by hand.
    chat_counts = summed([shape.counts(r.usage) for r in reported if not r.summary])
    summary_counts = summed([shape.counts(r.usage) for r in summaries])
    usd = (hand_cost(chat_counts, CHAT_PRICE)
           + hand_cost(summary_counts, {**SUMMARY_PRICE, **SUMMARY_CACHE}))
    assert usd > 0
    models = ", ".join(sorted([shape.chat_model, shape.summary_model]))
    assert report["Estimated cost"] == f"${usd:.4f} (prices for {models})"

    # The shell view: every session's own share, which together make the chain's totals.
    assert len(listed) >= 2  # the root and its compression continuation
    for key in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
                "reasoning_tokens", "calls"):
        assert sum(s[key] for s in listed) == getattr(totals, key), key
    assert all(s["calls"] > 0 for s in listed)


async def test_usage_of_a_fresh_chat_and_without_prices(tmp_path, fake_openai):
    platform = RecordingPlatform()
    gw = await started_gateway(config_for(tmp_path, fake_openai.base_url), [platform])
    try:
        fresh = usage_lines(await say(platform, "/usage"))
        await say(platform, "hello")
        after = usage_lines(await say(platform, "/usage"))
    finally:
        await close(gw)
    assert fresh["Calls"] == "0" and fresh["Cache hit rate"] == "n/a"
    assert fresh["Cost"] == "no prices configured for this model (fake-model)"
    assert after["Calls"] == "1" and after["Cache hit rate"] == "0.0%"
    assert "Estimated cost" not in after


async def test_hit_rate_and_cost_from_stored_cache_usage(tmp_path, fake_openai):
    """Cache figures the fakes do not produce, written straight into the store: the hit
    rate is cache read over all prompt tokens, and each model is priced at its own rate."""
    config = config_for(tmp_path, fake_openai.base_url,
                        prices={"fake-model": {"input": 3, "output": 15}})
    platform = RecordingPlatform()
    gw = await started_gateway(config, [platform])
    try:
        session = await gw.conversations.live_session(CHAT)
        for record in (
                UsageRecord("fake-model", "chat", input_tokens=300, output_tokens=1000,
                            cache_read_tokens=6000, cache_write_tokens=2000,
                            reasoning_tokens=400),
                UsageRecord("fake-model", "chat", input_tokens=1700, output_tokens=234,
                            cache_read_tokens=6000),
                UsageRecord("cheap-summarizer", "summary", input_tokens=4000,
                            output_tokens=99)):
            await gw.store.record_usage(session.id, record)
        report = usage_lines(await say(platform, "/usage"))
    finally:
        await close(gw)
    assert (report["Input"], report["Cache read"], report["Cache write"]) == \
        ("6,000", "12,000", "2,000")
    assert (report["Output"], report["Reasoning"], report["Calls"]) == \
        ("1,333", "400 (part of output)", "3")
    assert report["Cache hit rate"] == "60.0%"  # 12,000 of 6,000 + 12,000 + 2,000
    # fake-model: 2,000 in x $3 + 12,000 read x $0.30 + 2,000 written x $3.75 + 1,234 out x $15
    #   per million = 0.006 + 0.0036 + 0.0075 + 0.01851 = $0.03561; the summarizer has no prices.
    assert report["Estimated cost"] == ("$0.0356 (prices for fake-model); not counted, "
                                        "no prices for cheap-summarizer")


async def test_store_splits_usage_by_model_and_by_session(tmp_path, fake_openai):
    config = config_for(tmp_path, fake_openai.base_url)
    gw = await started_gateway(config, [])
    try:
        store = gw.store
        root = await gw.conversations.live_session(CHAT)
        other = await gw.conversations.live_session("test:2")
        await store.record_usage(root.id, UsageRecord("a", "chat", input_tokens=10,
                                                      output_tokens=1, cache_read_tokens=5))
        await store.record_usage(root.id, UsageRecord("b", "summary", input_tokens=20,
                                                      output_tokens=2, reasoning_tokens=1))
        await store.record_usage(root.id, UsageRecord("a", "chat", input_tokens=30,
                                                      output_tokens=3, cache_write_tokens=7))
        await store.record_usage(other.id, UsageRecord("a", "chat", input_tokens=999))
        by_model = await store.usage_by_model(root.id)
        by_session = await store.usage_by_session([root.id, other.id, "no-such-session"])
        chain_total = await store.usage_totals(root.id)
    finally:
        await close(gw)
    assert by_model == {
        "a": UsageTotals(input_tokens=40, output_tokens=4, cache_read_tokens=5,
                         cache_write_tokens=7, calls=2),
        "b": UsageTotals(input_tokens=20, output_tokens=2, reasoning_tokens=1, calls=1)}
    assert by_session == {root.id: chain_total,
                          other.id: UsageTotals(input_tokens=999, calls=1)}


def test_cost_is_each_token_kind_at_its_price() -> None:
    counts = TokenCounts(input_tokens=1_000_000, output_tokens=2_000_000,
                         cache_read_tokens=3_000_000, cache_write_tokens=4_000_000,
                         reasoning_tokens=1_500_000)  # inside output: never billed twice
    price = Price.per_million(3, 15)
    assert (price.cache_read, price.cache_write) == pytest.approx((0.3, 3.75))
    assert cost(counts, price) == pytest.approx(3 + 30 + 0.9 + 15)
    assert cost(counts, Price.per_million(3, 15, cache_read=0, cache_write=0)) == \
        pytest.approx(33)


def test_an_estimate_names_what_it_could_not_price() -> None:
    used = {"big": TokenCounts(input_tokens=10_000), "small": TokenCounts(output_tokens=10)}
    prices = {"big": Price.per_million(5, 25)}
    found = estimate(used, prices, "big")
    assert cost_line(found, "big") == \
        "Estimated cost: $0.0500 (prices for big); not counted, no prices for small"
    # The chat's model is priced but has not spent anything yet.
    assert cost_line(estimate({}, prices, "big"), "big") == \
        "Estimated cost: $0.0000 (prices for big)"
    assert cost_line(estimate(used, {}, "big"), "big") == \
        "Cost: no prices configured for this model (big)"
