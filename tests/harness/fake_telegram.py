"""Fake Telegram Bot API server that the real python-telegram-bot talks to over a socket.

Every call is `POST /bot<token>/<method>` (GET works too, as on Telegram); answers are
`{"ok": true, "result": ...}` or `{"ok": false, "error_code": N, "description": ...}`.
Text and entities are checked the way Telegram counts them (UTF-16 code units); see
`telegram_checks.py`. Updates are built with `fake.updates` (`telegram_updates.py`).

The base `fail_next`/`delay_next` skip getUpdates: a running poller would otherwise take
them at random. Fail polling with `fail_method_next("getUpdates", 502)`, or for a while
with `fail_method_for("getUpdates", 502, seconds=3)`; `poll_offsets()` says which offset
each getUpdates carried (a call confirms every update below its offset), and
`fake.updates.unparseable(...)` builds an update python-telegram-bot cannot read.

Files: `add_file(data, size=...)` registers a file and returns its file_id; the update
builders carry it (`fake.updates.photo(file_id=...)`, `document`, `voice`, `audio`,
`sticker`) or register generated files of their own. getFile answers {file_id,
file_unique_id, file_size, file_path} like the Bot API, 400 "invalid file_id" for an
unknown id and 400 "file is too big" above 20 MB (by the claimed size), and
`GET /file/bot<token>/<file_path>` downloads the bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import time
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from tests.harness.base import FakeServer, json_response, run_cli
from tests.harness.telegram_checks import (
    ApiError,
    Params,
    chat_member,
    check_commands,
    check_text,
    message_result,
    rejected_entities,
)
from tests.harness.telegram_outbox import Call, ChatAction, ChatKey, Draft, Outbox, SentMessage
from tests.harness.telegram_updates import (
    DEFAULT_USER_ID,
    MAX_DOWNLOAD_BYTES,
    FileStore,
    UpdateFactory,
    UpdateQueue,
)

__all__ = ["DEFAULT_TOKEN", "Call", "ChatAction", "Draft", "FakeTelegram", "SentMessage",
           "Webhook"]

DEFAULT_TOKEN = "123456789:AAFakeThreadlineTestToken0123456789"
POLL_CAP = 0.5  # seconds a long poll may park, whatever timeout the client asked for
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
CHAT_ACTIONS = frozenset({
    "typing", "upload_photo", "record_video", "upload_video", "record_voice", "upload_voice",
    "upload_document", "choose_sticker", "find_location", "record_video_note",
    "upload_video_note"})

MAX_BULK_DELETE = 100  # deleteMessages takes 1-100 ids
Method = Callable[[Params], Awaitable[Any]]


@dataclasses.dataclass
class Webhook:
    url: str = ""
    secret_token: str | None = None
    allowed_updates: list[str] | None = None
    max_connections: int | None = None


class FakeTelegram(FakeServer):
    """Bot API fake. `admins[chat_id]` holds administrator user ids, `owners[chat_id]` the
    creator; `files[file_id]` the bytes a download returns (see `add_file`)."""

    def __init__(self, token: str = DEFAULT_TOKEN, bot_username: str = "threadline_bot",
                 bot_id: int | None = None, *, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host=host, port=port)
        self.token = token
        self.bot_id = bot_id if bot_id is not None else int(token.split(":")[0])
        self.bot_username = bot_username
        self.file_store = FileStore()
        self.updates = UpdateFactory(self.bot_id, bot_username, files=self.file_store)
        self.admins: dict[int, set[int]] = defaultdict(set)
        # Privacy mode (on by default): getMe says the bot cannot read every group message.
        self.privacy_off = False
        self.owners: dict[int, int] = {}
        self.files: dict[str, bytes] = self.file_store.data  # the same dict
        self.webhook = Webhook()
        self.command_sets: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.poll_conflicts = 0  # polls cut off by a second concurrent poller
        self.queue = UpdateQueue(POLL_CAP)
        self.outbox = Outbox()
        self._failures: dict[str, deque[ApiError]] = defaultdict(deque)
        self._outages: dict[str, tuple[ApiError, float]] = {}  # method: (answer, until)
        # method: delays, each for one call; slow: before handling it, late: after (the
        # call took effect, its answer comes late, like a Bot API under load)
        self._slow: dict[str, deque[float]] = defaultdict(deque)
        self._late: dict[str, deque[float]] = defaultdict(deque)
        self.migrated: dict[int, int] = {}  # group id -> supergroup id, after an upgrade
        self._reject_entities: dict[str | None, int] = defaultdict(int)  # None: any method

    @property
    def base_url(self) -> str:
        """What `ApplicationBuilder().base_url()` takes (PTB appends the token)."""
        return f"{self.url}/bot"

    @property
    def base_file_url(self) -> str:
        return f"{self.url}/file/bot"

    @property
    def commands(self) -> list[dict[str, Any]]:
        """The command menu last set for the default scope and language."""
        return self.command_sets.get(("default", ""), [])

    # --- files ----------------------------------------------------------------------------
    def add_file(self, data: bytes, *, size: int | None = None, kind: str = "document",
                 suffix: str = "") -> str:
        """Register a file a user sent; returns its file_id for the update builders.

        `size` claims a size without holding the bytes (e.g. 30 MB, which getFile then
        refuses as too big); downloads still return `data`. `kind` ("photo", "voice",
        "audio", "sticker", "document") shapes the id and the path's folder, `suffix`
        (".pdf") ends the path."""
        return self.file_store.add(data, size=size, kind=kind, suffix=suffix)

    # --- knobs ----------------------------------------------------------------------------
    def fail_method_next(self, method: str, status: int, description: str | None = None, *,
                         times: int = 1, parameters: dict[str, Any] | None = None) -> None:
        """Answer the next `times` calls of `method` with a Telegram-shaped error."""
        for _ in range(times):
            self._failures[method.lower()].append(ApiError(status, description, parameters))

    def fail_method_for(self, method: str, status: int, seconds: float,
                        description: str | None = None) -> None:
        """Answer every call of `method` with a Telegram-shaped error for `seconds` (an
        outage: 502 from the proxy in front of the Bot API, say)."""
        self._outages[method.lower()] = (ApiError(status, description),
                                         time.monotonic() + seconds)

    def slow_method_next(self, method: str, seconds: float, times: int = 1) -> None:
        """The next `times` calls of `method` wait `seconds` before they are handled."""
        self._slow[method.lower()].extend([seconds] * times)

    def late_answer_next(self, method: str, seconds: float, times: int = 1) -> None:
        """The next `times` calls of `method` take effect at once (a sent message is in
        the chat) but are answered only after `seconds`."""
        self._late[method.lower()].extend([seconds] * times)

    def upgrade_group(self, group_id: int, supergroup_id: int) -> None:
        """The group became a supergroup: calls to the old id get 400 "group chat was
        upgraded to a supergroup chat" with `migrate_to_chat_id`, as on Telegram."""
        self.migrated[group_id] = supergroup_id

    def rate_limit_next(self, retry_after: float, times: int = 1,
                        method: str = "sendMessage") -> None:
        """429 with `parameters.retry_after` (PTB raises RetryAfter; fractions keep tests fast)."""
        self.fail_method_next(method, 429, f"Too Many Requests: retry after {retry_after:g}",
                              times=times, parameters={"retry_after": retry_after})

    def failures_left(self, method: str) -> int:
        """How many of the errors queued for `method` have not been answered yet."""
        return len(self._failures[method.lower()])

    def fail_chat_member_next(self, status: int = 400, times: int = 1) -> None:
        """Make getChatMember fail, e.g. 400 for a chat the bot cannot see, or 500."""
        description = "Bad Request: chat not found" if status == 400 else None
        self.fail_method_next("getChatMember", status, description, times=times)

    def reject_entities_next(self, times: int = 1, method: str | None = None) -> None:
        """The next sendMessage/editMessageText/sendMessageDraft (or only `method`) carrying
        entities (or a parse_mode) gets "can't parse entities"; plain text still goes through."""
        self._reject_entities[method.lower() if method else None] += times

    def reset(self) -> None:
        super().reset()
        self._failures.clear()
        self._outages.clear()
        self._slow.clear()
        self._late.clear()
        self._reject_entities.clear()

    # --- updates in ---------------------------------------------------------------------
    def push(self, update: dict[str, Any]) -> dict[str, Any]:
        """Queue an update for getUpdates and wake a parked poll at once."""
        self._remember(update)
        self.queue.push(update)
        return update

    @property
    def pending_updates(self) -> list[dict[str, Any]]:
        """Updates not yet confirmed by a getUpdates offset."""
        return self.queue.items()

    def poll_offsets(self) -> list[int]:
        """The offset each getUpdates call carried (0: none), in order, failed calls too."""
        offsets = []
        for call in self.calls_to("/getUpdates"):
            params = {**call.query, **(call.form or {}),
                      **(call.json if isinstance(call.json, dict) else {})}
            offsets.append(int(params.get("offset") or 0))
        return offsets

    async def post_update(self, url: str, update: dict[str, Any],
                          secret: str | None = None) -> int:
        """Deliver an update to a webhook the way Telegram does; returns the HTTP status."""
        self._remember(update)
        headers = {SECRET_HEADER: secret} if secret is not None else {}
        async with aiohttp.ClientSession() as session, \
                session.post(url, json=update, headers=headers) as response:
            await response.read()
            return response.status

    def _remember(self, update: dict[str, Any]) -> None:
        for kind in ("message", "edited_message"):
            if isinstance(update.get(kind), dict):
                self.updates.remember(update[kind])

    # --- what the bot did ---------------------------------------------------------------
    def messages(self, chat_id: ChatKey | None = None) -> list[SentMessage]:
        """Accepted messages in the chat (all chats when None), in order, as last edited."""
        return self.outbox.messages(chat_id)

    def edits(self, chat_id: ChatKey) -> list[SentMessage]:
        """Each accepted edit in the chat, as a snapshot of the message after it."""
        return self.outbox.edits(chat_id)

    def chat_actions(self, chat_id: ChatKey) -> list[ChatAction]:
        return self.outbox.chat_actions(chat_id)

    def drafts(self, chat_id: ChatKey) -> list[Draft]:
        """Each accepted sendMessageDraft in the chat, in order. Drafts are not messages."""
        return self.outbox.drafts(chat_id)

    def deleted(self, chat_id: ChatKey) -> list[int]:
        """Ids deleted by deleteMessage/deleteMessages in the chat, in order."""
        return self.outbox.deleted(chat_id)

    def timeline(self, chat_id: ChatKey) -> list[Call]:
        """Every accepted call on the chat, in order, as (method, at) pairs: sendMessage,
        editMessageText, sendMessageDraft, deleteMessage(s), sendChatAction."""
        return self.outbox.timeline(chat_id)

    async def wait_for_messages(self, chat_id: ChatKey, count: int = 1,
                                timeout: float = 5.0) -> list[SentMessage]:  # noqa: ASYNC109
        """Wait until the chat holds `count` accepted messages; return them all."""
        return await self.outbox.wait_for_messages(chat_id, count, timeout)

    async def wait_for_drafts(self, chat_id: ChatKey, count: int = 1,
                              timeout: float = 5.0) -> list[Draft]:  # noqa: ASYNC109
        """Wait until the chat has had `count` accepted drafts; return them all."""
        return await self.outbox.wait_for_drafts(chat_id, count, timeout)

    # --- server -------------------------------------------------------------------------
    def routes(self) -> list[web.RouteDef]:
        return [web.route("*", "/bot{token}/{method}", self._api),
                web.get("/file/bot{token}/{path:.+}", self._download),
                web.post("/_fake/push", self._control_push),
                web.get("/_fake/messages", self._control_messages)]

    def error_body(self, status: int, message: str) -> Any:
        return ApiError(status, message).body()

    def injectable(self, request: web.Request) -> bool:
        method = request.match_info.get("method", "")
        return method.lower() != "getupdates" and not request.path.startswith("/_fake/")

    async def stop(self) -> None:
        self.queue.wake()  # a parked poll answers now instead of holding up shutdown
        await super().stop()

    async def _api(self, request: web.Request) -> web.Response:
        token = request.match_info["token"]
        if token != self.token:
            # Telegram: 401 for a well-formed but unknown token, 404 for a malformed one.
            return ApiError(401 if ":" in token else 404).response()
        method = self._methods().get(request.match_info["method"].lower())
        if method is None:
            # Telegram says just "Not Found", which PTB raises as InvalidToken; name the gap.
            return ApiError(404, f"Not Found: the fake does not implement "
                                 f"{request.match_info['method']}").response()
        if self._cut_off(request):
            # The client gave up (or the fake is stopping) during an injected delay: a
            # request nobody waits for must leave no trace, like one that never arrived.
            return ApiError(502).response()
        try:
            params = await Params.read(request)
            name = request.match_info["method"].lower()
            outage = self._outages.get(name)
            if outage is not None and time.monotonic() < outage[1]:
                raise outage[0]
            queued = self._failures.get(name)
            if queued:
                raise queued.popleft()
            if self._slow.get(name):
                await asyncio.sleep(self._slow[name].popleft())
            self._check_migrated(params)
            result = await method(params)
            if self._late.get(name):
                await asyncio.sleep(self._late[name].popleft())
        except ApiError as error:
            return error.response()
        return json_response({"ok": True, "result": result})

    def _check_migrated(self, params: Params) -> None:
        raw = params.text("chat_id")
        moved = self.migrated.get(int(raw)) if raw and raw.lstrip("-").isdigit() else None
        if moved is not None:
            raise ApiError(400, "Bad Request: group chat was upgraded to a supergroup chat",
                           {"migrate_to_chat_id": moved})

    def _cut_off(self, request: web.Request) -> bool:
        transport = request.transport
        return transport is None or transport.is_closing() or self._closing.is_set()

    def _methods(self) -> dict[str, Method]:
        return {"getme": self._get_me, "getupdates": self._get_updates,
                "setwebhook": self._set_webhook, "deletewebhook": self._delete_webhook,
                "getwebhookinfo": self._get_webhook_info, "sendmessage": self._send_message,
                "editmessagetext": self._edit_message_text,
                "sendmessagedraft": self._send_message_draft,
                "deletemessage": self._delete_message, "deletemessages": self._delete_messages,
                "sendchataction": self._send_chat_action, "setmycommands": self._set_commands,
                "getmycommands": self._get_commands, "deletemycommands": self._delete_commands,
                "getchatmember": self._get_chat_member, "getfile": self._get_file,
                "close": self._true, "logout": self._true}

    # --- methods ------------------------------------------------------------------------
    async def _true(self, p: Params) -> bool:
        return True

    async def _get_me(self, p: Params) -> dict[str, Any]:
        return {**self.updates.bot_user, "can_join_groups": True,
                "can_read_all_group_messages": self.privacy_off, "supports_inline_queries": False,
                "can_connect_to_business": False, "has_main_web_app": False}

    async def _get_updates(self, p: Params) -> list[dict[str, Any]]:
        if self.webhook.url:
            raise ApiError(409, "Conflict: can't use getUpdates method while webhook is "
                                "active; use deleteWebhook to delete the webhook first")
        updates = await self.queue.poll(p.int("offset") or 0, p.int("limit") or 100,
                                        p.float("timeout") or 0, p.json("allowed_updates"))
        if updates is None:
            if not self._cut_off(p.request):  # a cancelled poll has nobody to tell
                self.poll_conflicts += 1
            raise ApiError(409, "Conflict: terminated by other getUpdates request; make sure "
                                "that only one bot instance is running")
        return updates

    async def _set_webhook(self, p: Params) -> bool:
        url = p.text("url") or ""
        if url and not url.startswith("https://"):
            raise ApiError(400, "Bad Request: bad webhook: An HTTPS URL must be provided "
                                "for webhook")
        secret = p.text("secret_token")
        if secret is not None and not (0 < len(secret) <= 256 and all(
                c.isascii() and (c.isalnum() or c in "_-") for c in secret)):
            raise ApiError(400, "Bad Request: secret token contains unallowed characters")
        if p.bool("drop_pending_updates"):
            self.queue.clear()
        self.webhook = Webhook(url, secret if url else None, p.json("allowed_updates"),
                               p.int("max_connections"))
        self.queue.wake()
        return True

    async def _delete_webhook(self, p: Params) -> bool:
        if p.bool("drop_pending_updates"):
            self.queue.clear()
        self.webhook = Webhook()
        return True

    async def _get_webhook_info(self, p: Params) -> dict[str, Any]:
        info: dict[str, Any] = {"url": self.webhook.url, "has_custom_certificate": False,
                                "pending_update_count": len(self.queue)}
        if self.webhook.url:
            info["max_connections"] = self.webhook.max_connections or 40
            if self.webhook.allowed_updates:
                info["allowed_updates"] = self.webhook.allowed_updates
        return info

    async def _send_message(self, p: Params) -> dict[str, Any]:
        chat_id, text = p.chat_id(), p.text("text") or ""
        entities, parse_mode = p.entities(), p.text("parse_mode")
        self._check(text, entities, parse_mode, "sendmessage")
        reply_to, target = self._reply_target(chat_id, p)
        thread_id, preview = p.int("message_thread_id"), p.json("link_preview_options")
        message_id = self.updates.next_message_id()
        result = message_result(self.updates.bot_user, chat_id, message_id, text, entities,
                                thread_id=thread_id, reply_to_message=target,
                                link_preview=preview)
        self.updates.remember(result)
        await self.outbox.add(SentMessage(chat_id, message_id, text, entities, reply_to,
                                          thread_id, preview, parse_mode, time.monotonic()))
        return result

    async def _edit_message_text(self, p: Params) -> dict[str, Any]:
        chat_id, message_id = p.chat_id(), p.int("message_id")
        text, entities, parse_mode = p.text("text") or "", p.entities(), p.text("parse_mode")
        self._check(text, entities, parse_mode, "editmessagetext")
        edited = await self.outbox.edit(chat_id, message_id, text, entities, parse_mode)
        return {**message_result(self.updates.bot_user, chat_id, edited.message_id, text,
                                 entities, thread_id=edited.thread_id),
                "edit_date": int(time.time())}

    async def _send_message_draft(self, p: Params) -> bool:
        chat_id, draft_id = p.chat_id(), p.int("draft_id")
        if not draft_id:
            raise ApiError(400, "Bad Request: draft_id must be non-zero")
        if not isinstance(chat_id, int) or chat_id <= 0:
            # What Telegram answers for a group, supergroup or channel: drafts are DM-only.
            raise ApiError(400, "Bad Request: TEXTDRAFT_PEER_INVALID")
        text, entities, parse_mode = p.text("text") or "", p.entities(), p.text("parse_mode")
        if text.strip() or entities:  # an empty text is the "Thinking..." placeholder
            self._check(text, entities, parse_mode, "sendmessagedraft")
        await self.outbox.add_draft(Draft(chat_id, draft_id, text, entities,
                                          p.int("message_thread_id"), parse_mode))
        return True

    async def _delete_message(self, p: Params) -> bool:
        chat_id, message_id = p.chat_id(), p.int("message_id")
        if message_id is None:
            raise ApiError(400, "Bad Request: message identifier is not specified")
        if not self._deletable(chat_id, message_id):
            raise ApiError(400, "Bad Request: message to delete not found")
        await self.outbox.delete(chat_id, [message_id], "deleteMessage")
        return True

    async def _delete_messages(self, p: Params) -> bool:
        """Like Telegram: ids that cannot be found are skipped."""
        chat_id, message_ids = p.chat_id(), p.json("message_ids")
        if not isinstance(message_ids, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) for i in message_ids):
            raise ApiError(400, "Bad Request: can't parse message_ids JSON array")
        if not 1 <= len(message_ids) <= MAX_BULK_DELETE:
            raise ApiError(400, "Bad Request: message_ids must hold 1-100 identifiers")
        found = list(dict.fromkeys(i for i in message_ids if self._deletable(chat_id, i)))
        await self.outbox.delete(chat_id, found, "deleteMessages")
        return True

    def _deletable(self, chat_id: ChatKey, message_id: int) -> bool:
        """A message the bot sent, or one it was sent, that is not deleted yet."""
        if self.outbox.is_deleted(chat_id, message_id):
            return False
        return (any(m.message_id == message_id for m in self.outbox.messages(chat_id))
                or self.updates.find(chat_id, message_id) is not None)

    def _check(self, text: str, entities: list[dict[str, Any]], parse_mode: str | None,
               method: str) -> None:
        if entities or parse_mode:
            for key in (method, None):  # a knob aimed at this method goes first
                if self._reject_entities.get(key):
                    self._reject_entities[key] -= 1
                    raise rejected_entities(text, entities)
        check_text(text, entities)

    def _reply_target(self, chat_id: ChatKey,
                      p: Params) -> tuple[int | None, dict[str, Any] | None]:
        """The replied-to id and message; 400 when it does not exist and that matters."""
        reply = p.json("reply_parameters") or {}
        if not isinstance(reply, dict):
            raise ApiError(400, "Bad Request: can't parse reply parameters JSON object")
        message_id = reply.get("message_id") or p.int("reply_to_message_id")
        if message_id is None:
            return None, None
        reply_chat = reply.get("chat_id", chat_id)
        target = None if self.outbox.is_deleted(reply_chat, message_id) else \
            self.updates.find(reply_chat, message_id)
        if target is not None:
            return message_id, {k: v for k, v in target.items() if k != "reply_to_message"}
        if reply.get("allow_sending_without_reply") or p.bool("allow_sending_without_reply"):
            return None, None
        raise ApiError(400, "Bad Request: message to be replied not found")

    async def _send_chat_action(self, p: Params) -> bool:
        chat_id, action = p.chat_id(), p.text("action")
        if action not in CHAT_ACTIONS:
            raise ApiError(400, "Bad Request: wrong parameter action in request")
        self.outbox.add_action(
            ChatAction(chat_id, action, p.int("message_thread_id"), time.monotonic()))
        return True

    async def _set_commands(self, p: Params) -> bool:
        commands = p.json("commands")
        check_commands(commands)
        self.command_sets[self._command_key(p)] = list(commands)
        return True

    async def _get_commands(self, p: Params) -> list[dict[str, Any]]:
        return self.command_sets.get(self._command_key(p), [])

    async def _delete_commands(self, p: Params) -> bool:
        self.command_sets.pop(self._command_key(p), None)
        return True

    @staticmethod
    def _command_key(p: Params) -> tuple[str, str]:
        scope = p.json("scope") or {}
        return scope.get("type", "default"), p.text("language_code") or ""

    async def _get_chat_member(self, p: Params) -> dict[str, Any]:
        chat_id, user_id = p.chat_id(), p.int("user_id")
        if user_id is None:
            raise ApiError(400, "Bad Request: user_id is empty")
        user = self.updates.bot_user if user_id == self.bot_id else {
            "id": user_id, "is_bot": False, "first_name": f"User {user_id}"}
        if self.owners.get(chat_id) == user_id:
            return chat_member("creator", user)
        return chat_member("administrator" if user_id in self.admins.get(chat_id, ()) else
                           "member", user)

    async def _get_file(self, p: Params) -> dict[str, Any]:
        file_id = p.text("file_id")
        if not file_id:
            raise ApiError(400, "Bad Request: file_id is empty")
        stored = self.file_store.get(file_id)
        if stored is None:
            raise ApiError(400, "Bad Request: invalid file_id")
        if stored.file_size > MAX_DOWNLOAD_BYTES:
            raise ApiError(400, "Bad Request: file is too big")
        return stored.as_result()

    async def _download(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return ApiError(401).response()
        data = self.file_store.by_path(request.match_info["path"])
        if data is None:
            return ApiError(404).response()
        return web.Response(body=data, content_type="application/octet-stream")

    # --- control routes for script mode -------------------------------------------------
    async def _control_push(self, request: web.Request) -> web.Response:
        """POST an update dict, or {"text": ..., "user_id"?: ...} for a private text."""
        body = await request.json()
        update = body if "update_id" in body else self.updates.private_text(
            body["text"], body.get("user_id", DEFAULT_USER_ID))
        return json_response(self.push(update))

    async def _control_messages(self, request: web.Request) -> web.Response:
        return json_response([dataclasses.asdict(m) for m in self.messages()])


def main(argv: list[str] | None = None) -> None:
    """`python -m tests.harness.fake_telegram --port 8081 [--api-key TOKEN]`."""
    def make(args: argparse.Namespace) -> FakeServer:
        return FakeTelegram(args.api_key or DEFAULT_TOKEN, host=args.host, port=args.port)

    run_cli(make, "Fake Telegram Bot API server", argv)


if __name__ == "__main__":
    main()
