"""The websocket half of the fake Discord: gateway sessions over real sockets.

A connection gets HELLO (op 10), then IDENTIFY (op 2) starts a session: READY and one
GUILD_CREATE per guild. A session outlives its connection: every dispatch gets the
session's next `s` and is kept, so a RESUME (op 6) on a new connection replays what the
client missed, then RESUMED. Frames are TEXT, in order (one writer task per connection).

Knobs act on the live connection: op 7 `reconnect()`, op 9 `invalidate_session()`,
`zombie()` (no ACKs and no dispatches, which discord.py notices after its
`heartbeat_timeout`), `drop()` (the socket aborts), `close_gateway(code)` (a close frame
with that code); `refuse_identify(code)` closes every IDENTIFY and RESUME with `code` until
`refuse_identify(None)`; `close_codes` lists every code the fake sent.

Delivery follows the session's intents as far as the application's flags grant them
(`granted`): no MESSAGE_CREATE without GUILD_MESSAGES/DIRECT_MESSAGES, and empty content in
guilds without MESSAGE_CONTENT unless the message mentions (or comes from) the bot. An
IDENTIFY asking for a privileged intent the application lacks is closed with 4014, as on
Discord (`enforce_privileged_intents = False` lets it in, with that intent withheld).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import WSMsgType, web

from tests.harness.discord_payloads import (
    APP_FLAGS_MEMBERS,
    APP_FLAGS_MESSAGE_CONTENT,
    APP_FLAGS_PRESENCE,
    BOT_ID,
    INTENT_DM_MESSAGES,
    INTENT_GUILD_MEMBERS,
    INTENT_GUILD_MESSAGES,
    INTENT_GUILD_PRESENCES,
    INTENT_MESSAGE_CONTENT,
)

DISPATCH, HEARTBEAT, IDENTIFY, PRESENCE, VOICE_STATE = 0, 1, 2, 3, 4
RESUME, RECONNECT, REQUEST_MEMBERS, INVALID_SESSION, HELLO, HEARTBEAT_ACK = 6, 7, 8, 9, 10, 11
MEMBER_EVENTS = frozenset({"GUILD_MEMBER_ADD", "GUILD_MEMBER_UPDATE", "GUILD_MEMBER_REMOVE"})
# A privileged intent and the application flags (full or limited) that allow it.
PRIVILEGED = {INTENT_GUILD_PRESENCES: APP_FLAGS_PRESENCE, INTENT_GUILD_MEMBERS: APP_FLAGS_MEMBERS,
              INTENT_MESSAGE_CONTENT: APP_FLAGS_MESSAGE_CONTENT}
CONTENT_FIELDS = ("content", "embeds", "attachments", "components")
Frame = dict[str, Any]


def op_frame(op: int, d: Any = None) -> Frame:
    return {"op": op, "d": d, "s": None, "t": None}


def granted(intents: int, app_flags: int) -> int:
    """The intents a session gets: privileged ones only with their application flag."""
    return intents & ~sum(bit for bit, flags in PRIVILEGED.items() if not app_flags & flags)


def content_visible(data: dict[str, Any], in_guild: bool) -> bool:
    """Discord's rule without MESSAGE_CONTENT: content shows in DMs, in messages that
    mention the bot and in the bot's own."""
    mentioned = any(m.get("id") == BOT_ID for m in data.get("mentions") or [])
    from_bot = (data.get("author") or {}).get("id") == BOT_ID
    return not in_guild or mentioned or from_bot


def redacted(data: dict[str, Any]) -> dict[str, Any]:
    """A message with its content fields emptied (a forward's snapshots too)."""
    shown = {**data, **{k: "" if k == "content" else [] for k in CONTENT_FIELDS}}
    if data.get("message_snapshots"):
        shown["message_snapshots"] = [{"message": redacted(s["message"])}
                                      for s in data["message_snapshots"]]
    return shown


def visible(intents: int, event: str, data: dict[str, Any]) -> dict[str, Any] | None:
    """What a session with these intents receives of an event (None: nothing)."""
    if event in ("MESSAGE_CREATE", "MESSAGE_UPDATE"):
        in_guild = "guild_id" in data
        if not intents & (INTENT_GUILD_MESSAGES if in_guild else INTENT_DM_MESSAGES):
            return None
        if not intents & INTENT_MESSAGE_CONTENT and not content_visible(data, in_guild):
            return redacted(data)
    if event in MEMBER_EVENTS and not intents & INTENT_GUILD_MEMBERS:
        return None
    if event == "GUILD_CREATE" and not intents & INTENT_GUILD_PRESENCES:
        # Without presences Discord sends only the bot's own member; the rest by chunks.
        return {**data, "members": [m for m in data["members"] if m["user"]["id"] == BOT_ID]}
    return data


