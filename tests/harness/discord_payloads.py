"""Discord API objects for the fake Discord server, in the shapes discord.py 2.7 parses.

Ids are snowflake strings (time-based, increasing, 19 digits, so discord.py's
`<@id>` mention regex and `created_at` work). Errors are `ApiError`s with Discord's
`{"message", "code", "errors"?}` body. Builders return fresh dicts; callers may mutate them.
"""

from __future__ import annotations

import base64
import datetime as dtm
import hashlib
import json
import math
import mimetypes
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from aiohttp import web

from tests.harness.base import json_response

BOT_ID = "1310000000000000001"
APP_ID = "1310000000000000000"  # an older app: its id differs from the bot user's
OWNER_ID = "1310000000000000050"
DEFAULT_USER_ID = "1310000000000000100"
BOT_NAME = "threadline"
DISCORD_EPOCH_MS = 1420070400000
MAX_CONTENT = 2000
ATTACHMENT_LIMIT = 10 * 2**20

# Permission bits (https://discord.com/developers/docs/topics/permissions).
MANAGE_MESSAGES = 1 << 13
MANAGE_THREADS = 1 << 34
DEFAULT_PERMISSIONS = (
    (1 << 0) | (1 << 6) | (1 << 10) | (1 << 11) | (1 << 14) | (1 << 15) | (1 << 16)
    | (1 << 18) | (1 << 26) | (1 << 31) | (1 << 35) | (1 << 36) | (1 << 38))
BOT_PERMISSIONS = DEFAULT_PERMISSIONS | MANAGE_THREADS

# Gateway intent bits.
INTENT_GUILD_MEMBERS = 1 << 1
INTENT_GUILD_PRESENCES = 1 << 8
INTENT_GUILD_MESSAGES = 1 << 9
INTENT_DM_MESSAGES = 1 << 12
INTENT_MESSAGE_CONTENT = 1 << 15

# Application flags: each privileged intent's bit for verified apps and its "limited" bit
# (an unverified app whose developer-portal toggle is on). Neither: the intent is off.
APP_FLAGS_PRESENCE = (1 << 12) | (1 << 13)
APP_FLAGS_MEMBERS = (1 << 14) | (1 << 15)
GATEWAY_MESSAGE_CONTENT, GATEWAY_MESSAGE_CONTENT_LIMITED = 1 << 18, 1 << 19
APP_FLAGS_MESSAGE_CONTENT = GATEWAY_MESSAGE_CONTENT | GATEWAY_MESSAGE_CONTENT_LIMITED
APP_FLAGS = (1 << 13) | (1 << 15) | GATEWAY_MESSAGE_CONTENT_LIMITED  # all three toggled on

EPHEMERAL = 1 << 6
LOADING = 1 << 7
IS_VOICE_MESSAGE = 1 << 13  # message flag of a voice message
CDN_BASE = "https://cdn.discordapp.com"
MEDIA_BASE = "https://media.discordapp.net"
# Content types Discord reports, by extension (mimetypes varies between machines).
_CONTENT_TYPES = {
    "png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "gif": "image/gif",
    "webp": "image/webp", "ogg": "audio/ogg", "oga": "audio/ogg", "opus": "audio/ogg",
    "mp3": "audio/mpeg", "m4a": "audio/mp4", "wav": "audio/x-wav", "mp4": "video/mp4",
    "webm": "video/webm", "txt": "text/plain", "md": "text/markdown", "csv": "text/csv",
    "json": "application/json", "pdf": "application/pdf", "zip": "application/zip"}


