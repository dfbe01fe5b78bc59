"""The web view: a small, read-only site over the store (docs/web.md).

Server-rendered pages (Jinja2, every value escaped) on aiohttp; no script, no build step,
no asset from elsewhere. Every page reads only what it shows: a chat page reads the chat's
sessions and their token sums, never a history; a session's messages come a page at a time.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from typing import Any

import jinja2
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gateway.turns.pricing import Price, format_usd
from gateway.turns.spending import Budgets
from gateway.web.auth import Access, safe_next
from gateway.web.charts import usage_charts
from gateway.web.requests import add_headers, query_int, refuse_bad_input
from gateway.web.timeline import SORTS, chat_row, sort_rows, timeline
from storage.base import SessionStore

CHATS_PER_PAGE = 50
SESSIONS_PER_PAGE = 50  # a long chain's timeline pages too: each step may hold a summary
MESSAGES_PER_PAGE = 200
STORE = web.AppKey("store", SessionStore)
PRICES = web.AppKey("prices", dict)
BUDGETS = web.AppKey("budgets", object)  # gateway.turns.spending.Budgets, or None
BUDGET_CHATS = 50  # the most recently active chats in the budget table
PAGES = web.AppKey("pages", jinja2.Environment)
ACCESS = web.AppKey("access", Access)


def _when(ts: float | None) -> str:
    if not ts:
        return ""
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _pages() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("gateway.web", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters["when"] = _when
    env.filters["usd"] = lambda v: "—" if v is None else format_usd(v)
    env.filters["pct"] = lambda v: "—" if v is None else f"{100 * v:.1f}%"
    env.filters["n"] = lambda v: "—" if v is None else f"{v:,}"
    return env


def build_app(store: SessionStore, *, token: str,
              prices: Mapping[str, Price] | None = None, session_hours: float = 24,
              trusted_proxies: tuple[str, ...] = (),
              budgets: Budgets | None = None) -> web.Application:
    access = Access(token, store, session_hours=session_hours,
                    trusted_proxies=trusted_proxies)
    app = web.Application(middlewares=[refuse_bad_input, access.middleware])
    app.on_response_prepare.append(add_headers)
    app[STORE], app[PRICES], app[PAGES], app[ACCESS] = store, dict(prices or {}), _pages(), access
    app[BUDGETS] = budgets if budgets is not None and budgets.config.any else None
    app.router.add_get("/", home)
    app.router.add_get("/login", login_form)
    app.router.add_post("/login", login)
    app.router.add_post("/logout", logout)
    app.router.add_get("/chats", chats_page)
    app.router.add_get("/chats/{chat_key}", chat_page)
    app.router.add_get("/sessions/{session_id}", session_page)
    app.router.add_get("/search", search_page)
    app.router.add_get("/usage", usage_page)
    app.router.add_get("/api/chats", chats_api)
    app.router.add_get("/metrics", metrics_page)
    return app


def _render(request: web.Request, name: str, status: int = 200, **values: Any) -> web.Response:
    html = request.app[PAGES].get_template(name).render(**values)
    return web.Response(text=html, content_type="text/html", status=status)


async def home(request: web.Request) -> web.Response:
    raise web.HTTPFound("/chats")


async def login_form(request: web.Request) -> web.Response:
    return _render(request, "login.html", next=safe_next(request.query.get("next", "")),
                   failed=False)


async def login(request: web.Request) -> web.Response:
    form = await request.post()
    target = safe_next(str(form.get("next", "")))
    access = request.app[ACCESS]
    client = access.client(request)
    async with access.throttle.turn(client):  # one try at a time per address
        if not access.token_matches(str(form.get("token", ""))):
            await access.throttle.failed(client)
            return _render(request, "login.html", status=401, next=target, failed=True)
        access.throttle.succeeded(client)
    response = web.HTTPFound(target)
    await access.sign_in(request, response)
    raise response


async def logout(request: web.Request) -> web.Response:
    response = web.HTTPFound("/login")
    await request.app[ACCESS].sign_out(request, response)
    raise response


def _page_number(request: web.Request) -> int:
    return max(1, query_int(request, "page", 1))


async def chats_page(request: web.Request) -> web.Response:
    sort = request.query.get("sort", "last")
    sort = sort if sort in SORTS else "last"
    descending = request.query.get("order", "desc") != "asc"
    rows = [chat_row(s, request.app[PRICES]) for s in await request.app[STORE].chat_summaries()]
    rows = sort_rows(rows, sort, descending)
    pages = max(1, math.ceil(len(rows) / CHATS_PER_PAGE))
    page = min(_page_number(request), pages)
    shown = rows[(page - 1) * CHATS_PER_PAGE:page * CHATS_PER_PAGE]
    return _render(request, "chats.html", rows=shown, sort=sort, descending=descending,
                   page=page, pages=pages, total=len(rows))


async def chat_page(request: web.Request) -> web.Response:
    chat_key = request.match_info["chat_key"]
    store = request.app[STORE]
    sessions = await store.list_sessions(chat_key, limit=10_000)
    if not sessions:
        raise web.HTTPNotFound(text=f"no chat {chat_key}")
    steps = timeline(sessions, await store.session_tokens(chat_key))
    pages = max(1, math.ceil(len(steps) / SESSIONS_PER_PAGE))
    page = min(_page_number(request), pages)
    return _render(request, "chat.html", chat_key=chat_key, total=len(steps),
                   steps=steps[(page - 1) * SESSIONS_PER_PAGE:page * SESSIONS_PER_PAGE],
                   page=page, pages=pages,
                   compactions=sum(1 for s in steps if s.session.kind == "compression"))


async def session_page(request: web.Request) -> web.Response:
    store = request.app[STORE]
    session = await store.get_session(request.match_info["session_id"])
    if session is None:
        raise web.HTTPNotFound(text="no such session")
    start = query_int(request, "start", 0)
    start -= start % MESSAGES_PER_PAGE  # pages begin at whole multiples
    messages = await store.session_messages(session.id, start, MESSAGES_PER_PAGE)
    return _render(request, "session.html", session=session, messages=messages, start=start,
                   per_page=MESSAGES_PER_PAGE)


async def search_page(request: web.Request) -> web.Response:
    query = request.query.get("q", "").strip()
    hits = await request.app[STORE].search(query, limit=100) if query else []
    return _render(request, "search.html", query=query, hits=hits,
                   per_page=MESSAGES_PER_PAGE)


async def usage_page(request: web.Request) -> web.Response:
    days = await request.app[STORE].usage_by_day()
    budgets, standing = request.app[BUDGETS], []
    if budgets is not None:
        recent = sorted(await request.app[STORE].chat_summaries(), key=lambda c: -c.last_at)
        standing = await budgets.overview([c.chat_key for c in recent[:BUDGET_CHATS]])
    return _render(request, "usage.html", charts=usage_charts(days, request.app[PRICES]),
                   priced=bool(request.app[PRICES]), standing=standing)


async def chats_api(request: web.Request) -> web.Response:
    rows = [chat_row(s, request.app[PRICES]) for s in await request.app[STORE].chat_summaries()]
    return web.json_response([{
        "chat": r.summary.chat_key, "session": r.summary.session_id,
        "last_at": r.summary.last_at, "messages": r.summary.messages,
        "sessions": r.summary.sessions, "compactions": r.summary.compactions,
        "tokens": r.tokens, "cost_usd": r.cost, "cache_hit_rate": r.cache_rate,
    } for r in rows])


async def metrics_page(request: web.Request) -> web.Response:
    """The web view's own metrics for Prometheus (it sends the token as a bearer header)."""
    body = generate_latest(request.app[ACCESS].throttle.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
