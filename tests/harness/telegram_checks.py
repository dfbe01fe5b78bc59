"""Bot API wire rules for the fake Telegram server: parameters, errors, text and entities.

Parameters arrive as form fields (strings raw, everything else JSON-encoded, which is
how python-telegram-bot sends them), as a JSON body, or in the query string.
"""

from __future__ import annotations

import json
import re
import time
from http import HTTPStatus
from typing import Any

from aiohttp import web

from tests.harness.base import json_response
from tests.harness.telegram_updates import chat_dict

MAX_TEXT_UNITS = 4096
ENTITY_TYPES = frozenset({
    "mention", "hashtag", "cashtag", "bot_command", "url", "email", "phone_number", "bold",
    "italic", "underline", "strikethrough", "spoiler", "blockquote", "expandable_blockquote",
    "code", "pre", "text_link", "text_mention", "custom_emoji", "date_time"})
# Entity types that mean nothing without an extra field.
_NEEDS = {"text_link": "url", "text_mention": "user", "custom_emoji": "custom_emoji_id",
          "date_time": "unix_time"}
_COMMAND_NAME = re.compile(r"^[a-z0-9_]{1,32}$")
_DEFAULT_DESCRIPTIONS = {400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
                         409: "Conflict", 429: "Too Many Requests: retry after 1",
                         500: "Internal Server Error", 502: "Bad Gateway"}


class ApiError(Exception):
    """A Bot API error answer; raise it from a method handler."""

    def __init__(self, status: int, description: str | None = None,
                 parameters: dict[str, Any] | None = None) -> None:
        if description is None:
            description = _DEFAULT_DESCRIPTIONS.get(status) or HTTPStatus(status).phrase
        super().__init__(description)
        self.status = status
        self.description = description
        self.parameters = parameters

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"ok": False, "error_code": self.status,
                                "description": self.description}
        if self.parameters:
            body["parameters"] = self.parameters
        return body

    def response(self) -> web.Response:
        return json_response(self.body(), self.status)


class Params:
    """One request's parameters, decoded the way the Bot API decodes them."""

    def __init__(self, values: dict[str, Any], request: web.Request) -> None:
        self.values = values
        self.request = request

    @classmethod
    async def read(cls, request: web.Request) -> Params:
        values: dict[str, Any] = dict(request.query)
        if request.content_type in ("multipart/form-data", "application/x-www-form-urlencoded"):
            values.update(await request.post())  # cached: the base server read it already
        elif request.content_type == "application/json" and request.body_exists:
            try:
                body = await request.json()
            except ValueError:
                raise ApiError(400, "Bad Request: can't parse JSON request body") from None
            if isinstance(body, dict):
                values.update(body)
        return cls(values, request)

    def text(self, name: str) -> str | None:
        value = self.values.get(name)
        return value if value is None or isinstance(value, str) else str(value)

    def json(self, name: str) -> Any:
        value = self.values.get(name)
        if not isinstance(value, str):
            return value
        try:
            return json.loads(value)
        except ValueError:
            raise ApiError(400, f"Bad Request: can't parse {name} JSON object") from None

    def int(self, name: str) -> int | None:
        value = self.json(name)
        if value is None or isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ApiError(400, f"Bad Request: wrong parameter {name} in request")

    def float(self, name: str) -> float | None:
        value = self.json(name)
        if value is None or isinstance(value, int | float) and not isinstance(value, bool):
            return value
        raise ApiError(400, f"Bad Request: wrong parameter {name} in request")

    def bool(self, name: str) -> bool:
        return self.values.get(name) in (True, "true", "True", "1", 1)

    def chat_id(self) -> int | str:
        """An integer chat id, or "@channelname" as a string."""
        value = self.text("chat_id")
        if not value:
            raise ApiError(400, "Bad Request: chat_id is empty")
        if value.startswith("@"):
            return value
        try:
            return int(value)
        except ValueError:
            raise ApiError(400, "Bad Request: chat not found") from None

    def entities(self) -> list[dict[str, Any]]:
        value = self.values.get("entities")
        if value is None:
            return []
        try:
            entities = json.loads(value) if isinstance(value, str) else value
        except ValueError:
            entities = None
        if not isinstance(entities, list) or not all(isinstance(e, dict) for e in entities):
            raise ApiError(400, "Bad Request: can't parse entities JSON object")
        return entities


def _units(text: str) -> list[int]:
    data = text.encode("utf-16-le")
    return [int.from_bytes(data[i:i + 2], "little") for i in range(0, len(data), 2)]


