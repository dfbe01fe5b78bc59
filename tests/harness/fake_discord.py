"""Fake Discord (REST under /api/v10 and the gateway at /gateway) for the real discord.py.

Point discord.py at it with `patched_endpoints(fake)`. Build the world first (`add_guild`,
`add_channel`, `add_thread`, `add_role`, `add_member`, `dm_channel`, `group_dm`), then push
events (`user_message`, `interaction`) and read what the bot did (`messages`, `callbacks`,
`followups`, `typing_count`). REST answers follow Discord's rules: 2000 characters,
no empty messages, one callback per interaction within `interaction_deadline_s`, and
webhooks only after an acknowledgement. Messages the bot sends come back to it as
MESSAGE_CREATE, as on Discord. The gateway lives in `discord_gateway.py`.

Knobs for Discord's edges (what discord.py 2.7 makes of them in brackets):
- System messages (`discord_events.py`): `pin_notice`, `join_notice`, `boost_notice`,
  `thread_created_notice`, `rename_notice`, `recipient_notice`, `call_notice`,
  `automod_notice`, `poll_result_notice`; `system_message(channel, kind)` for any type.
  [`message.type` is the `discord.MessageType` of Discord's number (`SYSTEM_TYPES` in
  `discord_messages.py`); `is_system()` is True for all of them but `poll_result`, which
  discord.py counts as ordinary (like default, reply and the command types);
  `system_content` renders the English line; a group DM's messages land in a DMChannel.]
- Forwards: `forward_message(channel, source_id | content=, attachments=)`: empty content,
  `message_reference.type` 1, flag 1 << 14, one `message_snapshots` entry. [`reference.type`
  is `MessageReferenceType.forward`, `flags.forwarded`; `message.message_snapshots` is a
  list of `MessageSnapshot` with `type content embeds attachments created_at edited_at flags
  stickers components` (no id, author or channel); its Attachments `read()` from the CDN.
  A snapshot without `edited_timestamp` raises KeyError out of `Client.connect()`: the
  fake sends null.]
- Deletes: `delete_message(id)` (MESSAGE_DELETE), `delete_messages(ids)` (MESSAGE_DELETE_BULK,
  one guild channel); GET answers 10008 afterwards and the CDN drops the files.
  [`on_message_delete` / `on_bulk_message_delete` for messages in the client's cache,
  `on_raw_*` always.]
- History: `GET /channels/{id}/messages` (`discord_history.py`); `user_message(...,
  dispatch=False)` writes while the bot is offline. [`channel.history()` works in every
  direction; `after=` yields oldest first.]
- Nonces: `nonce`/`enforce_nonce` on creates (`discord_history.py`). [`send(nonce=...)`
  always sets `enforce_nonce`; `Message.nonce` on the answer and the echo, None on GETs.]
- Fatal closes: `close_gateway(code)` now, `refuse_identify(code)` on every IDENTIFY and
  RESUME until `refuse_identify(None)`. [`Client.connect()` raises
  `discord.errors.ConnectionClosed` (`.code`) for 4004, 4010, 4011, 4012, 4013 and closes
  the client; `discord.errors.PrivilegedIntentsRequired` for 4014; never `LoginFailure`,
  which only `login()` raises on a REST 401. Any other code is resumed.]
- Application flags: `app_flags`, `set_message_content_intent(enabled, limited=True)`;
  READY carries them too. Off: an IDENTIFY with the intent is closed with 4014; without it,
  guild messages arrive (and REST reads return) without content, embeds, attachments and
  components unless they mention the bot or are the bot's; DMs keep theirs.
  [`(await client.application_info()).flags`, `client.application_flags`.]
- Commands: `GET /applications/{app}/commands`; `delete_registered_commands(guild_id=None)`.
- REST outages: `fail_for(path_substring, status, seconds)`, `answer_late(path_substring,
  seconds)` (`discord_faults.py`). [500/502/504 are retried after 1, 3, 5, 7 s, then
  `DiscordServerError`; a 503 is `DiscordServerError` at once.]
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import yarl
from aiohttp import web
from discord.gateway import DiscordWebSocket
from discord.http import Route

from tests.harness import discord_commands as c
from tests.harness import discord_payloads as p
from tests.harness.base import FakeServer, json_response
from tests.harness.discord_events import EventsMixin
from tests.harness.discord_faults import FaultsMixin
from tests.harness.discord_gateway import GatewayMixin
from tests.harness.discord_history import HistoryMixin
from tests.harness.discord_interactions import InteractionsMixin
from tests.harness.discord_payloads import APP_ID, BOT_ID, DEFAULT_USER_ID, ApiError
from tests.harness.discord_world import Callback, SentMessage, WorldMixin, is_ephemeral

__all__ = ["APP_ID", "BOT_ID", "DEFAULT_TOKEN", "DEFAULT_USER_ID", "Callback", "FakeDiscord",
           "SentMessage", "patched_endpoints"]

DEFAULT_TOKEN = "MTMxMDAwMDAwMDAwMDAwMDAwMQ.GfAkE0.threadline-fake-discord-token"
Handler = Callable[[web.Request], Awaitable[Any]]  # returns JSON, or None for a 204


@dataclasses.dataclass
class _RateLimit:
    path: str
    retry_after: float
    is_global: bool
    times: int


@contextlib.contextmanager
def patched_endpoints(fake: FakeDiscord) -> Iterator[FakeDiscord]:
    """Point discord.py's REST base and default gateway at the fake; restore afterwards."""
    old_base, old_gateway = Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY
    Route.BASE = fake.api_base
    DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(fake.gateway_url)
    try:
        yield fake
    finally:
        Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY = old_base, old_gateway


