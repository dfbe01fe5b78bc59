"""The Telegram adapter on python-telegram-bot: long polling or a webhook, explicit lifecycle.

PTB's Application is driven step by step (never `run_polling()`, which would own the event
loop and the signals): initialize (getMe), start (polling or the webhook server), stop,
shutdown. Sending formats the model's Markdown into entities (format.py) and maps PTB's
errors onto the gateway's kinds: flood control → RateLimited, network → PlatformDown,
a blocked bot or a gone chat → Undeliverable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from telegram import BotCommand, MessageEntity, ReplyParameters, Update
from telegram.constants import ChatAction
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Forbidden,
    NetworkError,
    RetryAfter,
    TelegramError,
)
from telegram.ext import Application, ApplicationBuilder, ContextTypes, MessageHandler, filters

from platforms.base import (
    Attachment,
    ChatMoved,
    ChatRef,
    Chunk,
    Handler,
    InboundMessage,
    PlatformAdapter,
    PlatformDown,
    RateLimited,
    SendLimits,
    SendUnknown,
    Undeliverable,
)
from platforms.telegram import files
from platforms.telegram import format as fmt
from platforms.telegram.inbound import AdminCache, to_inbound
from platforms.telegram.polling import Poller, retry_after_s
from platforms.telegram.updates import FAILED, size_of, skipped
from platforms.telegram.webhook import WebhookServer
from platforms.text import markdown_balanced

log = logging.getLogger(__name__)

# The Bot API's documented pace: about one message a second per chat, twenty a minute in a
# group, thirty a second over all chats.
TELEGRAM_LIMITS = SendLimits(per_chat_interval_s=1.0, per_group_per_minute=20,
                             per_bot_per_second=30)
ALLOWED_UPDATES = [Update.MESSAGE, Update.EDITED_MESSAGE]
PREVIEW_TIMEOUT_S = 120.0  # a preview's answer is waited for this long (see send_preview)


@dataclass(frozen=True)
class TelegramSettings:
    token: str
    mode: str = "polling"  # polling | webhook
    base_url: str | None = None
    base_file_url: str | None = None
    webhook_url: str | None = None
    listen: str = "127.0.0.1"
    port: int = 8443
    secret_token: str | None = None
    require_mention: bool = True
    send_timeout_s: float = 30.0
    poll_timeout_s: float = 10.0


class TelegramAdapter(PlatformAdapter):
    """Private chats, groups, supergroups and forum topics of one bot."""

    name = "telegram"
    max_message_length = fmt.TELEGRAM_LIMIT
    limits = TELEGRAM_LIMITS
    max_download_bytes = files.BOT_API_DOWNLOAD_LIMIT

    def __init__(self, handler: Handler, settings: TelegramSettings) -> None:
        super().__init__(handler)
        if settings.mode == "webhook" and not settings.secret_token:
            raise ValueError("telegram webhook mode needs a secret token")
        self.settings = settings
        self.exclusive = settings.mode == "polling"  # Telegram allows one getUpdates caller
        self.redelivers = True  # an update not confirmed comes again
        self._unstored: set[int] = set()  # updates the gateway could not store
        # A webhook's updates are handled concurrently (the gateway keeps each chat in order
        # itself); our poller hands them over one at a time, each confirmed once stored.
        # PTB's own Updater is not used (polling.py says why).
        # Calls wait `send_timeout_s` for Telegram's answer: a slow Bot API that takes a
        # message and answers late must not look like a failure (the message would be sent
        # again and show twice).
        builder = (ApplicationBuilder().token(settings.token).concurrent_updates(True)
                   .updater(None).read_timeout(settings.send_timeout_s)
                   .write_timeout(settings.send_timeout_s))
        if settings.base_url:
            builder = builder.base_url(settings.base_url)
        if settings.base_file_url:
            builder = builder.base_file_url(settings.base_file_url)
        self.app: Application = builder.build()
        self.app.add_handler(MessageHandler(
            filters.UpdateType.MESSAGE | filters.UpdateType.EDITED_MESSAGE, self._on_update))
        self.app.add_error_handler(self._on_error)
        self.admins = AdminCache(self._member_status)
        self.webhook: WebhookServer | None = None
        self.poller = Poller(self.app.bot, self.process, self.counters,
                             timeout_s=settings.poll_timeout_s,
                             allowed_updates=ALLOWED_UPDATES,
                             allowed=lambda: self.may_receive(),
                             standby=lambda: self.on_standby()) if self.exclusive else None

    # --- lifecycle ----------------------------------------------------------------------
    async def initialize(self) -> None:
        await self.app.initialize()  # getMe: a wrong token fails here
        self.bot_username = self.app.bot.username

    async def start(self) -> None:
        s = self.settings
        if self.poller is not None:
            await self.poller.start()
        else:
            assert s.secret_token is not None
            self.webhook = WebhookServer(self.app, self.process, listen=s.listen, port=s.port,
                                         path=_path_of(s.webhook_url),
                                         secret_token=s.secret_token, counters=self.counters)
            await self.webhook.start()
            await self.app.bot.set_webhook(url=s.webhook_url or "", secret_token=s.secret_token,
                                           allowed_updates=ALLOWED_UPDATES)
        await self.app.start()

    async def stop(self) -> None:
        if self.poller is not None:
            await self.poller.stop()
        if self.webhook is not None:
            webhook, self.webhook = self.webhook, None
            await webhook.stop()
        if self.app.running:
            await self.app.stop()

    async def shutdown(self) -> None:
        await self.app.shutdown()

    async def register_commands(self, commands: list[tuple[str, str]]) -> None:
        # setMyCommands is cheap and idempotent: set it on every start.
        await self.app.bot.set_my_commands([BotCommand(name, what[:256])
                                            for name, what in commands])

    # --- inbound ------------------------------------------------------------------------
    async def _on_update(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.edited_message or update.message
        if message is None:
            return
        msg = to_inbound(message, self.app.bot.bot, edited=update.edited_message is not None,
                         require_mention=self.settings.require_mention)
        if msg is not None and await self.handler(msg) is False:
            self._unstored.add(update.update_id)

    async def process(self, update: Update) -> bool:
        """Hand an update to the application; False when the gateway could not store it
        (then Telegram must deliver it again: not confirmed, or answered 503)."""
        await self.app.process_update(update)
        if update.update_id in self._unstored:
            self._unstored.discard(update.update_id)
            return False
        return True

    async def check_admin(self, msg: InboundMessage) -> bool:
        """A group's administrators, asked of Telegram (and remembered a while) only when a
        command needs to know; anonymous admins are known from the message itself."""
        if msg.is_admin_hint or not msg.is_group:
            return msg.is_admin_hint
        if msg.user_id.startswith("-"):
            return False  # a post as a channel: a member, never an admin
        return await self.admins.is_admin(int(msg.chat_id), int(msg.user_id))

    async def _on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        # One of our handlers raised: the update is dropped (and confirmed), not retried, as
        # it would fail the same way. The traceback is our code's; the update's text is not
        # logged.
        self.counters[FAILED] += 1
        update_id = update.update_id if isinstance(update, Update) else None
        size = size_of(update.to_dict()) if isinstance(update, Update) else 0
        skipped(update_id, size, f"failed to be handled ({type(context.error).__name__})",
                error=context.error)

    async def _member_status(self, chat_id: int, user_id: int) -> str:
        member = await self.app.bot.get_chat_member(chat_id, user_id)
        return str(member.status)

    # --- outbound -----------------------------------------------------------------------
    def render(self, text: str) -> list[Chunk]:
        return fmt.render(text)

    @property
    def formatter(self) -> Callable[[str], list[Chunk]]:
        return fmt.render  # the converter is not linear on every input: bounded, off the loop

    def render_plain(self, text: str) -> list[Chunk]:
        return fmt.render_plain(text)

    async def send(self, chat: ChatRef, chunk: Chunk, reply_to: str | None = None) -> str:
        try:
            return await self._send(chat, chunk, reply_to)
        except BadRequest as exc:
            if chunk.entities and "can't parse entities" in str(exc).lower():
                # Telegram disagrees with our formatting: the same words, unformatted.
                log.warning("telegram: %s rejected a chunk's formatting (%s); sending it as "
                            "plain text", chat.key, exc)
                return await self._guarded(chat, fmt.plain(chunk), reply_to)
            raise Undeliverable(f"telegram: {exc}") from exc

    async def _guarded(self, chat: ChatRef, chunk: Chunk, reply_to: str | None) -> str:
        try:
            return await self._send(chat, chunk, reply_to)
        except BadRequest as exc:
            raise Undeliverable(f"telegram: {exc}") from exc

    async def _send(self, chat: ChatRef, chunk: Chunk, reply_to: str | None,
                    read_timeout: float | None = None) -> str:
        entities = _entities(chunk)
        reply = (ReplyParameters(message_id=int(reply_to), allow_sending_without_reply=True)
                 if reply_to else None)
        waits = {} if read_timeout is None else {"read_timeout": read_timeout}  # else default
        with _errors_as_kinds(taken_maybe=True):
            sent = await self.app.bot.send_message(
                chat_id=int(chat.chat_id), text=chunk.text, entities=entities or None,
                reply_parameters=reply, message_thread_id=_thread(chat), **waits)
        return str(sent.message_id)

    async def send_preview(self, chat: ChatRef, chunk: Chunk,
                           reply_to: str | None = None) -> str:
        # Waits long for the answer: the preview is edited into the final reply by its id.
        try:
            return await self._send(chat, chunk, reply_to, PREVIEW_TIMEOUT_S)
        except BadRequest as exc:
            raise Undeliverable(f"telegram: {exc}") from exc

    # --- a reply shown while it is written -----------------------------------------------
    def stream_mode(self, chat: ChatRef) -> str:
        # sendMessageDraft is for private chats; groups and topics see one message edited.
        return "edit" if chat.group else "draft"

    def render_partial(self, text: str) -> list[Chunk]:
        if markdown_balanced(text):
            return fmt.render(text)
        return fmt.render_plain(text)

    async def send_draft(self, chat: ChatRef, draft_id: int, chunk: Chunk) -> None:
        try:
            await self._draft(chat, draft_id, chunk)
        except Undeliverable as exc:
            if not (chunk.entities and "can't parse entities" in str(exc).lower()):
                raise
            await self._draft(chat, draft_id, fmt.plain(chunk))  # the same words, plain

    async def _draft(self, chat: ChatRef, draft_id: int, chunk: Chunk) -> None:
        params: dict[str, Any] = {"chat_id": int(chat.chat_id), "draft_id": draft_id,
                                  "text": chunk.text, "message_thread_id": _thread(chat)}
        bot = self.app.bot
        with _errors_as_kinds(bad_request=True):
            if hasattr(bot, "send_message_draft"):
                await bot.send_message_draft(entities=_entities(chunk) or None, **params)
            else:  # an older python-telegram-bot: the same Bot API call, by name
                extra = {"entities": list(chunk.entities)} if chunk.entities else {}
                await bot.do_api_request("sendMessageDraft", api_kwargs={
                    **{k: v for k, v in params.items() if v is not None}, **extra})

    async def edit(self, chat: ChatRef, message_id: str, chunk: Chunk) -> None:
        try:
            await self._edit(chat, message_id, chunk)
        except BadRequest as exc:
            text = str(exc).lower()
            if "message is not modified" in text:
                return  # already says exactly this
            if chunk.entities and "can't parse entities" in text:
                log.warning("telegram: %s rejected an edit's formatting (%s); editing in plain "
                            "text", chat.key, exc)
                with _errors_as_kinds(bad_request=True):
                    await self._edit(chat, message_id, fmt.plain(chunk))
                return
            raise Undeliverable(f"telegram: {exc}") from exc

    async def _edit(self, chat: ChatRef, message_id: str, chunk: Chunk) -> None:
        with _errors_as_kinds():
            await self.app.bot.edit_message_text(
                text=chunk.text, chat_id=int(chat.chat_id), message_id=int(message_id),
                entities=_entities(chunk) or None)

    async def delete(self, chat: ChatRef, message_id: str) -> None:
        with _errors_as_kinds(bad_request=True):
            await self.app.bot.delete_message(chat_id=int(chat.chat_id),
                                              message_id=int(message_id))

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        return await files.download(self.app.bot, attachment, max_bytes)

    async def typing(self, chat: ChatRef) -> None:
        with _errors_as_kinds():
            await self.app.bot.send_chat_action(chat_id=int(chat.chat_id),
                                                action=ChatAction.TYPING,
                                                message_thread_id=_thread(chat))


def _entities(chunk: Chunk) -> list[MessageEntity]:
    return [MessageEntity.de_json(dict(e), None) for e in chunk.entities]


# httpx errors raised after the request went out: Telegram may have acted on it.
_AFTER_SENDING = (httpx.ReadTimeout, httpx.WriteTimeout, httpx.ReadError, httpx.WriteError,
                  httpx.RemoteProtocolError)


class _errors_as_kinds:  # noqa: N801 - used as a context manager, reads like a phrase
    """PTB's errors as the gateway's send error kinds; BadRequest passes through unless
    `bad_request`, when it is a refusal for good like the rest. `taken_maybe`: a call
    Telegram may have carried out though no answer came is a SendUnknown (a message sent
    twice would show twice; an edit repeated changes nothing)."""

    def __init__(self, *, bad_request: bool = False, taken_maybe: bool = False) -> None:
        self.bad_request = bad_request
        self.taken_maybe = taken_maybe

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None:
            return False
        if isinstance(exc, BadRequest):
            if self.bad_request:
                raise Undeliverable(f"telegram: {exc}") from exc
            return False
        if isinstance(exc, RetryAfter):
            raise RateLimited(retry_after_s(exc), "telegram flood control") from exc
        if isinstance(exc, Forbidden):
            raise Undeliverable(f"telegram: {exc}") from exc
        if isinstance(exc, ChatMigrated):
            raise ChatMoved(str(exc.new_chat_id)) from exc
        if isinstance(exc, NetworkError):
            if self.taken_maybe and isinstance(exc.__cause__, _AFTER_SENDING):
                raise SendUnknown(f"telegram: no answer in time ({exc})") from exc
            raise PlatformDown(f"telegram: {exc}") from exc
        if isinstance(exc, TelegramError):
            raise PlatformDown(f"telegram: {exc}") from exc
        return False


def _thread(chat: ChatRef) -> int | None:
    return int(chat.thread_id) if chat.thread_id else None


def _path_of(url: str | None) -> str:
    """The path part of the public webhook URL: the local server listens on the same one."""
    if not url:
        return ""
    after_host = url.split("://", 1)[-1].partition("/")[2]
    return after_host.split("?", 1)[0]
