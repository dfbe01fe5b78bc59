"""`threadline web` as a real process: it serves the view beside the store, and stops cleanly."""

from __future__ import annotations

import asyncio
import signal

import aiohttp

from storage.sqlite import SqliteSessionStore
from tests.harness.cli import THREADLINE, cli_env, threadline
from tests.harness.fixtures import free_port
from tests.harness.gateway import write_config


async def test_web_serves_the_view_with_its_token_and_stops_on_sigterm(tmp_path) -> None:
    port = free_port()
    config = str(write_config(tmp_path, web={"port": port, "token": "${WEB_TOKEN}"}))
    async with SqliteSessionStore(tmp_path / "threadline.db"):
        pass  # the web view reads what the service made; it makes no database itself
    proc = await asyncio.create_subprocess_exec(
        THREADLINE, "web", "--config", config, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=cli_env(tmp_path, WEB_TOKEN="s3cret-web-token-of-some-length"))
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        assert f"http://127.0.0.1:{port}/" in line
        async with aiohttp.ClientSession() as http:
            url = f"http://127.0.0.1:{port}"
            async with http.get(f"{url}/api/chats") as refused:
                assert refused.status == 401
            headers = {"Authorization": "Bearer s3cret-web-token-of-some-length"}
            async with http.get(f"{url}/api/chats", headers=headers) as listed:
                assert listed.status == 200 and await listed.json() == []
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)
    assert proc.returncode == 0
    assert proc.stderr is not None
    err = (await proc.stderr.read()).decode()
    assert "Traceback" not in err and "s3cret-web-token-of-some-length" not in err


async def test_web_without_a_token_says_what_to_set(tmp_path) -> None:
    ran = await threadline("web", "--config", str(write_config(tmp_path)), home=tmp_path)
    assert ran.code == 1 and "web.token" in ran.err


async def test_web_refuses_a_short_token_and_makes_a_good_one(tmp_path) -> None:
    config = str(write_config(tmp_path, web={"token": "${WEB_TOKEN}"}))
    short = await threadline("web", "--config", config, home=tmp_path,
                             env=cli_env(tmp_path, WEB_TOKEN="a"))
    assert short.code == 1 and "--new-token" in short.err
    assert len(short.err.strip().splitlines()) == 1, short.err
    made = await threadline("web", "--new-token", home=tmp_path)
    tokens = {made.out.strip(), (await threadline("web", "--new-token", home=tmp_path)).out.strip()}
    assert made.code == 0 and len(tokens) == 2 and all(len(t) >= 32 for t in tokens)
