"""Fake OpenAI Chat Completions server: POST /v1/chat/completions, GET /v1/models.

Usage is computed from the request: prompt_tokens = ceil(message text chars × token_ratio / 4),
completion_tokens = ceil(reply chars / 4), cached tokens 0.

`stream: true` gets `chat.completion.chunk` events (`data: {json}`, then `data: [DONE]`):
the role, text deltas, tool-call deltas, the finish reason, and with
`stream_options.include_usage` a last chunk holding only the usage (see `streams`).

Images: `image_url` content parts are validated like OpenAI does (user messages only; the
url a `data:image/<png|jpeg|gif|webp>;base64,<valid base64>` URL or http(s), else 400
invalid_request_error) and each counts IMAGE_TOKENS (85, OpenAI's low-detail figure)
prompt tokens on top of the text. `images_seen` counts images in answered requests;
`requests_with_images()` finds recorded requests that carried base64 image bytes.

Transcription: POST /v1/audio/transcriptions (see `fake_transcribe`).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import itertools
import json
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

from aiohttp import web

from tests.harness.base import (
    FakeServer,
    Responder,
    estimate_tokens,
    json_response,
    run_cli,
    text_of,
)
from tests.harness.fake_transcribe import TranscriptionMixin
from tests.harness.streams import Answer, SSEWriter, StreamingModel, asks_to_stream, serve_stream

_ERROR_TYPES = {400: ("invalid_request_error", None), 401: ("invalid_request_error",
                "invalid_api_key"), 403: ("invalid_request_error", "unsupported_country_region"),
                404: ("invalid_request_error", "model_not_found"),
                429: ("requests", "rate_limit_exceeded")}
# What OpenAI sends inside a stream that fails after it started (the SDK raises APIError).
STREAM_ERROR = {"error": {"message": "The server had an error while processing your request.",
                          "type": "server_error", "code": None}}


IMAGE_TOKENS = 85  # prompt tokens per image: OpenAI's figure for a low-detail image
IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
_DATA_URL = re.compile(r"data:([^;,]*);base64,(.*)", re.DOTALL)
_MAGIC = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"),
          (b"GIF87a", "image/gif"), (b"GIF89a", "image/gif"))


def decode_base64(data: Any) -> bytes | None:
    """Strictly decoded base64 (no stray characters, right padding), or None."""
    if not isinstance(data, str):
        return None
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def sniff_image(data: bytes) -> str | None:
    """The image media type the bytes start like (PNG, JPEG, GIF, WebP), or None."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return next((kind for magic, kind in _MAGIC if data.startswith(magic)), None)


def image_parts(body: Any) -> Iterator[tuple[str, str | None, dict[str, Any]]]:
    """(where, role, part) for every image_url content part in the messages, `where` like
    "messages[0].content[1]"."""
    messages = body.get("messages") if isinstance(body, dict) else None
    for i, message in enumerate(messages if isinstance(messages, list) else []):
        if not isinstance(message, dict) or not isinstance(message.get("content"), list):
            continue
        for j, part in enumerate(message["content"]):
            if isinstance(part, dict) and part.get("type") == "image_url":
                yield f"messages[{i}].content[{j}]", message.get("role"), part


def count_images(body: Any) -> int:
    return sum(1 for _ in image_parts(body))


def base64_images(body: Any) -> int:
    """How many images in the request carry their bytes (data: URLs)."""
    return sum(1 for _, _, part in image_parts(body)
               if isinstance(part.get("image_url"), dict)
               and str(part["image_url"].get("url", "")).startswith("data:"))


