"""Fake Anthropic Messages server: POST /v1/messages, validating the request like the real API;
GET /v1/models lists `models` (default: claude-fake).

Usage is computed from the request: the prompt is ceil(system + message chars × token_ratio / 4)
tokens, split into input_tokens, cache_read_input_tokens and cache_creation_input_tokens by
the prompt cache (`anthropic_cache`); output_tokens = ceil(reply chars / 4).

`stream: true` gets the Messages event stream: message_start (usage with the input and
cache counts, output_tokens 1), a ping, content_block_start / _delta / _stop per block
(text_delta, or input_json_delta for tool_use), message_delta (stop reason, final
output_tokens) and message_stop (see `streams`).

Images: an `image` block's base64 source must name image/jpeg, image/png, image/gif or
image/webp, carry valid base64 (at most 5 MB of it), and, when the bytes start like a known
format, match its media_type; a url source needs an http(s) URL. Each image adds
IMAGE_TOKENS (1,600) input tokens: the real count is about width × height / 750, which the
fake cannot know without decoding the image; 1,600 is what a ~1.15-megapixel image (the
size the API scales larger ones down to) costs. Image tokens are billed as plain
`input_tokens`, outside the prompt cache's split. `images_seen` counts images in answered
requests; `requests_with_images()` finds recorded requests that carried base64 image bytes.
`document` blocks are checked too (base64 application/pdf, text/plain text, url).
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from tests.harness.anthropic_cache import (
    DEFAULT_MIN_CACHEABLE_TOKENS,
    PromptCache,
    prompt_blocks,
    ttl_order_problem,
)
from tests.harness.base import (
    FakeServer,
    Responder,
    estimate_tokens,
    json_response,
    run_cli,
)
from tests.harness.fake_openai import IMAGE_MEDIA_TYPES, decode_base64, sniff_image
from tests.harness.streams import Answer, SSEWriter, StreamingModel, asks_to_stream, serve_stream

MAX_CACHE_BLOCKS = 4
IMAGE_TOKENS = 1_600  # input tokens per image (see the module docstring)
MAX_IMAGE_BASE64 = 5 * 1024 * 1024  # the API refuses a larger base64 image
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}
_MESSAGE_KEYS = frozenset({"role", "content"})
_USER_BLOCKS = frozenset({"text", "image", "document", "tool_result", "search_result"})
_ASSISTANT_BLOCKS = frozenset({"text", "tool_use", "thinking", "redacted_thinking"})
# What the Messages API sends inside a stream that fails after it started.
STREAM_ERROR = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


class InvalidRequest(Exception):
    """A request the real API would refuse with 400 invalid_request_error."""


def anthropic_error(message: str, type_: str = "invalid_request_error") -> dict[str, Any]:
    return {"type": "error", "error": {"type": type_, "message": message}}


def _check_cache_control(value: Any, where: str) -> int:
    if value is None:
        return 0
    where = f"{where}.cache_control"
    if not isinstance(value, dict) or value.get("type") != "ephemeral":
        raise InvalidRequest(f"{where}.type: Input should be 'ephemeral'")
    if value.get("ttl", "5m") not in ("5m", "1h"):
        raise InvalidRequest(f"{where}.ttl: Input should be '5m' or '1h'")
    extras = sorted(set(value) - {"type", "ttl"})
    if extras:
        raise InvalidRequest(f"{where}.{extras[0]}: Extra inputs are not permitted")
    return 1


def _check_block(block: Any, where: str, allowed: frozenset[str]) -> int:
    """Validate one content block; return how many cache_control markers it carries."""
    if not isinstance(block, dict) or block.get("type") not in allowed:
        kind = block.get("type") if isinstance(block, dict) else type(block).__name__
        raise InvalidRequest(f"{where}.type: unexpected block type {kind!r}")
    kind = block["type"]
    if kind == "text" and not (isinstance(block.get("text"), str) and block["text"]):
        raise InvalidRequest(f"{where}: text content blocks must be non-empty")
    if kind == "tool_use" and not (block.get("id") and block.get("name")
                                   and isinstance(block.get("input"), dict)):
        raise InvalidRequest(f"{where}: tool_use needs id, name and an object input")
    if kind == "image":
        _check_image(block.get("source"), f"{where}.image.source")
    if kind == "document":
        _check_document(block.get("source"), f"{where}.document.source")
    count = _check_cache_control(block.get("cache_control"), where)
    if kind == "tool_result":
        inner = block.get("content")
        if isinstance(inner, list):
            for i, sub in enumerate(inner):
                count += _check_block(sub, f"{where}.content.{i}", frozenset({"text", "image"}))
    return count


def _check_image(source: Any, where: str) -> None:
    kind = source.get("type") if isinstance(source, dict) else None
    if kind not in ("base64", "url", "file"):
        raise InvalidRequest(f"{where}.type: Input should be 'base64', 'url' or 'file'")
    if kind == "url":
        if not str(source.get("url") or "").startswith(("http://", "https://")):
            raise InvalidRequest(f"{where}.url.url: Input should be a valid URL")
        return
    if kind == "file":
        if not source.get("file_id"):
            raise InvalidRequest(f"{where}.file.file_id: Field required")
        return
    media_type, data = source.get("media_type"), source.get("data")
    if media_type not in IMAGE_MEDIA_TYPES:
        raise InvalidRequest(f"{where}.base64.media_type: Input should be 'image/jpeg', "
                             f"'image/png', 'image/gif' or 'image/webp'")
    if not isinstance(data, str) or not data:
        raise InvalidRequest(f"{where}.base64.data: Field required")
    if len(data) > MAX_IMAGE_BASE64:
        raise InvalidRequest(f"{where}.base64: image exceeds 5 MB maximum: {len(data)} bytes > "
                             f"{MAX_IMAGE_BASE64} bytes")
    raw = decode_base64(data)
    if not raw:
        raise InvalidRequest(f"{where}.base64.data: invalid base64 data")
    actual = sniff_image(raw)
    if actual is not None and actual != media_type:
        raise InvalidRequest(f"{where}.base64.data: The image was specified using the "
                             f"{media_type} media type, but the image appears to be a "
                             f"{actual} image")


def _check_document(source: Any, where: str) -> None:
    kind = source.get("type") if isinstance(source, dict) else None
    if kind == "base64":
        if source.get("media_type") != "application/pdf":
            raise InvalidRequest(f"{where}.base64.media_type: Input should be "
                                 f"'application/pdf'")
        if not decode_base64(source.get("data")):
            raise InvalidRequest(f"{where}.base64.data: invalid base64 data")
    elif kind == "text":
        if source.get("media_type") != "text/plain":
            raise InvalidRequest(f"{where}.text.media_type: Input should be 'text/plain'")
        if not isinstance(source.get("data"), str):
            raise InvalidRequest(f"{where}.text.data: Field required")
    elif kind == "url":
        if not str(source.get("url") or "").startswith(("http://", "https://")):
            raise InvalidRequest(f"{where}.url.url: Input should be a valid URL")
    elif kind not in ("content", "file"):
        raise InvalidRequest(f"{where}.type: Input should be 'base64', 'text', 'content', "
                             f"'url' or 'file'")


def image_blocks(body: Any) -> list[dict[str, Any]]:
    """Every image block in the messages, tool results included, in order."""
    found: list[dict[str, Any]] = []

    def walk(blocks: Any) -> None:
        for block in blocks if isinstance(blocks, list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "image":
                found.append(block)
            elif block.get("type") == "tool_result":
                walk(block.get("content"))

    messages = body.get("messages") if isinstance(body, dict) else None
    for message in messages if isinstance(messages, list) else []:
        walk(message.get("content") if isinstance(message, dict) else None)
    return found


def base64_images(body: Any) -> int:
    """How many images in the request carry their bytes (base64 sources)."""
    return sum(1 for b in image_blocks(body)
               if isinstance(b.get("source"), dict) and b["source"].get("type") == "base64")


def _blocks(content: Any) -> list[Any]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def _check_messages(messages: Any) -> int:
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages: at least one message is required")
    count = 0
    asked: set[str] = set()
    for i, message in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(message, dict):
            raise InvalidRequest(f"{where}: expected an object")
        extras = sorted(set(message) - _MESSAGE_KEYS)
        if extras:
            raise InvalidRequest(f"{where}.{extras[0]}: Extra inputs are not permitted")
        role, content = message.get("role"), message.get("content")
        expected = "user" if i % 2 == 0 else "assistant"
        if role != expected:
            raise InvalidRequest(f"{where}: roles must alternate between \"user\" and "
                                 f"\"assistant\", starting with \"user\" (got {role!r})")
        if content in (None, "", []):
            raise InvalidRequest(f"{where}: all messages must have non-empty content")
        blocks = _blocks(content)
        allowed = _USER_BLOCKS if role == "user" else _ASSISTANT_BLOCKS
        for j, block in enumerate(blocks):
            count += _check_block(block, f"{where}.content.{j}", allowed)
        results = {b["tool_use_id"] for b in blocks if b["type"] == "tool_result"}
        if role == "user":
            if results - asked:
                raise InvalidRequest(f"{where}: unexpected `tool_use_id` found in `tool_result` "
                                     f"blocks: {sorted(results - asked)}. Each `tool_result` "
                                     "block must have a corresponding `tool_use` block in the "
                                     "previous message.")
            if asked - results:
                raise InvalidRequest(f"messages.{i - 1}: `tool_use` ids were found without "
                                     f"`tool_result` blocks immediately after: "
                                     f"{sorted(asked - results)}")
        asked = {b["id"] for b in blocks if b["type"] == "tool_use"}
    if asked:
        raise InvalidRequest(f"messages.{len(messages) - 1}: `tool_use` ids were found without "
                             f"`tool_result` blocks immediately after: {sorted(asked)}")
    last = messages[-1]
    if last["role"] == "assistant":
        tail = _blocks(last["content"])[-1]
        if tail.get("type") == "text" and tail["text"] != tail["text"].rstrip():
            raise InvalidRequest("final assistant content cannot end with trailing whitespace")
    return count


def _check_system_and_tools(body: dict[str, Any]) -> int:
    count = 0
    system = body.get("system")
    if isinstance(system, list):
        for i, block in enumerate(system):
            count += _check_block(block, f"system.{i}", frozenset({"text"}))
    elif system is not None and not isinstance(system, str):
        raise InvalidRequest("system: expected a string or a list of text blocks")
    for i, tool in enumerate(body.get("tools") or []):
        if not (isinstance(tool, dict) and tool.get("name")
                and isinstance(tool.get("input_schema"), dict)):
            raise InvalidRequest(f"tools.{i}: a tool needs name and input_schema")
        count += _check_cache_control(tool.get("cache_control"), f"tools.{i}")
    return count


def validate_request(body: Any) -> None:
    """Raise InvalidRequest for what the real Messages API would refuse."""
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise InvalidRequest("model: Field required")
    if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
        raise InvalidRequest("max_tokens: Field required (a positive integer)")
    markers = _check_messages(body.get("messages")) + _check_system_and_tools(body)
    if markers > MAX_CACHE_BLOCKS:
        raise InvalidRequest(f"A maximum of {MAX_CACHE_BLOCKS} blocks with cache_control may "
                             f"be provided. Found {markers}.")


def request_chars(body: dict[str, Any]) -> int:
    """Characters the fake bills as input: system, text, tool inputs and tool results."""
    return sum(block.chars for block in prompt_blocks(body))


class FakeAnthropic(FakeServer, StreamingModel):
    """Anthropic Messages server; `base_url` is what `AsyncAnthropic(base_url=...)` takes.

    Same knobs as FakeOpenAI: responder (text, or an OpenAI-format assistant message with
    tool_calls), queue_reply, context_limit, enforce_output_room, max_output_tokens, api_key
    (checked against x-api-key or Authorization: Bearer), models.

    Prompt caching: min_cacheable_tokens, clock (seconds; `advance()` moves it forward),
    enforce_ttl_order (refuse a 1h marker after a 5m one, as the real API does; off by
    default until every caller's test data obeys it); counters cache_reads and cache_writes
    (tokens) and cache_entries (live entries); `usages` holds each answered request's usage.

    Streaming knobs (stream_chunk_chars, stream_delay_s, break_stream_next,
    streamed_requests): see `tests.harness.streams`. A streamed reply reads and writes the
    cache when it starts, like any other, but its usage joins `usages` only once the stream
    got past its text: a broken stream's does not, so `usage_totals()` then falls short of
    cache_reads / cache_writes by what that request read and wrote.

    images_seen: images in answered requests, cumulative (each costs IMAGE_TOKENS).
    """

    def __init__(self, *, responder: Responder | None = None, context_limit: int | None = None,
                 enforce_output_room: bool = False, max_output_tokens: int | None = None,
                 api_key: str | None = None, models: list[str] | None = None,
                 token_ratio: float = 1.0,
                 min_cacheable_tokens: int = DEFAULT_MIN_CACHEABLE_TOKENS,
                 clock: Callable[[], float] | None = None, enforce_ttl_order: bool = False,
                 host: str = "127.0.0.1", port: int = 0) -> None:
        FakeServer.__init__(self, host=host, port=port)
        StreamingModel.__init__(self, responder, token_ratio)
        self.context_limit = context_limit
        self.enforce_output_room = enforce_output_room
        self.max_output_tokens = max_output_tokens
        self.api_key = api_key
        self.models = models
        self.min_cacheable_tokens = min_cacheable_tokens
        self.clock: Callable[[], float] = clock or time.monotonic
        self.enforce_ttl_order = enforce_ttl_order
        self._cache = PromptCache()
        self._skew = 0.0
        self.images_seen = 0
        self._ids = itertools.count(1)

    @property
    def base_url(self) -> str:
        return self.url

    def provider_settings(self, **overrides: Any) -> Any:
        """ProviderSettings for an AnthropicProvider talking to this fake."""
        from agent.providers.base import ProviderSettings

        values: dict[str, Any] = {"provider": "anthropic", "model": "claude-fake",
                                  "base_url": self.base_url, "api_key": self.api_key or "test-key",
                                  "max_retries": 0, "timeout_s": 10.0}
        return ProviderSettings(**{**values, **overrides})

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/v1/messages", self._messages), web.get("/v1/models", self._models)]

    def requests_with_images(self, *, urls: bool = False) -> list[int]:
        """Indices into `calls` of Messages requests that carried base64 image bytes (with
        `urls=True`: any image block), refused ones too."""
        def carries(body: Any) -> bool:
            return bool(len(image_blocks(body)) if urls else base64_images(body))

        return [i for i, call in enumerate(self.calls)
                if call.path == "/v1/messages" and carries(call.json)]

    # --- prompt cache -----------------------------------------------------------------------
    def now(self) -> float:
        """The cache's time in seconds: `clock()` plus everything `advance()` added."""
        return self.clock() + self._skew

    def advance(self, seconds: float) -> None:
        """Move the cache's clock forward, e.g. past a TTL."""
        self._skew += seconds

    @property
    def cache_reads(self) -> int:
        """Prompt tokens served from the cache so far."""
        return self._cache.read_tokens

    @property
    def cache_writes(self) -> int:
        """Prompt tokens written to the cache so far."""
        return self._cache.written_tokens

    @property
    def cache_entries(self) -> int:
        """Cached prefixes that have not expired."""
        return self._cache.live_entries(self.now())

    def clear_cache(self) -> None:
        """Forget every cached prefix (the counters keep their totals)."""
        self._cache.clear()

    def reset(self) -> None:
        """Forget recorded calls, usages, images_seen, pending injections and a pending
        stream break; the cache stays warm."""
        super().reset()
        self.usages.clear()
        self.images_seen = 0
        self.take_stream_break()

    def error_body(self, status: int, message: str) -> Any:
        return anthropic_error(message, _ERROR_TYPES.get(status, "api_error"))

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        """Text tokens (chars / 4 × token_ratio) plus IMAGE_TOKENS per image."""
        return self.count_tokens(request_chars(body)) + IMAGE_TOKENS * len(image_blocks(body))

    def _auth_refusal(self, request: web.Request) -> web.Response | None:
        given = request.headers.get("x-api-key") or request.headers.get(
            "Authorization", "").removeprefix("Bearer ")
        if not given or (self.api_key is not None and given != self.api_key):
            return json_response(anthropic_error("invalid x-api-key", "authentication_error"),
                                 401)
        if not request.headers.get("anthropic-version"):
            return json_response(anthropic_error("anthropic-version: header is required"), 400)
        return None

    def _length_refusal(self, body: dict[str, Any]) -> str | None:
        prompt, wanted = self.prompt_tokens(body), body["max_tokens"]
        if self.max_output_tokens is not None and wanted > self.max_output_tokens:
            return (f"max_tokens: {wanted} > {self.max_output_tokens}, which is the maximum "
                    f"allowed number of output tokens for {body['model']}")
        limit = self.context_limit
        if limit is not None and prompt > limit:
            return f"prompt is too long: {prompt} tokens > {limit} maximum"
        if limit is not None and self.enforce_output_room and prompt + wanted > limit:
            return (f"input length and `max_tokens` exceed context limit: {prompt} + {wanted} > "
                    f"{limit}, decrease input length or `max_tokens` and try again")
        return None

    async def _models(self, request: web.Request) -> web.Response:
        refusal = self._auth_refusal(request)
        if refusal is not None:
            return refusal
        names = self.models or ["claude-fake"]
        return json_response({
            "data": [{"type": "model", "id": n, "display_name": n,
                      "created_at": "2025-01-01T00:00:00Z"} for n in names],
            "has_more": False, "first_id": names[0], "last_id": names[-1]})

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        refusal = self._auth_refusal(request)
        if refusal is not None:
            return refusal
        try:
            body = await request.json()
            validate_request(body)
        except (json.JSONDecodeError, InvalidRequest) as exc:
            return json_response(anthropic_error(str(exc)), 400)
        misordered = ttl_order_problem(prompt_blocks(body)) if self.enforce_ttl_order else None
        if misordered is not None:
            return json_response(anthropic_error(misordered), 400)
        if self.models is not None and body["model"] not in self.models:
            return json_response(anthropic_error(f"model: {body['model']}", "not_found_error"),
                                 404)
        too_long = self._length_refusal(body)
        if too_long is not None:
            return json_response(anthropic_error(too_long), 400)
        self.images_seen += len(image_blocks(body))
        answer = await self._answer(body)
        if asks_to_stream(body):
            return await self._stream(request, body, answer)
        self.usages.append(answer.usage)
        return json_response(self._message(body, answer))

    async def _answer(self, body: dict[str, Any]) -> Answer:
        """The reply to `body`: text (cut at max_tokens), tool calls, stop reason, and the
        usage, for which the prompt cache is read and written (once per request)."""
        text, calls = await self.next_reply(body)
        stop = "tool_use" if calls else "end_turn"
        if estimate_tokens(len(text)) > body["max_tokens"]:
            text, stop = text[: body["max_tokens"] * 4], "max_tokens"
        output = estimate_tokens(len(text) + sum(len(c["function"]["arguments"]) for c in calls))
        usage = self._cache.settle(prompt_blocks(body), self.count_tokens, now=self.now(),
                                   min_tokens=self.min_cacheable_tokens)
        usage["input_tokens"] += IMAGE_TOKENS * len(image_blocks(body))
        usage["output_tokens"] = output
        return Answer(text, calls, stop, usage)

    def _message(self, body: dict[str, Any], answer: Answer) -> dict[str, Any]:
        """The answer as one Message object."""
        content: list[dict[str, Any]] = ([{"type": "text", "text": answer.text}]
                                         if answer.text else [])
        for call in answer.calls:
            args = call["function"]["arguments"]
            content.append({"type": "tool_use", "id": call["id"],
                            "name": call["function"]["name"],
                            "input": json.loads(args) if args else {}})
        return {
            "id": f"msg_fake_{next(self._ids)}", "type": "message", "role": "assistant",
            "model": body["model"], "content": content, "stop_reason": answer.stop,
            "stop_sequence": None, "usage": answer.usage,
        }

    async def _stream(self, request: web.Request, body: dict[str, Any],
                      answer: Answer) -> web.StreamResponse:
        """The answer as Messages stream events; its usage is recorded near the end."""
        start = {"id": f"msg_fake_{next(self._ids)}", "type": "message", "role": "assistant",
                 "model": body["model"], "content": [], "stop_reason": None,
                 "stop_sequence": None, "usage": {**answer.usage, "output_tokens": 1}}

        async def produce(sse: SSEWriter) -> None:
            await sse.send({"type": "message_start", "message": start}, "message_start")
            await sse.send({"type": "ping"}, "ping")
            shown = sse.shown_text(answer.text)
            if shown:
                await _open_block(sse, 0, {"type": "text", "text": ""})
                for piece in self.pieces(shown):
                    await sse.delta(_block_delta(0, {"type": "text_delta", "text": piece}),
                                    "content_block_delta")
            await sse.break_if_planned(STREAM_ERROR, "error")
            if answer.text:
                await _close_block(sse, 0)
            for index, call in enumerate(answer.calls, start=1 if answer.text else 0):
                await self._stream_tool_use(sse, index, call)
            self.usages.append(answer.usage)
            await sse.send({"type": "message_delta",
                            "delta": {"stop_reason": answer.stop, "stop_sequence": None},
                            "usage": {"output_tokens": answer.usage["output_tokens"]}},
                           "message_delta")
            await sse.send({"type": "message_stop"}, "message_stop")

        return await serve_stream(request, produce, pause_s=self.stream_delay_s,
                                  closing=self._closing, broken=self.take_stream_break())

    async def _stream_tool_use(self, sse: SSEWriter, index: int, call: dict[str, Any]) -> None:
        """One tool_use block: id and name with an empty input, then the JSON in pieces."""
        function = call["function"]
        await _open_block(sse, index, {"type": "tool_use", "id": call["id"],
                                       "name": function["name"], "input": {}})
        for piece in self.pieces(function["arguments"]):
            await sse.delta(_block_delta(index, {"type": "input_json_delta",
                                                 "partial_json": piece}),
                            "content_block_delta")
        await _close_block(sse, index)


async def _open_block(sse: SSEWriter, index: int, block: dict[str, Any]) -> None:
    await sse.send({"type": "content_block_start", "index": index, "content_block": block},
                   "content_block_start")


def _block_delta(index: int, delta: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


async def _close_block(sse: SSEWriter, index: int) -> None:
    await sse.send({"type": "content_block_stop", "index": index}, "content_block_stop")


def main(argv: list[str] | None = None) -> None:
    def make(args: argparse.Namespace) -> FakeServer:
        return FakeAnthropic(host=args.host, port=args.port, context_limit=args.context_limit,
                             api_key=args.api_key)

    run_cli(make, "Fake Anthropic Messages server", argv)


if __name__ == "__main__":
    main()
