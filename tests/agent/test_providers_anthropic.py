"""Anthropic provider: history conversion and errors, via the real SDK and the validating fake."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import pytest

from agent.errors import (
    AuthError,
    BadRequestError,
    ContextOverflowError,
    EmptyReplyError,
    ModelNotFoundError,
    OutputCapError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitedError,
)
from agent.providers.anthropic import CONTINUES, AnthropicProvider
from tests.harness import FakeAnthropic, tool_call_reply

TOOLS = [{"type": "function", "function": {
    "name": "get_time", "description": "Current time in a timezone",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}}]
EPHEMERAL = {"type": "ephemeral"}
PIXEL = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJ"
         "RU5ErkJggg==")

Make = Callable[..., AnthropicProvider]


@pytest.fixture
def provider(autoclose: Callable[[Any], Any]) -> Make:
    def make(fake: FakeAnthropic, **overrides: Any) -> AnthropicProvider:
        return autoclose(AnthropicProvider(fake.provider_settings(**overrides)))

    return make


def sent(fake: FakeAnthropic) -> dict[str, Any]:
    return fake.calls[-1].json


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


async def test_plain_reply_with_usage_and_required_max_tokens(
        provider: Make, fake_anthropic: FakeAnthropic) -> None:
    llm = provider(fake_anthropic, max_output_tokens=777)
    reply = await llm.complete([{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "hello there"}])
    assert reply.message == {"role": "assistant", "content": "echo: hello there"}
    assert reply.finish_reason == "stop"
    assert reply.usage.input_tokens == 5 and reply.usage.output_tokens == 5
    assert reply.usage.cache_read_tokens == 0
    body = sent(fake_anthropic)
    assert body["system"] == "Be brief."
    assert body["max_tokens"] == 777
    assert body["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "hello there"}]}]


async def test_tool_call_round_trip(provider: Make, fake_anthropic: FakeAnthropic) -> None:
    llm = provider(fake_anthropic)
    fake_anthropic.queue_reply(
        tool_call_reply("get_time", {"tz": "UTC"}, call_id="toolu_1", content="Let me check."),
        "It is noon.")
    history: list[dict[str, Any]] = [{"role": "user", "content": "what time is it?"}]
    first = await llm.complete(history, tools=TOOLS)
    assert first.finish_reason == "tool_calls"
    assert first.message == {"role": "assistant", "content": "Let me check.", "tool_calls": [
        _call("toolu_1", "get_time", '{"tz": "UTC"}')]}
    assert sent(fake_anthropic)["tools"] == [{
        "name": "get_time", "description": "Current time in a timezone",
        "input_schema": TOOLS[0]["function"]["parameters"]}]

    history += [first.message, {"role": "tool", "tool_call_id": "toolu_1", "content": "12:00"}]
    second = await llm.complete(history, tools=TOOLS)
    assert second.text == "It is noon."
    assert sent(fake_anthropic)["messages"][1:] == [
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {"tz": "UTC"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "12:00"}]}]


async def test_messy_history_is_converted_into_a_valid_request(
        provider: Make, fake_anthropic: FakeAnthropic) -> None:
    history = [
        {"role": "system", "content": "You are Threadline."},
        {"role": "assistant", "content": "Earlier summary lives here.  "},
        {"role": "user", "content": "first"},
        {"role": "user", "content": [{"type": "text", "text": "second"}, {
            "type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}}]},
        {"role": "system", "content": "Note: the conversation was compacted."},
        {"role": "assistant", "content": "", "tool_calls": [
            _call("c1", "get_time", '{"tz": "UTC"}'), _call("c2", "search", "not json")]},
        {"role": "tool", "tool_call_id": "c1", "content": "12:00", "_tokens": 3},
        {"role": "tool", "tool_call_id": "c2", "content": ""},
        {"role": "user", "content": "thanks"},
        {"role": "assistant", "content": "You're welcome.\n"},
    ]
    reply = await provider(fake_anthropic).complete(history)
    assert reply.text  # the validating fake accepted it
    body = sent(fake_anthropic)
    assert body["system"] == "You are Threadline.\n\nNote: the conversation was compacted."
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert body["messages"][0]["content"] == [{"type": "text", "text": CONTINUES}]
    merged = body["messages"][2]["content"]
    assert [b["type"] for b in merged] == ["text", "text", "image"]
    assert merged[2]["source"] == {"type": "base64", "media_type": "image/png", "data": PIXEL}
    tool_uses = body["messages"][3]["content"]
    assert tool_uses[1]["input"] == {"_raw": "not json"}
    results = body["messages"][4]["content"]
    assert [b["type"] for b in results] == ["tool_result", "tool_result", "text"]
    assert results[1]["content"] == "(empty)"  # never send empty content
    assert body["messages"][5]["content"] == [{"type": "text", "text": "You're welcome."}]


async def test_split_tool_pairs_are_repaired(provider: Make, fake_anthropic: FakeAnthropic) -> None:
    # After a compaction the middle may hold a result whose call was summarized away.
    history = [
        {"role": "user", "content": "go on"},
        {"role": "tool", "tool_call_id": "gone", "content": "old output"},
        {"role": "assistant", "content": None, "tool_calls": [_call("c9", "get_time", "{}")]},
        {"role": "user", "content": "never mind"},
    ]
    await provider(fake_anthropic).complete(history)
    messages = sent(fake_anthropic)["messages"]
    assert messages[0]["content"][1] == {"type": "text", "text": "[tool result gone] old output"}
    assert messages[2]["content"][0]["type"] == "tool_result"
    assert messages[2]["content"][0]["tool_use_id"] == "c9"


async def test_cache_control_markers_are_kept(
        provider: Make, fake_anthropic: FakeAnthropic) -> None:
    history = [
        {"role": "system",
         "content": [{"type": "text", "text": "sys", "cache_control": EPHEMERAL}]},
        {"role": "user", "content": "a", "cache_control": EPHEMERAL},
        {"role": "assistant", "content": [{"type": "text", "text": "b",
                                           "cache_control": {"type": "ephemeral", "ttl": "1h"}}]},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": None, "cache_control": EPHEMERAL},
    ]
    await provider(fake_anthropic).complete(history)
    body = sent(fake_anthropic)
    assert body["system"] == [{"type": "text", "text": "sys", "cache_control": EPHEMERAL}]
    assert body["messages"][0]["content"][-1]["cache_control"] == EPHEMERAL
    assert "cache_control" not in body["messages"][0]
    assert body["messages"][1]["content"][0]["cache_control"]["ttl"] == "1h"
    assert body["messages"][3]["content"] == [
        {"type": "text", "text": "(empty)", "cache_control": EPHEMERAL}]


async def test_too_many_cache_markers_are_refused_like_the_real_api(
        provider: Make, fake_anthropic: FakeAnthropic) -> None:
    history = [{"role": "system", "content": "sys", "cache_control": EPHEMERAL}]
    for i in range(4):
        history.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}",
                        "cache_control": EPHEMERAL})
    history.append({"role": "user", "content": "last"})
    with pytest.raises(BadRequestError, match="A maximum of 4 blocks with cache_control"):
        await provider(fake_anthropic).complete(history)


@pytest.mark.parametrize(("messages", "problem"), [
    ([{"role": "assistant", "content": "hi"}], "starting with \"user\""),
    ([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "alternate"),
    ([{"role": "user", "content": ""}], "non-empty"),
    ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x",
                                    "content": "r"}]}], "tool_use_id"),
    ([{"role": "user", "content": "a"}, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
      {"role": "user", "content": "b"}], "without `tool_result`"),
])
async def test_fake_refuses_what_the_real_api_refuses(
        fake_anthropic: FakeAnthropic, messages: list[dict[str, Any]], problem: str) -> None:
    # Guards the guard: the raw SDK, bypassing our conversion, must hit each check.
    client = anthropic.AsyncAnthropic(base_url=fake_anthropic.base_url, api_key="k",
                                      max_retries=0)
    with pytest.raises(anthropic.BadRequestError, match=problem):
        await client.messages.create(model="m", max_tokens=10, messages=messages)
    await client.close()


async def test_context_overflow_states_the_limit(
        provider: Make, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.context_limit = 50
    with pytest.raises(ContextOverflowError) as caught:
        await provider(fake_anthropic).complete([{"role": "user", "content": "x" * 400}])
    assert caught.value.limit == 50


async def test_output_room_is_an_output_cap(provider: Make, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.context_limit, fake_anthropic.enforce_output_room = 1000, True
    with pytest.raises(OutputCapError) as caught:
        await provider(fake_anthropic).complete([{"role": "user", "content": "x" * 400}],
                                                max_tokens=950)
    assert caught.value.limit == 900


async def test_max_tokens_above_the_model_cap(
        provider: Make, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.max_output_tokens = 8192
    with pytest.raises(OutputCapError) as caught:
        await provider(fake_anthropic).complete([{"role": "user", "content": "x"}],
                                                max_tokens=64000)
    assert caught.value.limit == 8192


async def test_wrong_key_and_missing_key_are_auth_errors(
        provider: Make,
        fake_anthropic: FakeAnthropic, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    fake_anthropic.api_key = "sk-ant-right-0000"
    with pytest.raises(AuthError) as caught:
        await provider(fake_anthropic, api_key="sk-ant-wrong-1234").complete(
            [{"role": "user", "content": "hi"}])
    assert "sk-ant-wrong-1234" not in str(caught.value)
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path / "absent"))
    with pytest.raises(AuthError, match="no API key"):
        await provider(fake_anthropic, api_key=None).complete([{"role": "user", "content": "x"}])


async def test_unknown_model(provider: Make, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.models = ["claude-sonnet-4-5"]
    with pytest.raises(ModelNotFoundError):
        await provider(fake_anthropic, model="claude-nope").complete(
            [{"role": "user", "content": "x"}])


async def test_rate_limit_and_overload(provider: Make, fake_anthropic: FakeAnthropic) -> None:
    llm = provider(fake_anthropic)
    fake_anthropic.fail_next(429, headers={"retry-after": "4"})
    fake_anthropic.fail_next(529)
    with pytest.raises(RateLimitedError) as caught:
        await llm.complete([{"role": "user", "content": "x"}])
    assert caught.value.retry_after == 4.0
    with pytest.raises(ProviderUnavailableError) as unavailable:
        await llm.complete([{"role": "user", "content": "x"}])
    assert unavailable.value.status == 529


async def test_timeout_and_refused_connection(
        provider: Make, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.delay_next(5.0)
    llm = provider(fake_anthropic, timeout_s=0.2)
    with pytest.raises(ProviderTimeoutError):
        await llm.complete([{"role": "user", "content": "x"}])
    await fake_anthropic.stop()
    with pytest.raises(ProviderUnavailableError) as caught:
        await llm.complete([{"role": "user", "content": "x"}])
    assert not isinstance(caught.value, ProviderTimeoutError)


async def test_empty_reply_is_an_error(provider: Make, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.queue_reply("")
    with pytest.raises(EmptyReplyError):
        await provider(fake_anthropic).complete([{"role": "user", "content": "x"}])


async def test_tool_arguments_come_back_as_json_strings(
        provider: Make, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.queue_reply(tool_call_reply("search", {"q": "ünïcode", "n": 3}))
    reply = await provider(fake_anthropic).complete([{"role": "user", "content": "x"}],
                                                    tools=TOOLS)
    call = reply.message["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == {"q": "ünïcode", "n": 3}
    assert reply.message["content"] is None
