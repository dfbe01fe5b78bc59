"""Model fallbacks in the live gateway (issue 38, points 4 and 5): the real openai SDK
against two fake servers, the primary's and the fallback's; real store, real config."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import generate_latest

from agent.errors import BadRequestError
from gateway.service.app import Gateway
from gateway.turns.resets import utc_now
from gateway.wiring import create_gateway
from tests.gateway.test_compaction_gateway import chat_calls, seed, summary_calls
from tests.harness.fake_openai import FakeOpenAI
from tests.harness.gateway import close, config_for, summarizing_responder
from tests.harness.platform import RecordingPlatform

CHAT = "test:1"
PRIMARY_KEY = "sk-primary-fallback-test-0123456789abcdef"
SPARE_KEY = "sk-spare-fallback-test-fedcba9876543210"
ANSWERED_ELSEWHERE = "(Answered by fake-fallback: fake-model is not available right now.)"


class Clock:
    """Real time plus however far a test has moved it on (the gateway's, the breakers')."""

    def __init__(self) -> None:
        self.ahead = dt.timedelta()

    def __call__(self) -> dt.datetime:
        return utc_now() + self.ahead


@pytest.fixture
async def spare() -> AsyncIterator[FakeOpenAI]:
    """The fallback model's server."""
    server = FakeOpenAI(api_key=SPARE_KEY, responder=summarizing_responder)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def fallback_config(tmp_path, primary: FakeOpenAI, spare: FakeOpenAI, *,
                    fallback: dict[str, Any] | None = None,
                    sections: dict[str, Any] | None = None, **model: Any) -> Any:
    """The primary at `primary`, one fallback (`fake-fallback`) at `spare`; `model` and
    `fallback` override their keys, `sections` adds other config sections."""
    entry = {"provider": "openai", "name": "fake-fallback", "base_url": spare.base_url,
             "api_key": SPARE_KEY, "max_retries": 0, "timeout_s": 5, **(fallback or {})}
    return config_for(tmp_path, primary.base_url, model={
        "api_key": PRIMARY_KEY, "fallbacks": [entry],
        "breaker": {"failures": 2, "cooldown_s": 60}, **model}, **(sections or {}))


async def started(config: Any, platform: RecordingPlatform, clock: Clock | None = None
                  ) -> Gateway:
    gateway = create_gateway(config, [platform], **({"clock": clock} if clock else {}))
    await gateway.initialize()
    await gateway.start()
    return gateway


async def answer(platform: RecordingPlatform, text: str, chat_id: str = "1") -> float:
    """Say `text`, wait for its answer; the seconds it took."""
    began = time.monotonic()
    await platform.say(text, chat_id=chat_id)
    await platform.wait_delivered(len(platform.delivered_ids) + 1)
    return time.monotonic() - began


async def test_an_outage_is_answered_by_the_fallback_and_the_primary_rests(
        tmp_path, fake_openai, spare, caplog):
    caplog.set_level(logging.INFO)
    fake_openai.outage = 503
    config = fallback_config(tmp_path, fake_openai, spare, timeout_s=3, max_retries=2)
    platform, clock = RecordingPlatform(), Clock()
    gw = await started(config, platform, clock)
    try:
        took = await answer(platform, "first")
        assert took < 3 + 1  # the request timeout plus 1 s (the SDK's two retries included)
        assert len(chat_calls(fake_openai)) == 3  # one call and the SDK's two retries
        await answer(platform, "second")  # the second failure in a row opens its breaker
        assert len(chat_calls(fake_openai)) == 6
        for text in ("third", "fourth"):  # open: the primary gets no call at all
            assert await answer(platform, text) < 1
        assert len(chat_calls(fake_openai)) == 6
        scrape = generate_latest(gw.metrics.registry).decode()
        assert 'threadline_model_breaker{model="fake-model"} 1.0' in scrape
        assert 'threadline_model_calls_total{model="fake-model",outcome="fell_back"} 2.0' \
            in scrape
        assert 'threadline_model_calls_total{model="fake-model",outcome="skipped"} 2.0' in scrape
        clock.ahead = dt.timedelta(seconds=61)  # the cool-down is over; the primary is back
        fake_openai.outage = None
        await answer(platform, "fifth")  # the one probe, which closes the breaker
        await answer(platform, "sixth")
    finally:
        await close(gw)
    assert platform.texts() == [f"echo: {t}" for t in
                                ("first", "second", "third", "fourth", "fifth", "sixth")]
    assert len(chat_calls(fake_openai)) == 8 and len(chat_calls(spare)) == 4
    assert "model fallback: fake-fallback answered instead: fake-model is unavailable " \
           "(HTTP 503)" in caplog.text
    assert "model fake-model: breaker opened after 2 failures in a row" in caplog.text
    assert "model fake-model: breaker closed" in caplog.text
    assert PRIMARY_KEY not in caplog.text and SPARE_KEY not in caplog.text


async def test_a_hanging_primary_is_left_after_its_timeout(tmp_path, fake_openai, spare):
    fake_openai.delay_next(30, times=5)
    config = fallback_config(tmp_path, fake_openai, spare, timeout_s=1, max_retries=0)
    platform = RecordingPlatform()
    gw = await started(config, platform)
    try:
        assert await answer(platform, "anyone there?") < 1 + 1
    finally:
        await close(gw)
    assert platform.texts() == ["echo: anyone there?"]