@dataclass(eq=False)
class Session:
    """A gateway session: its sequence and every dispatch sent under it."""

    session_id: str
    intents: int
    seq: int = 0
    buffer: list[Frame] = field(default_factory=list)
    conn: Connection | None = None


class Connection:
    """One websocket; a writer task sends queued frames (or a close code) in order."""

    def __init__(self, ws: web.WebSocketResponse, request: web.Request) -> None:
        self.ws = ws
        self.transport = request.transport
        self.session: Session | None = None
        self.zombie = False  # no ACKs
        self.accepting = True  # dispatches go out (off after op 7/9 and for a zombie)
        self._queue: asyncio.Queue[Frame | int] = asyncio.Queue()
        self._writer = asyncio.create_task(self._write())

    def put(self, frame: Frame) -> None:
        self._queue.put_nowait(frame)

    def close(self, code: int) -> None:
        """Close after the frames already queued."""
        self._queue.put_nowait(code)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def stop(self) -> None:
        self._writer.cancel()

    async def _write(self) -> None:
        while True:
            item = await self._queue.get()
            try:
                if isinstance(item, int):
                    await self.ws.close(code=item)
                    return
                await self.ws.send_str(json.dumps(item))
            except (ConnectionError, RuntimeError):
                return


class GatewayMixin:
    """Gateway state and knobs for FakeDiscord; the host supplies the hooks below."""

    token: str
    heartbeat_interval_ms: int
    app_flags: int
    enforce_privileged_intents: bool

    def _init_gateway(self) -> None:
        self.sessions: dict[str, Session] = {}
        self.session: Session | None = None  # the latest identified one
        self.identify_payloads: list[dict[str, Any]] = []
        self.resume_payloads: list[dict[str, Any]] = []
        self.identifies = self.resumes = self.rejected_resumes = 0
        self.close_codes: list[int] = []  # every close code the fake sent, in order
        self.identify_close_code: int | None = None  # set by refuse_identify()
        self.connections = self.heartbeats = 0
        self._conns: list[Connection] = []
        self._gateway_changed = asyncio.Condition()

    if TYPE_CHECKING:  # supplied by the host (WorldMixin)
        def _ready_data(self, session_id: str) -> dict[str, Any]: ...
        def _guild_creates(self) -> list[dict[str, Any]]: ...
        def _guild_members(self, guild_id: str) -> list[dict[str, Any]]: ...

    # --- test-facing ----------------------------------------------------------------------
    @property
    def live(self) -> Connection:
        """The newest open connection."""
        for conn in reversed(self._conns):
            if not conn.ws.closed:
                return conn
        raise RuntimeError("no live gateway connection")

    async def dispatch(self, event: str, data: dict[str, Any]) -> int | None:
        """Send an event under the current session; its `s`, or None if intents hide it."""
        if self.session is None:
            raise RuntimeError("no gateway session: the client has not identified yet")
        return self._dispatch_to(self.session, event, data)

    def _announce(self, event: str, data: dict[str, Any]) -> None:
        """Dispatch if a session exists (world changes before the first IDENTIFY are silent)."""
        if self.session is not None:
            self._dispatch_to(self.session, event, data)

    async def reconnect(self) -> None:
        """Op 7: the client should close and RESUME."""
        conn = self.live
        conn.accepting = False
        conn.put(op_frame(RECONNECT))

    async def invalidate_session(self, resumable: bool = False) -> None:
        """Op 9: resumable → the client RESUMEs, else the session is gone and it IDENTIFYs."""
        conn = self.live
        conn.accepting = False
        if not resumable and conn.session is not None:
            self.sessions.pop(conn.session.session_id, None)
        conn.put(op_frame(INVALID_SESSION, resumable))

    async def zombie(self) -> None:
        """Silence the live connection: no ACKs, no dispatches (they are still kept)."""
        conn = self.live
        conn.zombie, conn.accepting = True, False

    async def drop(self) -> None:
        """Abort the live socket without a close frame."""
        self.live.abort()

    async def close_gateway(self, code: int) -> None:
        """Close the live connection with `code` (after the frames already queued)."""
        await self._close_with(self.live, code)

    def refuse_identify(self, code: int | None) -> None:
        """Close every IDENTIFY and RESUME with `code` from now on; None: stop."""
        self.identify_close_code = code

    async def wait_identified(self, count: int = 1,
                              timeout: float = 5.0) -> None:  # noqa: ASYNC109
        await self._wait_gateway(lambda: self.identifies >= count, f"{count} IDENTIFY", timeout)

    async def wait_resumed(self, count: int = 1,
                           timeout: float = 5.0) -> None:  # noqa: ASYNC109
        await self._wait_gateway(lambda: self.resumes >= count, f"{count} RESUME", timeout)

    async def _wait_gateway(self, done: Callable[[], bool], what: str,
                            timeout: float) -> None:  # noqa: ASYNC109
        try:
            async with asyncio.timeout(timeout), self._gateway_changed:
                await self._gateway_changed.wait_for(done)
        except TimeoutError:
            raise AssertionError(
                f"no {what} within {timeout}s: identifies={self.identifies} resumes="
                f"{self.resumes} rejected_resumes={self.rejected_resumes} "
                f"connections={self.connections}") from None

    # --- internals ------------------------------------------------------------------------
    def _dispatch_to(self, session: Session, event: str, data: dict[str, Any]) -> int | None:
        shown = visible(granted(session.intents, self.app_flags), event, data)
        if shown is None:
            return None
        session.seq += 1
        frame = {"op": DISPATCH, "t": event, "s": session.seq, "d": shown}
        session.buffer.append(frame)
        conn = session.conn
        if conn is not None and conn.accepting:
            conn.put(frame)
        return session.seq

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        conn = Connection(ws, request)
        self._conns.append(conn)
        self.connections += 1
        conn.put(op_frame(HELLO, {"heartbeat_interval": self.heartbeat_interval_ms}))
        try:
            async for msg in ws:
                if msg.type is WSMsgType.TEXT:
                    await self._on_frame(conn, json.loads(msg.data))
        finally:
            conn.stop()
            self._conns.remove(conn)
            if conn.session is not None and conn.session.conn is conn:
                conn.session.conn = None
        return ws

    async def _close_gateway(self) -> None:
        for conn in list(self._conns):
            conn.stop()
            with contextlib.suppress(Exception):
                await conn.ws.close(code=1001)

    async def _on_frame(self, conn: Connection, payload: dict[str, Any]) -> None:
        op, d = payload.get("op"), payload.get("d")
        if op == HEARTBEAT:
            self.heartbeats += 1
            if not conn.zombie:
                conn.put(op_frame(HEARTBEAT_ACK))
        elif op == IDENTIFY:
            await self._identify(conn, d or {})
        elif op == RESUME:
            await self._resume(conn, d or {})
        elif op == REQUEST_MEMBERS and conn.session is not None:
            self._members_chunk(conn.session, d or {})
        elif op not in (PRESENCE, VOICE_STATE):
            await self._close_with(conn, 4001)  # Unknown opcode

    async def _close_with(self, conn: Connection, code: int) -> None:
        conn.accepting = False
        conn.close(code)
        self.close_codes.append(code)
        await self._notify_gateway()

    async def _refused(self, conn: Connection, d: dict[str, Any]) -> bool:
        """Close codes that end an IDENTIFY or RESUME before it starts."""
        code = self.identify_close_code
        if code is None and d.get("token") != self.token:
            code = 4004  # Authentication failed
        if code is not None:
            await self._close_with(conn, code)
        return code is not None

    async def _identify(self, conn: Connection, d: dict[str, Any]) -> None:
        if await self._refused(conn, d):
            return
        if conn.session is not None:
            await self._close_with(conn, 4005)  # Already authenticated
            return
        intents = int(d.get("intents") or 0)
        if self.enforce_privileged_intents and granted(intents, self.app_flags) != intents:
            await self._close_with(conn, 4014)  # Disallowed intent(s)
            return
        self.identify_payloads.append(d)
        session = Session(secrets.token_hex(16), intents, conn=conn)
        self.sessions[session.session_id] = self.session = conn.session = session
        ready = self._ready_data(session.session_id)
        if d.get("shard") is not None:  # Discord echoes a sharded IDENTIFY's [id, count]
            ready["shard"] = d["shard"]
        self._dispatch_to(session, "READY", ready)
        for guild in self._guild_creates():
            self._dispatch_to(session, "GUILD_CREATE", guild)
        self.identifies += 1
        await self._notify_gateway()

    async def _resume(self, conn: Connection, d: dict[str, Any]) -> None:
        if await self._refused(conn, d):
            return
        self.resume_payloads.append(d)
        session = self.sessions.get(d.get("session_id") or "")
        if session is None:
            self.rejected_resumes += 1
            conn.put(op_frame(INVALID_SESSION, False))
            await self._notify_gateway()
            return
        seq = d.get("seq") or 0
        for frame in session.buffer:
            if frame["s"] > seq:
                conn.put(frame)
        conn.session, session.conn = session, conn
        self._dispatch_to(session, "RESUMED", {"_trace": ["fake-discord"]})
        self.resumes += 1
        await self._notify_gateway()

    def _members_chunk(self, session: Session, d: dict[str, Any]) -> None:
        guild_id = str(d.get("guild_id"))
        chunk = {"guild_id": guild_id, "members": self._guild_members(guild_id),
                 "chunk_index": 0, "chunk_count": 1, "not_found": []}
        if d.get("nonce"):
            chunk["nonce"] = d["nonce"]
        self._dispatch_to(session, "GUILD_MEMBERS_CHUNK", chunk)

    async def _notify_gateway(self) -> None:
        async with self._gateway_changed:
            self._gateway_changed.notify_all()
