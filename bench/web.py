"""The web view with a big chat: page times and sizes, and the README's screenshot.

    python bench/web.py [--messages 10000] [--screenshot docs/images/timeline.png]

Builds a SQLite store holding one chat of N messages over four sessions (three
compactions, each with a summary) plus usage, serves the view on 127.0.0.1, and fetches
the chats page, the chat's timeline and a page of its messages 20 times each, signed in
with the token. Prints the median and worst time and the bytes each page transfers
(issue 19: the chat page under 1 s and under 500 KB). With --screenshot, Debian's
chromium (Playwright) saves the timeline as the README shows it.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp  # noqa: E402
from aiohttp.test_utils import TestServer  # noqa: E402

from gateway.turns.pricing import Price  # noqa: E402
from gateway.web.app import build_app  # noqa: E402
from storage.models import Compaction, NewMessage, TurnRecord, UsageRecord  # noqa: E402
from storage.sqlite import SqliteSessionStore  # noqa: E402

TOKEN = "bench-token-of-16-plus"
CHAT = "telegram:1001"
SUMMARY = ("## Goal\nShip the billing export before Friday.\n## Completed Actions\n"
           "1. Wrote the CSV writer ({n} rounds so far)\n## Active Task\nThe currency column.")


def _turns(first: int, count: int) -> list[NewMessage]:
    out = []
    for n in range(first, first + count):
        role = "user" if n % 2 == 0 else "assistant"
        text = (f"message {n}: can we export invoices as CSV with the currency?" if role == "user"
                else f"reply {n}: yes, the writer now adds a currency column per row.")
        out.append(NewMessage({"role": role, "content": text}, tokens=len(text) // 4))
    return out


async def build(store: SqliteSessionStore, messages: int) -> None:
    session = await store.open_session(CHAT, model="claude-sonnet", system_prompt="be brief",
                                       system_message=NewMessage({"role": "system",
                                                                  "content": "be brief"}))
    per_session = messages // 4
    for round_ in range(4):
        for start in range(0, per_session, 1000):
            await store.append_messages(session.id,
                                        _turns(start, min(1000, per_session - start)))
        usage = (UsageRecord("claude-sonnet", "chat", input_tokens=4000, output_tokens=600,
                             cache_read_tokens=30_000, cache_write_tokens=2000),)
        if round_ == 3:
            await store.record_turn(session.id, TurnRecord(usage=usage))
            break
        summary = SUMMARY.format(n=round_ + 1)
        session = await store.record_turn(session.id, TurnRecord(
            before=_turns(per_session, 2), usage=usage, compaction=Compaction(
                messages=(NewMessage({"role": "system", "content": "be brief"}, tokens=3),
                          NewMessage({"role": "user", "content": summary}, tokens=60)),
                engine_state={"previous_summary": summary})))


async def timed(http: aiohttp.ClientSession, url: str, times: int = 20) -> tuple[list[float], int]:
    samples, size = [], 0
    for _ in range(times):
        started = time.perf_counter()
        async with http.get(url) as response:
            body = await response.read()
            assert response.status == 200, (url, response.status)
        samples.append(time.perf_counter() - started)
        size = len(body)
    return samples, size


async def screenshot(url: str, path: Path) -> None:
    from playwright.async_api import async_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium,
                                                   args=["--no-sandbox"])
        page = await browser.new_page(viewport={"width": 1100, "height": 760})
        await page.context.add_cookies([{"name": "threadline_web", "url": url,
                                         "value": build_app_cookie()}])
        await page.goto(f"{url}/chats/{CHAT}")
        for details in (await page.locator("details.summary").all())[-1:]:
            await details.locator("summary").click()
        await page.screenshot(path=str(path))
        await browser.close()


def build_app_cookie() -> str:
    from gateway.web.auth import Access

    return Access(TOKEN).cookie_value


async def main(messages: int, shot: Path | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with SqliteSessionStore(Path(tmp) / "web.db") as store:
            await build(store, messages)
            app = build_app(store, token=TOKEN, prices={"claude-sonnet": Price.per_million(3, 15)})
            server = TestServer(app, host="127.0.0.1")
            await server.start_server()
            url = str(server.make_url("")).rstrip("/")
            sessions = await store.list_sessions(CHAT)
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with aiohttp.ClientSession(headers=headers) as http:
                print(f"one chat of {messages:,} messages in {len(sessions)} sessions")
                print(f"{'page':<34} {'median ms':>10} {'worst ms':>9} {'bytes':>9}")
                for name, path in (("chats", "/chats"), ("chat timeline", f"/chats/{CHAT}"),
                                   ("a page of messages", f"/sessions/{sessions[0].id}?start=2000"),
                                   ("usage charts", "/usage")):
                    samples, size = await timed(http, url + path)
                    print(f"{name:<34} {statistics.median(samples) * 1000:>10.1f} "
                          f"{max(samples) * 1000:>9.1f} {size:>9,}")
                    if name == "chat timeline":
                        print(f"  against the target (1 s, 500 KB): time "
                              f"{1.0 / max(samples):.1f}x, size {500_000 / size:.1f}x")
            if shot is not None:
                await screenshot(url, shot)
                print(f"screenshot: {shot}")
            await server.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--screenshot", type=Path, default=None)
    args = parser.parse_args()
    asyncio.run(main(args.messages, args.screenshot))
