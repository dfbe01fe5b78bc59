"""The fake Anthropic server caches prompts the way the real API does, seen through the real SDK.

Expected numbers are computed here from characters (the fake's rule: ceil(chars / 4)), not
read back from the fake, so a fake that caches wrongly cannot agree with itself.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest

from tests.harness import FakeAnthropic

SYSTEM = "You are Threadline, a patient assistant in a group chat. " * 9  # 513 chars
FIVE_MINUTES, ONE_HOUR = 300, 3600


@pytest.fixture
async def client(fake_anthropic: FakeAnthropic) -> AsyncIterator[anthropic.AsyncAnthropic]:
    fake_anthropic.min_cacheable_tokens = 100
    sdk = anthropic.AsyncAnthropic(base_url=fake_anthropic.url, api_key="k", max_retries=0)
    yield sdk
    await sdk.close()


def turns(n: int, *, tag: str = "") -> list[dict[str, Any]]:
    """n alternating messages, user first, about 47 tokens each."""
    return [{"role": "user" if i % 2 == 0 else "assistant",
             "content": f"turn {i}{tag}: " + " ".join(["words"] * 30)} for i in range(n)]


def marker(ttl: str | None) -> dict[str, str]:
    return {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}


def system_and_3(system: str, messages: list[dict[str, Any]], ttl: str | None = None,
                 last: int = 3) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Our strategy's layout: a marker on the system prompt and on the last `last` messages."""
    marked = [dict(m) for m in messages]
    for m in marked[len(marked) - last:]:
        m["content"] = [{"type": "text", "text": m["content"], "cache_control": marker(ttl)}]
    return [{"type": "text", "text": system, "cache_control": marker(ttl)}], marked


def tokens(system: str, messages: list[dict[str, Any]]) -> int:
    """The uncached prompt size by the fake's documented rule."""
    return math.ceil((len(system) + sum(len(m["content"]) for m in messages)) / 4)


async def send(client: anthropic.AsyncAnthropic, system: Any, messages: list[dict[str, Any]],
               **extra: Any) -> anthropic.types.Usage:
    reply = await client.messages.create(model=extra.pop("model", "claude-fake"), max_tokens=64,
                                         system=system, messages=messages, **extra)
    return reply.usage


def split(usage: anthropic.types.Usage) -> tuple[int, int, int]:
    """(input, cache read, cache write)."""
    return (usage.input_tokens, usage.cache_read_input_tokens or 0,
            usage.cache_creation_input_tokens or 0)


async def test_without_markers_everything_is_input(
        client: anthropic.AsyncAnthropic, fake_anthropic: FakeAnthropic) -> None:
    history = turns(5)
    for _ in range(2):
        usage = await send(client, SYSTEM, history)
        assert split(usage) == (tokens(SYSTEM, history), 0, 0)
    assert fake_anthropic.cache_entries == 0 and fake_anthropic.cache_writes == 0


async def test_a_growing_conversation_reads_the_old_prefix_and_writes_the_new_turn(
        client: anthropic.AsyncAnthropic, fake_anthropic: FakeAnthropic) -> None:
    first = turns(3)
    usage = await send(client, *system_and_3(SYSTEM, first))
    assert split(usage) == (0, 0, tokens(SYSTEM, first))  # the last message is a breakpoint
    assert fake_anthropic.cache_entries == 4

    second = turns(5)  # the assistant's answer and the next user message appended
    usage = await send(client, *system_and_3(SYSTEM, second))
    assert split(usage) == (0, tokens(SYSTEM, first),
                            tokens(SYSTEM, second) - tokens(SYSTEM, first))
    assert usage.cache_creation.ephemeral_5m_input_tokens == usage.cache_creation_input_tokens
    assert fake_anthropic.cache_reads == tokens(SYSTEM, first)
    assert fake_anthropic.cache_writes == tokens(SYSTEM, second)
    totals = fake_anthropic.usage_totals()
    assert totals["cache_read_input_tokens"] == fake_anthropic.cache_reads
    assert totals["cache_creation_input_tokens"] == fake_anthropic.cache_writes


