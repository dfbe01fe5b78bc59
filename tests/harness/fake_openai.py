"""Fake OpenAI Chat Completions server: POST /v1/chat/completions, GET /v1/models.

Usage is computed from the request: prompt_tokens = ceil(message text chars × token_ratio / 4),
completion_tokens = ceil(reply chars / 4), cached tokens 0.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from typing import Any

from aiohttp import web

from tests.harness.base import (
    FakeServer,
    Responder,
    ScriptedModel,
    estimate_tokens,
    json_response,
    run_cli,
    text_of,
)

_ERROR_TYPES = {400: ("invalid_request_error", None), 401: ("invalid_request_error",
                "invalid_api_key"), 403: ("invalid_request_error", "unsupported_country_region"),
                404: ("invalid_request_error", "model_not_found"),
                429: ("requests", "rate_limit_exceeded")}


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


class FakeOpenAI(FakeServer, ScriptedModel):
    """OpenAI-compatible chat server; `base_url` is what `AsyncOpenAI(base_url=...)` takes.

    responder: request json -> reply text, or an assistant message dict with tool_calls.
    context_limit: prompt estimate above it -> 400 context_length_exceeded.
    enforce_output_room: also refuse prompt + max_tokens > context_limit (older OpenAI text).
    max_output_tokens: max_tokens above it -> 400 "max_tokens is too large".
    api_key: when set, requests must carry `Authorization: Bearer <api_key>` (else 401).
    models: when set, other model names get 404 model_not_found.
    """

    def __init__(self, *, responder: Responder | None = None, context_limit: int | None = None,
                 enforce_output_room: bool = False, max_output_tokens: int | None = None,
                 api_key: str | None = None, models: list[str] | None = None,
                 token_ratio: float = 1.0, host: str = "127.0.0.1", port: int = 0) -> None:
        FakeServer.__init__(self, host=host, port=port)
        ScriptedModel.__init__(self, responder, token_ratio)
        self.context_limit = context_limit
        self.enforce_output_room = enforce_output_room
        self.max_output_tokens = max_output_tokens
        self.api_key = api_key
        self.models = models
        self._ids = itertools.count(1)

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
        return [web.post("/v1/chat/completions", self._chat), web.get("/v1/models", self._models)]

    def error_body(self, status: int, message: str) -> Any:
        type_, code = _ERROR_TYPES.get(status, ("server_error", None))
        return openai_error(message, type_=type_, code=code)

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        return self.count_tokens(request_chars(body))

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
        if body.get("stream"):
            return json_response(openai_error("the fake supports stream=false only"), 400)
        if self.models is not None and body["model"] not in self.models:
            return json_response(openai_error(
                f"The model `{body['model']}` does not exist or you do not have access to it.",
                code="model_not_found"), 404)
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

    async def _chat(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            body = None
        refusal = self._refusal(request, body)
        if refusal is not None:
            return refusal
        text, calls = await self.next_reply(body)
        finish = "tool_calls" if calls else "stop"
        wanted = body.get("max_tokens") or body.get("max_completion_tokens")
        if wanted and estimate_tokens(len(text)) > wanted:
            text, finish = text[: wanted * 4], "length"
        message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls
                                   else None, "refusal": None}
        if calls:
            message["tool_calls"] = calls
        prompt = self.prompt_tokens(body)
        completion = estimate_tokens(len(text) + sum(len(c["function"]["arguments"])
                                                     for c in calls))
        return json_response({
            "id": f"chatcmpl-fake-{next(self._ids)}", "object": "chat.completion",
            "created": int(time.time()), "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish,
                         "logprobs": None}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion,
                      "prompt_tokens_details": {"cached_tokens": 0},
                      "completion_tokens_details": {"reasoning_tokens": 0}},
        })


def main(argv: list[str] | None = None) -> None:
    def make(args: argparse.Namespace) -> FakeServer:
        return FakeOpenAI(host=args.host, port=args.port, context_limit=args.context_limit,
                          api_key=args.api_key)

    run_cli(make, "Fake OpenAI Chat Completions server", argv)


if __name__ == "__main__":
    main()
