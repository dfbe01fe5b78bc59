"""Budgets through the real gateway and the real OpenAI SDK: a sender past a limit hears
one sentence and costs no model call, others go on, the next day resets it; chat and bot
limits, admins, overrides; a limit that sends the turn to the fallback model; counters
that outlive a restart (issue 38, acceptance 1-3; docs/budgets.md)."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
from typing import Any

from gateway.turns.resets import utc_now
from gateway.wiring import create_gateway
from storage.sqlite import SqliteSessionStore
from tests.harness.gateway import close, config_for
from tests.harness.platform import RecordingPlatform

# $0.001 a token: one short turn ("hello" and its echo, the system prompt) costs ~1.5 cents.
PRICES = {"fake-model": {"input": 1000, "output": 1000},
          "cheap-model": {"input": 1, "output": 1}}
CHAT = "telegram:1"


class Clock:
    """Real time, shifted to today's noon UTC (so that a run near midnight sees the same
    "resets in N h" as one at any other hour) and moved on by a test."""

    def __init__(self) -> None:
        now = utc_now()
        self.ahead = now.replace(hour=12, minute=0, second=0, microsecond=0) - now

    def __call__(self) -> dt.datetime:
        return utc_now() + self.ahead

    def tomorrow(self) -> None:
        now = self()
        midnight = now.replace(hour=0, minute=0, second=0, microsecond=0) + dt.timedelta(days=1)
        self.ahead += midnight - now + dt.timedelta(minutes=1)


async def running(tmp_path, fake_openai, budgets: dict[str, Any], clock: Clock | None = None,
                  **sections: Any):
    config = config_for(tmp_path, fake_openai.base_url, prices=PRICES, budgets=budgets,
                        **sections)
    platform = RecordingPlatform("telegram")
    gateway = create_gateway(config, [platform], clock=clock or Clock())
    await gateway.initialize()
    await gateway.start()
    return config, gateway, platform


def model_calls(fake_openai) -> int:
    return len(fake_openai.calls_to("/chat/completions"))


async def exchange(platform: RecordingPlatform, text: str, **kw: Any) -> str:
    """Say something and wait for the answer to it; return that answer."""
    before = len(platform.delivered_ids)
    sent = len(platform.sent)
    await platform.say(text, **kw)
    await platform.wait_delivered(before + 1)
    return "\n".join(s.text for s in platform.sent[sent:])


DAILY_USER = re.compile(r"You have reached the daily spending limit \(\$0\.01\)\. It resets "
                        r"at 00:00 UTC \(in \d+ h \d+ min\); an admin can raise it\.")


async def test_a_user_past_the_daily_limit_is_told_with_no_call_others_go_on_and_tomorrow_again(
        tmp_path, fake_openai) -> None:
    clock = Clock()
    _, gateway, platform = await running(tmp_path, fake_openai,
                                         {"user": {"day": {"usd": 0.01}}}, clock)
    try:
        assert await exchange(platform, "hello", user_id="ada") == "echo: hello"
        calls = model_calls(fake_openai)
        refused = await exchange(platform, "and again", user_id="ada")
        assert DAILY_USER.fullmatch(refused), refused
        assert model_calls(fake_openai) == calls  # no model call for it
        assert await exchange(platform, "my turn", user_id="bob") == "echo: my turn"
        clock.tomorrow()
        assert await exchange(platform, "a new day", user_id="ada") == "echo: a new day"
    finally:
        await close(gateway)
    # The refused message never joined the conversation: the model was not shown it.
    seen = [m["content"] for call in fake_openai.calls_to("/chat/completions")
            for m in call.json["messages"] if m["role"] == "user"]
    assert "and again" not in seen


async def test_a_chat_limit_stops_everyone_there_and_a_bot_limit_every_chat(
        tmp_path, fake_openai) -> None:
    _, gateway, platform = await running(
        tmp_path, fake_openai, {"chat": {"day": {"usd": 0.01}}, "bot": {"month": {"tokens": 60}}})
    try:
        assert await exchange(platform, "hello", user_id="ada") == "echo: hello"
        said = await exchange(platform, "hi", user_id="bob")
        assert said.startswith("This chat has reached the daily spending limit ($0.01).")
        # Other chats go on until the bot's month is spent (tokens this time).
        for n in range(10):
            said = await exchange(platform, f"question {n}", chat_id=f"{n + 2}", user_id="bob")
            if not said.startswith("echo:"):
                break
        assert said.startswith("This bot has reached the monthly spending limit "
                               "(60 tokens). It resets on "), said
        assert n >= 1
    finally:
        await close(gateway)


async def test_admins_are_exempt_and_overrides_raise_or_exempt_one_user_or_chat(
        tmp_path, fake_openai) -> None:
    budgets = {"user": {"day": {"usd": 0.01}},
               "overrides": {"telegram:rich": {"day": {"usd": 5}},
                             "telegram:7": {"exempt": True}}}
    _, gateway, platform = await running(tmp_path, fake_openai, budgets,
                                         gateway={"admins": {"telegram": ["boss"]}})
    try:
        for who in ("boss", "rich"):
            for n in range(3):
                assert await exchange(platform, f"{who} {n}", user_id=who) == f"echo: {who} {n}"
        for n in range(3):  # any user in the exempt chat
            assert await exchange(platform, f"free {n}", chat_id="7", user_id="ada") \
                == f"echo: free {n}"
        await exchange(platform, "first", user_id="ada")
        assert DAILY_USER.fullmatch(await exchange(platform, "second", user_id="ada"))
    finally:
        await close(gateway)


async def test_past_the_limit_the_fallback_model_answers_and_is_booked_once_told(
        tmp_path, fake_openai) -> None:
    budgets = {"user": {"day": {"usd": 0.01}}, "on_limit": "fallback",
               "fallback_model": {"provider": "openai", "name": "cheap-model",
                                  "base_url": fake_openai.base_url, "api_key": "test-key",
                                  "max_retries": 0}}
    _, gateway, platform = await running(tmp_path, fake_openai, budgets)
    try:
        assert await exchange(platform, "hello", user_id="ada") == "echo: hello"
        told = await exchange(platform, "more", user_id="ada")
        assert told.startswith("You have reached the daily spending limit ($0.01).")
        assert told.endswith("until then cheap-model answers here.\necho: more")
        assert await exchange(platform, "and more", user_id="ada") == "echo: and more"
        models = [c.json["model"] for c in fake_openai.calls_to("/chat/completions")]
        assert models == ["fake-model", "cheap-model", "cheap-model"]
        session = await gateway.store.live_session(CHAT)
        by_model = await gateway.store.usage_by_model(session.id)
    finally:
        await close(gateway)
    assert by_model["cheap-model"].calls == 2 and by_model["fake-model"].calls == 1


async def test_spend_outlives_a_restart(tmp_path, fake_openai) -> None:
    budgets = {"user": {"day": {"usd": 0.01}}}
    config, gateway, platform = await running(tmp_path, fake_openai, budgets)
    try:
        assert await exchange(platform, "hello", user_id="ada") == "echo: hello"
    finally:
        await close(gateway)
    _, gateway, platform = await running(tmp_path, fake_openai, budgets)
    try:
        # (new message ids: the ledger would take the first run's again as redeliveries)
        assert DAILY_USER.fullmatch(await exchange(platform, "still me", user_id="ada",
                                                   message_id="after-1"))
        usage = await exchange(platform, "/usage", user_id="ada", message_id="after-2")
    finally:
        await close(gateway)
    async with SqliteSessionStore(config.db_path) as store:
        session = await store.live_session(CHAT)
        assert session is not None
        assert (await store.usage_totals(session.id)).calls == 1
    assert re.search(r"^You today: \$0\.0\d{3} of \$0\.01$", usage, re.M), usage
    assert "This chat today: $0.0" in usage and "(no limit)" in usage


async def test_a_limit_only_held_by_a_running_turn_says_to_send_again_later(
        tmp_path, fake_openai) -> None:
    # A turn holds its estimate (its prompt and the longest reply, 32 tokens: ~$0.035)
    # while it runs; that alone takes the $0.03 limit, though nothing is spent yet.
    release = asyncio.Event()

    async def slow(body: dict[str, Any]) -> str:
        await release.wait()
        return "echo: " + body["messages"][-1]["content"]

    fake_openai.responder = slow
    _, gateway, platform = await running(tmp_path, fake_openai, {"user": {"day": {"usd": 0.03}}},
                                         model={"max_output_tokens": 32})
    try:
        await platform.say("first", chat_id="1", user_id="ada")
        await fake_openai.wait_for_call("/chat/completions")
        said = await exchange(platform, "second", chat_id="2", user_id="ada")
        assert said == ("Your other answers may use up the daily spending limit; send this "
                        "again once they are done."), said
        release.set()
        await platform.wait_delivered(2)
        assert platform.texts(CHAT)[-1:] == ["echo: first"], platform.sent
    finally:
        release.set()
        await close(gateway)
