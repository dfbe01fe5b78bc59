"""The cluster's notice connection outlives a server that answers out of turn: cut, then
met by a reply no PostgreSQL gives, it keeps trying and listens again, and closing the
store stays quiet (docs/scale-out.md). Seen under load: the listener task ended on
asyncpg's own error while reconnecting, the process went deaf to notices, and the error
came out of shutdown as a traceback and exit code 1."""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from storage.postgres import PostgresSessionStore
from storage.postgres.coordination import CHANNEL
from tests.harness.pg_proxy import PgRelay


def through(url: str, port: int) -> str:
    parts = urlsplit(url)
    user = parts.netloc.rsplit("@", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}@127.0.0.1:{port}"))


async def heard_again(url: str, heard: asyncio.Queue[str], payload: str,
                      within: float) -> bool:
    """Notify until the listener hears `payload` (it reconnects on its own schedule)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    con = await asyncpg.connect(url)
    try:
        while loop.time() < deadline:
            await con.execute("SELECT pg_notify($1, $2)", CHANNEL, payload)
            try:
                while (await asyncio.wait_for(heard.get(), 0.5)) != payload:
                    pass
                return True
            except TimeoutError:
                continue
        return False
    finally:
        await con.close()


async def test_a_listener_met_by_a_garbled_server_keeps_trying_and_hears_again(
        postgres_url: str, caplog) -> None:
    caplog.set_level(logging.INFO, logger="storage.postgres.coordination")
    target = urlsplit(postgres_url)
    relay = PgRelay(target.hostname or "127.0.0.1", target.port or 5432)
    port = await relay.start()
    heard: asyncio.Queue[str] = asyncio.Queue()
    try:
        store = PostgresSessionStore(through(postgres_url, port))
        await store.initialize()
        try:
            await store.coordination.listen(lambda notice: heard.put_nowait(notice.chat_key))
            assert await heard_again(postgres_url, heard, "first", within=10)
            relay.garbled = True
            relay.cut()  # the notice connection is lost; its next tries meet the garble
            await asyncio.wait_for(relay.answered.wait(), 30)
            relay.answered.clear()
            await asyncio.wait_for(relay.answered.wait(), 30)  # and it tried once more
            relay.garbled = False
            assert await heard_again(postgres_url, heard, "second", within=30), \
                "the listener gave up"
        finally:
            await store.shutdown()  # raises nothing, whatever the listener met
    finally:
        await relay.stop()
    assert relay.garbled_answers >= 2
    assert "listening for notices again" in caplog.text


async def test_a_healthy_listener_shows_its_last_proof_of_life(postgres_url: str) -> None:
    """Issue 47, point 9: the listen loop's health time moves while LISTEN works (each
    ping answered), so the alert on a time that stops moving fires only when it stops."""
    store = PostgresSessionStore(postgres_url)
    await store.initialize()
    try:
        store.coordination.ping_every_s = 0.1
        await store.coordination.listen(lambda notice: None)
        connected = store.coordination.listening_ok_at
        assert connected > 0
        for _ in range(100):
            if store.coordination.listening_ok_at > connected:
                break
            await asyncio.sleep(0.05)
        assert store.coordination.listening_ok_at > connected, "no ping counted"
    finally:
        await store.shutdown()
