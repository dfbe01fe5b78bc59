"""OpenAI's transcription endpoint for FakeOpenAI: POST /v1/audio/transcriptions.

The request is multipart: `file` (the audio, with a file name), `model`, and optionally
`language`, `prompt`, `response_format` (json, text, verbose_json, srt, vtt) and
`temperature`. The answer is `{"text": ..., "usage": {"type": "duration", "seconds": N}}`
(whisper-1's shape; N from 4 KB a second) for json, the bare text for text, and so on;
errors are OpenAI's: 400 for a missing field, a file name whose extension OpenAI does not
take, an empty file or an unknown response_format, 413 above 25 MB.

What the text is: `transcriber(data, filename)` when set (may be async), else
`transcripts[sha256 hex of the bytes]`, else `transcripts[filename]`, else
"transcribed: <filename> (<N> bytes)". Each request that reached the transcriber is kept in
`transcriptions` (refused ones are not).

`audio_extensions` is the list of file name extensions taken (OpenAI's by default); set it to
play a compatible server with a shorter list, e.g. GROQ_AUDIO_EXTENSIONS (no "oga").
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from tests.harness.base import json_response

# The extensions OpenAI names in its "Invalid file format" error.
AUDIO_EXTENSIONS = ("flac", "m4a", "mp3", "mp4", "mpeg", "mpga", "oga", "ogg", "wav", "webm")
# Groq's list (its 400 names it): Telegram's ".oga" voice notes are refused there.
GROQ_AUDIO_EXTENSIONS = ("flac", "mp3", "mp4", "mpeg", "mpga", "m4a", "ogg", "opus", "wav",
                         "webm")
MAX_AUDIO_BYTES = 25 * 1024 * 1024
RESPONSE_FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
TEXT_ONLY_MODELS = ("gpt-4o-transcribe", "gpt-4o-mini-transcribe")  # json and text only

Transcriber = Callable[[bytes, str], str | Awaitable[str]]


@dataclass(frozen=True)
class TranscriptionRequest:
    """One transcription the fake answered."""

    filename: str
    size: int
    model: str
    content_type: str | None
    response_format: str
    language: str | None
    prompt: str | None
    data: bytes
    text: str


def _error(message: str, status: int = 400, *, param: str | None = None,
           code: str | None = None, type_: str = "invalid_request_error") -> web.Response:
    return json_response({"error": {"message": message, "type": type_, "param": param,
                                    "code": code}}, status)


def audio_hash(data: bytes) -> str:
    """The key `transcripts` may use for these bytes."""
    return hashlib.sha256(data).hexdigest()


def _timestamp(seconds: float, comma: bool) -> str:
    whole = int(seconds)
    millis = round((seconds - whole) * 1000)
    sep = "," if comma else "."
    return f"{whole // 3600:02d}:{whole % 3600 // 60:02d}:{whole % 60:02d}{sep}{millis:03d}"


class TranscriptionMixin:
    """The endpoint; FakeOpenAI supplies `_auth_refusal`."""

    if TYPE_CHECKING:
        def _auth_refusal(self, request: web.Request) -> web.Response | None: ...

    def _init_transcription(self) -> None:
        self.transcripts: dict[str, str] = {}
        self.transcriber: Transcriber | None = None
        self.transcription_models: list[str] | None = None  # None: any model name
        self.transcriptions: list[TranscriptionRequest] = []
        self.audio_extensions: tuple[str, ...] = AUDIO_EXTENSIONS

    async def transcribe(self, data: bytes, filename: str) -> str:
        """The text the fake answers for this audio."""
        if self.transcriber is not None:
            text = self.transcriber(data, filename)
            return await text if inspect.isawaitable(text) else text
        found = self.transcripts.get(audio_hash(data), self.transcripts.get(filename))
        return found if found is not None else f"transcribed: {filename} ({len(data)} bytes)"

    async def _transcription(self, request: web.Request) -> web.Response:
        refusal = self._auth_refusal(request)
        if refusal is not None:
            return refusal
        if request.content_type != "multipart/form-data":
            return _error("Invalid Content-Type header (expected multipart/form-data).")
        form = await request.post()  # cached: the base middleware read it already
        upload, model = form.get("file"), form.get("model")
        if not isinstance(upload, web.FileField):
            return _error("Missing required parameter: 'file'.", param="file")
        if not isinstance(model, str) or not model:
            return _error("you must provide a model parameter", param="model")
        if self.transcription_models is not None and model not in self.transcription_models:
            return _error(f"The model `{model}` does not exist or you do not have access "
                          f"to it.", 404, code="model_not_found")
        upload.file.seek(0)
        data = upload.file.read()
        filename = upload.filename or ""
        extension = filename.rsplit(".", 1)[-1].lower() if "." in filename else ""
        if extension not in self.audio_extensions:
            return _error(f"Invalid file format. Supported formats: "
                          f"{list(self.audio_extensions)}",
                          param="file", code="invalid_value")
        if len(data) > MAX_AUDIO_BYTES:
            return _error(f"Maximum content size limit ({MAX_AUDIO_BYTES}) exceeded "
                          f"({len(data)} bytes read)", 413)
        if not data:
            return _error("Audio file is too short. Minimum audio length is 0.1 seconds.",
                          param="file", code="audio_too_short")
        response_format = str(form.get("response_format") or "json")
        if response_format not in RESPONSE_FORMATS:
            return _error(f"Invalid value: '{response_format}'. Supported values are: "
                          + ", ".join(f"'{f}'" for f in RESPONSE_FORMATS) + ".",
                          param="response_format", code="invalid_value")
        if model in TEXT_ONLY_MODELS and response_format not in ("json", "text"):
            return _error(f"response_format '{response_format}' is not compatible with model "
                          f"'{model}'. Use 'json' or 'text' instead.",
                          param="response_format", code="unsupported_value")
        language, prompt = form.get("language"), form.get("prompt")
        text = await self.transcribe(data, filename)
        self.transcriptions.append(TranscriptionRequest(
            filename, len(data), model, upload.content_type, response_format,
            language if isinstance(language, str) else None,
            prompt if isinstance(prompt, str) else None, data, text))
        return _formatted(text, response_format, language if isinstance(language, str) else None,
                          duration=max(0.1, len(data) / 4_000))


def _formatted(text: str, response_format: str, language: str | None, *,
               duration: float) -> web.Response:
    """The transcript in the asked format (the duration is a guess: 4 KB a second)."""
    if response_format == "text":
        return web.Response(text=text + "\n", content_type="text/plain")
    if response_format == "srt":
        return web.Response(text=f"1\n{_timestamp(0, True)} --> {_timestamp(duration, True)}"
                                 f"\n{text}\n\n", content_type="text/plain")
    if response_format == "vtt":
        return web.Response(text=f"WEBVTT\n\n{_timestamp(0, False)} --> "
                                 f"{_timestamp(duration, False)}\n{text}\n\n",
                            content_type="text/plain")
    body: dict[str, Any] = {"text": text,
                            "usage": {"type": "duration", "seconds": math.ceil(duration)}}
    if response_format == "verbose_json":
        body = {"task": "transcribe", "language": language or "english",
                "duration": round(duration, 2), "text": text, "segments": [{
                    "id": 0, "seek": 0, "start": 0.0, "end": round(duration, 2), "text": text,
                    "tokens": [], "temperature": 0.0, "avg_logprob": -0.2,
                    "compression_ratio": 1.0, "no_speech_prob": 0.01}]}
    return web.Response(body=json.dumps(body).encode(), content_type="application/json")
