"""The web view in a real headless Chromium (Debian's `chromium`, driven by Playwright):
sign in, the chats, a chain of three compactions, search, the usage chart (issue 19);
after sign-in the browser stays on the site (issue 35)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
from aiohttp.test_utils import TestServer
from PIL import Image
from playwright.async_api import Browser, Page, async_playwright

from gateway.turns.pricing import Price
from gateway.web.app import build_app
from storage.models import TurnRecord, UsageRecord
from storage.sqlite import SqliteSessionStore
from tests.harness.store import CHAT, grow_chain, msg

TOKEN = "browser-test-token"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.fail("Chromium is missing: `make test` installs Debian's `chromium` package")
    async with async_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium's sandbox cannot start.
        launched = await playwright.chromium.launch(executable_path=chromium,
                                                    args=["--no-sandbox"])
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[tuple[str, list[str]]]:
    async with SqliteSessionStore(tmp_path / "t.db") as store:
        ids = await grow_chain(store, 3)
        await store.record_turn(ids[-1], TurnRecord(
            before=(msg("user", "and the <script>alert(1)</script> tag?"),
                    msg("assistant", "shown as text")),
            usage=(UsageRecord("m", "chat", input_tokens=900, output_tokens=80,
                               cache_read_tokens=2400),)))
        app = build_app(store, token=TOKEN, prices={"m": Price.per_million(3.0, 15.0)})
        server = TestServer(app)
        await server.start_server()
        try:
            yield str(server.make_url("")).rstrip("/"), ids
        finally:
            await server.close()


async def _sign_in(page: Page, url: str) -> None:
    await page.goto(f"{url}/chats")
    assert "/login" in page.url
    await page.fill("input[name=token]", "wrong")
    await page.click("button[type=submit]")
    assert await page.locator(".error").count() == 1
    await page.fill("input[name=token]", TOKEN)
    await page.click("button[type=submit]")
    await page.wait_for_url(f"{url}/chats")


async def test_sign_in_browse_a_chain_search_and_see_the_usage_chart(
        browser: Browser, site: tuple[str, list[str]]) -> None:
    url, ids = site
    page = await browser.new_page(viewport={"width": 1100, "height": 900})
    await _sign_in(page, url)
    await page.click(f"#chats a:text-is('{CHAT}')")
    steps = page.locator("#timeline section.step")
    assert await steps.count() == 4
    assert await page.locator("#timeline .compaction").count() == 3
    for details in await page.locator("details.summary").all():
        await details.locator("summary").click()
    summaries = await page.locator("details.summary pre").all_inner_texts()
    assert summaries == ["0", "1", "2"]
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / "timeline.png"), full_page=True)

    await page.goto(f"{url}/search?q=question 1")  # a turn the second compaction folded in
    await page.locator("#hits a").first.click()
    target = page.locator(".msg:target")
    assert "question 1" in await target.inner_text()
    assert ids[1] in page.url

    await page.goto(f"{url}/sessions/{ids[-1]}")
    shown = await page.locator(".msg pre").all_inner_texts()
    assert "and the <script>alert(1)</script> tag?" in shown  # as text, never run
    await page.goto(f"{url}/usage")
    chart = page.locator("#chart-kinds svg")
    await chart.wait_for()
    shot = ARTIFACTS / "usage-chart.png"
    await chart.screenshot(path=str(shot))
    image = Image.open(shot).convert("RGB")
    # Background, grid, axes and text are greys; bars are colours. A chart without its
    # bars keeps only the small legend swatches in colour.
    coloured = sum(1 for r, g, b in image.get_flattened_data() if max(r, g, b) - min(r, g, b) > 60)
    assert coloured > 0.05 * image.width * image.height, "the chart area is blank"


# Each once took a browser to another host after sign-in (issue 35): Chromium drops tabs
# and line breaks from a Location and reads a backslash as a slash.
REDIRECTS = ["/\t/evil.example", "/\n/evil.example", "/ /evil.example", "/%09/evil.example",
             "/%0a/evil.example", "/\\evil.example", "//evil.example", "/\\/evil.example",
             "https://evil.example/", "//evil.example:80/x"]


async def test_sign_in_never_takes_the_browser_to_another_site(
        browser: Browser, site: tuple[str, list[str]]) -> None:
    url, _ = site
    page = await browser.new_page()
    for target in REDIRECTS:
        await page.goto(f"{url}/login?next={quote(target, safe='')}")
        await page.fill("input[name=token]", TOKEN)
        async with page.expect_navigation():
            await page.click("button[type=submit]")
        where = urlsplit(page.url)
        assert f"{where.scheme}://{where.netloc}" == url, (target, page.url)
    raw = "/%09/evil.example"  # percent-encoded in the query: decoded into a tab by the server
    await page.goto(f"{url}/login?next={raw}")
    await page.fill("input[name=token]", TOKEN)
    async with page.expect_navigation():
        await page.click("button[type=submit]")
    assert page.url.startswith(url + "/"), page.url