@dataclass(frozen=True)
class AttachmentFile:
    """A file attached to a message: by a user (`user_message(attachments=...)`) or in a
    bot's upload. `content_type` None: Discord's guess from the extension (text types get
    "; charset=utf-8", as on Discord). `size` claims a size (default: len(data)); the CDN
    still serves `data`. Images get width/height (given, read from a PNG/GIF header, or
    512x512). `duration_secs` makes it a voice message (with a waveform)."""

    filename: str
    data: bytes
    content_type: str | None = None
    size: int | None = None
    width: int | None = None
    height: int | None = None
    duration_secs: float | None = None
    description: str | None = None

    @classmethod
    def of(cls, spec: AttachmentFile | tuple[Any, ...]) -> AttachmentFile:
        """An AttachmentFile, or one from (filename, data[, content_type[, size]])."""
        return spec if isinstance(spec, AttachmentFile) else cls(*spec)

    @property
    def claimed_size(self) -> int:
        return len(self.data) if self.size is None else self.size

    @property
    def reported_type(self) -> str | None:
        if self.content_type is not None:
            return self.content_type
        extension = self.filename.rsplit(".", 1)[-1].lower() if "." in self.filename else ""
        guessed = _CONTENT_TYPES.get(extension) or mimetypes.guess_type(self.filename)[0]
        if guessed and guessed.startswith("text/"):
            return f"{guessed}; charset=utf-8"
        return guessed

    def dimensions(self) -> tuple[int, int] | None:
        """(width, height) for an image: given, from the PNG/GIF header, else 512x512."""
        if not (self.reported_type or "").startswith("image/"):
            return None
        if self.width is not None and self.height is not None:
            return self.width, self.height
        data = self.data
        if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
            width, height = struct.unpack(">II", data[16:24])
            return width, height
        if data[:4] == b"GIF8" and len(data) >= 10:
            width, height = struct.unpack("<HH", data[6:10])
            return width, height
        return 512, 512


Files = list[AttachmentFile]  # the files of a multipart upload, as the fake read them


class ApiError(Exception):
    """A Discord error answer; raise it from a route handler."""

    def __init__(self, status: int, code: int, message: str,
                 errors: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.errors = status, code, message, errors

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"message": self.message, "code": self.code}
        if self.errors is not None:
            body["errors"] = self.errors
        return body

    def response(self) -> web.Response:
        return json_response(self.body(), self.status)


def unknown(what: str) -> ApiError:
    """Discord's 404 for a missing object: "Unknown Channel" (10003) and friends."""
    codes = {"Channel": 10003, "Message": 10008, "Webhook": 10015, "interaction": 10062,
             "Application": 10002, "Guild": 10004}
    return ApiError(404, codes[what], f"Unknown {what}")


def form_error(path: Iterable[str], code: str, message: str) -> ApiError:
    """400 "Invalid Form Body" (50035) with the error nested under `path`."""
    errors: dict[str, Any] = {"_errors": [{"code": code, "message": message}]}
    for key in reversed(list(path)):
        errors = {key: errors}
    return ApiError(400, 50035, "Invalid Form Body", errors)


def check_message_body(body: dict[str, Any], *, prefix: tuple[str, ...] = (),
                       has_files: bool = False) -> None:
    """Discord's content rules: at most 2000 characters, and never an empty message."""
    content = body.get("content") or ""
    if not isinstance(content, str):
        raise form_error((*prefix, "content"), "STRING_TYPE_CONVERT", "Could not interpret "
                         f"\"{content}\" as string.")
    if len(content) > MAX_CONTENT:
        raise form_error((*prefix, "content"), "BASE_TYPE_MAX_LENGTH",
                         f"Must be {MAX_CONTENT} or fewer in length.")
    if not (content or has_files or body.get("embeds") or body.get("sticker_ids")
            or body.get("components") or body.get("poll") or body.get("attachments")):
        raise ApiError(400, 50006, "Cannot send an empty message")


async def read_json(request: web.Request) -> Any:
    raw = await request.read()
    try:
        return json.loads(raw) if raw else {}
    except ValueError:
        raise ApiError(400, 50109, "The request body contains invalid JSON.") from None


async def read_body(request: web.Request) -> tuple[dict[str, Any], Files]:
    """A JSON body, or multipart's `payload_json` plus the uploaded files (Discord detects
    their content type itself: discord.py sends every file as application/octet-stream).
    A file over ATTACHMENT_LIMIT is a 413, as on Discord without boosts."""
    if request.content_type == "multipart/form-data":
        form = await request.post()  # cached: the base middleware read it already
        files = []
        for value in form.values():
            if isinstance(value, web.FileField):
                value.file.seek(0)
                files.append(AttachmentFile(value.filename, value.file.read()))
        if any(f.claimed_size > ATTACHMENT_LIMIT for f in files):
            raise ApiError(413, 40005, "Request entity too large")
        return json.loads(str(form.get("payload_json") or "{}")), files
    body = await read_json(request)
    return (body if isinstance(body, dict) else {}), []