def image_problem(body: dict[str, Any]) -> dict[str, Any] | None:
    """OpenAI's 400 body for the first bad image_url part, else None."""
    for where, role, part in image_parts(body):
        if role != "user":
            return openai_error(f"Invalid '{where}': Image URLs are only allowed for messages "
                                f"with role 'user', but this message with role '{role}' "
                                f"contains an image URL.", param=f"{where}.image_url",
                                code="invalid_value")
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else None
        param = f"{where}.image_url.url"
        if not isinstance(url, str) or not url:
            return openai_error(f"Missing required parameter: '{param}'.", param=param,
                                code="missing_required_parameter")
        if url.startswith(("http://", "https://")):
            continue
        match = _DATA_URL.fullmatch(url)
        if match is None:
            return openai_error(f"Invalid '{param}'. Expected a valid URL, but got a value "
                                f"with an invalid format.", param=param, code="invalid_value")
        if match.group(1) not in IMAGE_MEDIA_TYPES:
            return openai_error("You uploaded an unsupported image. Please make sure your "
                                "image has of one the following formats: ['png', 'jpeg', "
                                "'gif', 'webp'].", param=param, code="invalid_image_format")
        if not decode_base64(match.group(2)):
            return openai_error(f"Invalid '{param}'. Expected a base64-encoded data URL with an "
                                f"image MIME type (e.g. 'data:image/png;base64,aW1nIGJ5dGVzIGhl"
                                f"cmU='), but got an invalid base64 encoding.", param=param,
                                code="invalid_value")
    return None