def entity_problem(units: list[int], entity: dict[str, Any]) -> str | None:
    """Why Telegram would refuse this entity on a text of these UTF-16 units, or None."""
    kind, offset, length = entity.get("type"), entity.get("offset"), entity.get("length")
    if kind not in ENTITY_TYPES:
        return f"unsupported entity type {kind!r}"
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (offset, length)) \
            or offset < 0 or length <= 0:
        return f"{kind} entity needs a non-negative offset and a positive length"
    end = offset + length
    if end > len(units):
        return (f"{kind} entity at UTF-16 offset {offset} (length {length}) runs past the "
                f"end of the text, which is {len(units)} UTF-16 code units long")
    for edge in (offset, end):
        # A low surrogate at an edge means the span cuts one character in half: the
        # offsets were counted in code points (or bytes), not UTF-16 code units.
        if edge < len(units) and 0xDC00 <= units[edge] <= 0xDFFF:
            return f"{kind} entity edge at UTF-16 offset {edge} splits a surrogate pair"
    needed = _NEEDS.get(kind)
    if needed and not entity.get(needed):
        return f"{kind} entity needs {needed!r}"
    return None


def check_text(text: str, entities: list[dict[str, Any]]) -> None:
    """Raise the ApiError Telegram answers for this message text and entities, if any."""
    if not text.strip():
        raise ApiError(400, "Bad Request: message text is empty")
    units = _units(text)
    if len(units) > MAX_TEXT_UNITS:
        raise ApiError(400, "Bad Request: message is too long")
    for entity in entities:
        problem = entity_problem(units, entity)
        if problem:
            raise ApiError(400, f"Bad Request: can't parse entities: {problem}")


def rejected_entities(text: str, entities: list[dict[str, Any]]) -> ApiError:
    """The error Telegram gives for unbalanced markup, at the first entity's byte offset."""
    offset = entities[0].get("offset", 0) if entities else 0
    head = text.encode("utf-16-le")[: 2 * offset] if isinstance(offset, int) else b""
    prefix = head.decode("utf-16-le", errors="ignore")
    return ApiError(400, "Bad Request: can't parse entities: Can't find end of the entity "
                         f"starting at byte offset {len(prefix.encode())}")


def check_commands(commands: Any) -> None:
    if not isinstance(commands, list):
        raise ApiError(400, "Bad Request: can't parse commands JSON object")
    for command in commands:
        name = command.get("command", "") if isinstance(command, dict) else ""
        description = command.get("description", "") if isinstance(command, dict) else ""
        if not _COMMAND_NAME.match(name):
            raise ApiError(400, "Bad Request: BOT_COMMAND_INVALID")
        if not 1 <= len(description) <= 256:
            raise ApiError(400, "Bad Request: command description is invalid")


def message_result(bot_user: dict[str, Any], chat_id: int | str, message_id: int, text: str,
                   entities: list[dict[str, Any]], *, thread_id: int | None = None,
                   reply_to_message: dict[str, Any] | None = None,
                   link_preview: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Message object Telegram returns for a message the bot sent."""
    if isinstance(chat_id, str):  # "@channel": Telegram resolves it to the channel
        chat: dict[str, Any] = {"id": -1000000000001, "type": "channel",
                                "title": chat_id[1:], "username": chat_id[1:]}
    else:
        chat = chat_dict(chat_id)
    message: dict[str, Any] = {"message_id": message_id, "from": bot_user, "chat": chat,
                               "date": int(time.time()), "text": text}
    optional = {"entities": entities or None, "message_thread_id": thread_id,
                "reply_to_message": reply_to_message, "link_preview_options": link_preview}
    message.update({k: v for k, v in optional.items() if v is not None})
    return message


def chat_member(status: str, user: dict[str, Any]) -> dict[str, Any]:
    """A ChatMember object with every field PTB requires for that status."""
    member: dict[str, Any] = {"status": status, "user": user}
    if status == "creator":
        member["is_anonymous"] = False
    elif status == "administrator":
        member.update(dict.fromkeys((
            "can_manage_chat", "can_delete_messages", "can_manage_video_chats",
            "can_restrict_members", "can_change_info", "can_invite_users", "can_post_stories",
            "can_edit_stories", "can_delete_stories", "can_pin_messages"), True))
        member.update(can_be_edited=False, is_anonymous=False, can_promote_members=False)
    return member
