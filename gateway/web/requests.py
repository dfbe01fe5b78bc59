"""What the web view reads from a request besides its path, and what it adds to every answer.

A request comes from a browser on this machine or through a TLS proxy: the client's
address and whether it came over HTTPS are taken from `X-Forwarded-For` and
`X-Forwarded-Proto` only when the peer is one of `web.trusted_proxies` (docs/web.md,
"Access"). Malformed input (a header, cookie or query value we cannot read) is the
client's fault and answers 400 in a line, never a 500 with a traceback.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Every answer: no script, no frame, no sniffing, no referrer, and nothing kept in a cache
# (pages hold chat content).
HEADERS = {
    "Content-Security-Policy": ("default-src 'none'; style-src 'unsafe-inline'; "
                                "img-src 'self' data:; form-action 'self'; "
                                "frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
MAX_INDEX = 2**31 - 1  # the largest page or offset a query may ask for


class BadInput(ValueError):
    """A value in the request that cannot be read: the answer is 400 with this text."""


def query_int(request: web.Request, name: str, default: int) -> int:
    """A non-negative whole number from the query; `default` when absent, 400 when not one."""
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isascii() or not raw.isdigit() or int(raw) > MAX_INDEX:
        raise BadInput(f"{name} must be a whole number up to {MAX_INDEX}")
    return int(raw)


def _networks(proxies: tuple[str, ...]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [ipaddress.ip_network(p, strict=False) for p in proxies]


def _from_proxy(request: web.Request, proxies: tuple[str, ...]) -> bool:
    if not proxies or not request.remote:
        return False
    try:
        peer = ipaddress.ip_address(request.remote)
    except ValueError:  # a Unix socket
        return False
    return any(peer in network for network in _networks(proxies))


def client_address(request: web.Request, proxies: tuple[str, ...]) -> str:
    """The client's address: the proxy's last `X-Forwarded-For` hop when the peer is one."""
    if _from_proxy(request, proxies):
        hops = [h.strip() for h in request.headers.get("X-Forwarded-For", "").split(",")]
        if hops and hops[-1]:
            return hops[-1]
    return request.remote or "unknown"


def came_over_https(request: web.Request, proxies: tuple[str, ...]) -> bool:
    if request.secure:
        return True
    forwarded = request.headers.get("X-Forwarded-Proto", "").split(",")[-1].strip().lower()
    return forwarded == "https" and _from_proxy(request, proxies)


@web.middleware
async def refuse_bad_input(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Outermost: a value we cannot read answers 400 with what was wrong."""
    try:
        return await handler(request)
    except (BadInput, UnicodeError) as exc:
        log.info("web: 400 for %s %s: %s", request.method, request.path, exc)
        text = str(exc) if isinstance(exc, BadInput) else "malformed request"
        return web.Response(status=400, text=f"Bad request: {text}\n")


async def add_headers(request: web.Request, response: web.StreamResponse) -> None:
    """`on_response_prepare`: the security headers on every answer, errors included."""
    response.headers.update(HEADERS)
