"""Real python-telegram-bot applications wired to the fake Telegram server, for tests.

The lifecycle is PTB's explicit one (initialize, start the updater, start; then stop the
updater, stop, shutdown): `run_polling()` owns the event loop and signals, so tests never
use it. PTB's default 10 s long poll costs nothing here, since the fake parks polls for at
most 0.5 s and releases them on `stop()`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from telegram import Update
from telegram.ext import Application, ApplicationBuilder, ContextTypes, MessageHandler, Updater
from telegram.ext import filters as ptb_filters

from tests.harness.fake_telegram import FakeTelegram

StartUpdates = Callable[[Updater], Awaitable[object]]


def build_app(fake: FakeTelegram, token: str | None = None) -> Application:
    """An Application whose Bot talks to the fake (through PTB's documented URL hooks)."""
    return (ApplicationBuilder().token(token or fake.token).base_url(fake.base_url)
            .base_file_url(fake.base_file_url).build())


class Running:
    """A started application; `seen` receives every update its message handler got."""

    def __init__(self, app: Application) -> None:
        self.app = app
        self.seen: asyncio.Queue[Update] = asyncio.Queue()

    async def collect(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        await self.seen.put(update)

    async def next(self, timeout: float = 2.0) -> Update:  # noqa: ASYNC109
        return await asyncio.wait_for(self.seen.get(), timeout)


def start_polling(updater: Updater) -> Awaitable[object]:
    return updater.start_polling(poll_interval=0)


@contextlib.asynccontextmanager
async def running_app(fake: FakeTelegram,
                      start: StartUpdates = start_polling) -> AsyncIterator[Running]:
    """A PTB application with a catch-all MessageHandler, fed by `start` (polling)."""
    app = build_app(fake)
    running = Running(app)
    app.add_handler(MessageHandler(ptb_filters.ALL, running.collect))
    await app.initialize()
    assert app.updater is not None
    await start(app.updater)
    await app.start()
    try:
        yield running
    finally:
        await app.updater.stop()
        await app.stop()
        await app.shutdown()
