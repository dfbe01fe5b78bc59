"""Slash commands and interactions in the shapes Discord sends and discord.py parses:
a synced command, INTERACTION_CREATE for one, and the callback's answer."""

from __future__ import annotations

import re
from typing import Any

from tests.harness.discord_payloads import APP_ID, ATTACHMENT_LIMIT, EPHEMERAL, form_error


def check_command(command: dict[str, Any], index: str) -> None:
    """A slash command's name (1-32 lower-case word characters) and description (1-100)."""
    if command.get("type", 1) != 1:
        return
    name = command.get("name") or ""
    if not re.fullmatch(r"[-_'\w]{1,32}", name) or name != name.lower():
        raise form_error((index, "name"), "APPLICATION_COMMAND_INVALID_NAME",
                         "Command name is invalid")
    if not 1 <= len(command.get("description") or "") <= 100:
        raise form_error((index, "description"), "BASE_TYPE_BAD_LENGTH",
                         "Must be between 1 and 100 in length.")


def app_command(body: dict[str, Any], command_id: str, version: str,
                guild_id: str | None) -> dict[str, Any]:
    """A command as Discord stores it after a sync."""
    data = {"type": 1, "default_member_permissions": None, "nsfw": False,
            "contexts": None, "integration_types": [0], "options": [], **body,
            "id": command_id, "application_id": APP_ID, "version": version}
    if guild_id is not None:
        data["guild_id"] = guild_id
    return data


def command_options(options: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Interaction options: str → type 3, bool → 5, int → 4, float → 10."""
    result = []
    for name, value in (options or {}).items():
        kind = (5 if isinstance(value, bool) else 4 if isinstance(value, int)
                else 10 if isinstance(value, float) else 3)
        result.append({"name": name, "type": kind, "value": value})
    return result


def interaction(interaction_id: str, token: str, command: dict[str, Any],
                channel: dict[str, Any], *, user_data: dict[str, Any],
                member_data: dict[str, Any] | None, app_permissions: int) -> dict[str, Any]:
    """INTERACTION_CREATE for an application command: `member` in guilds, `user` in DMs."""
    data: dict[str, Any] = {
        "id": interaction_id, "application_id": APP_ID, "type": 2, "data": command,
        "token": token, "version": 1, "channel": channel, "channel_id": channel["id"],
        "app_permissions": str(app_permissions), "locale": "en-US", "entitlements": [],
        "entitlement_sku_ids": [], "attachment_size_limit": ATTACHMENT_LIMIT}
    guild_id = channel.get("guild_id")
    if guild_id is None:  # a DM with the bot
        return {**data, "user": user_data, "context": 1,
                "authorizing_integration_owners": {"0": "0"}}
    return {**data, "guild_id": guild_id, "member": member_data, "guild_locale": "en-US",
            "guild": {"id": guild_id, "locale": "en-US", "features": []}, "context": 0,
            "authorizing_integration_owners": {"0": guild_id}}


def callback_response(interaction_id: str, kind: int,
                      message: dict[str, Any] | None) -> dict[str, Any]:
    """An InteractionCallbackResponse (`?with_response=1`): what discord.py's
    `InteractionCallbackResponse` reads, with the created message as the resource."""
    answer: dict[str, Any] = {"id": interaction_id, "type": 2,
                              "response_message_loading": kind == 5,
                              "response_message_ephemeral": bool(
                                  message and message["flags"] & EPHEMERAL)}
    if message is None:
        return {"interaction": answer, "resource": {"type": kind}}
    answer["response_message_id"] = message["id"]
    return {"interaction": answer, "resource": {"type": kind, "message": message}}
