"""Voice notes to text: the real openai SDK over a socket to FakeOpenAI's transcription endpoint."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from agent.providers.transcribe import Transcriber, TranscriptionError, TranscriptionSettings
from tests.harness import FakeOpenAI
from tests.harness.fake_transcribe import GROQ_AUDIO_EXTENSIONS, audio_hash
from tests.harness.fixtures import free_port

KEY = "sk-test-Zq81vX0pLmN4rT6yWc2e"
OGG = b"OggS\x00\x02" + bytes(300)  # what Telegram sends for a voice note: Ogg/Opus

Make = Callable[..., Transcriber]


@pytest.fixture
def transcriber(autoclose: Callable[[Any], Any]) -> Make:
    def make(fake: FakeOpenAI | None, **overrides: Any) -> Transcriber:
        base_url = fake.base_url if fake else f"http://127.0.0.1:{free_port()}/v1"
        values: dict[str, Any] = {"model": "whisper-1", "base_url": base_url, "api_key": KEY,
                                  "max_retries": 0, "timeout_s": 10.0}
        return autoclose(Transcriber(TranscriptionSettings(**{**values, **overrides})))

    return make


async def failure(transcribe: Transcriber, data: bytes = OGG,
                  filename: str = "voice.oga") -> TranscriptionError:
    with pytest.raises(TranscriptionError) as caught:
        await transcribe.transcribe(data, filename)
    return caught.value


async def test_voice_note_comes_back_as_text(transcriber: Make, fake_openai: FakeOpenAI) -> None:
    fake_openai.transcripts[audio_hash(OGG)] = "  see you at nine \n"
    text = await transcriber(fake_openai).transcribe(OGG, "voice.oga")
    assert text == "see you at nine"
    [seen] = fake_openai.transcriptions
    assert (seen.filename, seen.model, seen.content_type, seen.response_format, seen.data) == (
        "voice.ogg", "whisper-1", "audio/ogg", "json", OGG)
    assert fake_openai.calls[-1].headers["authorization"] == f"Bearer {KEY}"


async def test_voice_notes_reach_servers_that_refuse_oga(
        transcriber: Make, fake_openai: FakeOpenAI) -> None:
    fake_openai.audio_extensions = GROQ_AUDIO_EXTENSIONS
    fake_openai.transcripts[audio_hash(OGG)] = "on my way"
    assert await transcriber(fake_openai).transcribe(OGG, "file_12.oga") == "on my way"


@pytest.mark.parametrize(("filename", "mime", "data", "sent"), [
    ("voice/file_3.oga", "audio/ogg", OGG, "file_3.ogg"),  # Telegram's file_path
    ("music/file_9.mp3", "audio/mpeg", b"ID3\x04\x00" + bytes(40), "file_9.mp3"),
    ("voice", None, OGG, "voice.ogg"),
    ("", "audio/ogg", OGG, "audio.ogg"),
    ("memo", None, b"ID3\x04\x00" + bytes(40), "memo.mp3"),
    ("memo", None, b"\xff\xfb\x90\x64" + bytes(40), "memo.mp3"),
    ("rec.bin", None, b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(40), "rec.wav"),
    ("take", None, b"fLaC\x00\x00\x00\x22" + bytes(40), "take.flac"),
    ("memo", None, b"\x00\x00\x00\x20ftypM4A " + bytes(40), "memo.m4a"),
    ("clip", None, b"\x1a\x45\xdf\xa3" + bytes(40), "clip.webm"),
    ("note.dat", "audio/webm;codecs=opus", b"\x00" * 40, "note.webm"),  # the mime type tells
    # An accepted name stays, even where the bytes would suggest another extension.
    ("round.mp4", "video/mp4", b"\x00\x00\x00\x18ftypmp42" + bytes(40), "round.mp4"),
])
async def test_audio_gets_a_name_the_service_accepts(
        transcriber: Make, fake_openai: FakeOpenAI, filename: str, mime: str | None,
        data: bytes, sent: str) -> None:
    await transcriber(fake_openai).transcribe(data, filename, mime)
    assert [t.filename for t in fake_openai.transcriptions] == [sent]


async def test_audio_in_a_format_the_service_cannot_read(
        transcriber: Make, fake_openai: FakeOpenAI) -> None:
    error = await failure(transcriber(fake_openai), b"#!AMR\n" + bytes(40), "note.amr")
    assert str(error) == "the transcription service refused the file (unsupported format)"
    assert not error.transient


async def test_a_silent_voice_note_is_not_an_answer(
        transcriber: Make, fake_openai: FakeOpenAI) -> None:
    fake_openai.transcriber = lambda data, name: " \n "
    error = await failure(transcriber(fake_openai))
    assert str(error) == "the voice note had no words I could make out"
    assert not error.transient


def _echoing_key(status: int, code: str | None = None) -> dict[str, Any]:
    """An error body that repeats our key and a keyed URL, as careless servers do."""
    return {"error": {"message": f"failed for key {KEY} at https://stt.example/v1?key={KEY}",
                      "type": "invalid_request_error", "code": code}}


@pytest.mark.parametrize(("status", "code", "phrase", "transient"), [
    (500, None, "the transcription service is having trouble (HTTP 500)", True),
    (503, None, "the transcription service is having trouble (HTTP 503)", True),
    (429, "rate_limit_exceeded", "the transcription service is rate-limiting us", True),
    (429, "insufficient_quota", "the transcription service says our quota or credit is used up",
     False),
    (401, "invalid_api_key", "the transcription service rejected our key", False),
    (403, None, "the transcription service refused us access", False),
    (413, None, "the voice note is too large for the transcription service", False),
    (400, "audio_too_short", "the voice note is too short to transcribe", False),
    (400, None, "the transcription service refused the request", False),
])
async def test_service_errors_become_plain_phrases_without_secrets(
        transcriber: Make, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture,
        status: int, code: str | None, phrase: str, transient: bool) -> None:
    fake_openai.fail_next(status, _echoing_key(status, code))
    with caplog.at_level(logging.WARNING, logger="agent.providers.transcribe"):
        error = await failure(transcriber(fake_openai))
    assert (str(error), error.transient) == (phrase, transient)
    assert f"HTTP {status}" in caplog.text  # the operator still sees what happened
    assert KEY not in caplog.text and KEY not in str(error)


async def test_a_wrong_key_is_reported_without_showing_it(
        transcriber: Make, fake_openai: FakeOpenAI) -> None:
    fake_openai.api_key = "sk-the-right-one"
    error = await failure(transcriber(fake_openai))
    assert (str(error), error.transient) == ("the transcription service rejected our key", False)
    assert KEY not in str(error)


async def test_an_unknown_model_is_named(transcriber: Make, fake_openai: FakeOpenAI) -> None:
    fake_openai.transcription_models = ["whisper-1"]
    error = await failure(transcriber(fake_openai, model="whisper-9"))
    assert str(error) == "the transcription service does not offer the model 'whisper-9'"
    assert not error.transient


async def test_a_service_that_is_down(transcriber: Make) -> None:
    error = await failure(transcriber(None))
    assert (str(error), error.transient) == ("the transcription service did not answer", True)
    assert KEY not in str(error)


async def test_a_service_that_does_not_answer_in_time(
        transcriber: Make, fake_openai: FakeOpenAI) -> None:
    fake_openai.delay_next(5)
    error = await failure(transcriber(fake_openai, timeout_s=0.3))
    assert (str(error), error.transient) == (
        "the transcription service did not answer in time", True)


async def test_retries_are_honoured(transcriber: Make, fake_openai: FakeOpenAI) -> None:
    fake_openai.fail_next(503, headers={"retry-after-ms": "20"})
    text = await transcriber(fake_openai, max_retries=1).transcribe(OGG, "voice.oga")
    assert text == f"transcribed: voice.ogg ({len(OGG)} bytes)"
    assert [c.headers["x-stainless-retry-count"] for c in fake_openai.calls] == ["0", "1"]

    fake_openai.reset()
    fake_openai.fail_next(503, headers={"retry-after-ms": "20"})
    error = await failure(transcriber(fake_openai, max_retries=0))
    assert error.transient and len(fake_openai.calls) == 1
