"""Wrong sign-ins cost time: each one from an address waits longer than the last.

The n-th wrong token in a row from one client address is answered after
`BASE_S * GROWTH**(n-1)` seconds (at most `MAX_S`), and attempts from that address wait
their turn, so sending many at once saves nothing. Fifty wrong tries take about 15 s, a
few hundred hours, while a person who mistypes waits a tenth of a second. A right token
clears the address; an address that stops failing is forgotten after `FORGET_S`. At most
`MAX_CLIENTS` addresses are remembered (the oldest go first), so the table stays small.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter

from gateway import clock

BASE_S = 0.1
GROWTH = 1.04
MAX_S = 30.0
FORGET_S = 3600.0
MAX_CLIENTS = 10_000

@dataclass
class _Client:
    failures: int = 0
    last: float = 0.0
    turn: asyncio.Lock = field(default_factory=asyncio.Lock)


def delay_after(failures: int) -> float:
    """Seconds a wrong sign-in waits when it is the `failures`-th in a row."""
    if failures <= 0:
        return 0.0
    return min(MAX_S, BASE_S * GROWTH ** min(failures - 1, 10_000))


class SignInThrottle:
    def __init__(self) -> None:
        self._clients: OrderedDict[str, _Client] = OrderedDict()
        # The web view's own metrics (served at /metrics): the gateway's are another process.
        self.registry = CollectorRegistry()
        self.wrong = Counter("threadline_web_wrong_sign_ins",
                             "Sign-ins to the web view with a wrong token",
                             registry=self.registry)

    def _client(self, address: str) -> _Client:
        now = clock.monotonic()
        client = self._clients.pop(address, None)
        if client is None or (now - client.last > FORGET_S and not client.turn.locked()):
            client = _Client()
        self._clients[address] = client  # newest last
        while len(self._clients) > MAX_CLIENTS:
            oldest, old = next(iter(self._clients.items()))
            if old.turn.locked():
                break
            del self._clients[oldest]
        return client

    def turn(self, address: str) -> asyncio.Lock:
        """Hold while checking a sign-in: attempts from one address go one at a time."""
        return self._client(address).turn

    async def failed(self, address: str) -> None:
        """A wrong token from `address`: wait its penalty (inside its turn)."""
        client = self._client(address)
        client.failures += 1
        client.last = clock.monotonic()
        self.wrong.inc()
        await asyncio.sleep(delay_after(client.failures))

    def succeeded(self, address: str) -> None:
        client = self._clients.get(address)
        if client is not None:
            client.failures = 0
