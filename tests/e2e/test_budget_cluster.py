"""A user's daily limit across three `threadline run` processes on one PostgreSQL: twenty
turns of theirs racing in twenty groups pass the limit by at most one turn's cost, since
spend and holds live in the store, not in any process (issue 38, acceptance 3)."""

from __future__ import annotations

import asyncio

import pytest

from tests.harness.cluster import post, rows, start_instance, stop_all

pytestmark = pytest.mark.timing  # `make test-loaded` runs it with the CPUs busy

USER = 4_200_042
GROUPS = 20
PRICE = 1000.0  # USD per million tokens: $0.001 a token, in and out
LIMIT = 0.06  # about three of these turns
MODEL_S = 0.6  # each answer takes this long: the twenty turns overlap


async def test_twenty_racing_turns_of_one_user_overshoot_by_at_most_one_turn(
        tmp_path, fake_telegram, fake_openai, postgres_url) -> None:
    fake_openai.answer_delay_s = MODEL_S
    sections = {"prices": {"fake-model": {"input": PRICE, "output": PRICE}},
                "budgets": {"user": {"day": {"usd": LIMIT}}}}
    instances = list(await asyncio.gather(*(
        start_instance(tmp_path / f"p{i}", fake_telegram, fake_openai.base_url, postgres_url,
                       model={"max_output_tokens": 32}, **sections) for i in range(3))))
    try:
        name = fake_telegram.updates.bot_username
        await asyncio.gather(*(
            post(fake_telegram, instances, n % 3, fake_telegram.updates.group_text(
                f"@{name} question {n}", chat_id=-1_000_000 - n, user_id=USER))
            for n in range(GROUPS)))
        deadline = asyncio.get_running_loop().time() + 60
        while len(fake_telegram.messages()) < GROUPS:
            assert asyncio.get_running_loop().time() < deadline, fake_telegram.messages()
            await asyncio.sleep(0.1)
    finally:
        await stop_all(instances)
    texts = [m.text for m in fake_telegram.messages()]
    answered = [t for t in texts if t.startswith("echo:")]
    refused = [t for t in texts if "spending limit" in t]
    assert len(answered) + len(refused) == GROUPS == len(texts), texts
    assert answered and refused
    # One counter a UTC day: a run that crosses midnight books into two of them.
    days = [usd for (usd,) in await rows(
        postgres_url, "SELECT usd FROM spend_counters WHERE key LIKE $1",
        f"user:telegram:{USER}:d____-__-__")]
    spent = sum(days)
    turns = [(u["prompt_tokens"] + u["completion_tokens"]) * PRICE / 1e6
             for u in fake_openai.usages]
    assert len(turns) == len(answered)
    assert spent == pytest.approx(sum(turns))
    assert max(days) <= LIMIT + max(turns), (days, len(answered), turns)
    for instance in instances:
        assert "Traceback" not in instance.log(), instance.log()
