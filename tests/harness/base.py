"""A small aiohttp server on 127.0.0.1 that records calls and fails or stalls on request.

Subclasses add routes (`routes()`) and the error body shape of their service
(`error_body()`). Everything runs on the test's own event loop over a real socket.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import json
import math
import signal
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class RecordedCall:
    """One request as the fake saw it; `headers` keys are lower-case."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    json: Any = None
    form: dict[str, Any] | None = None
    body: bytes = b""
    at: float = field(default_factory=time.monotonic)  # when it arrived


@dataclass
class _Injection:
    status: int | None = None  # None: a delay, then the normal answer
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


def json_response(data: Any, status: int = 200,
                  headers: dict[str, str] | None = None) -> web.Response:
    """JSON with `Content-Type: application/json` exactly (discord.py rejects a charset)."""
    return web.Response(body=json.dumps(data).encode(), status=status,
                        headers={"Content-Type": "application/json", **(headers or {})})


class FakeServer:
    """Base fake: lifecycle, call log, `wait_for_call`, FIFO failure and delay injection."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self._port = port
        self.calls: list[RecordedCall] = []
        self._injections: deque[_Injection] = deque()
        self.in_flight = 0  # requests being answered now, and the most there ever were
        self.peak_in_flight = 0
        self.answer_delay_s = 0.0  # every request waits this long (concurrency shows)
        self.outage: int | None = None  # every request gets this status until set to None
        self._runner: web.AppRunner | None = None
        self._closing = asyncio.Event()
        self._changed = asyncio.Condition()

    # --- subclass hooks -------------------------------------------------------------------
    def routes(self) -> list[web.RouteDef]:
        return []

    def error_body(self, status: int, message: str) -> Any:
        """The service's error body for an injected failure without an explicit body."""
        return {"error": {"message": message, "status": status}}

    def injectable(self, request: web.Request) -> bool:
        """Whether injected failures and delays apply to this request."""
        return True

    # --- lifecycle ------------------------------------------------------------------------
    async def start(self) -> FakeServer:
        """Listen on 127.0.0.1; after a `stop()` the same port is reused."""
        if self._runner is not None:
            return self
        app = web.Application(middlewares=[self._middleware], client_max_size=64 * 2**20)
        app.add_routes(self.routes())
        # Short shutdown: a test must never wait on a handler parked in a delay or long poll.
        runner = web.AppRunner(app, shutdown_timeout=0.5, access_log=None)
        await runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self._port))
            self._port = sock.getsockname()[1]
            await web.SockSite(runner, sock).start()
        except BaseException:
            sock.close()
            await runner.cleanup()
            raise
        self._closing = asyncio.Event()
        self._runner = runner
        return self

    async def stop(self) -> None:
        """Stop listening and drop connections: new connects are refused until `start()`."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        self._closing.set()
        await runner.cleanup()

    async def __aenter__(self) -> FakeServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def running(self) -> bool:
        return self._runner is not None

    @property
    def port(self) -> int:
        if not self._port:
            raise RuntimeError("the fake server has not been started")
        return self._port

    @property
    def url(self) -> str:
        """Root URL, e.g. http://127.0.0.1:40123 (no trailing slash)."""
        return f"http://{self.host}:{self.port}"

    # --- call log -------------------------------------------------------------------------
    def calls_to(self, path_substring: str) -> list[RecordedCall]:
        return [c for c in self.calls if path_substring in c.path]

    async def wait_for_call(self, path_substring: str, count: int = 1,
                            timeout: float = 5.0) -> RecordedCall:  # noqa: ASYNC109
        """Wait until `count` calls hit a path containing the substring; return the last."""
        def seen() -> bool:
            return len(self.calls_to(path_substring)) >= count

        try:
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(seen)
        except TimeoutError:
            paths = [f"{c.method} {c.path}" for c in self.calls]
            raise AssertionError(f"no {count} call(s) to {path_substring!r} within "
                                 f"{timeout}s; saw {paths}") from None
        return self.calls_to(path_substring)[count - 1]

    def reset(self) -> None:
        """Forget recorded calls and pending injections."""
        self.calls.clear()
        self._injections.clear()

    # --- error injection ------------------------------------------------------------------
    def fail_next(self, status: int, body: Any = None, headers: dict[str, str] | None = None,
                  times: int = 1) -> None:
        """Answer the next `times` requests with `status` (body: dict → JSON, str → text)."""
        for _ in range(times):
            self._injections.append(_Injection(status=status, body=body,
                                               headers=dict(headers or {})))

    def delay_next(self, seconds: float, times: int = 1) -> None:
        """Stall the next `times` requests (then answer normally); `stop()` cuts it short."""
        for _ in range(times):
            self._injections.append(_Injection(seconds=seconds))

    @property
    def pending_injections(self) -> int:
        return len(self._injections)

    # --- internals ------------------------------------------------------------------------
    async def _record(self, request: web.Request) -> None:
        call = RecordedCall(
            method=request.method, path=request.path, query=dict(request.query),
            headers={k.lower(): v for k, v in request.headers.items()})
        if request.content_type in ("multipart/form-data", "application/x-www-form-urlencoded"):
            # post() caches its result, so the route handler can read the form again.
            form = await request.post()
            call.form = {k: v if isinstance(v, str) else f"<file {getattr(v, 'filename', '')}>"
                         for k, v in form.items()}
        elif request.can_read_body:
            call.body = await request.read()
            with contextlib.suppress(ValueError):
                call.json = json.loads(call.body) if call.body else None
        self.calls.append(call)
        async with self._changed:
            self._changed.notify_all()

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            await self._record(request)
            if self.outage is not None and self.injectable(request):
                return self._injected_response(_Injection(status=self.outage))
            if self._injections and self.injectable(request):
                injection = self._injections.popleft()
                if injection.status is None:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._closing.wait(), injection.seconds)
                else:
                    return self._injected_response(injection)
            if self.answer_delay_s:
                await asyncio.sleep(self.answer_delay_s)
            return await handler(request)
        finally:
            self.in_flight -= 1

    def _injected_response(self, injection: _Injection) -> web.Response:
        status = injection.status or 500
        body = injection.body
        if body is None:
            body = self.error_body(status, f"injected failure {status}")
        if isinstance(body, str | bytes):
            data = body.encode() if isinstance(body, str) else body
            return web.Response(body=data, status=status, headers=injection.headers)
        return json_response(body, status, injection.headers)


