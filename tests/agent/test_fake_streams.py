"""The LLM fakes stream replies the way the real services do, seen through the real SDKs.

Each test drives `openai.AsyncOpenAI` or `anthropic.AsyncAnthropic` over a socket against
the fake and checks what the SDK's own stream parsing makes of it: the text, whole tool
calls, the usage, the pacing, the planned breaks and the refusals before a stream starts.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest

from tests.harness import FakeAnthropic, FakeOpenAI

PROMPT = "please describe the weather in Lisbon today in a sentence"  # 58 chars
OPENAI_STREAM: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}
USAGE_KEYS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens",
              "output_tokens")
TWO_CALLS = {"role": "assistant", "content": "Checking both cities now.", "tool_calls": [
    {"id": "call_a", "type": "function",
     "function": {"name": "get_weather", "arguments": json.dumps({"city": "Lisbon"})}},
    {"id": "call_b", "type": "function", "function": {
        "name": "get_weather", "arguments": json.dumps({"city": "Porto", "units": "metric"})}}]}


@pytest.fixture
async def oai(fake_openai: FakeOpenAI) -> AsyncIterator[openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(base_url=fake_openai.base_url, api_key="test-key",
                                max_retries=0)
    yield client
    await client.close()


@pytest.fixture
async def claude(fake_anthropic: FakeAnthropic) -> AsyncIterator[anthropic.AsyncAnthropic]:
    client = anthropic.AsyncAnthropic(base_url=fake_anthropic.base_url, api_key="test-key",
                                      max_retries=0)
    yield client
    await client.close()


def user(text: str = PROMPT) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


async def openai_chunks(client: openai.AsyncOpenAI, **extra: Any) -> list[Any]:
    """Every chunk of one streamed chat completion."""
    stream = await client.chat.completions.create(
        model="fake-model", messages=extra.pop("messages", user()), **{**OPENAI_STREAM, **extra})
    return [chunk async for chunk in stream]


def openai_text(chunks: list[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


async def claude_stream(client: anthropic.AsyncAnthropic,
                        **extra: Any) -> tuple[list[Any], anthropic.types.Message]:
    """Every event of one streamed message, and the SDK's final message."""
    request = {"model": "claude-fake", "max_tokens": 256, "messages": user(), **extra}
    async with client.messages.stream(**request) as stream:
        events = [event async for event in stream]
        return events, await stream.get_final_message()


def claude_usage(usage: Any) -> dict[str, Any]:
    """The counts that matter from an SDK usage object or a fake's usage dict."""
    if isinstance(usage, dict):
        return {key: usage[key] for key in USAGE_KEYS}
    return {key: getattr(usage, key) for key in USAGE_KEYS}


# --- OpenAI -------------------------------------------------------------------------------
async def test_openai_stream_joins_to_the_plain_reply_and_ends_with_usage(
        oai: openai.AsyncOpenAI, fake_openai: FakeOpenAI) -> None:
    plain = await oai.chat.completions.create(model="fake-model", messages=user())
    fake_openai.stream_chunk_chars = 5
    chunks = await openai_chunks(oai)

    assert openai_text(chunks) == plain.choices[0].message.content
    first, finish, last = chunks[0], chunks[-2], chunks[-1]
    assert first.choices[0].delta.role == "assistant" and first.choices[0].delta.content == ""
    deltas = [c.choices[0].delta.content for c in chunks[1:-2]]
    assert deltas and all(0 < len(d) <= 5 for d in deltas)
    assert finish.choices[0].finish_reason == "stop" and finish.choices[0].delta.content is None
    assert last.choices == [] and all(c.usage is None for c in chunks[:-1])
    assert last.usage.model_dump(exclude_none=True) == fake_openai.usages[-1]
    assert last.usage.model_dump(exclude_none=True) == plain.usage.model_dump(exclude_none=True)
    assert fake_openai.streamed_requests == 1 and len(fake_openai.usages) == 2


async def test_openai_stream_without_include_usage_sends_no_usage_chunk(
        oai: openai.AsyncOpenAI, fake_openai: FakeOpenAI) -> None:
    chunks = await openai_chunks(oai, stream_options=None)
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in chunks)
    assert len(fake_openai.usages) == 1  # still recorded by the fake


