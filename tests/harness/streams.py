"""Streamed replies for the LLM fakes: the knobs, the server-sent-event writer, the breaks.

Both fakes compute one `Answer` per request (text, tool calls, stop reason, usage) and
either format it as one JSON body or hand it to `serve_stream`, which writes it as
`text/event-stream` events in the provider's own shapes. The knobs live on
`StreamingModel`:

- `stream_chunk_chars` (12): characters of text per text delta; tool-call arguments are
  cut into pieces of the same size.
- `stream_delay_s` (0.0): pause before each delta after the first.
- `break_stream_next(after_chars, how)`: the next streamed reply stops once that many
  characters of text went out: "drop" closes the connection mid-body, "error" sends the
  provider's in-stream error event and ends the stream. No usage is recorded for it.
- `streamed_requests`: how many recorded requests asked for `stream: true`.

A client that goes away mid-stream, or a server that stops, ends the stream quietly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.harness.base import RecordedCall, Responder, ScriptedModel

DROP, ERROR = "drop", "error"


@dataclass(frozen=True)
class StreamBreak:
    """How the next streamed reply fails: after `after_chars` characters of text, `how`."""

    after_chars: int
    how: str


@dataclass
class Answer:
    """One computed reply, before formatting: OpenAI-format tool calls, the provider's stop
    reason ("stop", "tool_use", ...) and the usage object the provider reports."""

    text: str
    calls: list[dict[str, Any]]
    stop: str
    usage: dict[str, Any]


class StreamStopped(Exception):
    """The stream ends early: broken on purpose, client gone, or server stopping."""


def asks_to_stream(body: Any) -> bool:
    """Whether a request body asks for a streamed reply."""
    return isinstance(body, dict) and bool(body.get("stream"))


def cut_pieces(text: str, size: int) -> list[str]:
    """`text` in pieces of `size` characters (one piece when size < 1; none when empty)."""
    if size < 1:
        return [text] if text else []
    return [text[i:i + size] for i in range(0, len(text), size)]


class StreamingModel(ScriptedModel):
    """ScriptedModel plus the streaming knobs; the fake server class supplies `calls`."""

    calls: list[RecordedCall]

    def __init__(self, responder: Responder | None = None, token_ratio: float = 1.0) -> None:
        super().__init__(responder, token_ratio)
        self.stream_chunk_chars = 12
        self.stream_delay_s = 0.0
        self._stream_break: StreamBreak | None = None

    @property
    def streamed_requests(self) -> int:
        """Recorded requests that asked for streaming (refused or failed ones included)."""
        return sum(1 for call in self.calls if asks_to_stream(call.json))

    def break_stream_next(self, after_chars: int, how: str = DROP) -> None:
        """Make the next streamed reply stop after `after_chars` characters of text (at the
        end of its text when that is shorter, before any tool call). Its usage is not recorded.

        how="drop": the connection is closed without finishing the body.
        how="error": the provider's in-stream error event, then the end of the stream.
        """
        if how not in (DROP, ERROR):
            raise ValueError(f"how must be {DROP!r} or {ERROR!r}, not {how!r}")
        if after_chars < 0:
            raise ValueError("after_chars must not be negative")
        self._stream_break = StreamBreak(after_chars, how)

    def take_stream_break(self) -> StreamBreak | None:
        """The pending break, now used up (None when there is none)."""
        pending, self._stream_break = self._stream_break, None
        return pending

    def pieces(self, text: str) -> list[str]:
        """`text` cut into deltas of `stream_chunk_chars` characters."""
        return cut_pieces(text, self.stream_chunk_chars)


class SSEWriter:
    """Writes the events of one streamed response and carries out a planned break."""

    def __init__(self, request: web.Request, response: web.StreamResponse, *,
                 pause_s: float, closing: asyncio.Event,
                 broken: StreamBreak | None = None) -> None:
        self._request = request
        self._response = response
        self._pause_s = pause_s
        self._closing = closing
        self._deltas = 0
        self.broken = broken

    def shown_text(self, text: str) -> str:
        """The part of `text` that goes out before a planned break (all of it without one)."""
        return text if self.broken is None else text[:self.broken.after_chars]

    async def send(self, data: Any, event: str | None = None) -> None:
        """One event: optional `event:` line, then `data:` with JSON (or a string as is)."""
        payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
        head = f"event: {event}\n" if event else ""
        await self._response.write(f"{head}data: {payload}\n\n".encode())

    async def delta(self, data: Any, event: str | None = None) -> None:
        """A content delta: sent after a pause of `pause_s`, except the first one."""
        if self._deltas and self._pause_s > 0:
            await self._pause()
        self._deltas += 1
        await self.send(data, event)

    async def _pause(self) -> None:
        """Wait `pause_s`; a server that stops meanwhile ends the stream."""
        try:
            await asyncio.wait_for(self._closing.wait(), self._pause_s)
        except TimeoutError:
            return
        raise StreamStopped("the server is stopping")

    async def break_if_planned(self, error: Any, event: str | None = None) -> None:
        """Carry out the planned break, if any: send `error` (how="error") or drop the line."""
        if self.broken is None:
            return
        if self.broken.how == ERROR:
            await self.send(error, event)
        else:
            transport = self._request.transport
            if transport is not None:
                transport.close()  # flushes what was written, then closes mid-body
        raise StreamStopped(f"stream broken on purpose ({self.broken.how})")


StreamProducer = Callable[[SSEWriter], Awaitable[None]]


async def serve_stream(request: web.Request, produce: StreamProducer, *, pause_s: float,
                       closing: asyncio.Event,
                       broken: StreamBreak | None = None) -> web.StreamResponse:
    """Answer `request` with a 200 event stream whose events `produce` writes.

    An early end (planned break, client disconnect, server stop) is quiet: the response
    is returned as is and aiohttp closes what is left of the connection.
    """
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8",
                                           "Cache-Control": "no-cache"})
    await response.prepare(request)
    # Many small writes: without TCP_NODELAY, Nagle's algorithm and the client's delayed
    # ACK hold one back for tens of milliseconds now and then, which no real API does.
    sock = request.transport.get_extra_info("socket") if request.transport else None
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    writer = SSEWriter(request, response, pause_s=pause_s, closing=closing, broken=broken)
    with contextlib.suppress(StreamStopped, ConnectionResetError, asyncio.CancelledError):
        await produce(writer)
    return response