# --- scripted model replies shared by the LLM fakes ---------------------------------------
Reply = str | dict[str, Any]
Responder = Callable[[dict[str, Any]], Reply | Awaitable[Reply]]


def estimate_tokens(chars: int) -> int:
    """The fakes' token rule: one token per 4 characters, rounded up."""
    return math.ceil(chars / 4)


def text_of(content: Any) -> str:
    """Plain text of a message content: a string, or the text parts of a block list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [text_of(b.get("text", b.get("content"))) for b in content if isinstance(b, dict)]
        return "\n".join(p for p in parts if p)
    return ""


def last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return text_of(message.get("content"))
    return ""


def echo_responder(request: dict[str, Any]) -> str:
    """Default reply: "echo: " + the last user text, cut to 200 characters."""
    return "echo: " + last_user_text(request.get("messages") or [])[:200]


def tool_call_reply(name: str, arguments: dict[str, Any] | str | None = None, *,
                    call_id: str | None = None, content: str | None = None) -> dict[str, Any]:
    """An OpenAI-format assistant message calling one tool; both LLM fakes accept it."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return {"role": "assistant", "content": content, "tool_calls": [
        {"id": call_id or f"call_{name}", "type": "function",
         "function": {"name": name, "arguments": args}}]}


def normalize_reply(reply: Reply) -> tuple[str, list[dict[str, Any]]]:
    """A scripted reply as (text, OpenAI-format tool_calls)."""
    if isinstance(reply, str):
        return reply, []
    calls = []
    for i, call in enumerate(reply.get("tool_calls") or []):
        function = call.get("function") or call
        args = function.get("arguments", function.get("input", {}))
        calls.append({"id": call.get("id") or f"call_{i}", "type": "function", "function": {
            "name": function.get("name", ""),
            "arguments": args if isinstance(args, str) else json.dumps(args)}})
    return text_of(reply.get("content")), calls


class ScriptedModel:
    """Queued replies first, then the responder (default: echo).

    `token_ratio` is the fake's tokenizer knob: real services count tokens their own way,
    so prompt sizes (reported usage and the context limit alike) are chars / 4 times it.
    1.6 plays a tokenizer that counts more than our estimate, 0.7 one that counts fewer.
    `usages` holds the usage object of each answered request, in order.
    """

    def __init__(self, responder: Responder | None = None, token_ratio: float = 1.0) -> None:
        self.responder: Responder = responder or echo_responder
        self.token_ratio = token_ratio
        self.usages: list[dict[str, Any]] = []
        self._queued: deque[Reply] = deque()

    def count_tokens(self, chars: int) -> int:
        """The service's own count for `chars` characters of prompt."""
        return math.ceil(chars * self.token_ratio / 4)

    def usage_totals(self) -> dict[str, int]:
        """Each top-level token count summed over `usages` (one usage per answered request)."""
        totals: dict[str, int] = {}
        for usage in self.usages:
            for key, value in usage.items():
                if isinstance(value, int):
                    totals[key] = totals.get(key, 0) + value
        return totals

    def queue_reply(self, *replies: Reply) -> None:
        """Answer the next requests with these replies, in order, before the responder."""
        self._queued.extend(replies)

    async def next_reply(self, request: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        reply = self._queued.popleft() if self._queued else self.responder(request)
        if inspect.isawaitable(reply):
            reply = await reply
        return normalize_reply(reply)


def run_cli(make: Callable[[argparse.Namespace], FakeServer], description: str,
            argv: list[str] | None = None) -> None:
    """Serve a fake until Ctrl-C: `python -m tests.harness.fake_openai --port 8765`."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--context-limit", type=int, default=None)
    parser.add_argument("--api-key", default=None)
    args = parser.parse_args(argv)

    async def serve() -> None:
        server = make(args)
        await server.start()
        print(f"{type(server).__name__} listening on {server.url} (Ctrl-C to stop)", flush=True)
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, done.set)
        try:
            await done.wait()
        finally:
            await server.stop()

    asyncio.run(serve())
