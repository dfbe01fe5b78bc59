"""OpenAI-compatible provider: the real `openai` SDK over a socket to the fake server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
from agent.providers.base import ProviderSettings
from agent.providers.openai_compat import OpenAICompatProvider
from tests.harness import FakeOpenAI, tool_call_reply
from tests.harness.fixtures import free_port

TOOLS = [{"type": "function", "function": {
    "name": "get_time", "description": "Current time in a timezone",
    "parameters": {"type": "object", "properties": {
        "tz": {"type": "string"}, "_cursor": {"type": "string"}}}}}]

Make = Callable[..., OpenAICompatProvider]


@pytest.fixture
def provider(autoclose: Callable[[Any], Any]) -> Make:
    def make(fake: FakeOpenAI, **overrides: Any) -> OpenAICompatProvider:
        return autoclose(OpenAICompatProvider(fake.provider_settings(**overrides)))

    return make


async def test_plain_reply_reports_usage_from_the_response(
        provider: Make, fake_openai: FakeOpenAI) -> None:
    llm = provider(fake_openai, max_output_tokens=321)
    history = [{"role": "system", "content": "Be brief."},
               {"role": "user", "content": "hello there", "_id": 17}]
    reply = await llm.complete(history)
    assert reply.text == "echo: hello there"
    assert reply.message == {"role": "assistant", "content": "echo: hello there"}
    assert reply.finish_reason == "stop"
    sent = fake_openai.calls[-1].json
    assert reply.usage.input_tokens == fake_openai.prompt_tokens(sent) == 5  # 20 chars / 4
    assert reply.usage.output_tokens == 5
    # Our bookkeeping keys never reach the wire; the configured output cap does.
    assert sent["messages"][1] == {"role": "user", "content": "hello there"}
    assert sent["max_tokens"] == 321
    assert fake_openai.calls[-1].headers["authorization"] == "Bearer test-key"


async def test_tool_call_round_trip(provider: Make, fake_openai: FakeOpenAI) -> None:
    llm = provider(fake_openai)
    fake_openai.queue_reply(tool_call_reply("get_time", {"tz": "UTC"}, call_id="call_1"),
                            "It is noon.")
    history: list[dict[str, Any]] = [{"role": "user", "content": "what time is it?"}]
    first = await llm.complete(history, tools=TOOLS)
    assert first.finish_reason == "tool_calls"
    assert first.message["content"] is None
    assert first.message["tool_calls"] == [{"id": "call_1", "type": "function", "function": {
        "name": "get_time", "arguments": '{"tz": "UTC"}'}}]
    assert fake_openai.calls[-1].json["tools"] == TOOLS

    history += [first.message, {"role": "tool", "tool_call_id": "call_1", "content": "12:00"}]
    second = await llm.complete(history, tools=TOOLS)
    assert second.text == "It is noon."
    assert fake_openai.calls[-1].json["messages"][1:] == history[1:]


async def test_empty_reply_is_an_error(provider: Make, fake_openai: FakeOpenAI) -> None:
    fake_openai.queue_reply("")
    with pytest.raises(EmptyReplyError):
        await provider(fake_openai).complete([{"role": "user", "content": "hi"}])


async def test_context_overflow_states_the_limit(provider: Make, fake_openai: FakeOpenAI) -> None:
    fake_openai.context_limit = 50
    with pytest.raises(ContextOverflowError) as caught:
        await provider(fake_openai).complete([{"role": "user", "content": "x" * 400}])
    assert caught.value.limit == 50
    assert caught.value.status == 400


async def test_output_room_too_small_is_an_output_cap_not_an_overflow(
        provider: Make, fake_openai: FakeOpenAI) -> None:
    fake_openai.context_limit, fake_openai.enforce_output_room = 1000, True
    with pytest.raises(OutputCapError) as caught:
        await provider(fake_openai).complete([{"role": "user", "content": "x" * 400}],
                                             max_tokens=950)
    assert caught.value.limit == 1000 - 100


async def test_max_tokens_above_the_model_cap(provider: Make, fake_openai: FakeOpenAI) -> None:
    fake_openai.max_output_tokens = 4096
    with pytest.raises(OutputCapError) as caught:
        await provider(fake_openai).complete([{"role": "user", "content": "hi"}],
                                             max_tokens=10_000)
    assert caught.value.limit == 4096


async def test_wrong_key_is_an_auth_error_that_never_shows_the_key(
        provider: Make, fake_openai: FakeOpenAI) -> None:
    fake_openai.api_key = "sk-right-key-000000"
    secret = "sk-proj-wrong-key-123456789"
    with pytest.raises(AuthError) as caught:
        await provider(fake_openai, api_key=secret).complete([{"role": "user", "content": "hi"}])
    assert caught.value.status == 401
    # The real API echoes a masked key in its message: it must not survive either way.
    fake_openai.api_key = None
    fake_openai.fail_next(401, {"error": {"message": f"Incorrect API key provided: {secret}.",
                                          "type": "invalid_request_error",
                                          "code": "invalid_api_key"}})
    with pytest.raises(AuthError) as caught:
        await provider(fake_openai, api_key=secret).complete([{"role": "user", "content": "hi"}])
    assert secret not in str(caught.value)
    assert "sk-proj" not in str(caught.value)


async def test_unknown_model_is_model_not_found(provider: Make, fake_openai: FakeOpenAI) -> None:
    fake_openai.models = ["gpt-4o-mini"]
    with pytest.raises(ModelNotFoundError, match="gpt-nope"):
        await provider(fake_openai, model="gpt-nope").complete([{"role": "user", "content": "x"}])


@pytest.mark.parametrize(("headers", "expected"), [
    ({"retry-after": "7"}, 7.0), ({"retry-after-ms": "1500"}, 1.5), ({}, None)])
async def test_rate_limit_carries_retry_after(
        provider: Make, fake_openai: FakeOpenAI, headers: dict[str, str],
        expected: float | None) -> None:
    fake_openai.fail_next(429, headers=headers)
    with pytest.raises(RateLimitedError) as caught:
        await provider(fake_openai).complete([{"role": "user", "content": "hi"}])
    assert caught.value.retry_after == expected


async def test_sdk_retries_honour_retry_after_ms(provider: Make, fake_openai: FakeOpenAI) -> None:
    fake_openai.fail_next(429, headers={"retry-after-ms": "20"})
    reply = await provider(fake_openai, max_retries=1).complete(
        [{"role": "user", "content": "again"}])
    assert reply.text == "echo: again"
    assert [c.headers["x-stainless-retry-count"] for c in fake_openai.calls] == ["0", "1"]


async def test_exhausted_quota_is_an_auth_error_not_a_rate_limit(
        provider: Make, fake_openai: FakeOpenAI) -> None:
    fake_openai.fail_next(429, {"error": {
        "message": "You exceeded your current quota, please check your plan and billing details.",
        "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}})
    with pytest.raises(AuthError):
        await provider(fake_openai).complete([{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("status", [500, 502, 503, 529])
async def test_server_errors_are_unavailable(
        provider: Make, fake_openai: FakeOpenAI, status: int) -> None:
    fake_openai.fail_next(status)
    with pytest.raises(ProviderUnavailableError) as caught:
        await provider(fake_openai).complete([{"role": "user", "content": "hi"}])
    assert caught.value.status == status
    assert not isinstance(caught.value, ProviderTimeoutError)


async def test_slow_server_is_a_timeout(provider: Make, fake_openai: FakeOpenAI) -> None:
    fake_openai.delay_next(5.0)
    with pytest.raises(ProviderTimeoutError):
        await provider(fake_openai, timeout_s=0.2).complete([{"role": "user", "content": "hi"}])


async def test_stopped_server_is_unavailable_then_recovers(
        provider: Make, fake_openai: FakeOpenAI) -> None:
    llm = provider(fake_openai)
    await llm.complete([{"role": "user", "content": "warm the connection pool"}])
    await fake_openai.stop()
    with pytest.raises(ProviderUnavailableError) as caught:
        await llm.complete([{"role": "user", "content": "hi"}])
    assert not isinstance(caught.value, ProviderTimeoutError)
    await fake_openai.start()  # same port again
    assert (await llm.complete([{"role": "user", "content": "back"}])).text == "echo: back"


async def test_nothing_listening_is_unavailable(autoclose: Callable[[Any], Any]) -> None:
    llm = autoclose(OpenAICompatProvider(ProviderSettings(
        provider="openai", model="m", base_url=f"http://127.0.0.1:{free_port()}/v1",
        max_retries=0)))
    with pytest.raises(ProviderUnavailableError, match="cannot reach"):
        await llm.complete([{"role": "user", "content": "hi"}])


async def test_switches_to_max_completion_tokens_when_the_model_asks(
        provider: Make, fake_openai: FakeOpenAI) -> None:
    fake_openai.fail_next(400, {"error": {
        "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
                   "Use 'max_completion_tokens' instead.",
        "type": "invalid_request_error", "param": "max_tokens", "code": "unsupported_parameter"}})
    llm = provider(fake_openai)
    assert (await llm.complete([{"role": "user", "content": "hi"}], max_tokens=64)).text
    retried = fake_openai.calls[-1].json
    assert retried["max_completion_tokens"] == 64 and "max_tokens" not in retried


async def test_other_bad_requests_stay_bad_requests(
        provider: Make, fake_openai: FakeOpenAI) -> None:
    fake_openai.fail_next(400, {"error": {"message": "Invalid 'messages[0].role': 'robot'.",
                                          "type": "invalid_request_error", "code": None}})
    with pytest.raises(BadRequestError):
        await provider(fake_openai).complete([{"role": "user", "content": "hi"}])
