"""The webhook receiver: Telegram's POST is answered only once the update was handled.

python-telegram-bot's own webhook server answers 200 as soon as the update is queued, so
a crash right after it loses the update: Telegram considers it delivered. An update the
gateway could not store (its database out of reach) is answered 503, so Telegram (and a
balancer in front) delivers it again. Here the update
is handed to the Application at once and the answer waits until our handler stored the
message (the gateway's ledger write); a process killed before that answers nothing, and
Telegram sends the update again, to this or another process (docs/scale-out.md).

A body that is not an update we can read (not JSON, JSON of another shape, a malformed or
too new update) is answered 200 and dropped with one line (updates.py): sent again, it
would be as unreadable.
"""

from __future__ import annotations

import collections
import hmac
import json
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from telegram import Update
from telegram.ext import Application

from platforms.telegram.updates import read_update

log = logging.getLogger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"


class WebhookServer:
    def __init__(self, app: Application, process: Callable[[Update], Awaitable[bool]], *,
                 listen: str, port: int, path: str,
                 secret_token: str, counters: collections.Counter[str]) -> None:
        self.app = app
        self.process = process  # False: the update could not be stored
        self.counters = counters
        self.secret = secret_token
        self.address = (listen, port)
        web_app = web.Application()
        web_app.router.add_post("/" + path.lstrip("/"), self._receive)
        self._runner = web.AppRunner(web_app, access_log=None)

    async def start(self) -> None:
        await self._runner.setup()
        await web.TCPSite(self._runner, *self.address).start()

    async def stop(self) -> None:
        await self._runner.cleanup()

    async def _receive(self, request: web.Request) -> web.Response:
        given = request.headers.get(SECRET_HEADER, "")
        if not hmac.compare_digest(given.encode(), self.secret.encode()):
            log.warning("webhook: refused a request without the secret token")
            return web.Response(status=403)
        body = await request.read()
        try:
            raw = json.loads(body)
        except ValueError:  # not JSON at all: as unreadable as a malformed update
            raw = None
        update = read_update(raw, self.app.bot, self.counters, size=len(body))
        if update is None:
            return web.Response(status=200)  # a retry would be as unreadable
        if not await self.process(update):
            # Not stored (the database is out of reach): Telegram sends it again later.
            return web.Response(status=503, text="not stored; send it again")
        return web.Response(status=200)
