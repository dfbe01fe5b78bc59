"""Reading back what a channel holds, and creating at most once (`HistoryMixin`).

`GET /channels/{id}/messages` pages over every message the fake knows in the channel (the
users', including those written while the bot was offline with `user_message(...,
dispatch=False)`, system messages, and the bot's own; never ephemeral ones), newest first
as Discord returns them: `before=X` the `limit` messages just older than X, `after=X` the
`limit` messages just newer than X, `around=X` up to limit//2 older ones plus the rest
from X on; `limit` 1-100, default 50; at most one of before/after/around (a 400 for more:
the fake's choice, Discord documents them as exclusive). REST reads leave out a create's
`nonce`, and redact guild messages while the application's Message Content intent is off.

`POST /channels/{id}/messages` with a `nonce` (at most 25 characters) records it on the
stored message (`stored[id]["nonce"]`, `SentMessage.nonce`, the create's answer and its
MESSAGE_CREATE). With `enforce_nonce: true`, a nonce the bot used in the same channel within
`nonce_window_s` (300) returns that earlier message (same id, nothing new created or
dispatched; its id is appended to `nonce_replays`); without it a repeated nonce creates
a new message.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from tests.harness import discord_payloads as p
from tests.harness.discord_gateway import content_visible, redacted
from tests.harness.discord_payloads import BOT_ID
from tests.harness.discord_world import is_ephemeral

MAX_NONCE = 25
ANCHORS = ("around", "before", "after")


class HistoryMixin:
    """Channel history, REST views of stored messages, nonces; the host is FakeDiscord."""

    if TYPE_CHECKING:
        stored: dict[str, dict[str, Any]]
        channels: dict[str, dict[str, Any]]

        @property
        def message_content_enabled(self) -> bool: ...
        def _channel(self, channel_id: str) -> dict[str, Any]: ...

    def _init_history(self) -> None:
        self.nonce_window_s = 300.0
        self.nonce_replays: list[str] = []
        self._nonces: dict[tuple[str, str, str], tuple[str, float]] = {}

    def history(self, channel_id: str) -> list[dict[str, Any]]:
        """Every message the channel holds, oldest first (what the pages are cut from)."""
        messages = (m for m in self.stored.values()
                    if m["channel_id"] == channel_id and not is_ephemeral(m))
        return sorted(messages, key=lambda m: int(m["id"]))

    def rest_view(self, message: dict[str, Any]) -> dict[str, Any]:
        """A stored message as a REST read returns it."""
        shown = {k: v for k, v in message.items() if k != "nonce"}
        in_guild = self.channels[message["channel_id"]].get("guild_id") is not None
        if not self.message_content_enabled and not content_visible(shown, in_guild):
            return redacted(shown)
        return shown

    async def _get_history(self, request: web.Request) -> Any:
        channel_id = request.match_info["cid"]
        self._channel(channel_id)
        query = request.query
        limit = _number(query, "limit", 50)
        if not 1 <= limit <= 100:
            code, bound = (("NUMBER_TYPE_MIN", "greater than or equal to 1") if limit < 1
                           else ("NUMBER_TYPE_MAX", "less than or equal to 100"))
            raise p.form_error(["limit"], code, f"int value should be {bound}.")
        anchors = [a for a in ANCHORS if a in query]
        if len(anchors) > 1:
            raise p.form_error([anchors[1]], "BASE_TYPE_INVALID",
                               f"Only one of {', '.join(ANCHORS)} may be given.")
        page = _page(self.history(channel_id), anchors[0] if anchors else None,
                     _number(query, anchors[0], 0) if anchors else 0, limit)
        return [self.rest_view(m) for m in reversed(page)]

    # --- nonces ---------------------------------------------------------------------------
    def _replayed(self, channel_id: str, payload: dict[str, Any]) -> dict[str, Any] | None:
        """The earlier message an enforced nonce names, if it is recent and still there."""
        nonce = payload.get("nonce")
        if nonce is None:
            return None
        if len(str(nonce)) > MAX_NONCE:
            raise p.form_error(["nonce"], "BASE_TYPE_MAX_LENGTH",
                               f"Must be {MAX_NONCE} or fewer in length.")
        seen = self._nonces.get((channel_id, BOT_ID, str(nonce)))
        if not payload.get("enforce_nonce") or seen is None:
            return None
        message_id, at = seen
        if time.monotonic() - at > self.nonce_window_s or message_id not in self.stored:
            return None
        self.nonce_replays.append(message_id)
        return self.stored[message_id]

    def _remember_nonce(self, message: dict[str, Any], payload: dict[str, Any]) -> None:
        nonce = payload.get("nonce")
        if nonce is not None:
            message["nonce"] = nonce
            self._nonces[(message["channel_id"], BOT_ID, str(nonce))] = (message["id"],
                                                                        time.monotonic())


def _number(query: Any, name: str, default: int) -> int:
    raw = query.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise p.form_error([name], "NUMBER_TYPE_COERCE",
                           f"Value \"{raw}\" is not int.") from None


def _page(messages: list[dict[str, Any]], anchor: str | None, anchor_id: int,
          limit: int) -> list[dict[str, Any]]:
    """The chosen messages, oldest first."""
    if anchor == "after":
        return [m for m in messages if int(m["id"]) > anchor_id][:limit]
    if anchor == "around":
        older = [m for m in messages if int(m["id"]) < anchor_id]
        older = older[max(0, len(older) - limit // 2):] if limit // 2 else []
        newer = [m for m in messages if int(m["id"]) >= anchor_id][:limit - len(older)]
        return older + newer
    if anchor == "before":
        messages = [m for m in messages if int(m["id"]) < anchor_id]
    return messages[-limit:]