async def test_openai_stream_sends_text_then_whole_tool_calls(
        oai: openai.AsyncOpenAI, fake_openai: FakeOpenAI) -> None:
    fake_openai.stream_chunk_chars = 6
    fake_openai.queue_reply(TWO_CALLS)
    chunks = await openai_chunks(oai)

    calls: dict[int, dict[str, str]] = {}
    kinds = []
    for chunk in chunks[:-1]:
        delta = chunk.choices[0].delta
        kinds += ["text"] if delta.content else []
        for piece in delta.tool_calls or []:
            kinds.append("call")
            call = calls.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += piece.id or ""
            call["name"] += piece.function.name or ""
            call["arguments"] += piece.function.arguments or ""
    assert openai_text(chunks) == TWO_CALLS["content"]
    assert kinds.index("call") > len(kinds) - kinds[::-1].index("text") - 1  # text first
    assert kinds.count("call") > 4  # the arguments came in pieces
    expected = {i: {"id": c["id"], "name": c["function"]["name"],
                    "arguments": c["function"]["arguments"]}
                for i, c in enumerate(TWO_CALLS["tool_calls"])}
    assert calls == expected
    assert json.loads(calls[1]["arguments"]) == {"city": "Porto", "units": "metric"}
    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    assert chunks[-1].usage.model_dump(exclude_none=True) == fake_openai.usages[-1]


# --- Anthropic ----------------------------------------------------------------------------
async def test_anthropic_stream_joins_to_the_plain_reply_with_the_same_usage(
        claude: anthropic.AsyncAnthropic, fake_anthropic: FakeAnthropic) -> None:
    plain = await claude.messages.create(model="claude-fake", max_tokens=256, messages=user())
    fake_anthropic.stream_chunk_chars = 7
    events, final = await claude_stream(claude)

    texts = [e.delta.text for e in events if e.type == "content_block_delta"]
    assert len(texts) > 1 and "".join(texts) == plain.content[0].text
    assert [b.type for b in final.content] == ["text"] and final.content[0].text == "".join(texts)
    assert events[0].type == "message_start" and events[0].message.usage.output_tokens == 1
    assert final.stop_reason == "end_turn" and final.stop_sequence is None
    assert claude_usage(final.usage) == claude_usage(plain.usage)
    assert claude_usage(final.usage) == claude_usage(fake_anthropic.usages[-1])
    assert fake_anthropic.streamed_requests == 1 and len(fake_anthropic.usages) == 2


