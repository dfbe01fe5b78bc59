"""Error classification: real error bodies per provider, sent over the wire through the SDKs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from agent.errors import (
    AuthError,
    BadRequestError,
    ContextOverflowError,
    ModelNotFoundError,
    OutputCapError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitedError,
)
from agent.providers.anthropic import AnthropicProvider
from agent.providers.classify import parse_retry_after
from agent.providers.openai_compat import OpenAICompatProvider
from tests.harness import FakeAnthropic, FakeOpenAI


@dataclass(frozen=True)
class Case:
    name: str
    status: int
    body: Any
    kind: type[ProviderError]
    limit: int | None = None
    headers: dict[str, str] = field(default_factory=dict)


def _oa(message: str, type_: str = "invalid_request_error", code: str | None = None) -> Any:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


def _an(message: str, type_: str = "invalid_request_error") -> Any:
    return {"type": "error", "error": {"type": type_, "message": message}}


OPENAI_COMPATIBLE = [
    Case("openai overflow", 400, _oa(
        "This model's maximum context length is 128000 tokens. However, your messages resulted "
        "in 130412 tokens. Please reduce the length of the messages.",
        code="context_length_exceeded"), ContextOverflowError, 128000),
    Case("openai overflow stated with the split", 400, _oa(
        "This model's maximum context length is 8192 tokens. However, you requested 9100 tokens "
        "(8900 in the messages, 200 in the completion). Please reduce the length of the "
        "messages or completion.", code="context_length_exceeded"), ContextOverflowError, 8192),
    Case("openai input fits but completion does not", 400, _oa(
        "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens "
        "(5000 in the messages, 4000 in the completion). Please reduce the length of the "
        "messages or completion.", code="context_length_exceeded"), OutputCapError, 3192),
    Case("openai max_tokens too large", 400, _oa(
        "max_tokens is too large: 100000. This model supports at most 16384 completion tokens, "
        "whereas you provided 100000."), OutputCapError, 16384),
    Case("vllm output room", 400, _oa(
        "'max_tokens' or 'max_completion_tokens' is too large: 4000. This model's maximum "
        "context length is 4096 tokens and your request has 1200 input tokens "
        "(4000 > 4096 - 1200).", type_="BadRequestError"), OutputCapError, 2896),
    Case("llama.cpp server", 400, {"error": {
        "code": 400, "message": "the request exceeds the available context size, try "
        "increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 5000,
        "n_ctx": 4096}}, ContextOverflowError, 4096),
    Case("openrouter overflow", 400, {"error": {
        "message": "This endpoint's maximum context length is 32768 tokens. However, you "
        "requested about 40211 tokens (40011 of text input, 200 in the output). Please reduce "
        "the length of either one.", "code": 400}}, ContextOverflowError, 32768),
    Case("payload too large", 413, "Request Entity Too Large", ContextOverflowError),
    Case("bad gateway text body", 502, "<html>Bad Gateway</html>", ProviderUnavailableError),
    Case("request timeout", 408, _oa("Request timed out."), ProviderTimeoutError),
    Case("forbidden region", 403, _oa("Country, region, or territory not supported",
                                      code="unsupported_country_region_territory"), AuthError),
    Case("quota", 429, _oa("You exceeded your current quota.", "insufficient_quota",
                           "insufficient_quota"), AuthError),
    Case("rate limit", 429, _oa("Rate limit reached for requests", "requests",
                                "rate_limit_exceeded"), RateLimitedError,
         headers={"retry-after": "3"}),
    Case("model not found", 404, _oa("The model `gpt-9` does not exist or you do not have "
                                     "access to it.", code="model_not_found"), ModelNotFoundError),
    Case("content filter", 400, _oa("The response was filtered due to the prompt triggering "
                                    "content management policy.", code="content_filter"),
         BadRequestError),
    Case("openrouter credits", 402, {"error": {"message": "Insufficient credits. Add more "
                                                "using https://openrouter.ai/credits",
                                                "code": 402}}, AuthError),
    Case("unprocessable", 422, {"detail": "messages.0.role: bad value"}, BadRequestError),
]

ANTHROPIC = [
    Case("prompt too long", 400, _an("prompt is too long: 208455 tokens > 200000 maximum"),
         ContextOverflowError, 200000),
    Case("output room", 400, _an("input length and `max_tokens` exceed context limit: "
                                 "198000 + 8192 > 200000, decrease input length or "
                                 "`max_tokens` and try again"), OutputCapError, 2000),
    Case("max_tokens above model cap", 400, _an(
        "max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens for "
        "claude-sonnet-4-5"), OutputCapError, 64000),
    Case("request too large", 413, _an("Request exceeds the maximum allowed number of bytes.",
                                       "request_too_large"), ContextOverflowError),
    Case("overloaded", 529, _an("Overloaded", "overloaded_error"), ProviderUnavailableError),
    Case("api error", 500, _an("Internal server error", "api_error"), ProviderUnavailableError),
    Case("rate limit", 429, _an("Number of request tokens has exceeded your per-minute rate "
                                "limit", "rate_limit_error"), RateLimitedError,
         headers={"retry-after": "12"}),
    Case("bad key", 401, _an("invalid x-api-key", "authentication_error"), AuthError),
    Case("permission", 403, _an("Your API key does not have permission to use the specified "
                                "resource.", "permission_error"), AuthError),
    Case("credit balance", 400, _an("Your credit balance is too low to access the Anthropic "
                                    "API.", "invalid_request_error"), AuthError),
    Case("model not found", 404, _an("model: claude-nope", "not_found_error"),
         ModelNotFoundError),
    Case("too many cache blocks", 400, _an("A maximum of 4 blocks with cache_control may be "
                                           "provided. Found 5."), BadRequestError),
]


def _check(err: ProviderError, case: Case) -> None:
    assert type(err) is case.kind, f"{case.name}: got {type(err).__name__}: {err}"
    assert err.status == case.status
    if case.kind in (ContextOverflowError, OutputCapError):
        assert err.limit == case.limit  # type: ignore[attr-defined]
    if case.kind is RateLimitedError:
        assert err.retry_after == float(case.headers["retry-after"])  # type: ignore


@pytest.mark.parametrize("case", OPENAI_COMPATIBLE, ids=lambda c: c.name)
async def test_openai_compatible_error_bodies(fake_openai: FakeOpenAI, case: Case,
                                              autoclose: Callable[[Any], Any]) -> None:
    fake_openai.fail_next(case.status, case.body, case.headers)
    llm = autoclose(OpenAICompatProvider(fake_openai.provider_settings()))
    with pytest.raises(ProviderError) as caught:
        await llm.complete([{"role": "user", "content": "hi"}])
    _check(caught.value, case)
    assert caught.value.provider == "openai"


@pytest.mark.parametrize("case", ANTHROPIC, ids=lambda c: c.name)
async def test_anthropic_error_bodies(fake_anthropic: FakeAnthropic, case: Case,
                                      autoclose: Callable[[Any], Any]) -> None:
    fake_anthropic.fail_next(case.status, case.body, case.headers)
    llm = autoclose(AnthropicProvider(fake_anthropic.provider_settings()))
    with pytest.raises(ProviderError) as caught:
        await llm.complete([{"role": "user", "content": "hi"}])
    _check(caught.value, case)
    assert caught.value.provider == "anthropic"


def test_retry_after_accepts_an_http_date() -> None:
    assert parse_retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
