"""Voice notes to text through an OpenAI-compatible `/audio/transcriptions` endpoint.

SDK failures go through the providers' own classification (`classify.sdk_errors`, which
also catches the transport's errors whichever of httpx and httpx2 the SDK uses) and come
out as one `TranscriptionError` carrying a short phrase for the user.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from agent.errors import (
    AuthError,
    ModelNotFoundError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitedError,
    plain_error,
)
from agent.providers.classify import sdk_errors

log = logging.getLogger(__name__)

# OpenAI's list without "oga": OpenAI takes it, but other compatible servers (Groq among
# them) refuse it, and ".ogg" names the same Ogg container everywhere.
ACCEPTED_EXTENSIONS = frozenset({"flac", "m4a", "mp3", "mp4", "mpeg", "mpga", "ogg", "wav",
                                 "webm"})
_MIME_EXTENSIONS = {
    "audio/ogg": "ogg", "audio/opus": "ogg", "application/ogg": "ogg", "audio/mpeg": "mp3",
    "audio/mp3": "mp3", "audio/wav": "wav", "audio/x-wav": "wav", "audio/wave": "wav",
    "audio/flac": "flac", "audio/x-flac": "flac", "audio/mp4": "m4a", "audio/m4a": "m4a",
    "audio/x-m4a": "m4a", "video/mp4": "mp4", "audio/webm": "webm", "video/webm": "webm",
}
_EXTENSION_MIMES = {"ogg": "audio/ogg", "mp3": "audio/mpeg", "mpga": "audio/mpeg",
                    "mpeg": "audio/mpeg", "wav": "audio/wav", "flac": "audio/flac",
                    "m4a": "audio/mp4", "mp4": "audio/mp4", "webm": "audio/webm"}
# How compatible servers word "this is not audio I can read" in a 400.
_FORMAT_TEXT = re.compile(r"file format|file type|must be one of|unsupported|unrecognized"
                          r"|could not (?:decode|process|read)|invalid (?:audio|media)",
                          re.IGNORECASE)


@dataclass(frozen=True)
class TranscriptionSettings:
    """The `transcription:` config section; transcription is on when `model` is set."""

    model: str
    base_url: str | None = None  # None: OpenAI's own API
    api_key: str | None = None
    timeout_s: float = 120.0
    max_retries: int = 2


class TranscriptionError(Exception):
    """Why a transcription failed, as a short plain phrase for the user.

    `transient`: the same audio is worth sending again later (timeouts, rate limits,
    the service down or failing on its side).
    """

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


def _sniff(data: bytes) -> str | None:
    """The accepted extension the audio bytes start like, or None."""
    if data.startswith(b"OggS"):
        return "ogg"
    # ID3 tag, or a bare MPEG frame: 11 sync bits, then layer bits 01 (Layer III).
    if data.startswith(b"ID3") or (len(data) > 1 and data[0] == 0xFF
                                   and data[1] & 0xE6 == 0xE2):
        return "mp3"
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "wav"
    if data.startswith(b"fLaC"):
        return "flac"
    if data[4:8] == b"ftyp":
        return "m4a"
    if data.startswith(b"\x1a\x45\xdf\xa3"):
        return "webm"
    return None


def upload_name(filename: str, mime: str | None, data: bytes) -> str:
    """A file name the service accepts: the given one when its extension is accepted, else
    its stem with the extension the bytes or the mime type show (unchanged if neither does)."""
    path = PurePosixPath(filename)  # a platform's file path ("voice/file_3.oga") too
    if path.suffix[1:].lower() in ACCEPTED_EXTENSIONS:
        return path.name
    base_mime = (mime or "").split(";")[0].strip().lower()
    extension = _sniff(data) or _MIME_EXTENSIONS.get(base_mime)
    stem = path.stem or "audio"
    return f"{stem}.{extension}" if extension else path.name or "audio"


def _auth_error(err: AuthError) -> TranscriptionError:
    if err.status == 401:
        return TranscriptionError("the transcription service rejected our key", transient=False)
    if err.status == 403:
        return TranscriptionError("the transcription service refused us access",
                                  transient=False)
    return TranscriptionError("the transcription service says our quota or credit is used up",
                              transient=False)


def _refusal(err: ProviderError) -> TranscriptionError:
    """A 4xx that is not about keys, limits or the model: the file, or the request."""
    text = str(err)
    if err.status == 413:
        return TranscriptionError("the voice note is too large for the transcription service",
                                  transient=False)
    if err.code == "audio_too_short" or "too short" in text.lower():
        return TranscriptionError("the voice note is too short to transcribe", transient=False)
    if _FORMAT_TEXT.search(text):
        return TranscriptionError(
            "the transcription service refused the file (unsupported format)", transient=False)
    return TranscriptionError("the transcription service refused the request", transient=False)


def explain(err: ProviderError, model: str) -> TranscriptionError:
    """The user's phrase and retry advice for a classified provider error."""
    if isinstance(err, ProviderTimeoutError):
        return TranscriptionError("the transcription service did not answer in time",
                                  transient=True)
    if isinstance(err, RateLimitedError):
        return TranscriptionError("the transcription service is rate-limiting us",
                                  transient=True)
    if isinstance(err, ProviderUnavailableError):
        if err.status is None:
            return TranscriptionError("the transcription service did not answer", transient=True)
        return TranscriptionError(f"the transcription service is having trouble "
                                  f"(HTTP {err.status})", transient=True)
    if isinstance(err, AuthError):
        return _auth_error(err)
    if isinstance(err, ModelNotFoundError):
        return TranscriptionError(f"the transcription service does not offer the model "
                                  f"{model!r}", transient=False)
    if err.status is not None and 400 <= err.status < 500:
        return _refusal(err)
    return TranscriptionError("the transcription service failed", transient=False)


class Transcriber:
    """Turns audio bytes into text with one configured transcription model."""

    def __init__(self, settings: TranscriptionSettings) -> None:
        import openai  # only when transcription is set up: the SDK is slow to import

        self.settings = settings
        self._client = openai.AsyncOpenAI(
            base_url=settings.base_url,
            api_key=settings.api_key or "not-needed",  # local servers ignore the key
            timeout=settings.timeout_s,
            max_retries=settings.max_retries,
        )

    async def transcribe(self, data: bytes, filename: str, mime: str | None = None) -> str:
        """The words in the audio, stripped; `TranscriptionError` when there are none."""
        name = upload_name(filename, mime, data)
        content_type = mime or _EXTENSION_MIMES.get(PurePosixPath(name).suffix[1:].lower(),
                                                    "application/octet-stream")
        import openai

        try:
            with sdk_errors(openai, openai.OpenAIError, provider="transcription",
                            timeout_s=self.settings.timeout_s, base_url=self._client.base_url,
                            secret=self.settings.api_key):
                result = await self._client.audio.transcriptions.create(
                    model=self.settings.model, file=(name, data, content_type),
                    response_format="json")
        except ProviderError as err:
            log.warning("transcribing %s failed: %s", name,
                        plain_error(err, limit=400, known=self.settings.api_key))
            raise explain(err, self.settings.model) from err
        text = result if isinstance(result, str) else getattr(result, "text", None) or ""
        if not text.strip():
            raise TranscriptionError("the voice note had no words I could make out",
                                     transient=False)
        return text.strip()

    async def aclose(self) -> None:
        await self._client.close()