async def test_anthropic_stream_settles_the_prompt_cache_once(
        claude: anthropic.AsyncAnthropic, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.min_cacheable_tokens = 10
    system = [{"type": "text", "text": "You are a careful weather assistant. " * 4,
               "cache_control": {"type": "ephemeral"}}]
    _, first = await claude_stream(claude, system=system)
    _, second = await claude_stream(claude, system=system)

    assert first.usage.cache_creation_input_tokens > 0 and first.usage.cache_read_input_tokens == 0
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert [claude_usage(u) for u in fake_anthropic.usages] == \
        [claude_usage(first.usage), claude_usage(second.usage)]
    totals = fake_anthropic.usage_totals()
    assert totals["cache_read_input_tokens"] == fake_anthropic.cache_reads
    assert totals["cache_creation_input_tokens"] == fake_anthropic.cache_writes


async def test_anthropic_stream_sends_text_then_whole_tool_uses(
        claude: anthropic.AsyncAnthropic, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.stream_chunk_chars = 6
    fake_anthropic.queue_reply(TWO_CALLS)
    events, final = await claude_stream(claude)

    json_pieces = [e for e in events if e.type == "content_block_delta"
                   and e.delta.type == "input_json_delta"]
    assert len(json_pieces) > 4
    assert [b.type for b in final.content] == ["text", "tool_use", "tool_use"]
    assert final.content[0].text == TWO_CALLS["content"]
    assert [(b.id, b.name, b.input) for b in final.content[1:]] == [
        ("call_a", "get_weather", {"city": "Lisbon"}),
        ("call_b", "get_weather", {"city": "Porto", "units": "metric"})]
    assert final.stop_reason == "tool_use"
    assert claude_usage(final.usage) == claude_usage(fake_anthropic.usages[-1])


# --- pacing, breaks, refusals -------------------------------------------------------------
async def test_stream_delay_spreads_the_deltas_out(
        oai: openai.AsyncOpenAI, fake_openai: FakeOpenAI,
        claude: anthropic.AsyncAnthropic, fake_anthropic: FakeAnthropic) -> None:
    text = "x" * 34  # echo: + 34 chars = 40 chars = 10 deltas of 4, 9 pauses of 0.02 s
    for fake in (fake_openai, fake_anthropic):
        fake.stream_chunk_chars, fake.stream_delay_s = 4, 0.02

    arrivals = []
    stream = await oai.chat.completions.create(model="fake-model", messages=user(text),
                                               stream=True)
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append(time.monotonic())
    async with claude.messages.stream(model="claude-fake", max_tokens=64,
                                      messages=user(text)) as events:
        claude_arrivals = [time.monotonic() async for e in events if e.type == "text"]

    for times in (arrivals, claude_arrivals):
        assert len(times) == 10
        assert 0.12 <= times[-1] - times[0] < 2.0


@pytest.mark.parametrize("how", ["drop", "error"])
async def test_openai_stream_break_raises_after_some_text(
        oai: openai.AsyncOpenAI, fake_openai: FakeOpenAI, how: str) -> None:
    fake_openai.stream_chunk_chars = 4
    fake_openai.break_stream_next(10, how)
    received: list[str] = []
    with pytest.raises(openai.APIError) as raised:
        stream = await oai.chat.completions.create(model="fake-model", messages=user(),
                                                   **OPENAI_STREAM)
        async for chunk in stream:
            received.append(openai_text([chunk]))
    assert "".join(received) == ("echo: " + PROMPT)[:10] and len([r for r in received if r]) > 1
    if how == "error":
        assert "The server had an error" in str(raised.value)
    assert fake_openai.usages == []
    chunks = await openai_chunks(oai)  # the break was used up
    assert openai_text(chunks) == "echo: " + PROMPT and len(fake_openai.usages) == 1


@pytest.mark.parametrize("how", ["drop", "error"])
async def test_anthropic_stream_break_raises_after_some_text(
        claude: anthropic.AsyncAnthropic, fake_anthropic: FakeAnthropic, how: str) -> None:
    fake_anthropic.stream_chunk_chars = 4
    fake_anthropic.break_stream_next(10, how)
    received: list[str] = []
    with pytest.raises(Exception) as raised:  # noqa: B017 - drop surfaces a transport error
        async with claude.messages.stream(model="claude-fake", max_tokens=256,
                                          messages=user()) as stream:
            async for event in stream:
                received += [event.text] if event.type == "text" else []
    assert not isinstance(raised.value, AssertionError)
    assert "".join(received) == ("echo: " + PROMPT)[:10] and len(received) > 1
    if how == "error":
        assert isinstance(raised.value, anthropic.APIStatusError)
        assert raised.value.body["error"]["type"] == "overloaded_error"
    assert fake_anthropic.usages == []
    _, final = await claude_stream(claude)
    assert final.content[0].text == "echo: " + PROMPT and len(fake_anthropic.usages) == 1


async def test_refusals_come_back_as_status_errors_before_any_stream(
        oai: openai.AsyncOpenAI, fake_openai: FakeOpenAI,
        claude: anthropic.AsyncAnthropic, fake_anthropic: FakeAnthropic) -> None:
    fake_openai.context_limit = fake_anthropic.context_limit = 5
    with pytest.raises(openai.BadRequestError) as too_long:
        await oai.chat.completions.create(model="fake-model", messages=user(), **OPENAI_STREAM)
    assert too_long.value.code == "context_length_exceeded"
    with pytest.raises(anthropic.BadRequestError, match="prompt is too long"):
        await claude_stream(claude)

    fake_openai.fail_next(500)
    fake_anthropic.fail_next(529)
    with pytest.raises(openai.InternalServerError):
        await oai.chat.completions.create(model="fake-model", messages=user(), stream=True)
    with pytest.raises(anthropic.APIStatusError) as overloaded:
        await claude_stream(claude)
    assert overloaded.value.status_code == 529
    assert fake_openai.streamed_requests == fake_anthropic.streamed_requests == 2
    assert fake_openai.usages == [] and fake_anthropic.usages == []


async def test_a_client_leaving_a_paused_stream_does_not_upset_the_server(
        oai: openai.AsyncOpenAI, fake_openai: FakeOpenAI,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    fake_openai.stream_chunk_chars, fake_openai.stream_delay_s = 2, 0.05
    stream = await oai.chat.completions.create(model="fake-model", messages=user(),
                                               stream=True)
    async for chunk in stream:
        if openai_text([chunk]):
            break
    await stream.close()
    await asyncio.sleep(0.12)  # the server's next pause ends and it writes to a closed line
    fake_openai.stream_delay_s = 0.0
    chunks = await openai_chunks(oai)
    assert openai_text(chunks) == "echo: " + PROMPT
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
