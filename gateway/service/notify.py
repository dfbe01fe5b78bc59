"""The sd_notify protocol, spoken directly: readiness, status, stopping, watchdog pings.

systemd hands a `Type=notify` service the address of a unix datagram socket in
`$NOTIFY_SOCKET`; each datagram holds newline-separated `KEY=value` assignments (see
sd_notify(3)). Sending is best effort: a lost datagram must never stop the gateway, so
errors are logged at debug level and dropped. Without `$NOTIFY_SOCKET` (a terminal, a
container, a test) every method does nothing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Mapping

log = logging.getLogger(__name__)


class Notifier:
    """Sends sd_notify messages to one socket address (None: sends nothing)."""

    def __init__(self, address: str | None, *, watchdog_interval: float | None = None) -> None:
        self.address = address
        self.watchdog_interval = watchdog_interval if address else None
        self._sock: socket.socket | None = None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None,
                         pid: int | None = None) -> Notifier:
        """The notifier systemd asked for through the environment (a no-op one outside it)."""
        env = os.environ if environ is None else environ
        address = _socket_address(env.get("NOTIFY_SOCKET", ""))
        interval = _watchdog_interval(env, os.getpid() if pid is None else pid)
        return cls(address, watchdog_interval=interval)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def ready(self) -> None:
        self.send("READY=1")

    def status(self, text: str) -> None:
        # One line per assignment: a newline in the text would start a new assignment.
        self.send("STATUS=" + " ".join(text.splitlines()))

    def stopping(self) -> None:
        self.send("STOPPING=1")

    def send(self, message: str) -> None:
        """One datagram, never blocking and never raising."""
        if self.address is None:
            return
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self._sock.setblocking(False)
            self._sock.sendto(message.encode(), self.address)
        except OSError as exc:
            log.debug("sd_notify %r to %r failed: %s", message, self.address, exc)

    async def watchdog(self) -> None:
        """Send `WATCHDOG=1` every half watchdog period, forever (returns if none is set).

        It runs as a task on the gateway's own event loop on purpose: when the loop is
        blocked the pings stop, systemd's watchdog fires and the hung service is restarted.
        """
        if self.watchdog_interval is None:
            return
        while True:
            self.send("WATCHDOG=1")
            await asyncio.sleep(self.watchdog_interval)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _socket_address(value: str) -> str | None:
    """An absolute path, or "@name" for a Linux abstract socket; anything else is ignored."""
    if value.startswith("@") and len(value) > 1:
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    if value:
        log.debug("ignoring NOTIFY_SOCKET %r: not a unix socket address", value)
    return None


def _watchdog_interval(env: Mapping[str, str], pid: int) -> float | None:
    """Half of $WATCHDOG_USEC in seconds, when the watchdog is meant for this process.

    systemd sets WATCHDOG_PID so that a child which inherited the environment does not
    ping on the main process's behalf (sd_watchdog_enabled(3)).
    """
    owner = env.get("WATCHDOG_PID", "")
    if owner and owner != str(pid):
        return None
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    return usec / 2_000_000 if usec > 0 else None
