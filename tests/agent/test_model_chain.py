"""The fallback chain and its breakers, with the real openai SDK against two fake servers:
which failures move on to the next model, which are the request's own, how a 429 is
waited out, and how a breaker skips, probes once and closes (docs/fallbacks.md)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agent.errors import (
    BadRequestError,
    ContextOverflowError,
    ProviderUnavailableError,
    RateLimitedError,
)
from agent.providers.breaker import Breaker, Breakers, BreakerSettings, State
from agent.providers.chain import FallbackPolicy, ModelChain, SummaryChain
from agent.providers.openai_compat import OpenAICompatProvider
from tests.harness.fake_openai import FakeOpenAI
from tests.harness.fixtures import free_port

ASK = [{"role": "user", "content": "hello"}]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def backup() -> AsyncIterator[FakeOpenAI]:
    """The fallback's server, apart from the primary's (`fake_openai`)."""
    server = FakeOpenAI()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def chats(fake: FakeOpenAI) -> int:
    return len(fake.calls_to("/chat/completions"))


def make_chain(autoclose, primary: FakeOpenAI, fallback: FakeOpenAI, *, clock: Clock,
               failures: int = 2, kind: type[ModelChain] = ModelChain,
               **policy: Any) -> ModelChain:
    models = [autoclose(OpenAICompatProvider(primary.provider_settings(model="main-model"))),
              autoclose(OpenAICompatProvider(fallback.provider_settings(model="spare-model")))]
    breakers = Breakers(BreakerSettings(failures=failures, cooldown_s=60), clock)
    return kind(models, breakers=breakers, policy=FallbackPolicy(**policy))


def test_a_breaker_opens_after_failures_in_a_row_then_lets_one_probe_through():
    clock = Clock()
    breaker = Breaker("m", BreakerSettings(failures=3, cooldown_s=60), clock)
    for _ in range(2):
        assert breaker.admit() == (True, False)
        breaker.failed(probe=False)
    breaker.succeeded(probe=False)  # a success in between: the count starts again
    for _ in range(3):
        breaker.admit()
        breaker.failed(probe=False)
    assert breaker.state is State.OPEN
    clock.now += 59
    assert breaker.admit() == (False, False)
    clock.now += 2
    assert breaker.admit() == (True, True)  # the probe
    assert breaker.state is State.HALF_OPEN
    assert breaker.admit() == (False, False)  # everyone else skips it meanwhile
    breaker.failed(probe=True)
    assert breaker.state is State.OPEN  # for another whole cool-down
    clock.now += 59
    assert breaker.admit() == (False, False)
    clock.now += 2
    assert breaker.admit() == (True, True)
    breaker.abandoned(probe=True)  # a stopped turn: no verdict, the next call probes
    assert breaker.admit() == (True, True)
    breaker.succeeded(probe=True)
    assert breaker.state is State.CLOSED and breaker.failures == 0
    assert breaker.admit() == (True, False)


@pytest.mark.parametrize("status", [500, 503, 401, 403, 404])
async def test_failures_that_are_not_the_requests_fall_back(autoclose, fake_openai, backup,
                                                            status):
    chain = make_chain(autoclose, fake_openai, backup, clock=Clock())
    fake_openai.fail_next(status)
    completion = await chain.complete(ASK)
    assert completion.model == "spare-model" and completion.text == "echo: hello"
    assert chats(fake_openai) == 1 and chats(backup) == 1


async def test_an_unreachable_or_silent_model_falls_back(autoclose, fake_openai, backup):
    gone = OpenAICompatProvider(fake_openai.provider_settings(
        model="gone", base_url=f"http://127.0.0.1:{free_port()}/v1"))
    slow = OpenAICompatProvider(fake_openai.provider_settings(model="slow", timeout_s=0.3))
    spare = OpenAICompatProvider(backup.provider_settings(model="spare-model"))
    chain = autoclose(ModelChain([gone, slow, spare]))
    fake_openai.delay_next(5)
    completion = await chain.complete(ASK)
    assert completion.model == "spare-model"
    assert chats(fake_openai) == 1  # the slow one was asked (and timed out)


@pytest.mark.parametrize("body, error", [
    ({"error": {"message": "Invalid value for 'temperature'.", "type": "invalid_request_error",
                "code": None}}, BadRequestError),
    ({"error": {"message": "This model's maximum context length is 100 tokens. However, your "
                "messages resulted in 900 tokens.", "type": "invalid_request_error",
                "code": "context_length_exceeded"}}, ContextOverflowError),
], ids=["bad-request", "overflow"])
async def test_the_requests_own_failures_never_fall_back(autoclose, fake_openai, backup, body,
                                                         error):
    clock = Clock()
    chain = make_chain(autoclose, fake_openai, backup, clock=clock, failures=1)
    fake_openai.fail_next(400, body)
    with pytest.raises(error):  # for the caller: the agent compacts on overflow
        await chain.complete(ASK)
    assert chats(backup) == 0
    # The model answered: it is up, so its breaker stays closed.
    assert chain.breakers.states() == {"main-model": 0.0}
    assert await chain.complete(ASK)
    assert chats(fake_openai) == 2


async def test_a_short_429_is_waited_out_on_the_same_model(autoclose, fake_openai, backup):
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    chain = make_chain(autoclose, fake_openai, backup, clock=Clock(), max_wait_s=5,
                       sleep=sleep)
    fake_openai.fail_next(429, headers={"retry-after": "2"}, times=2)
    completion = await chain.complete(ASK)
    assert completion.model == "main-model" and waits == [2.0, 2.0]
    assert chats(backup) == 0
    # Two more waits of 2 s would pass max_wait_s (5 s in all): the third 429 moves on.
    fake_openai.fail_next(429, headers={"retry-after": "2"}, times=3)
    waits.clear()
    completion = await chain.complete(ASK)
    assert completion.model == "spare-model" and waits == [2.0, 2.0]


@pytest.mark.parametrize("headers", [{"retry-after": "120"}, {}], ids=["too-long", "no-time"])
async def test_a_long_or_open_ended_429_falls_back_at_once(autoclose, fake_openai, backup,
                                                           headers):
    async def sleep(seconds: float) -> None:
        raise AssertionError("nothing should be waited out")

    chain = make_chain(autoclose, fake_openai, backup, clock=Clock(), max_wait_s=30,
                       sleep=sleep)
    fake_openai.fail_next(429, headers=headers)
    assert (await chain.complete(ASK)).model == "spare-model"


async def test_alone_a_model_has_no_breaker_and_its_error_is_raised(autoclose, fake_openai):
    chain = autoclose(ModelChain(
        [OpenAICompatProvider(fake_openai.provider_settings(model="only"))],
        breakers=Breakers(BreakerSettings(failures=1), Clock())))
    fake_openai.outage = 503
    for _ in range(3):  # with nothing to fall back to, every call still goes out
        with pytest.raises(ProviderUnavailableError):
            await chain.complete(ASK)
    assert chats(fake_openai) == 3


async def test_an_open_breaker_skips_its_model_until_one_probe_closes_it(autoclose,
                                                                        fake_openai, backup):
    clock = Clock()
    chain = make_chain(autoclose, fake_openai, backup, clock=clock, failures=2)
    fake_openai.outage = 503
    for _ in range(2):
        assert (await chain.complete(ASK)).model == "spare-model"
    assert chats(fake_openai) == 2
    assert chain.breakers.states()["main-model"] == 1.0
    for _ in range(3):  # open: not a single call goes to it
        assert (await chain.complete(ASK)).model == "spare-model"
    assert chats(fake_openai) == 2
    clock.now += 61
    fake_openai.outage = None
    fake_openai.delay_next(0.5)  # the probe takes a while; two more calls come meanwhile
    answers = await asyncio.gather(*(chain.complete(ASK) for _ in range(3)))
    assert sorted(a.model for a in answers) == ["main-model", "spare-model", "spare-model"]
    assert chats(fake_openai) == 3  # exactly one probe
    assert chain.breakers.states()["main-model"] == 0.0
    assert (await chain.complete(ASK)).model == "main-model"
    outcomes = dict(chain.breakers.outcomes())
    assert outcomes["main-model"] == {"fell_back": 2, "skipped": 5, "ok": 2}


async def test_every_model_resting_fails_without_a_call(autoclose, fake_openai, backup):
    chain = make_chain(autoclose, fake_openai, backup, clock=Clock(), failures=1)
    fake_openai.outage = backup.outage = 503
    with pytest.raises(ProviderUnavailableError):
        await chain.complete(ASK)
    with pytest.raises(ProviderUnavailableError, match="resting"):
        await chain.complete(ASK)
    assert chats(fake_openai) == chats(backup) == 1


async def test_a_rate_limit_past_the_last_model_is_raised_as_such(autoclose, fake_openai,
                                                                  backup):
    chain = make_chain(autoclose, fake_openai, backup, clock=Clock(), max_wait_s=0)
    fake_openai.fail_next(503)
    backup.fail_next(429, headers={"retry-after": "9"})
    with pytest.raises(RateLimitedError):
        await chain.complete(ASK)


async def test_the_summarizers_chain_sizes_requests_for_what_it_may_reach(autoclose,
                                                                          fake_openai, backup):
    clock = Clock()
    big = OpenAICompatProvider(fake_openai.provider_settings(model="big", context_length=32_000))
    small = OpenAICompatProvider(backup.provider_settings(model="small", context_length=4_000))
    chain = autoclose(SummaryChain([big, small], breakers=Breakers(
        BreakerSettings(failures=3, cooldown_s=60), clock)))
    assert chain.context_length == 32_000  # a healthy first model: its own window
    fake_openai.fail_next(503)
    assert (await chain.complete(ASK)).model == "small"
    assert chain.context_length == 4_000  # it failed lately: size for the fallback too
    assert (await chain.complete(ASK)).model == "big"
    assert chain.context_length == 32_000
