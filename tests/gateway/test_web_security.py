"""The web view against a hostile client, over real HTTP on a real SQLite store (issue 35):
redirects that stay on the site, sessions that end, throttled guessing, headers, 400s."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
from aiohttp.test_utils import TestClient, TestServer

from gateway.web.app import build_app
from gateway.web.auth import Access, token_problem
from gateway.web.requests import HEADERS
from storage.sqlite import SqliteSessionStore
from tests.harness.store import CHAT, grow_chain

TOKEN = "w3b-t0ken-for-security-tests"
# After sign-in a browser must stay on this site whatever `next` says: each of these once
# reached another host (a browser drops tabs and line breaks, and reads `\` as `/`).
REDIRECTS = ["/\t/evil.example", "/\n/evil.example", "/\r\n/evil.example", "/ /evil.example",
             "/%09/evil.example", "/%0a/evil.example", "/\\evil.example", "\\\\evil.example",
             "//evil.example", "/\\/evil.example", "//evil.example/%2f..", "///evil.example",
             "https://evil.example/", "http:evil.example", "javascript:alert(1)",
             " /\t/evil.example", "/\x0b/evil.example", "/\u3000/evil.example",
             "/\x00/evil.example", "evil.example", "/%5cevil.example"]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteSessionStore]:
    async with SqliteSessionStore(tmp_path / "t.db") as opened:
        yield opened


async def _client(store: SqliteSessionStore, token: str = TOKEN,
                  **options: object) -> TestClient:
    client = TestClient(TestServer(build_app(store, token=token, **options)))  # type: ignore[arg-type]
    await client.start_server()
    return client


@pytest.fixture
async def client(store: SqliteSessionStore) -> AsyncIterator[TestClient]:
    opened = await _client(store)
    yield opened
    await opened.close()


async def _sign_in(client: TestClient, token: str = TOKEN, next_: str = "/chats",
                   headers: dict[str, str] | None = None) -> str:
    """The session cookie a right sign-in sets (the client also keeps it)."""
    response = await client.post("/login", data={"token": token, "next": next_},
                                 allow_redirects=False, headers=headers)
    assert response.status == 302, await response.text()
    return response.cookies["threadline_web"].value


def _on_site(client: TestClient, location: str) -> bool:
    base = str(client.make_url("/"))
    return urlsplit(urljoin(base, location)).netloc == urlsplit(base).netloc


async def test_sign_in_sends_you_only_to_a_path_on_this_site(client: TestClient) -> None:
    for target in REDIRECTS:
        response = await client.post("/login", data={"token": TOKEN, "next": target},
                                     allow_redirects=False)
        location = response.headers["Location"]
        assert response.status == 302 and _on_site(client, location), (target, location)
        assert location.startswith("/") and not location.startswith(("//", "/\\")), target
        form = await client.get("/login", params={"next": target})
        assert 'value="/chats"' in await form.text(), target  # the form carries it too
    kept = await client.post("/login", data={"token": TOKEN, "next": "/search?q=a%20b"},
                             allow_redirects=False)
    assert kept.headers["Location"] == "/search?q=a%20b"  # a real path survives


async def test_a_session_ends_at_logout_at_a_token_change_and_at_its_expiry(
        store: SqliteSessionStore, client: TestClient) -> None:
    first, second = await _sign_in(client), await _sign_in(client)
    assert first != second and len(first) >= 40  # random per sign-in, never derived
    assert (await client.get("/chats", allow_redirects=False)).status == 200
    await client.post("/logout", allow_redirects=False)
    client.session.cookie_jar.update_cookies({"threadline_web": second})
    assert (await client.get("/chats", allow_redirects=False)).status == 302  # logged out
    client.session.cookie_jar.update_cookies({"threadline_web": first})
    assert (await client.get("/chats", allow_redirects=False)).status == 200  # another one

    renewed = await _client(store, token=TOKEN + "-new")  # the same store, a new token
    try:
        renewed.session.cookie_jar.update_cookies({"threadline_web": first})
        moved = await renewed.get("/chats", allow_redirects=False)
        assert moved.status == 302 and moved.headers["Location"].startswith("/login")
    finally:
        await renewed.close()

    brief = await _client(store, session_hours=1 / 3600)  # one second
    try:
        cookie = await _sign_in(brief)
        await asyncio.sleep(1.1)  # past the expiry; a busy machine only adds to it
        brief.session.cookie_jar.update_cookies({"threadline_web": cookie})  # kept anyway
        gone = await brief.get("/chats", allow_redirects=False)
        assert gone.status == 302 and gone.headers["Location"].startswith("/login")
    finally:
        await brief.close()
    stored = await store.get_setting("web:session:" + first)
    assert stored is None  # only the id's hash is kept


async def test_fifty_wrong_sign_ins_take_at_least_ten_seconds(client: TestClient) -> None:
    async def guess(n: int) -> int:
        response = await client.post("/login", data={"token": f"guess-{n}", "next": "/"})
        return response.status

    started = time.monotonic()
    statuses = await asyncio.gather(*(guess(n) for n in range(50)))  # all at once
    took = time.monotonic() - started
    assert statuses == [401] * 50
    assert took >= 10, f"50 wrong sign-ins took only {took:.1f} s"
    metrics = await client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert "threadline_web_wrong_sign_ins_total 50.0" in await metrics.text()


async def test_one_address_guessing_does_not_hold_up_another(store: SqliteSessionStore) -> None:
    client = await _client(store, trusted_proxies=("127.0.0.1/32", "::1"))
    try:
        def from_(address: str) -> dict[str, str]:
            return {"X-Forwarded-For": f"203.0.113.9, {address}"}

        guesses = [asyncio.create_task(client.post(
            "/login", data={"token": f"guess-{n}"}, headers=from_("198.51.100.7")))
            for n in range(30)]
        await asyncio.wait(guesses, return_when=asyncio.FIRST_COMPLETED)  # A is queued
        await _sign_in(client, headers=from_("198.51.100.8"))
        answered = sum(task.done() for task in guesses)
        assert answered < 15, f"B waited for {answered} of A's guesses"
        for task in guesses:
            assert (await task).status == 401
    finally:
        await client.close()


async def test_the_cookie_is_secure_when_the_request_came_over_https(
        store: SqliteSessionStore) -> None:
    https = {"X-Forwarded-Proto": "https"}
    plain = await _client(store)
    behind = await _client(store, trusted_proxies=("127.0.0.1", "::1"))
    try:
        for client, headers, secure in ((plain, None, False), (plain, https, False),
                                        (behind, https, True), (behind, None, False)):
            response = await client.post("/login", data={"token": TOKEN, "next": "/"},
                                         allow_redirects=False, headers=headers)
            morsel = response.cookies["threadline_web"]
            assert bool(morsel["secure"]) is secure, (headers, secure)
            assert morsel["httponly"] and morsel["samesite"] == "Strict"
            assert int(morsel["max-age"]) == 24 * 3600
    finally:
        await plain.close()
        await behind.close()


def test_a_short_token_is_refused_with_how_to_make_one(store: SqliteSessionStore) -> None:
    for token in ("", "a", "x" * 15):
        problem = token_problem(token)
        assert problem is not None and "threadline web --new-token" in problem
        with pytest.raises(ValueError):
            Access(token, store)
    assert token_problem("x" * 16) is None


async def test_every_answer_carries_the_security_headers(store: SqliteSessionStore,
                                                         client: TestClient) -> None:
    ids = await grow_chain(store, 1)
    before = [("GET", "/chats"), ("GET", "/api/chats"), ("GET", "/login"), ("GET", "/"),
              ("POST", "/login"), ("GET", "/nowhere")]
    for method, path in before:
        await _check_headers(client, method, path)
    await _sign_in(client)
    after = ["/", "/chats", f"/chats/{CHAT}", "/chats/nobody", f"/sessions/{ids[0]}",
             "/sessions/none", "/search?q=question", "/usage", "/api/chats", "/nowhere",
             "/sessions/x?start=100000000000000000000"]
    for path in after:
        await _check_headers(client, "GET", path)


async def _check_headers(client: TestClient, method: str, path: str) -> None:
    response = await client.request(method, path, allow_redirects=False)
    for name, value in HEADERS.items():
        assert response.headers.get(name) == value, (method, path, response.status, name)


async def _raw(client: TestClient, head: bytes) -> tuple[int, bytes]:
    """Send a request as raw bytes (no client library cleans them up): status and body."""
    server = client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    try:
        writer.write(head + b"Connection: close\r\n\r\n")
        await writer.drain()
        answer = await reader.read()
    finally:
        writer.close()
    status = int(answer.split(b" ", 2)[1])
    return status, answer


async def test_malformed_headers_cookies_and_query_values_answer_400(
        store: SqliteSessionStore, client: TestClient) -> None:
    ids = await grow_chain(store, 1)
    host = f"Host: {client.server.host}\r\n".encode()
    for head in (b"GET /api/chats HTTP/1.1\r\n" + host + b"Authorization: Bearer \xff\xfe\r\n",
                 b"GET /chats HTTP/1.1\r\n" + host +
                 "Cookie: threadline_web=caf\u00e9\r\n".encode()):
        status, answer = await _raw(client, head)
        assert status == 400 and b"Traceback" not in answer, answer
    await _sign_in(client)
    for path in (f"/sessions/{ids[0]}?start=100000000000000000000", "/chats?page=10**20",
                 f"/sessions/{ids[0]}?start=-1", "/chats?page=%F0%9F%98%80"):
        response = await client.get(path)
        assert response.status == 400, path
        assert "Traceback" not in await response.text()
    assert (await client.get(f"/sessions/{ids[0]}?start=200")).status == 200
