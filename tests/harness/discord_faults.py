"""Discord's bad days for the fake Discord (`FaultsMixin`): outages, late answers, the
application's settings changed in the developer portal.

- `fail_for(path_substring, status, seconds)`: every REST call whose path contains the
  substring answers `status` with Discord's JSON error body until the time is up.
  discord.py retries 500/502/504/524 by itself (after 1, 3, 5, 7 s; `DiscordServerError`
  after the 5th try) but raises `DiscordServerError` at once on a 503.
- `answer_late(path_substring, seconds)`: the call does its work at once (a message is
  created and echoed on the gateway) and its HTTP answer leaves `seconds` later.
- `set_message_content_intent(enabled, limited=True)`: the application's flags
  (GATEWAY_MESSAGE_CONTENT 1 << 18 for verified apps, ..._LIMITED 1 << 19 for the portal
  toggle); `app_flags` holds them all. Off: REST reads redact guild messages like the
  gateway does (`discord_gateway.content_visible`).
- `delete_registered_commands(guild_id=None)`: commands removed on Discord's side.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from tests.harness.base import json_response
from tests.harness.discord_payloads import (
    APP_FLAGS,
    APP_FLAGS_MESSAGE_CONTENT,
    GATEWAY_MESSAGE_CONTENT,
    GATEWAY_MESSAGE_CONTENT_LIMITED,
)


@dataclass
class _Outage:
    path: str
    status: int
    until: float  # time.monotonic()


@dataclass
class _Late:
    path: str
    method: str
    seconds: float
    times: int


class FaultsMixin:
    """Fault knobs for FakeDiscord; `_guard` consults `_outage` and `_answer_late`."""

    if TYPE_CHECKING:
        commands: dict[str | None, list[dict[str, Any]]]
        _closing: asyncio.Event

    def _init_faults(self) -> None:
        self.app_flags = APP_FLAGS
        self.enforce_privileged_intents = True
        self.outage_answers: list[tuple[str, int, float]] = []  # (path, status, monotonic)
        self.late_answers: list[tuple[str, float]] = []  # (path, seconds held)
        self._outages: list[_Outage] = []
        self._late: list[_Late] = []

    # --- knobs ----------------------------------------------------------------------------
    def fail_for(self, path_substring: str, status: int = 503, seconds: float = 1.0) -> None:
        """REST calls whose path contains the substring answer `status` for `seconds`."""
        self._outages.append(_Outage(path_substring, status, time.monotonic() + seconds))

    def answer_late(self, path_substring: str, seconds: float, *, times: int = 1,
                    method: str = "POST") -> None:
        """The next `times` matching calls are done at once and answered `seconds` later."""
        self._late.append(_Late(path_substring, method, seconds, times))

    def set_message_content_intent(self, enabled: bool, *, limited: bool = True) -> None:
        """The Message Content switch in the developer portal (limited: an unverified app's
        toggle; not limited: a verified app's approval)."""
        bit = GATEWAY_MESSAGE_CONTENT_LIMITED if limited else GATEWAY_MESSAGE_CONTENT
        self.app_flags = (self.app_flags & ~APP_FLAGS_MESSAGE_CONTENT) | (bit if enabled else 0)

    @property
    def message_content_enabled(self) -> bool:
        return bool(self.app_flags & APP_FLAGS_MESSAGE_CONTENT)

    def delete_registered_commands(self, guild_id: str | None = None) -> list[dict[str, Any]]:
        """Remove the global (or one guild's) commands as the developer portal would; the
        removed commands are returned."""
        return self.commands.pop(guild_id, [])

    # --- used by the server ---------------------------------------------------------------
    def _outage(self, request: web.Request) -> web.Response | None:
        now = time.monotonic()
        self._outages = [o for o in self._outages if o.until > now]
        outage = next((o for o in self._outages if o.path in request.path), None)
        if outage is None:
            return None
        self.outage_answers.append((request.path, outage.status, now))
        try:
            phrase = http.HTTPStatus(outage.status).phrase
        except ValueError:  # Cloudflare's own, like 524
            phrase = "Error"
        return json_response({"message": f"{outage.status}: {phrase}", "code": 0},
                             outage.status)

    async def _answer_late(self, request: web.Request) -> None:
        late = next((e for e in self._late if e.path in request.path
                     and e.method == request.method), None)
        if late is None:
            return
        late.times -= 1
        if late.times <= 0:
            self._late.remove(late)
        self.late_answers.append((request.path, late.seconds))
        with contextlib.suppress(TimeoutError):  # stop() cuts the wait short
            await asyncio.wait_for(self._closing.wait(), late.seconds)