async def test_look_back_finds_an_entry_between_breakpoints(
        client: anthropic.AsyncAnthropic, fake_anthropic: FakeAnthropic) -> None:
    await send(client, *system_and_3(SYSTEM, turns(3), last=1))
    # Only the system prompt and the new last message are marked: the old end is found anyway.
    usage = await send(client, *system_and_3(SYSTEM, turns(5), last=1))
    assert split(usage)[1] == tokens(SYSTEM, turns(3))


@pytest.mark.parametrize("token_ratio", [1.0, 1.6, 0.7])
async def test_the_three_parts_add_up_to_the_uncached_count(
        client: anthropic.AsyncAnthropic, fake_anthropic: FakeAnthropic,
        token_ratio: float) -> None:
    fake_anthropic.token_ratio = token_ratio
    history = turns(7)
    uncached = (await send(client, SYSTEM, history)).input_tokens
    assert uncached == math.ceil((len(SYSTEM) + sum(len(m["content"]) for m in history))
                                 * token_ratio / 4)
    await send(client, *system_and_3(SYSTEM, history[:3], last=2))
    # Read, write and plain input all present: the last marker sits before the last message.
    system, marked = system_and_3(SYSTEM, history[:-1], last=3)
    usage = await send(client, system, [*marked, history[-1]])
    parts = split(usage)
    assert all(parts) and sum(parts) == uncached


async def test_five_minute_entries_expire(
        client: anthropic.AsyncAnthropic, fake_anthropic: FakeAnthropic) -> None:
    history = turns(3)
    await send(client, *system_and_3(SYSTEM, history))
    fake_anthropic.advance(FIVE_MINUTES - 1)
    assert split(await send(client, *system_and_3(SYSTEM, history)))[1] == tokens(SYSTEM, history)
    fake_anthropic.advance(FIVE_MINUTES + 1)
    assert fake_anthropic.cache_entries == 0
    usage = await send(client, *system_and_3(SYSTEM, history))
    assert split(usage) == (0, 0, tokens(SYSTEM, history))


async def test_one_hour_entries_outlive_five_minutes(
        client: anthropic.AsyncAnthropic, fake_anthropic: FakeAnthropic) -> None:
    history = turns(3)
    usage = await send(client, *system_and_3(SYSTEM, history, ttl="1h"))
    assert usage.cache_creation.ephemeral_1h_input_tokens == tokens(SYSTEM, history)
    assert usage.cache_creation.ephemeral_5m_input_tokens == 0
    fake_anthropic.advance(ONE_HOUR - 60)
    assert split(await send(client, *system_and_3(SYSTEM, history, ttl="1h")))[1] \
        == tokens(SYSTEM, history)
    fake_anthropic.advance(ONE_HOUR + 1)
    assert split(await send(client, *system_and_3(SYSTEM, history, ttl="1h")))[1] == 0


async def test_a_hit_refreshes_the_ttl(
        client: anthropic.AsyncAnthropic, fake_anthropic: FakeAnthropic) -> None:
    history = turns(3)
    await send(client, *system_and_3(SYSTEM, history))
    for _ in range(3):  # 12 minutes after the write, still warm: each hit restarts the 5 minutes
        fake_anthropic.advance(240)
        assert split(await send(client, *system_and_3(SYSTEM, history)))[1] \
            == tokens(SYSTEM, history)


async def test_one_changed_byte_before_a_breakpoint_misses(
        client: anthropic.AsyncAnthropic, fake_anthropic: FakeAnthropic) -> None:
    history = turns(3)
    await send(client, *system_and_3(SYSTEM, history))
    edited = SYSTEM.replace("patient", "Patient", 1)
    usage = await send(client, *system_and_3(edited, history))
    assert split(usage) == (0, 0, tokens(edited, history))
    # A change in the last message keeps the prefix before it.
    changed = [*history[:2], {"role": "user", "content": history[2]["content"] + "!"}]
    usage = await send(client, *system_and_3(SYSTEM, changed))
    assert split(usage)[1] == tokens(SYSTEM, history[:2])


