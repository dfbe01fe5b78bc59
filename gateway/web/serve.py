"""`threadline web`: the web view as a process of its own, until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys

from aiohttp import web

from gateway.config import Config
from gateway.turns.resets import utc_now
from gateway.turns.spending import Budgets
from gateway.web.app import build_app
from gateway.web.auth import token_problem
from gateway.wiring import build_prices, build_store

log = logging.getLogger(__name__)

DEFAULT_PORT = 8480


async def serve_web(config: Config, port: int | None = None) -> int:
    """0 after a clean stop; 1 when it cannot start (no token, port in use)."""
    token = config.web.token
    problem = token_problem(token)
    if problem or token is None:
        print(f"threadline: {problem}", file=sys.stderr)
        return 1
    store = build_store(config, "current")  # web sign-ins are written; no upgrade
    await store.initialize()
    app = build_app(store, token=token, prices=build_prices(config),
                    session_hours=config.web.session_hours,
                    trusted_proxies=tuple(config.web.trusted_proxies),
                    budgets=Budgets(config.budgets, store, build_prices(config), utc_now))
    runner = web.AppRunner(app, access_log=None)
    try:
        await runner.setup()
        listen, port = config.web.listen, port or config.web.port or DEFAULT_PORT
        try:
            await web.TCPSite(runner, listen, port).start()
        except OSError as exc:
            print(f"threadline: cannot listen on {listen}:{port}: {exc.strerror or exc}",
                  file=sys.stderr)
            return 1
        print(f"web view on http://{listen}:{port}/ (sign in with web.token)", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        return 0
    finally:
        await runner.cleanup()
        await store.shutdown()
