"""Fetching what people send on Telegram: getFile, then the file itself.

The Bot API lets a bot download files of up to 20 MB; getFile refuses larger ones ("file
is too big"). Both the declared size and that refusal become FileTooLarge, so the user
hears the limit instead of a generic failure.
"""

from __future__ import annotations

from telegram import Bot
from telegram.error import BadRequest, Forbidden, NetworkError, RetryAfter, TelegramError

from platforms.base import Attachment, DownloadError, FileTooLarge

BOT_API_DOWNLOAD_LIMIT = 20 * 1024 * 1024


async def download(bot: Bot, attachment: Attachment, max_bytes: int) -> bytes:
    limit = min(max_bytes, BOT_API_DOWNLOAD_LIMIT)
    if attachment.size is not None and attachment.size > limit:
        raise FileTooLarge(limit, attachment.size)
    try:
        file = await bot.get_file(attachment.ref)
        if file.file_size is not None and file.file_size > limit:
            raise FileTooLarge(limit, file.file_size)
        data = bytes(await file.download_as_bytearray())
    except BadRequest as exc:
        if "too big" in exc.message.lower():
            raise FileTooLarge(BOT_API_DOWNLOAD_LIMIT, attachment.size) from exc
        raise DownloadError("Telegram no longer has this file") from exc
    except RetryAfter as exc:
        raise DownloadError("Telegram asked us to slow down") from exc
    except Forbidden as exc:
        raise DownloadError("Telegram refused the download") from exc
    except (NetworkError, TelegramError) as exc:  # timeouts and 5xx are NetworkErrors
        raise DownloadError("Telegram did not answer") from exc
    if len(data) > limit:
        raise FileTooLarge(limit, len(data))
    return data