async def test_the_model_is_part_of_the_key(
        client: anthropic.AsyncAnthropic, fake_anthropic: FakeAnthropic) -> None:
    await send(client, *system_and_3(SYSTEM, turns(3)))
    usage = await send(client, *system_and_3(SYSTEM, turns(3)), model="claude-other")
    assert split(usage)[1] == 0


async def test_prefixes_below_the_minimum_are_not_cached(
        client: anthropic.AsyncAnthropic, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.min_cacheable_tokens = 1024  # the real minimum for most Claude models
    history = turns(3)
    for _ in range(2):
        usage = await send(client, *system_and_3(SYSTEM, history))
        assert split(usage) == (tokens(SYSTEM, history), 0, 0)
    assert fake_anthropic.cache_entries == 0
    # Only breakpoints whose prefix reaches the minimum are stored.
    fake_anthropic.min_cacheable_tokens = tokens(SYSTEM, history[:1]) + 1
    usage = await send(client, *system_and_3(SYSTEM, history))
    assert split(usage) == (0, 0, tokens(SYSTEM, history))
    assert fake_anthropic.cache_entries == 2


async def test_a_cached_prompt_still_counts_against_the_context_limit(
        client: anthropic.AsyncAnthropic, fake_anthropic: FakeAnthropic) -> None:
    history = turns(3)
    await send(client, *system_and_3(SYSTEM, history))
    fake_anthropic.context_limit = tokens(SYSTEM, history) - 1
    with pytest.raises(anthropic.BadRequestError, match="prompt is too long"):
        await send(client, *system_and_3(SYSTEM, history))


async def test_more_than_four_markers_is_refused_with_the_real_message(
        client: anthropic.AsyncAnthropic) -> None:
    tool = {"name": "clock", "input_schema": {"type": "object"}, "cache_control": marker(None)}
    system, messages = system_and_3(SYSTEM, turns(3))  # 4 markers, plus the tool's
    with pytest.raises(anthropic.BadRequestError) as caught:
        await send(client, system, messages, tools=[tool])
    assert caught.value.body["error"] == {
        "type": "invalid_request_error",
        "message": "A maximum of 4 blocks with cache_control may be provided. Found 5."}


@pytest.mark.parametrize("cache_control", [
    {"type": "ephemeral", "ttl": "10m"}, {"type": "ephemeral", "ttl": 300},
    {"type": "persistent"}, {"type": "ephemeral", "max_age": 300}])
async def test_a_malformed_marker_is_refused(
        client: anthropic.AsyncAnthropic, cache_control: dict[str, Any]) -> None:
    system = [{"type": "text", "text": SYSTEM, "cache_control": cache_control}]
    with pytest.raises(anthropic.BadRequestError) as caught:
        await send(client, system, turns(1))
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert caught.value.body["error"]["message"].startswith("system.0.cache_control.")


async def test_a_one_hour_marker_after_a_five_minute_one_is_refused_when_enforced(
        client: anthropic.AsyncAnthropic, fake_anthropic: FakeAnthropic) -> None:
    system, messages = system_and_3(SYSTEM, turns(3))
    messages[-1]["content"][0]["cache_control"] = marker("1h")
    fake_anthropic.enforce_ttl_order = True
    with pytest.raises(anthropic.BadRequestError) as caught:
        await send(client, system, messages)
    assert caught.value.body["error"]["message"] == (
        "messages.2.content.0.cache_control.ttl: a ttl='1h' cache_control block must not come "
        "after a ttl='5m' cache_control block. Note that blocks are processed in the following "
        "order: `tools`, `system`, `messages`.")
    # Longer TTLs first is what the API accepts.
    system[0]["cache_control"] = marker("1h")
    for m in messages[:-1]:
        m["content"][0]["cache_control"] = marker("1h")
    messages[-1]["content"][0]["cache_control"] = marker("5m")
    assert split(await send(client, system, messages))[2] == tokens(SYSTEM, turns(3))
