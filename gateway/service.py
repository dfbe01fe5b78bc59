"""The run loop of `threadline run` and `threadline chat`: start, wait, drain, stop."""

from __future__ import annotations

import asyncio
import signal

from gateway.app import Gateway


async def serve(gateway: Gateway) -> int:
    """Run until every platform ends by itself or a SIGTERM/SIGINT asks to stop.

    On a signal the gateway stops taking messages and lets running turns finish (bounded
    drain); a second signal leaves at once.
    """
    stop = asyncio.Event()
    _install_signals(stop)
    async with gateway:
        await gateway.start()
        closed = asyncio.create_task(gateway.wait_closed())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({closed, stopping}, return_when=asyncio.FIRST_COMPLETED)
        for task in (closed, stopping):
            task.cancel()
        await gateway.stop()
    return 0


def _install_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if stop.is_set():
            raise SystemExit(130)  # a second signal: leave now
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, on_signal)
        except (NotImplementedError, RuntimeError):
            pass