class FakeDiscord(FaultsMixin, HistoryMixin, EventsMixin, InteractionsMixin, GatewayMixin,
                  WorldMixin, FakeServer):
    """Discord fake. The world: `guilds`, `channels`, `users`, `stored` (messages by id).
    What the bot did: `outbox`, `callbacks`, `typing`, `command_syncs`, `rate_limited`."""

    def __init__(self, token: str = DEFAULT_TOKEN, *, heartbeat_interval_ms: int = 41250,
                 host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host=host, port=port)
        self.token = token
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.interaction_deadline_s = 3.0
        self.command_syncs: list[list[dict[str, Any]]] = []
        self.callbacks: list[Callback] = []
        self.typing: dict[str, list[float]] = defaultdict(list)
        self.rate_limited: list[tuple[str, float]] = []  # (path, time.monotonic())
        self._rate_limits: list[_RateLimit] = []
        self._cdn_failures: list[int] = []
        self._init_world()
        self._init_gateway()
        self._init_history()
        self._init_faults()

    @property
    def api_base(self) -> str:
        return f"{self.url}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://{self.host}:{self.port}/gateway"

    @property
    def cdn_base(self) -> str:
        """Where attachment URLs point: the fake serves `/attachments/{channel}/{id}/{name}`
        like cdn.discordapp.com (and media.discordapp.net), so `Attachment.read()` works."""
        return self.url

    # --- knobs ----------------------------------------------------------------------------
    def rate_limit_next(self, path_substring: str, retry_after: float, *, times: int = 1,
                        is_global: bool = False) -> None:
        """A 429 for each of the next `times` requests whose path contains the substring."""
        self._rate_limits.append(_RateLimit(path_substring, retry_after, is_global, times))

    def fail_attachment_next(self, status: int = 404, times: int = 1) -> None:
        """The next `times` CDN downloads get `status` (404: the attachment is gone, 403:
        the signed URL expired). The base `fail_next` leaves the CDN alone."""
        self._cdn_failures.extend([status] * times)

    def attachment_urls(self, message_id: str) -> list[str]:
        """The CDN URLs of a stored message's attachments, in order."""
        return [a["url"] for a in self.stored[message_id]["attachments"]]

    def reset(self) -> None:
        super().reset()
        self._rate_limits.clear()
        self._cdn_failures.clear()
        self._outages.clear()
        self._late.clear()

    # --- what the bot did -------------------------------------------------------------------
    def messages(self, channel_id: str | None = None) -> list[SentMessage]:
        """Accepted writes (sends, responses, follow-ups, edits) in order, in one channel
        or all; an edit is logged as another entry with the same id."""
        if channel_id is None:
            return list(self.outbox)
        return list(self.outbox_by_channel.get(channel_id, ()))

    def followups(self, interaction_id: str) -> list[SentMessage]:
        return [m for m in self.outbox if m.interaction_id == interaction_id
                and m.via == "followup"]

    def typing_count(self, channel_id: str) -> int:
        return len(self.typing.get(channel_id, ()))

    async def wait_for_messages(self, channel_id: str, count: int = 1,
                                timeout: float = 5.0) -> list[SentMessage]:  # noqa: ASYNC109
        await self._wait_until(lambda: len(self.messages(channel_id)) >= count,
                               f"{count} message(s) in channel {channel_id}", timeout)
        return self.messages(channel_id)

    async def wait_for_followups(self, interaction_id: str, count: int = 1,
                                 timeout: float = 5.0) -> list[SentMessage]:  # noqa: ASYNC109
        await self._wait_until(lambda: len(self.followups(interaction_id)) >= count,
                               f"{count} follow-up(s) to {interaction_id}", timeout)
        return self.followups(interaction_id)

    async def wait_for_callback(self, interaction_id: str,
                                timeout: float = 5.0) -> Callback:  # noqa: ASYNC109
        """The first callback (accepted or not) for the interaction."""
        def first() -> Callback | None:
            return next((c for c in self.callbacks if c.interaction_id == interaction_id), None)

        await self._wait_until(lambda: first() is not None,
                               f"callback for interaction {interaction_id}", timeout)
        return first()  # type: ignore[return-value]

    async def _wait_until(self, done: Callable[[], bool], what: str,
                          timeout: float) -> None:  # noqa: ASYNC109
        try:
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(done)
        except TimeoutError:
            sent = [(m.via, m.channel_id, m.content[:30]) for m in self.outbox]
            raise AssertionError(f"no {what} within {timeout}s; outbox: {sent}; callbacks: "
                                 f"{self.callbacks}") from None

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # --- server -----------------------------------------------------------------------------
    def routes(self) -> list[web.RouteDef]:
        bot, hook = True, False  # webhook-token routes carry no Authorization header
        table: list[tuple[str, str, Handler, bool]] = [
            ("GET", "/users/@me", self._get_me, bot),
            ("GET", "/oauth2/applications/@me", self._get_app, bot),
            ("GET", "/gateway", self._get_gateway, bot),
            ("GET", "/gateway/bot", self._get_gateway, bot),
            ("POST", "/users/@me/channels", self._open_dm, bot),
            ("GET", "/channels/{cid}", self._get_channel, bot),
            ("GET", "/channels/{cid}/messages", self._get_history, bot),
            ("POST", "/channels/{cid}/messages", self._post_message, bot),
            ("GET", "/channels/{cid}/messages/{mid}", self._get_message, bot),
            ("PATCH", "/channels/{cid}/messages/{mid}", self._patch_message, bot),
            ("DELETE", "/channels/{cid}/messages/{mid}", self._delete_message, bot),
            ("POST", "/channels/{cid}/typing", self._typing, bot),
            ("GET", "/applications/{app}/commands", self._get_commands, bot),
            ("PUT", "/applications/{app}/commands", self._put_commands, bot),
            ("GET", "/applications/{app}/guilds/{gid}/commands", self._get_commands, bot),
            ("PUT", "/applications/{app}/guilds/{gid}/commands", self._put_commands, bot),
            ("POST", "/interactions/{iid}/{token}/callback", self._callback, hook),
            ("POST", "/webhooks/{app}/{token}", self._followup, hook),
            ("GET", "/webhooks/{app}/{token}/messages/{mid}", self._get_hook_message, hook),
            ("PATCH", "/webhooks/{app}/{token}/messages/{mid}", self._patch_hook_message, hook),
            ("DELETE", "/webhooks/{app}/{token}/messages/{mid}", self._delete_hook_message,
             hook)]
        return [web.get("/gateway", self._gateway),
                web.get("/attachments/{cid}/{aid}/{filename}", self._cdn_download),
                *(web.route(method, "/api/v10" + path, self._guard(handler, auth))
                  for method, path, handler, auth in table),
                web.route("*", "/api/v10/{tail:.*}", self._guard(self._not_found, False))]

    def error_body(self, status: int, message: str) -> Any:
        return {"message": message, "code": 0}

    def injectable(self, request: web.Request) -> bool:
        # base fail_next/delay_next: REST only (not the gateway, not the CDN)
        return request.path != "/gateway" and not request.path.startswith("/attachments/")

    async def stop(self) -> None:
        await self._close_gateway()
        await super().stop()

    def _guard(self, handler: Handler, auth: bool) -> Callable[[web.Request],
                                                               Awaitable[web.Response]]:
        """Outages, auth, injected 429s, ApiError → Discord's error body, JSON or 204 out,
        late answers."""
        async def guarded(request: web.Request) -> web.Response:
            refused = self._outage(request)
            if refused is None and auth and (request.headers.get("Authorization")
                                             != f"Bot {self.token}"):
                refused = json_response({"message": "401: Unauthorized", "code": 0}, 401)
            if refused is not None:
                return refused
            limited = self._take_rate_limit(request)
            if limited is not None:
                return limited
            response = await answer(request)
            await self._answer_late(request)
            return response

        async def answer(request: web.Request) -> web.Response:
            try:
                result = await handler(request)
            except ApiError as error:
                return error.response()
            except Exception as error:  # a fake bug: a 500 would make discord.py retry for 25 s
                return json_response({"message": f"fake bug: {error!r}", "code": -1}, 400)
            return web.Response(status=204) if result is None else json_response(result)
        return guarded

    def _take_rate_limit(self, request: web.Request) -> web.Response | None:
        entry = next((e for e in self._rate_limits if e.path in request.path), None)
        if entry is None:
            return None
        entry.times -= 1
        if entry.times <= 0:
            self._rate_limits.remove(entry)
        self.rate_limited.append((request.path, time.monotonic()))
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else request.path
        bucket = hashlib.sha1(f"{request.method} {route}".encode()).hexdigest()[:32]
        return p.rate_limited(entry.retry_after, bucket, is_global=entry.is_global)

    # --- CDN ----------------------------------------------------------------------------------
    async def _cdn_download(self, request: web.Request) -> web.Response:
        """An attachment's bytes, with its content type, as the CDN sends them. No auth: the
        URL's signature is the key (the fake does not check it)."""
        if self._cdn_failures:
            status = self._cdn_failures.pop(0)
            return web.Response(status=status, text="This content is no longer available.")
        m = request.match_info
        file = self.cdn.get((m["cid"], m["aid"], m["filename"]))
        if file is None:
            return web.Response(status=404, text="This content is no longer available.")
        return web.Response(body=file.data, headers={
            "Content-Type": file.reported_type or "application/octet-stream"})

    # --- REST: identity, channels, messages -------------------------------------------------
    async def _not_found(self, request: web.Request) -> Any:
        raise ApiError(404, 0, f"404: Not Found (the fake has no {request.method} "
                               f"{request.path})")

    async def _get_me(self, request: web.Request) -> Any:
        return self.users[BOT_ID]

    async def _get_app(self, request: web.Request) -> Any:
        return p.application(self.app_flags)

    async def _get_gateway(self, request: web.Request) -> Any:
        return {"url": self.gateway_url, "shards": 1, "session_start_limit": {
            "total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}}

    async def _open_dm(self, request: web.Request) -> Any:
        body = await p.read_json(request)
        return self.channels[self.dm_channel(str(body.get("recipient_id")))]

    async def _get_channel(self, request: web.Request) -> Any:
        return self._channel(request.match_info["cid"])

    async def _post_message(self, request: web.Request) -> Any:
        channel_id = request.match_info["cid"]
        self._channel(channel_id)
        payload, files = await p.read_body(request)
        earlier = self._replayed(channel_id, payload)  # an enforced nonce seen before
        if earlier is not None:
            return earlier
        message = self._create(channel_id, payload, files)
        self._remember_nonce(message, payload)
        await self._sent(message, payload, "channel")
        return message

    def _channel_message(self, request: web.Request) -> dict[str, Any]:
        self._channel(request.match_info["cid"])
        message = self.stored.get(request.match_info["mid"])
        if (message is None or message["channel_id"] != request.match_info["cid"]
                or is_ephemeral(message)):
            raise p.unknown("Message")
        return message

    async def _get_message(self, request: web.Request) -> Any:
        return self.rest_view(self._channel_message(request))

    async def _patch_message(self, request: web.Request) -> Any:
        message = self._channel_message(request)
        payload, files = await p.read_body(request)
        return await self._edit(message, payload, files, "edit")

    async def _delete_message(self, request: web.Request) -> Any:
        message = self._channel_message(request)
        if message["author"]["id"] != BOT_ID:  # the bot has no Manage Messages
            raise ApiError(403, 50013, "Missing Permissions")
        await self._delete(message)

    async def _typing(self, request: web.Request) -> Any:
        channel_id = request.match_info["cid"]
        self._channel(channel_id)
        self.typing[channel_id].append(time.monotonic())
        await self._notify()

    # --- REST: application commands ---------------------------------------------------------
    def _command_scope(self, request: web.Request) -> str | None:
        guild_id = request.match_info.get("gid")
        if request.match_info["app"] != APP_ID or (guild_id and guild_id not in self.guilds):
            raise ApiError(403, 50001, "Missing Access")
        return guild_id

    async def _get_commands(self, request: web.Request) -> Any:
        return self.commands.get(self._command_scope(request), [])

    async def _put_commands(self, request: web.Request) -> Any:
        """Bulk overwrite; a command keeps its id across syncs while its name stays."""
        scope, body = self._command_scope(request), await p.read_json(request)
        if not isinstance(body, list):
            raise p.form_error([], "BASE_TYPE_ARRAY", "Must be an array.")
        for index, command in enumerate(body):
            c.check_command(command, str(index))
        self.command_syncs.append(body)
        old = {cmd["name"]: cmd["id"] for cmd in self.commands.get(scope, [])}
        self.commands[scope] = [c.app_command(cmd, old.get(cmd["name"]) or self.ids.next(),
                                              self.ids.next(), scope) for cmd in body]
        return self.commands[scope]