def openai_error(message: str, *, type_: str = "invalid_request_error", code: str | None = None,
                 param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def request_chars(body: dict[str, Any]) -> int:
    """Characters of message text the fake bills as prompt: contents and tool-call arguments."""
    total = 0
    for message in body.get("messages") or []:
        total += len(text_of(message.get("content")))
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            total += len(function.get("name") or "") + len(function.get("arguments") or "")
    return total


class FakeOpenAI(TranscriptionMixin, FakeServer, StreamingModel):
    """OpenAI-compatible chat server; `base_url` is what `AsyncOpenAI(base_url=...)` takes.

    responder: request json -> reply text, or an assistant message dict with tool_calls.
    context_limit: prompt estimate above it -> 400 context_length_exceeded.
    enforce_output_room: also refuse prompt + max_tokens > context_limit (older OpenAI text).
    max_output_tokens: max_tokens above it -> 400 "max_tokens is too large".
    api_key: when set, requests must carry `Authorization: Bearer <api_key>` (else 401).
    models: when set, other model names get 404 model_not_found.
    Streaming knobs (stream_chunk_chars, stream_delay_s, break_stream_next,
    streamed_requests): see `tests.harness.streams`. `usages` holds each answered request's
    usage object, streamed or not; `usage_totals()` sums them.
    images_seen: images in answered chat requests, cumulative (each costs IMAGE_TOKENS).
    Transcription knobs (transcripts, transcriber, transcription_models, transcriptions):
    see `tests.harness.fake_transcribe`.
    """

    def __init__(self, *, responder: Responder | None = None, context_limit: int | None = None,
                 enforce_output_room: bool = False, max_output_tokens: int | None = None,
                 api_key: str | None = None, models: list[str] | None = None,
                 token_ratio: float = 1.0, host: str = "127.0.0.1", port: int = 0) -> None:
        FakeServer.__init__(self, host=host, port=port)
        StreamingModel.__init__(self, responder, token_ratio)
        self.context_limit = context_limit
        self.enforce_output_room = enforce_output_room
        self.max_output_tokens = max_output_tokens
        self.api_key = api_key
        self.models = models
        # An older OpenAI-compatible server (some vLLM, LocalAI releases): unknown request
        # fields are refused, `stream_options` among them.
        self.reject_stream_options = False
        self.images_seen = 0
        self._ids = itertools.count(1)
        self._init_transcription()

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def provider_settings(self, **overrides: Any) -> Any:
        """ProviderSettings for an OpenAICompatProvider talking to this fake."""
        from agent.providers.base import ProviderSettings

        values: dict[str, Any] = {"provider": "openai", "model": "fake-model",
                                  "base_url": self.base_url, "api_key": self.api_key or "test-key",
                                  "max_retries": 0, "timeout_s": 10.0}
        return ProviderSettings(**{**values, **overrides})

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/v1/chat/completions", self._chat), web.get("/v1/models", self._models),
                web.post("/v1/audio/transcriptions", self._transcription)]

    def requests_with_images(self, *, urls: bool = False) -> list[int]:
        """Indices into `calls` of chat requests that carried base64 image bytes (with
        `urls=True`: any image part, http(s) URLs included), refused ones too."""
        def carries(body: Any) -> bool:
            return bool(count_images(body) if urls else base64_images(body))

        return [i for i, call in enumerate(self.calls)
                if call.path.endswith("/chat/completions") and carries(call.json)]

    def reset(self) -> None:
        """Forget recorded calls, usages, transcriptions, images_seen, pending injections
        and a pending stream break."""
        super().reset()
        self.usages.clear()
        self.transcriptions.clear()
        self.images_seen = 0
        self.take_stream_break()

    def error_body(self, status: int, message: str) -> Any:
        type_, code = _ERROR_TYPES.get(status, ("server_error", None))
        return openai_error(message, type_=type_, code=code)

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        """Text tokens (chars / 4 × token_ratio) plus IMAGE_TOKENS per image."""
        return self.count_tokens(request_chars(body)) + IMAGE_TOKENS * count_images(body)

    async def _models(self, request: web.Request) -> web.Response:
        refusal = self._auth_refusal(request)
        if refusal is not None:
            return refusal
        names = self.models or ["fake-model"]
        return json_response({"object": "list", "data": [
            {"id": n, "object": "model", "created": 0, "owned_by": "fake"} for n in names]})

    def _auth_refusal(self, request: web.Request) -> web.Response | None:
        if self.api_key is None or \
                request.headers.get("Authorization") == f"Bearer {self.api_key}":
            return None
        return json_response(openai_error(
            "Incorrect API key provided. You can find your API key at "
            "https://platform.openai.com/account/api-keys.", code="invalid_api_key"), 401)

    def _refusal(self, request: web.Request, body: Any) -> web.Response | None:
        refusal = self._auth_refusal(request)
        if refusal is not None:
            return refusal
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list) \
                or not body["messages"] or not body.get("model"):
            return json_response(openai_error("'messages' and 'model' are required"), 400)
        if self.models is not None and body["model"] not in self.models:
            return json_response(openai_error(
                f"The model `{body['model']}` does not exist or you do not have access to it.",
                code="model_not_found"), 404)
        if self.reject_stream_options and "stream_options" in body:
            return json_response(openai_error(
                "Unrecognized request argument supplied: stream_options"), 400)
        bad_image = image_problem(body)
        if bad_image is not None:
            return json_response(bad_image, 400)
        return self._length_refusal(body)

    def _length_refusal(self, body: dict[str, Any]) -> web.Response | None:
        prompt = self.prompt_tokens(body)
        wanted = body.get("max_tokens") or body.get("max_completion_tokens") or 0
        if self.max_output_tokens is not None and wanted > self.max_output_tokens:
            return json_response(openai_error(
                f"max_tokens is too large: {wanted}. This model supports at most "
                f"{self.max_output_tokens} completion tokens, whereas you provided {wanted}.",
                param="max_tokens"), 400)
        limit = self.context_limit
        if limit is None:
            return None
        if prompt > limit:
            return json_response(openai_error(
                f"This model's maximum context length is {limit} tokens. However, your messages "
                f"resulted in {prompt} tokens. Please reduce the length of the messages.",
                param="messages", code="context_length_exceeded"), 400)
        if self.enforce_output_room and prompt + wanted > limit:
            return json_response(openai_error(
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{prompt + wanted} tokens ({prompt} in the messages, {wanted} in the "
                f"completion). Please reduce the length of the messages or completion.",
                param="messages", code="context_length_exceeded"), 400)
        return None

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            body = None
        refusal = self._refusal(request, body)
        if refusal is not None:
            return refusal
        self.images_seen += count_images(body)
        answer = await self._answer(body)
        if asks_to_stream(body):
            return await self._stream(request, body, answer)
        self.usages.append(answer.usage)
        return json_response(self._completion(body, answer))

    async def _answer(self, body: dict[str, Any]) -> Answer:
        """The reply to `body`: text (cut at max_tokens), tool calls, finish reason, usage."""
        text, calls = await self.next_reply(body)
        finish = "tool_calls" if calls else "stop"
        wanted = body.get("max_tokens") or body.get("max_completion_tokens")
        if wanted and estimate_tokens(len(text)) > wanted:
            text, finish = text[: wanted * 4], "length"
        prompt = self.prompt_tokens(body)
        completion = estimate_tokens(len(text) + sum(len(c["function"]["arguments"])
                                                     for c in calls))
        usage = {"prompt_tokens": prompt, "completion_tokens": completion,
                 "total_tokens": prompt + completion,
                 "prompt_tokens_details": {"cached_tokens": 0},
                 "completion_tokens_details": {"reasoning_tokens": 0}}
        return Answer(text, calls, finish, usage)

    def _completion(self, body: dict[str, Any], answer: Answer) -> dict[str, Any]:
        """The answer as one `chat.completion` object."""
        text, calls = answer.text, answer.calls
        message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls
                                   else None, "refusal": None}
        if calls:
            message["tool_calls"] = calls
        return {
            "id": f"chatcmpl-fake-{next(self._ids)}", "object": "chat.completion",
            "created": int(time.time()), "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": answer.stop,
                         "logprobs": None}],
            "usage": answer.usage,
        }

    async def _stream(self, request: web.Request, body: dict[str, Any],
                      answer: Answer) -> web.StreamResponse:
        """The answer as `chat.completion.chunk` events; its usage is recorded at the end."""
        options = body.get("stream_options")
        with_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        head = {"id": f"chatcmpl-fake-{next(self._ids)}", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": body["model"], "system_fingerprint": None}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return {**head, "choices": [choice], **({"usage": None} if with_usage else {})}

        async def produce(sse: SSEWriter) -> None:
            first = answer.text or not answer.calls
            await sse.send(chunk({"role": "assistant", "content": "" if first else None,
                                  "refusal": None}))
            for piece in self.pieces(sse.shown_text(answer.text)):
                await sse.delta(chunk({"content": piece}))
            await sse.break_if_planned(STREAM_ERROR)
            for index, call in enumerate(answer.calls):
                await self._stream_call(sse, chunk, index, call)
            self.usages.append(answer.usage)
            await sse.send(chunk({}, answer.stop))
            if with_usage:
                await sse.send({**head, "choices": [], "usage": answer.usage})
            await sse.send("[DONE]")

        return await serve_stream(request, produce, pause_s=self.stream_delay_s,
                                  closing=self._closing, broken=self.take_stream_break())

    async def _stream_call(self, sse: SSEWriter, chunk: Callable[..., dict[str, Any]], index: int,
                           call: dict[str, Any]) -> None:
        """One tool call: id, type and name first, then the arguments in pieces."""
        function = call["function"]
        await sse.send(chunk({"tool_calls": [{
            "index": index, "id": call["id"], "type": "function",
            "function": {"name": function["name"], "arguments": ""}}]}))
        for piece in self.pieces(function["arguments"]):
            await sse.delta(chunk({"tool_calls": [{"index": index,
                                                   "function": {"arguments": piece}}]}))


def main(argv: list[str] | None = None) -> None:
    def make(args: argparse.Namespace) -> FakeServer:
        return FakeOpenAI(host=args.host, port=args.port, context_limit=args.context_limit,
                          api_key=args.api_key)

    run_cli(make, "Fake OpenAI Chat Completions (and transcription) server", argv)


if __name__ == "__main__":
    main()
