"""Reading what a message carries, in the chat's order: fetch, keep, read, transcribe.

A message's attachments are described in its inbound row when it arrives; the chat's
worker reads them just before the turn (so a slow download never lets a later message
overtake it). Each becomes an attachment part of the stored message (agent/attachments/
parts.py) or a short sentence saying why not; nothing is read into the database but
text (docs/architecture.md, "Attachments").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.attachments.examine import examine
from agent.attachments.files import AttachmentFiles
from agent.attachments.parts import attachment_part
from agent.attachments.read import FileText, ModelImage, Unreadable
from agent.providers.transcribe import Transcriber, TranscriptionError
from gateway.metrics import Metrics
from gateway.offload import WorkerPool, WorkFailed, WorkTimeout
from platforms.base import (
    Attachment,
    DownloadError,
    FileTooLarge,
    InboundMessage,
    PlatformAdapter,
)
from storage.base import SessionStore
from storage.models import InboundRecord

log = logging.getLogger(__name__)

MB = 1024 * 1024
AUDIO_LIMIT = 25 * MB  # what OpenAI's transcription endpoint takes
HEARD_CHARS = 200  # the transcript shown back, on one line
NO_PICTURES = ("This model can't see pictures, so I'll go by your words. (The picture is "
               "kept with the conversation.)")
NO_PICTURES_ALONE = ("This model can't see pictures. Tell me in words what you'd like to "
                     "know about it.")
NO_TRANSCRIPTION = ("I can't listen to voice messages here: no transcription service is "
                    "set up. Please type your message instead.")
_DECLINED_KINDS = {"video": "videos", "sticker": "stickers", "other": "that kind of message"}


@dataclass(frozen=True)
class ReaderSettings:
    max_bytes: int = 20 * MB
    max_text_chars: int = 100_000
    timeout_s: float = 20.0  # judging and reading one file (decoding, a PDF's text)
    readers: int = 2  # worker processes reading at once
    memory_mb: int = 768  # address space of each


def reader_pool(settings: ReaderSettings) -> WorkerPool:
    """The worker processes files are read in (docs/architecture.md, "Untrusted work")."""
    return WorkerPool("reader", size=settings.readers, memory_mb=settings.memory_mb,
                      preload=("agent.attachments.examine",))


@dataclass
class Reading:
    """What a message's attachments came to."""

    parts: list[dict[str, Any]] = field(default_factory=list)  # for the stored message
    notices: list[str] = field(default_factory=list)  # said before the answer
    declined: list[str] = field(default_factory=list)  # why a file was not read

    @property
    def said(self) -> list[str]:
        return [*self.declined, *self.notices]


def attachments_of(record: InboundRecord) -> list[Attachment]:
    return [Attachment.from_dict(a) for a in record.extra.get("attachments") or ()
            if isinstance(a, dict)]


def _mb(size: int) -> str:
    return f"{size / MB:.1f}".rstrip("0").rstrip(".")


def _name(attachment: Attachment) -> str:
    if attachment.name:
        return attachment.name
    return {"image": "the picture", "voice": "the voice message"}.get(attachment.kind,
                                                                     "the file")


def too_big(attachment: Attachment, limit: int) -> str:
    size = f" ({_mb(attachment.size)} MB)" if attachment.size else ""
    return f"{_name(attachment)}{size} is too big: I can take files up to {_mb(limit)} MB."