class Snowflakes:
    """Increasing snowflake ids from the current time (worker/process bits left zero)."""

    def __init__(self) -> None:
        self._last = 0

    def next(self) -> str:
        now = (int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22
        self._last = max(now, self._last + 1)
        return str(self._last)


def now_iso() -> str:
    return dtm.datetime.now(dtm.UTC).isoformat()


def user(user_id: str, name: str | None = None, *, bot: bool = False) -> dict[str, Any]:
    name = name or f"user{user_id[-4:]}"
    data: dict[str, Any] = {
        "id": user_id, "username": name, "discriminator": "0",
        "global_name": None if bot else name.title(), "avatar": None, "banner": None,
        "accent_color": None, "public_flags": 0, "flags": 0,
        "avatar_decoration_data": None, "primary_guild": None, "collectibles": None}
    if bot:
        data["bot"] = True
    return data


def bot_user() -> dict[str, Any]:
    """The bot as `GET /users/@me` and READY describe it."""
    return {**user(BOT_ID, BOT_NAME, bot=True), "verified": True, "mfa_enabled": False,
            "locale": "en-US", "email": None}


def member(user_data: dict[str, Any], role_ids: Iterable[str] = (), *,
           nick: str | None = None, permissions: int | None = None,
           with_user: bool = True) -> dict[str, Any]:
    data: dict[str, Any] = {
        "roles": list(role_ids), "nick": nick, "avatar": None, "banner": None,
        "joined_at": now_iso(), "premium_since": None, "deaf": False, "mute": False,
        "flags": 0, "pending": False, "communication_disabled_until": None}
    if with_user:
        data["user"] = user_data
    if permissions is not None:
        data["permissions"] = str(permissions)
    return data


def role(role_id: str, name: str, permissions: int, position: int = 0, *,
         bot_id: str | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": role_id, "name": name, "color": 0,
        "colors": {"primary_color": 0, "secondary_color": None, "tertiary_color": None},
        "hoist": False, "icon": None, "unicode_emoji": None, "position": position,
        "permissions": str(permissions), "managed": bot_id is not None,
        "mentionable": False, "flags": 0}
    if bot_id is not None:
        data["tags"] = {"bot_id": bot_id}
    return data


def text_channel(channel_id: str, guild_id: str, name: str, position: int) -> dict[str, Any]:
    return {"id": channel_id, "type": 0, "guild_id": guild_id, "name": name,
            "position": position, "permission_overwrites": [], "parent_id": None,
            "topic": None, "nsfw": False, "last_message_id": None, "rate_limit_per_user": 0,
            "default_auto_archive_duration": 1440, "flags": 0}


def thread(thread_id: str, guild_id: str, parent_id: str, owner_id: str,
           name: str) -> dict[str, Any]:
    created = now_iso()
    return {"id": thread_id, "type": 11, "guild_id": guild_id, "parent_id": parent_id,
            "owner_id": owner_id, "name": name, "last_message_id": None,
            "rate_limit_per_user": 0, "message_count": 0, "member_count": 1,
            "total_message_sent": 0, "flags": 0,
            "thread_metadata": {"archived": False, "auto_archive_duration": 1440,
                                "archive_timestamp": created, "locked": False,
                                "create_timestamp": created}}


def dm_channel(channel_id: str, recipient: dict[str, Any]) -> dict[str, Any]:
    return {"id": channel_id, "type": 1, "last_message_id": None, "flags": 0,
            "recipients": [recipient]}


def guild(guild_id: str, name: str, *, owner_id: str = OWNER_ID) -> dict[str, Any]:
    """A guild without roles/channels/threads/members (GUILD_CREATE adds those)."""
    return {
        "id": guild_id, "name": name, "icon": None, "splash": None, "discovery_splash": None,
        "banner": None, "description": None, "owner_id": owner_id, "afk_channel_id": None,
        "afk_timeout": 300, "verification_level": 0, "default_message_notifications": 0,
        "explicit_content_filter": 0, "features": [], "emojis": [], "stickers": [],
        "mfa_level": 0, "application_id": None, "system_channel_id": None,
        "system_channel_flags": 0, "rules_channel_id": None, "public_updates_channel_id": None,
        "safety_alerts_channel_id": None, "vanity_url_code": None, "premium_tier": 0,
        "premium_subscription_count": 0, "preferred_locale": "en-US", "nsfw_level": 0,
        "premium_progress_bar_enabled": False, "max_members": 500000,
        "max_video_channel_users": 25, "unavailable": False, "large": False,
        "joined_at": now_iso(), "voice_states": [], "presences": [], "stage_instances": [],
        "guild_scheduled_events": [], "soundboard_sounds": []}


def message(message_id: str, channel_id: str, author: dict[str, Any], content: str, *,
            flags: int = 0, mentions: list[dict[str, Any]] | None = None,
            reference: dict[str, Any] | None = None, embeds: list[Any] | None = None,
            attachments: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": message_id, "type": 19 if reference else 0, "channel_id": channel_id,
        "author": author, "content": content, "timestamp": now_iso(),
        "edited_timestamp": None, "tts": False, "mention_everyone": False,
        "mentions": mentions or [], "mention_roles": [], "attachments": attachments or [],
        "embeds": embeds or [], "components": [], "pinned": False, "flags": flags}
    if reference is not None:
        data["message_reference"] = reference
    return data


def attachment_path(channel_id: str, attachment_id: str, filename: str) -> str:
    """The CDN path of an attachment (the file name percent-encoded)."""
    return f"/attachments/{channel_id}/{attachment_id}/{quote(filename)}"


def attachment(attachment_id: str, channel_id: str, filename: str, size: int, *,
               base: str = CDN_BASE, content_type: str | None = None,
               dimensions: tuple[int, int] | None = None,
               duration_secs: float | None = None,
               description: str | None = None) -> dict[str, Any]:
    """An attachment object. Its URLs are signed like Discord's (`?ex=&is=&hm=&`, expiring
    in a day) and point at `base`: the real CDN by default, the fake when it serves the
    bytes; `proxy_url` is the media proxy (on the fake: the same server)."""
    issued = int(time.time())
    signature = hashlib.sha256(f"{attachment_id}/{filename}/{issued}".encode()).hexdigest()
    query = f"?ex={issued + 86_400:x}&is={issued:x}&hm={signature}&"
    path = attachment_path(channel_id, attachment_id, filename)
    media = MEDIA_BASE if base == CDN_BASE else base
    data: dict[str, Any] = {"id": attachment_id, "filename": filename, "size": size,
                            "url": f"{base}{path}{query}", "proxy_url": f"{media}{path}{query}"}
    if content_type is not None:
        data["content_type"] = content_type
    if dimensions is not None:
        data["width"], data["height"] = dimensions
    if description is not None:
        data["description"] = description
    if duration_secs is not None:  # a voice message's: the message has IS_VOICE_MESSAGE
        data["duration_secs"] = duration_secs
        data["waveform"] = base64.b64encode(bytes((i * 37) % 256 for i in range(64))).decode()
    return data


def application(flags: int = APP_FLAGS) -> dict[str, Any]:
    """`GET /oauth2/applications/@me`: enough for discord.AppInfo, no interactions URL."""
    return {
        "id": APP_ID, "name": BOT_NAME, "description": "", "icon": None,
        "summary": "", "type": None, "hook": True, "bot_public": True,
        "bot_require_code_grant": False, "verify_key": "0" * 64, "flags": flags,
        "owner": user(OWNER_ID, "owner"), "team": None, "bot": bot_user(),
        "rpc_origins": [], "redirect_uris": [], "tags": [], "interactions_endpoint_url": None,
        "role_connections_verification_url": None, "approximate_guild_count": 1,
        "integration_types_config": {"0": {}}, "install_params": None}


def rate_limited(retry_after: float, bucket: str, *, is_global: bool = False) -> web.Response:
    """A 429 as Discord sends it; discord.py needs `Via` (else: a Cloudflare ban) and a
    JSON `retry_after`, and learns the bucket from `X-RateLimit-Bucket`."""
    headers = {
        "Via": "1.1 google", "Retry-After": str(max(1, math.ceil(retry_after))),
        "X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "0",
        "X-RateLimit-Reset": f"{time.time() + retry_after:.3f}",
        "X-RateLimit-Reset-After": f"{retry_after:.3f}", "X-RateLimit-Bucket": bucket,
        "X-RateLimit-Scope": "global" if is_global else "user"}
    if is_global:
        headers["X-RateLimit-Global"] = "true"
    body = {"message": "You are being rate limited.", "retry_after": retry_after,
            "global": is_global}
    return json_response(body, 429, headers)
