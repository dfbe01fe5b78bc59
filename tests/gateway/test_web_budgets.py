"""The web view's usage page lists spent of each limit: the bot's, each override's and the
active chats' (issue 38: "the web view's usage page shows them too")."""

from __future__ import annotations

import datetime as dt
import re

from aiohttp.test_utils import TestClient, TestServer

from gateway.config.budgets import BudgetsConfig
from gateway.turns.pricing import Price
from gateway.turns.spending import Budgets
from gateway.web.app import build_app
from storage.models import TurnRecord, UsageRecord
from storage.sqlite import SqliteSessionStore
from tests.harness.store import root

TOKEN = "w3b-t0ken-for-budgets"
PRICES = {"m": Price.per_million(1000.0, 1000.0)}  # $0.001 a token


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def cells(html: str, who: str) -> list[str]:
    row = re.search(rf"<tr><td>\w+</td><td>{re.escape(who)}</td>(.*?)</tr>", html, re.S)
    assert row, f"no row for {who}"
    return [re.sub(r"<[^>]+>", " ", c).split() for c in re.findall(r"<td[^>]*>(.*?)</td>",
                                                                     row.group(1), re.S)]


async def test_the_usage_page_shows_spent_of_each_limit(tmp_path) -> None:
    config = BudgetsConfig.model_validate({
        "bot": {"day": {"usd": 2}}, "chat": {"month": {"tokens": 5000}},
        "overrides": {"telegram:42": {"day": {"usd": 0.5}}}})
    async with SqliteSessionStore(tmp_path / "threadline.db") as store:
        budgets = Budgets(config, store, PRICES, now)
        session = await root(store, "telegram:-100")
        payer = budgets.payer("telegram:-100", "telegram:42")
        await store.record_turn(session.id, TurnRecord(usage=payer.book([])))
        await store.record_turn(session.id, TurnRecord(usage=(UsageRecord(
            "m", "chat", input_tokens=900, output_tokens=100, usd=1.0,
            spend_keys=payer.keys),)))
        app = build_app(store, token=TOKEN, prices=PRICES, budgets=budgets)
        async with TestClient(TestServer(app)) as client:
            await client.post("/login", data={"token": TOKEN, "next": "/usage"})
            html = await (await client.get("/usage")).text()
    assert 'id="budgets"' in html
    assert cells(html, "the bot") == [["$1.0000", "of", "$2.0000"],
                                      ["$1.0000", "(no", "limit)"]]
    assert cells(html, "telegram:42")[0] == ["$1.0000", "of", "$0.5000"]  # the user
    assert ["$1.0000", "1,000", "of", "5,000", "tokens"] in cells(html, "telegram:-100")


async def test_without_limits_the_page_has_no_budget_table(tmp_path) -> None:
    async with SqliteSessionStore(tmp_path / "threadline.db") as store:
        app = build_app(store, token=TOKEN, prices=PRICES,
                        budgets=Budgets(BudgetsConfig(), store, PRICES, now))
        async with TestClient(TestServer(app)) as client:
            await client.post("/login", data={"token": TOKEN, "next": "/usage"})
            html = await (await client.get("/usage")).text()
    assert 'id="budgets"' not in html and "Usage over time" in html