class AttachmentReader:
    """Turns a message's attachment descriptions into stored parts and sentences."""

    def __init__(self, adapters: Mapping[str, PlatformAdapter], files: AttachmentFiles | None,
                 store: SessionStore, *, settings: ReaderSettings | None = None,
                 transcriber: Transcriber | None = None, vision: bool = True,
                 text_room: Callable[[], int] = lambda: 100_000,
                 metrics: Metrics | None = None, pool: WorkerPool | None = None) -> None:
        self.adapters = adapters
        self.metrics = metrics or Metrics()
        self.files = files
        self.store = store
        self.settings = settings or ReaderSettings()
        self.pool = pool or reader_pool(self.settings)
        self.transcriber = transcriber
        self.vision = vision
        self.text_room = text_room  # characters one message may fill in the model's window

    def limit(self, platform: str, kind: str) -> int:
        adapter = self.adapters.get(platform)
        own = adapter.max_download_bytes if adapter is not None else None
        limit = min(self.settings.max_bytes, own or self.settings.max_bytes)
        return min(limit, AUDIO_LIMIT) if kind in ("voice", "audio") else limit

    def refusal(self, msg: InboundMessage) -> str | None:
        """At arrival: the answer to a message with no words whose every attachment is
        declined by what the platform says of it (kind, declared size); else None."""
        if msg.text.strip() or not msg.attachments:
            return None
        reasons = [self._declined_upfront(msg.platform, a) for a in msg.attachments]
        if any(reason is None for reason in reasons):
            return None
        for attachment in msg.attachments:
            self.metrics.attachments.labels(attachment.kind, "declined").inc()
        log.info("chat %s: message %s declined on arrival: %s", msg.chat_key, msg.message_id,
                 ", ".join(a.kind for a in msg.attachments))
        return " ".join(dict.fromkeys(r for r in reasons if r))

    def _declined_upfront(self, platform: str, attachment: Attachment) -> str | None:
        if self.files is None:
            return "I can't take files here: there is no place set up to keep them."
        if not attachment.readable:
            what = _DECLINED_KINDS.get(attachment.kind, "that kind of message")
            return (f"I can't open {what}: I read text, pictures, documents (text, code, "
                    "PDF) and voice messages.")
        if attachment.kind in ("voice", "audio") and self.transcriber is None:
            return NO_TRANSCRIPTION
        limit = self.limit(platform, attachment.kind)
        if attachment.size is not None and attachment.size > limit:
            return too_big(attachment, limit)
        return None

    async def read(self, record: InboundRecord) -> Reading:
        reading = Reading()
        found = attachments_of(record)
        room = max(1_000, self.text_room() - len(record.text)) // max(1, len(found))
        for attachment in found:
            why, outcome = await self._one(record, attachment, room, reading)
            self.metrics.attachments.labels(attachment.kind, outcome).inc()
            if why:
                log.info("chat %s: %s %s not read (%s): %s", record.chat_key, attachment.kind,
                         record.message_id, outcome, why)
                reading.declined.append(why)
        await self._pictures_note(record, reading)
        return reading

    async def _one(self, record: InboundRecord, attachment: Attachment, room: int,
                   reading: Reading) -> tuple[str | None, str]:
        """(why it was not read, outcome) of one attachment; read ones join `reading`."""
        declined = self._declined_upfront(record.platform, attachment)
        if declined:
            return declined, "declined"
        try:
            await self._read_one(record, attachment, room, reading)
        except FileTooLarge as exc:
            return too_big(attachment, exc.limit), "declined"
        except Unreadable as exc:
            return f"I can't read {_name(attachment)}: {exc}.", "declined"
        except WorkTimeout:
            return (f"I can't read {_name(attachment)}: it would take too long to open "
                    f"(over {self.settings.timeout_s:g} s), so I skipped it.", "declined")
        except WorkFailed as exc:
            log.warning("chat %s: reading %s %s failed: %s", record.chat_key, attachment.kind,
                        record.message_id, exc)
            return (f"I can't read {_name(attachment)}: it needs more than a reader may use "
                    "to open, so I skipped it.", "declined")
        except DownloadError as exc:
            return (f"I couldn't fetch {_name(attachment)} ({exc}). Please send it again.",
                    "failed")
        except TranscriptionError as exc:
            again = " Please try again in a moment." if exc.transient else ""
            return f"I couldn't transcribe the voice message: {exc}.{again}", "failed"
        return None, "read"

    async def _read_one(self, record: InboundRecord, attachment: Attachment, room: int,
                        reading: Reading) -> None:
        adapter = self.adapters.get(record.platform)
        if adapter is None:
            raise DownloadError(f"{record.platform} is not connected")
        data = await adapter.download(attachment, self.limit(record.platform, attachment.kind))
        limit = min(self.settings.max_text_chars, room)
        # Judging and reading the bytes is the costly part, and its input is anyone's: a
        # worker process does it, within the budget (gateway/offload.py).
        found = await self.pool.run(examine, data, attachment.name, attachment.mime,
                                    attachment.kind, limit, budget_s=self.settings.timeout_s)
        if isinstance(found, ModelImage):
            reading.parts.append(await self._image(record, attachment, found))
        elif isinstance(found, FileText):
            reading.parts.append(await self._document(record, attachment, data, found, reading))
        else:
            reading.parts.append(await self._audio(record, attachment, data, reading))

    async def _image(self, record: InboundRecord, attachment: Attachment, image: ModelImage
                     ) -> dict[str, Any]:
        suffix = image.mime.partition("/")[2]
        ref = await self.files.keep(record.chat_key, image.data, suffix)
        return attachment_part("image", file=ref, name=attachment.name or f"picture.{suffix}",
                               mime=image.mime, size=len(image.data),
                               text=attachment.caption or "", width=image.width,
                               height=image.height)

    async def _document(self, record: InboundRecord, attachment: Attachment, data: bytes,
                        text: FileText, reading: Reading) -> dict[str, Any]:
        name = attachment.name or "file"
        suffix = name.rpartition(".")[2] if "." in name else "txt"
        ref = await self.files.keep(record.chat_key, data, suffix)
        if text.truncated:
            reading.notices.append(
                f"{name} is long ({text.chars:,} characters), so I read its beginning and "
                f"its end: about {len(text.text):,} characters in all.")
        return attachment_part("file", file=ref, name=name, mime=text.mime, size=len(data),
                               text=text.text, chars=text.chars, truncated=text.truncated,
                               format=text.kind)

    async def _audio(self, record: InboundRecord, attachment: Attachment, data: bytes,
                     reading: Reading) -> dict[str, Any]:
        if self.transcriber is None:
            raise TranscriptionError("no transcription service is set up", transient=False)
        name = attachment.name or "voice.ogg"
        # A network call with its own timeout (transcription.timeout_s): no CPU of ours.
        transcript = await self.transcriber.transcribe(data, name, attachment.mime)
        suffix = name.rpartition(".")[2] if "." in name else "ogg"
        ref = await self.files.keep(record.chat_key, data, suffix)
        line = " ".join(transcript.split())
        if len(line) > HEARD_CHARS:
            line = line[:HEARD_CHARS - 1].rstrip() + "…"
        reading.notices.append(f'Heard: "{line}"')
        return attachment_part("audio", file=ref, name=name,
                               mime=attachment.mime or "audio/ogg", size=len(data),
                               text=transcript)

    async def aclose(self) -> None:
        await self.pool.close()
        if self.transcriber is not None:
            await self.transcriber.aclose()

    async def _pictures_note(self, record: InboundRecord, reading: Reading) -> None:
        """A model that cannot see is said once per chat; a picture with nothing else
        to answer is declined (the answer says why)."""
        if self.vision or not any(p["kind"] == "image" for p in reading.parts):
            return
        if not record.text.strip() and all(p["kind"] == "image" for p in reading.parts):
            reading.parts.clear()
            reading.declined.append(NO_PICTURES_ALONE)
            return
        key = f"told:no-pictures:{record.chat_key}"
        if await self.store.get_setting(key) is None:
            reading.notices.insert(0, NO_PICTURES)
            await self.store.put_setting(key, "1")
