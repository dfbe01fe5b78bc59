"""The run loop of `threadline run` and `threadline chat`: start, wait, drain, stop.

Under systemd (`Type=notify`) the loop also tells the service manager how it is doing:
`READY=1` once the platforms are up, `STATUS=` lines, `STOPPING=1` when a stop begins and
watchdog pings for the whole run (gateway/service/notify.py). Outside systemd that is all silent.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal

from gateway.service.app import Gateway
from gateway.service.connections import EX_CONFIG
from gateway.service.notify import Notifier
from gateway.turns.router import ChatRouter

log = logging.getLogger(__name__)

STATUS_CHECK_S = 2.0  # the status line is compared with the router's state this often
GC_YOUNG = 20_000  # container allocations between two young collections
EXIT_SECOND_SIGNAL = 130  # a second SIGTERM/SIGINT: leave without finishing the drain


async def serve(gateway: Gateway, notifier: Notifier | None = None, *,
                survive_hangup: bool = True) -> int:
    """Run until every platform ends by itself (or refuses the bot: then EX_CONFIG is
    returned) or a SIGTERM/SIGINT asks to stop.

    On a signal the gateway stops taking messages and lets running turns finish (bounded
    drain); a second signal leaves at once. SIGHUP is logged and changes nothing unless
    `survive_hangup` is False (a terminal chat, which ends with its terminal).
    """
    if notifier is None:
        notifier = Notifier.from_environment()
    stop = asyncio.Event()
    _install_signals(stop, notifier, survive_hangup)
    status = _StatusLine(notifier, gateway.router, stop)
    background: list[asyncio.Task[None]] = []
    try:
        async with gateway:
            if notifier.enabled:
                # Pings cover start and drain too: a hang anywhere in the run is a hang.
                background.append(asyncio.create_task(notifier.watchdog(), name="sd-watchdog"))
            await gateway.start()
            tune_collector()
            if not stop.is_set():  # a signal during start already said STOPPING
                notifier.ready()
            if notifier.enabled:
                background.append(asyncio.create_task(status.keep(), name="sd-status"))
            await _until_stopped(gateway, stop)
            if not stop.is_set():  # the platforms ended by themselves; no signal said it
                notifier.stopping()
            status.update()
            await gateway.stop()
    finally:
        for task in background:
            task.cancel()
        notifier.close()
    # Every platform refused the bot as configured: a restart would change nothing.
    return EX_CONFIG if gateway.connections.gave_up.is_set() else 0


def tune_collector() -> None:
    """Python's cycle collector, tuned for a long-running gateway (docs/architecture.md,
    "The collector"): what exists once running (modules, clients, configuration) is
    frozen out of every later collection, and young collections run every GC_YOUNG
    container allocations instead of every 700, which under load ran hundreds of times
    a second and took a fifth of the loop's time at 1,000 chats."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])


async def _until_stopped(gateway: Gateway, stop: asyncio.Event) -> None:
    waits = (asyncio.create_task(gateway.wait_closed()), asyncio.create_task(stop.wait()),
             asyncio.create_task(gateway.connections.gave_up.wait()))
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for task in waits:
        task.cancel()


class _StatusLine:
    """The status line `systemctl status` shows, sent whenever it changes."""

    def __init__(self, notifier: Notifier, router: ChatRouter, stop: asyncio.Event) -> None:
        self._notifier = notifier
        self._router = router
        self._stop = stop
        self._last = ""

    def update(self) -> None:
        chats, running = self._router.activity()
        if self._stop.is_set():
            line = f"Stopping: waiting for {_count(running, 'turn')} to finish"
        else:
            line = f"Ready: {_count(chats, 'chat')} active, {_count(running, 'turn')} running"
        if line != self._last:
            self._notifier.status(line)
            self._last = line

    async def keep(self) -> None:
        while True:
            self.update()
            await asyncio.sleep(STATUS_CHECK_S)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _on_hangup() -> None:
    # logrotate (and habit) send daemons SIGHUP, whose default action ends the process
    # with a status systemd counts as clean, so nothing restarted it. The log goes to
    # stderr (the journal): there is no file to reopen, and the config is not re-read.
    log.warning("SIGHUP received: still running; nothing to reopen (the log goes to "
                "stderr) and config.yaml is not re-read (restart the service for that)")


def _install_signals(stop: asyncio.Event, notifier: Notifier, survive_hangup: bool) -> None:
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if stop.is_set():
            log.warning("second stop signal: leaving now, without waiting for running turns")
            raise SystemExit(EXIT_SECOND_SIGNAL)
        # Said before draining starts, so systemd shows "deactivating" for the whole drain.
        notifier.stopping()
        log.info("stopping: no new messages; running turns may finish (a second signal "
                 "leaves at once)")
        stop.set()

    handlers = {signal.SIGTERM: on_signal, signal.SIGINT: on_signal}
    if survive_hangup:
        handlers[signal.SIGHUP] = _on_hangup
    for sig, handler in handlers.items():
        try:
            loop.add_signal_handler(sig, handler)
        except (NotImplementedError, RuntimeError):
            pass
