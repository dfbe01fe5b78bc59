"""Who may read the web view: whoever knows the token (docs/web.md, "Access").

A browser signs in once through the login form and gets a cookie; scripts send the token
as a bearer header. The cookie holds a value derived from the token, never the token
itself, so a copied cookie does not reveal it, and changing the token signs everyone out.
Without either, a page redirects to the login form and the API answers 401.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Awaitable, Callable
from urllib.parse import quote

from aiohttp import web

log = logging.getLogger(__name__)

COOKIE = "threadline_web"
OPEN_PATHS = frozenset({"/login", "/static/style.css"})
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Access:
    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("the web view needs a token")
        self._token = token.encode()
        self.cookie_value = hmac.new(self._token, b"threadline web session",
                                     hashlib.sha256).hexdigest()

    def token_matches(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self._token)

    def allowed(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and value:
            return self.token_matches(value.strip())
        cookie = request.cookies.get(COOKIE, "")
        return bool(cookie) and hmac.compare_digest(cookie, self.cookie_value)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS or self.allowed(request):
            return await handler(request)
        if request.path.startswith("/api/"):
            return web.json_response({"error": "a valid token is needed"}, status=401)
        raise web.HTTPFound(f"/login?next={quote(request.path_qs, safe='')}")

    def sign_in(self, response: web.StreamResponse, *, secure: bool) -> None:
        response.set_cookie(COOKIE, self.cookie_value, httponly=True, samesite="Strict",
                            secure=secure, path="/")


def safe_next(target: str) -> str:
    """Where to go after signing in: a path on this site only (never another host)."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/chats"
    return target
