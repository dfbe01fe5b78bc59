"""Interaction callbacks and their webhooks for the fake Discord (`InteractionsMixin`).

Discord's order: one callback per interaction (40060 for a second), within
`interaction_deadline_s` (10062 after it); webhook follow-ups and edits only after the
acknowledgement (10015 before). A deferred ("thinking…") original is filled by the first
follow-up or an edit.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from tests.harness import discord_commands as c
from tests.harness import discord_payloads as p
from tests.harness.discord_payloads import APP_ID, LOADING, ApiError
from tests.harness.discord_world import Callback, InteractionState, is_ephemeral

TRUE = ("1", "true", "True")
CALLBACK_TYPES = (4, 5, 6, 7, 8, 9, 12)


class InteractionsMixin:
    """REST handlers for `/interactions/...` and `/webhooks/...`; the host is FakeDiscord."""

    if TYPE_CHECKING:
        interactions: dict[str, InteractionState]
        stored: dict[str, dict[str, Any]]
        callbacks: list[Callback]
        interaction_deadline_s: float

        def _create(self, channel_id: str, payload: dict[str, Any], files: p.Files,
                    state: InteractionState | None = None, where: tuple[str, ...] = (), *,
                    check: bool = True) -> dict[str, Any]: ...
        async def _sent(self, message: dict[str, Any], payload: dict[str, Any], via: str,
                        state: InteractionState | None = None, *,
                        event: str = "MESSAGE_CREATE") -> None: ...
        async def _edit(self, message: dict[str, Any], payload: dict[str, Any],
                        files: p.Files, via: str,
                        state: InteractionState | None = None) -> dict[str, Any]: ...
        async def _delete(self, message: dict[str, Any]) -> None: ...
        def _announce(self, event: str, data: dict[str, Any]) -> None: ...
        def _on_gateway(self, message: dict[str, Any]) -> dict[str, Any]: ...
        async def _notify(self) -> None: ...

    async def _callback(self, request: web.Request) -> Any:
        state = self.interactions.get(request.match_info["iid"])
        if state is None or state.token != request.match_info["token"]:
            raise p.unknown("interaction")
        payload, files = await p.read_body(request)
        seen = Callback(state.id, payload.get("type"), payload.get("data") or {},
                        time.monotonic() - state.dispatched_at)
        try:
            message = await self._acknowledge(state, seen, files)
        except ApiError as error:
            self.callbacks.append(dataclasses.replace(seen, status=error.status,
                                                      code=error.code))
            await self._notify()
            raise
        self.callbacks.append(seen)
        await self._notify()
        if request.query.get("with_response") not in TRUE:
            return None
        return c.callback_response(state.id, seen.type or 0, message)

    async def _acknowledge(self, state: InteractionState, seen: Callback,
                           files: p.Files) -> dict[str, Any] | None:
        """Discord's order: acknowledged once (40060), within the deadline (10062)."""
        if state.acked:
            raise ApiError(400, 40060, "Interaction has already been acknowledged.")
        if seen.elapsed > self.interaction_deadline_s:
            raise p.unknown("interaction")
        if seen.type not in CALLBACK_TYPES:
            raise p.form_error(["type"], "BASE_TYPE_CHOICES",
                               f"Value must be one of {set(CALLBACK_TYPES)}.")
        message = None
        if seen.type == 4:
            message = self._create(state.channel_id, seen.data, files, state, ("data",))
        elif seen.type == 5:  # a "thinking…" original, filled by an edit or the 1st follow-up
            flags = LOADING | int(seen.data.get("flags") or 0)
            message = self._create(state.channel_id, {"content": "", "flags": flags}, [],
                                   state, check=False)
            state.filled = False
        state.acked = True
        if message is not None:
            state.original_id = message["id"]
            if seen.type == 4:
                await self._sent(message, seen.data, "callback", state)
            elif not is_ephemeral(message):
                self._announce("MESSAGE_CREATE", self._on_gateway(message))
        return message

    def _hook(self, request: web.Request) -> InteractionState:
        """The interaction behind a webhook token; 10015 unless it was acknowledged."""
        token = request.match_info["token"]
        state = next((s for s in self.interactions.values() if s.token == token), None)
        if request.match_info["app"] != APP_ID or state is None or not state.acked:
            raise p.unknown("Webhook")
        return state

    def _hook_message(self, request: web.Request) -> tuple[InteractionState, dict[str, Any]]:
        state, message_id = self._hook(request), request.match_info["mid"]
        if message_id == "@original":
            message_id = state.original_id or ""
        if message_id not in state.message_ids or message_id not in self.stored:
            raise p.unknown("Message")
        return state, self.stored[message_id]

    async def _followup(self, request: web.Request) -> Any:
        state = self._hook(request)
        payload, files = await p.read_body(request)
        original = self.stored.get(state.original_id or "")
        if not state.filled and original is not None:  # the 1st follow-up replaces "thinking…"
            message = await self._edit(original, payload, files, "followup", state)
            state.filled = True
        else:
            message = self._create(state.channel_id, payload, files, state)
            await self._sent(message, payload, "followup", state)
        return message if request.query.get("wait") in TRUE else None

    async def _get_hook_message(self, request: web.Request) -> Any:
        return self._hook_message(request)[1]

    async def _patch_hook_message(self, request: web.Request) -> Any:
        state, message = self._hook_message(request)
        payload, files = await p.read_body(request)
        edited = await self._edit(message, payload, files, "edit", state)
        state.filled = state.filled or message["id"] == state.original_id
        return edited

    async def _delete_hook_message(self, request: web.Request) -> Any:
        await self._delete(self._hook_message(request)[1])
