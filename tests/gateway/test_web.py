"""The web view over real HTTP, on both stores: access, escaping, chains, search, paging."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from aiohttp.test_utils import TestClient, TestServer

from gateway.turns.pricing import Price
from gateway.web.app import build_app
from storage.base import SessionStore
from storage.models import TurnRecord, UsageRecord
from tests.harness.store import Backend, grow_chain, msg, root

TOKEN = "w3b-t0ken-for-tests"


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionStore]:
    server = request.getfixturevalue("postgres_server") if request.param == "postgres" else None
    backend = Backend(request.param, tmp_path, server)
    await backend.prepare()
    async with backend.store() as opened:
        yield opened


@pytest.fixture
async def client(store: SessionStore) -> AsyncIterator[TestClient]:
    app = build_app(store, token=TOKEN, prices={"m": Price.per_million(1.0, 2.0)})
    async with TestClient(TestServer(app)) as opened:
        yield opened


async def signed_in(client: TestClient) -> TestClient:
    response = await client.post("/login", data={"token": TOKEN, "next": "/chats"},
                                 allow_redirects=False)
    assert response.status == 302 and response.headers["Location"] == "/chats"
    return client


async def test_without_the_token_pages_go_to_login_and_the_api_answers_401(
        client: TestClient) -> None:
    for path in ("/chats", "/chats/telegram:42", "/sessions/x", "/search?q=a"):
        response = await client.get(path, allow_redirects=False)
        assert response.status == 302, path
        location = urlsplit(response.headers["Location"])
        assert (location.path, parse_qs(location.query)["next"]) == ("/login", [path]), path
    assert (await client.get("/api/chats")).status == 401
    wrong = {"Authorization": "Bearer not-the-token"}
    assert (await client.get("/api/chats", headers=wrong)).status == 401
    refused = await client.post("/login", data={"token": "guess", "next": "/chats"})
    assert refused.status == 401 and "not the one configured" in await refused.text()
    assert "threadline_web" not in refused.cookies
    right = {"Authorization": f"Bearer {TOKEN}"}
    assert (await client.get("/api/chats", headers=right)).status == 200
    await signed_in(client)
    assert (await client.get("/chats")).status == 200


async def test_sign_in_never_sends_you_to_another_site(client: TestClient) -> None:
    response = await client.post("/login", data={"token": TOKEN, "next": "//evil.example/x"},
                                 allow_redirects=False)
    assert response.headers["Location"] == "/chats"


async def test_message_text_is_shown_as_text_never_as_html(store: SessionStore,
                                                           client: TestClient) -> None:
    session = await root(store)
    await store.append_messages(session.id, [msg("user", "<script>alert('x')</script><b>hi")])
    page = await (await (await signed_in(client)).get(f"/sessions/{session.id}")).text()
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&lt;b&gt;hi" in page
    assert "<script>" not in page and "<b>hi" not in page


async def test_a_chain_shows_every_session_its_compactions_and_their_summaries(
        store: SessionStore, client: TestClient) -> None:
    ids = await grow_chain(store, 3)  # summaries "0", "1", "2" in each child's state
    await store.record_turn(ids[-1], TurnRecord(
        before=(msg("user", "what now?"),),
        usage=(UsageRecord("m", "chat", input_tokens=1000, output_tokens=10,
                           cache_read_tokens=3000),)))
    await signed_in(client)
    page = await (await client.get("/chats/telegram:42")).text()
    assert len(re.findall(r'<section class="step ', page)) == 4
    assert page.count('class="compaction"') == 3
    summaries = re.findall(r'<details class="summary">.*?<pre class="text">(.*?)</pre>', page,
                           re.S)
    assert summaries == ["0", "1", "2"]
    chats = await (await client.get("/chats")).text()
    row = chats[chats.index("telegram:42"):]
    # Cache reads: 3000 of the 4030 tokens read (the three summaries read 10 each).
    assert "74.4%" in row[:row.index("</tr>")], row


async def test_search_lands_on_the_message_in_its_session(store: SessionStore,
                                                         client: TestClient) -> None:
    ids = await grow_chain(store, 2)
    await signed_in(client)
    page = await (await client.get("/search?q=question")).text()
    links = re.findall(r'<a href="(/sessions/[^"]+)">', page)
    assert links, page
    target = await client.get(links[0].replace("&amp;", "&"))
    seq = links[0].rsplit("#m", 1)[1]
    assert f'id="m{seq}"' in await target.text() and ids[0] in links[0]


async def test_chats_sort_and_page(store: SessionStore, client: TestClient) -> None:
    for n in range(60):
        session = await root(store, f"telegram:{n}")
        await store.append_messages(session.id, [msg("user", "x")] * n)
    await signed_in(client)
    first = await (await client.get("/chats?sort=messages&order=asc")).text()
    second = await (await client.get("/chats?sort=messages&order=asc&page=2")).text()
    keys = [re.findall(r'<a href="/chats/([^"]+)">', page) for page in (first, second)]
    assert [len(k) for k in keys] == [50, 10]
    assert keys[0][:3] == ["telegram%3A0", "telegram%3A1", "telegram%3A2"]
    assert keys[1][-1] == "telegram%3A59"


async def test_a_chat_of_10000_messages_pages_its_history(store: SessionStore,
                                                         client: TestClient) -> None:
    session = await root(store)
    text = "a line of conversation, about as long as people write them. " * 3
    for start in range(0, 10_000, 2_000):
        await store.append_messages(session.id, [msg("user", f"{n}: {text}")
                                                 for n in range(start, start + 2_000)])
    await signed_in(client)
    chat = await client.get("/chats/telegram:42")
    assert len(await chat.read()) < 500_000
    page = await client.get(f"/sessions/{session.id}?start=5010")  # the page of seqs 5000+
    body = await page.text()
    assert len(body.encode()) < 500_000
    assert "4999: a line" in body and "5198: a line" in body  # seq 0 is the system message
    assert "4998: a line" not in body and "5199: a line" not in body


async def test_usage_charts_are_plain_svg_drawn_on_the_server(store: SessionStore,
                                                              client: TestClient) -> None:
    session = await root(store)
    for model, tokens in (("m", 1000), ("other", 300)):
        await store.record_usage(session.id, UsageRecord(model, "chat", input_tokens=tokens,
                                                         cache_read_tokens=tokens // 2))
    await signed_in(client)
    page = await (await client.get("/usage")).text()
    charts = re.findall(r'<figure class="chart" id="chart-(\w+)"><svg', page)
    assert charts == ["kinds", "models", "cache", "cost"]
    assert "<script" not in page and ".js" not in page  # nothing to load from anywhere
    assert page.count(">other<") >= 1  # a model is a series of the by-model chart


async def test_a_long_chain_pages_its_timeline(store: SessionStore, client: TestClient) -> None:
    ids = await grow_chain(store, 60)
    await signed_in(client)
    pages = [await (await client.get(f"/chats/telegram:42?page={n}")).text() for n in (1, 2)]
    steps = [re.findall(r'<section class="step [a-z]+" id="s-([^"]+)"', p) for p in pages]
    assert [len(s) for s in steps] == [50, 11]
    assert steps[0] + steps[1] == ids  # oldest first, every session once
    assert "61 session(s), 60 compaction(s)" in pages[0]
