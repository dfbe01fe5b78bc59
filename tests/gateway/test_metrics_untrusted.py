"""What strangers sent that the bot skipped or bounded shows in metrics: updates the
Telegram library could not read, and jobs of the reader and render workers by outcome."""

from __future__ import annotations

import aiohttp

from tests.gateway.test_metrics import samples, value
from tests.harness.fixtures import free_port
from tests.harness.telegram_gateway import telegram_config, telegram_gateway

USER = 5550001


async def scrape(port: int) -> dict:
    async with aiohttp.ClientSession() as http, \
            http.get(f"http://127.0.0.1:{port}/metrics") as response:
        return samples(await response.text())


async def test_an_unreadable_update_and_the_workers_jobs_are_counted(tmp_path, fake_telegram,
                                                                      fake_openai):
    port = free_port()
    config = telegram_config(tmp_path, fake_telegram, fake_openai.base_url,
                             metrics={"port": port})
    async with telegram_gateway(config):
        fake_telegram.push(fake_telegram.updates.unparseable(user_id=USER))
        fake_telegram.push(fake_telegram.updates.private_text("**hello**", USER))
        await fake_telegram.wait_for_messages(USER, 1, timeout=30)
        found = await scrape(port)
    assert value(found, "threadline_platform_events_total", platform="telegram",
                 event="unparseable_updates") == 1
    assert value(found, "threadline_untrusted_work_total", pool="render", outcome="done") >= 1