async def test_after_the_cool_down_concurrent_turns_send_one_probe(tmp_path, fake_openai,
                                                                   spare):
    fake_openai.outage = 503
    config = fallback_config(tmp_path, fake_openai, spare)
    platform, clock = RecordingPlatform(), Clock()
    gw = await started(config, platform, clock)
    try:
        for chat in ("1", "2"):
            await answer(platform, "hello", chat)
        assert len(chat_calls(fake_openai)) == 2
        clock.ahead = dt.timedelta(seconds=61)
        fake_openai.outage = None
        fake_openai.delay_next(0.5)  # the probe takes its time; three chats ask meanwhile
        await asyncio.gather(*(platform.say("again", chat_id=c) for c in ("3", "4", "5")))
        await platform.wait_delivered(5)
    finally:
        await close(gw)
    assert len(chat_calls(fake_openai)) == 3  # exactly one probe
    assert len(chat_calls(spare)) == 4


async def test_a_bad_request_does_not_fall_back(tmp_path, fake_openai, spare):
    fake_openai.fail_next(400)
    config = fallback_config(tmp_path, fake_openai, spare)
    platform = RecordingPlatform()
    gw = await started(config, platform)
    try:
        await answer(platform, "hello")
    finally:
        await close(gw)
    assert platform.texts() == [BadRequestError.user_message]
    assert spare.calls == []


async def test_refused_credentials_fall_back_and_never_reach_the_log(tmp_path, fake_openai,
                                                                    spare, caplog):
    caplog.set_level(logging.DEBUG)
    fake_openai.fail_next(401, {"error": {  # like OpenAI's, quoting the key it refused
        "message": f"Incorrect API key provided: {PRIMARY_KEY}.",
        "type": "invalid_request_error", "code": "invalid_api_key"}})
    config = fallback_config(tmp_path, fake_openai, spare)
    platform = RecordingPlatform()
    gw = await started(config, platform)
    try:
        await answer(platform, "hello")
    finally:
        await close(gw)
    assert platform.texts() == ["echo: hello"]
    assert "fake-model refused our credentials or quota (HTTP 401)" in caplog.text
    assert PRIMARY_KEY not in caplog.text and SPARE_KEY not in caplog.text


@pytest.mark.parametrize("announce", [True, False])
async def test_usage_is_booked_under_the_model_that_answered(tmp_path, fake_openai, spare,
                                                             announce):
    fake_openai.outage = 503
    config = fallback_config(tmp_path, fake_openai, spare, announce_fallback=announce,
                             sections={"prices": {"fake-fallback": {"input": 1, "output": 2}}})
    platform = RecordingPlatform()
    gw = await started(config, platform)
    try:
        await answer(platform, "hello")
        session = await gw.store.live_session(CHAT)
        by_model = await gw.store.usage_by_model(session.id)
        await answer(platform, "/usage")
    finally:
        await close(gw)
    assert list(by_model) == ["fake-fallback"]
    assert by_model["fake-fallback"].output_tokens == spare.usages[0]["completion_tokens"]
    said = ["echo: hello", *([ANSWERED_ELSEWHERE] if announce else [])]
    assert platform.texts()[:-1] == said
    assert "(prices for fake-fallback)" in platform.texts()[-1]


async def test_a_smaller_fallback_gets_the_conversation_compacted_to_fit(tmp_path,
                                                                        fake_openai, spare):
    fake_openai.responder = summarizing_responder
    fake_openai.outage = 503
    spare.context_limit = 4000  # refuses a longer prompt, as a real server would
    config = fallback_config(tmp_path, fake_openai, spare, context_length=32_000,
                             fallback={"context_length": 4000},
                             breaker={"failures": 5, "cooldown_s": 60},
                             sections={"compression": {"protect_last_n": 4}})
    platform = RecordingPlatform()
    gw = await started(config, platform)
    try:
        await seed(gw, 30)  # ~6,500 tokens: at home in 32K, far too long for 4K
        await answer(platform, "still there?")
        fake_openai.outage = None
        await answer(platform, "/status")
    finally:
        await close(gw)
    assert platform.texts()[0] == "echo: still there?"
    # The summary fell back too, sized for the fallback's window: the model wrote it.
    summaries = summary_calls(spare)
    assert summaries and all(spare.prompt_tokens(c.json) <= 4000 for c in summaries)
    [answered] = chat_calls(spare)  # the only one: it fitted at once
    assert spare.prompt_tokens(answered.json) <= 4000
    assert "Exchanged numbered test messages" in str(answered.json["messages"])
    assert "/ 32,000 tokens" in platform.texts()[-1]  # the primary's window again


async def test_a_chats_own_model_falls_back_too(tmp_path, fake_openai, spare):
    fake_openai.outage = 503
    config = fallback_config(tmp_path, fake_openai, spare,
                             sections={"chats": {"console:1": {"model": "own-model"}}})
    platform = RecordingPlatform("console")
    gw = await started(config, platform)
    try:
        await answer(platform, "hello")
    finally:
        await close(gw)
    assert platform.texts() == ["echo: hello"]
    assert [c.json["model"] for c in chat_calls(fake_openai)] == ["own-model"]
    assert [c.json["model"] for c in chat_calls(spare)] == ["fake-fallback"]
