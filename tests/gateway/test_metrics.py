"""The Prometheus endpoint: after a scripted conversation a scrape shows what the fakes
saw (calls, tokens, errors, compactions, 429s); without a port nothing listens."""

from __future__ import annotations

import socket

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tests.harness.fixtures import free_port
from tests.harness.gateway import summarizing_responder
from tests.harness.telegram_gateway import telegram_config, telegram_gateway
from tests.harness.witness import WitnessOpenAI

USER = 5550001


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def value(found, name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_a_scrape_after_a_conversation_shows_what_the_fakes_saw(tmp_path,
                                                                       fake_telegram):
    model = WitnessOpenAI(responder=summarizing_responder)
    await model.start()
    port = free_port()
    config = telegram_config(tmp_path, fake_telegram, model.base_url,
                             model={"context_length": 8192},
                             compression={"protect_last_n": 4}, metrics={"port": port})
    sent = 0

    async def say(text: str) -> None:
        nonlocal sent
        fake_telegram.push(fake_telegram.updates.private_text(text, USER))
        sent += 1
        await fake_telegram.wait_for_messages(USER, sent, timeout=15)

    try:
        async with telegram_gateway(config):
            for i in range(8):
                await say(f"fact {i}: " + "the garden needs water and light " * 20)
            model.fail_next(500)
            await say("this one meets a provider outage")
            fake_telegram.rate_limit_next(0.3)
            await say("and this answer meets a rate limit")
            await say("/compress")
            async with aiohttp.ClientSession() as http, \
                    http.get(f"http://127.0.0.1:{port}/metrics") as response:
                scraped = samples(await response.text())
    finally:
        await model.stop()
    chat = [r.usage for r in model.reported if not r.summary]
    summary = [r.usage for r in model.reported if r.summary]
    assert summary, "the /compress asked the summarizer"
    assert value(scraped, "threadline_provider_calls_total", model="fake-model",
                 purpose="chat") == len(chat)
    assert value(scraped, "threadline_provider_calls_total", model="fake-model",
                 purpose="summary") == len(summary)
    every = chat + summary
    assert value(scraped, "threadline_tokens_total", model="fake-model", kind="input") == sum(
        u["prompt_tokens"] - (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        for u in every)
    assert value(scraped, "threadline_tokens_total", model="fake-model", kind="output") == sum(
        u["completion_tokens"] for u in every)
    assert value(scraped, "threadline_provider_errors_total", model="fake-model",
                 kind="ProviderUnavailableError") == 1
    assert value(scraped, "threadline_turns_total", outcome="answered") == 9
    assert value(scraped, "threadline_turns_total", outcome="failed") == 1
    assert value(scraped, "threadline_turn_seconds_count") == 10
    assert value(scraped, "threadline_compactions_total", trigger="manual") == 1
    assert value(scraped, "threadline_outbound_rate_limited_total", platform="telegram") == 1
    assert value(scraped, "threadline_outbound_paused_seconds_total",
                 platform="telegram") >= 0.3
    assert value(scraped, "threadline_chats_busy") == 0
    assert value(scraped, "threadline_undelivered_replies_total", platform="telegram") == 0


async def test_without_a_port_no_metrics_endpoint_listens(tmp_path, fake_openai,
                                                          fake_telegram):
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url)
    async with telegram_gateway(config) as gateway:
        fake_telegram.push(fake_telegram.updates.private_text("hello", USER))
        await fake_telegram.wait_for_messages(USER, 1)
        assert gateway.metrics.port is None
        with socket.socket() as probe:  # nor on the documented default port
            assert probe.connect_ex(("127.0.0.1", 9464)) != 0


async def test_a_metrics_port_already_taken_is_logged_and_the_bot_still_answers(
        tmp_path, fake_openai, fake_telegram, caplog):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url,
                                 metrics={"port": port})
        async with telegram_gateway(config) as gateway:
            fake_telegram.push(fake_telegram.updates.private_text("hello", USER))
            [reply] = await fake_telegram.wait_for_messages(USER, 1)
            assert gateway.metrics.port is None
    assert reply.text == "echo: hello"
    assert f"metrics: cannot listen on 127.0.0.1:{port}" in caplog.text
