"""Who may read the web view: whoever knows the token (docs/web.md, "Access").

A browser signs in once through the login form and gets a session: a random id in a
cookie, kept in the store only as its hash, with an expiry and a proof tied to the token,
so `/logout` ends it, a token change ends every one, and a copied database reveals no
cookie. Scripts send the token as a bearer header. Without either, a page redirects to the
login form and the API answers 401.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from urllib.parse import quote, unquote, urljoin, urlsplit

from aiohttp import web

from gateway.web.requests import BadInput, came_over_https, client_address
from gateway.web.throttle import SignInThrottle
from storage.base import SessionStore

log = logging.getLogger(__name__)

COOKIE = "threadline_web"
OPEN_PATHS = frozenset({"/login"})
MIN_TOKEN = 16  # characters; `threadline web --new-token` makes one of 43
_SESSION_KEY = "web:session:"  # + the sha256 of the cookie's id
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def new_token() -> str:
    return secrets.token_urlsafe(32)


def token_problem(token: str | None) -> str | None:
    """Why `token` cannot guard the view, in one line that says what to do; None if it can."""
    if not token:
        return ("the web view needs a token: set web.token, e.g. token: "
                "${THREADLINE_WEB_TOKEN}, and make one with `threadline web --new-token`")
    if len(token) < MIN_TOKEN:
        return (f"web.token is too short ({len(token)} characters; at least {MIN_TOKEN}): "
                "make one with `threadline web --new-token`")
    return None


class Access:
    def __init__(self, token: str, store: SessionStore, *, session_hours: float = 24,
                 trusted_proxies: tuple[str, ...] = (),
                 throttle: SignInThrottle | None = None) -> None:
        problem = token_problem(token)
        if problem:
            raise ValueError(problem)
        self._token = token.encode()
        self._store = store
        self._lifetime = session_hours * 3600
        self.proxies = trusted_proxies
        self.throttle = throttle or SignInThrottle()

    def token_matches(self, given: str) -> bool:
        return hmac.compare_digest(_ascii(given, "token").encode(), self._token)

    def _proof(self, session_id: str) -> str:
        """Ties a session to the token it was opened with: a new token fails every proof."""
        return hmac.new(self._token, session_id.encode(), hashlib.sha256).hexdigest()

    async def allowed(self, request: web.Request) -> bool:
        header = _ascii(request.headers.get("Authorization", ""), "Authorization header")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and value:
            return self.token_matches(value.strip())
        session_id = _ascii(request.cookies.get(COOKIE, ""), "cookie")
        return bool(session_id) and await self._live(session_id)

    async def _live(self, session_id: str) -> bool:
        stored = await self._store.get_setting(_key(session_id))
        try:
            entry = json.loads(stored) if stored else None
        except ValueError:
            entry = None
        if not isinstance(entry, dict):
            return False
        proof, expires = entry.get("proof"), entry.get("expires")
        return (isinstance(proof, str) and isinstance(expires, int | float)
                and expires > time.time()
                and hmac.compare_digest(proof, self._proof(session_id)))

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS or await self.allowed(request):
            return await handler(request)
        if request.path.startswith("/api/"):
            return web.json_response({"error": "a valid token is needed"}, status=401)
        raise web.HTTPFound(f"/login?next={quote(request.path_qs, safe='')}")

    async def sign_in(self, request: web.Request, response: web.StreamResponse) -> None:
        """Open a session and give its id to the browser."""
        session_id = secrets.token_urlsafe(32)
        entry = {"proof": self._proof(session_id), "expires": time.time() + self._lifetime}
        await self._store.put_setting(_key(session_id), json.dumps(entry))
        response.set_cookie(COOKIE, session_id, httponly=True, samesite="Strict", path="/",
                            secure=came_over_https(request, self.proxies),
                            max_age=int(self._lifetime))

    async def sign_out(self, request: web.Request, response: web.StreamResponse) -> None:
        session_id = request.cookies.get(COOKIE, "")
        if session_id.isascii() and session_id:
            await self._store.put_setting(_key(session_id), "")
        response.del_cookie(COOKIE, path="/")

    def client(self, request: web.Request) -> str:
        return client_address(request, self.proxies)


def _key(session_id: str) -> str:
    return _SESSION_KEY + hashlib.sha256(session_id.encode()).hexdigest()


def _ascii(value: str, what: str) -> str:
    """Header and cookie values we read are ASCII; anything else is a malformed request."""
    if not value.isascii():
        raise BadInput(f"malformed {what}")
    return value


def safe_next(target: str) -> str:
    """Where to go after signing in: a path on this site only (never another host).

    Browsers drop tabs and line breaks from a URL and read a backslash as a slash, so
    `/\t/evil.example` would go to evil.example: any such character, raw or percent-encoded
    in the path, refuses the target, and so does anything a join with this site's address
    would send elsewhere.
    """
    parts = urlsplit(target)
    path = unquote(parts.path)  # a proxy or browser may decode `%09` or `%5c` on the way
    if (not target.startswith("/") or target.startswith("//") or path.startswith("//")
            or any(_unsafe(c) for c in target) or any(_unsafe(c) for c in path)):
        return "/chats"
    joined = urlsplit(urljoin("http://this.site/", target))
    if joined.netloc != "this.site" or parts.scheme or parts.netloc:
        return "/chats"
    return target


def _unsafe(char: str) -> bool:
    return char.isspace() or not char.isprintable() or char == "\\"
