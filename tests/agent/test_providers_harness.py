"""The fake-server harness itself: the call log, waiting, injection order, fast shutdown."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from tests.harness import FakeOpenAI

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}


async def post(session: aiohttp.ClientSession, fake: FakeOpenAI) -> tuple[int, dict]:
    async with session.post(f"{fake.base_url}/chat/completions", json=CHAT) as response:
        return response.status, await response.json()


async def test_wait_for_call_sees_a_request_made_later(fake_openai: FakeOpenAI) -> None:
    async def post_later(session: aiohttp.ClientSession) -> None:
        await asyncio.sleep(0.05)
        await post(session, fake_openai)

    async with aiohttp.ClientSession() as session:
        later = asyncio.create_task(post_later(session))
        call = await fake_openai.wait_for_call("/chat/completions", timeout=2)
        await later
    assert call.method == "POST" and call.json == CHAT
    assert call.headers["content-type"] == "application/json"


async def test_wait_for_call_times_out_with_what_it_saw(fake_openai: FakeOpenAI) -> None:
    async with aiohttp.ClientSession() as session:
        await session.get(f"{fake_openai.base_url}/models")
    with pytest.raises(AssertionError, match="GET /v1/models"):
        await fake_openai.wait_for_call("/chat/completions", timeout=0.05)


async def test_injections_apply_in_order_then_stop(fake_openai: FakeOpenAI) -> None:
    fake_openai.fail_next(503, times=2)
    fake_openai.fail_next(418, "teapot")
    async with aiohttp.ClientSession() as session:
        statuses = [(await post(session, fake_openai))[0] for _ in range(2)]
        async with session.post(f"{fake_openai.base_url}/chat/completions", json=CHAT) as resp:
            assert (resp.status, await resp.text()) == (418, "teapot")
        status, body = await post(session, fake_openai)
    assert statuses == [503, 503]
    assert status == 200 and body["choices"][0]["message"]["content"] == "echo: hi"
    assert len(fake_openai.calls) == 4 and fake_openai.pending_injections == 0


async def test_stop_cuts_a_delay_short_and_refuses_new_connections() -> None:
    fake = await FakeOpenAI().start()
    fake.delay_next(30)
    async with aiohttp.ClientSession() as session:
        stalled = asyncio.create_task(post(session, fake))
        await fake.wait_for_call("/chat/completions")
        started = time.monotonic()
        await fake.stop()
        assert time.monotonic() - started < 2
        stalled.cancel()
        with pytest.raises(aiohttp.ClientConnectionError):
            await post(session, fake)


async def test_responder_and_queue(fake_openai: FakeOpenAI) -> None:
    fake_openai.responder = lambda request: f"{len(request['messages'])} messages"
    fake_openai.queue_reply("first")
    async with aiohttp.ClientSession() as session:
        replies = [(await post(session, fake_openai))[1] for _ in range(2)]
    texts = [r["choices"][0]["message"]["content"] for r in replies]
    assert texts == ["first", "1 messages"]
