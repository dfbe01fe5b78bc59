"""OpenAI Chat Completions and every server that speaks it (OpenRouter, Ollama, vLLM, llama.cpp)."""

from __future__ import annotations

import logging
from typing import Any

import openai

from agent.attachments.parts import is_attachment, placeholder
from agent.errors import (
    BadRequestError,
    EmptyReplyError,
    ProviderError,
)
from agent.messages import public_keys
from agent.providers.base import (
    Completion,
    Provider,
    ProviderSettings,
    TextSink,
    blank,
    unchecked,
)
from agent.providers.classify import sdk_errors
from agent.usage import from_openai_chat

log = logging.getLogger(__name__)


def _wire_message(message: dict[str, Any]) -> dict[str, Any]:
    """Drop our bookkeeping keys ("_..."), which strict servers reject as unknown fields.

    Only message and content-part keys: tool schemas and arguments are user data.
    """
    clean = public_keys(message)
    if isinstance(clean.get("content"), list):
        clean["content"] = [_wire_part(p) for p in clean["content"]]
    return clean


def _wire_part(part: Any) -> Any:
    if is_attachment(part):  # never sent as stored (agent/attachments/present.py)
        return {"type": "text", "text": placeholder(part)}
    return public_keys(part) if isinstance(part, dict) else part


def _tool_calls(message: Any) -> list[dict[str, Any]]:
    calls = []
    for call in getattr(message, "tool_calls", None) or []:
        function = getattr(call, "function", None)
        if function is None:  # custom (non-function) tool calls have no place in our history
            continue
        calls.append({
            "id": call.id,
            "type": "function",
            "function": {"name": function.name, "arguments": function.arguments or "{}"},
        })
    return calls


def _refuses_stream_options(err: ProviderError) -> bool:
    # Servers that check request fields strictly name the one they do not know.
    return isinstance(err, BadRequestError) and "stream_options" in str(err)


def _wants_max_completion_tokens(err: ProviderError) -> bool:
    # Newer OpenAI models refuse `max_tokens` and name the replacement in the error.
    text = str(err)
    return (isinstance(err, BadRequestError) and "max_completion_tokens" in text
            and "max_tokens" in text and "support" in text.lower())


class _StreamedReply:
    """A streamed Chat Completions answer put back together from its chunks."""

    def __init__(self, on_text: TextSink) -> None:
        self.on_text = on_text
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}  # by the index the chunks give
        self.finish_reason: str | None = None
        self.usage: Any = None
        self.model: str | None = None

    def add(self, chunk: Any) -> None:
        self.model = getattr(chunk, "model", None) or self.model
        if getattr(chunk, "usage", None) is not None:  # the last chunk, with include_usage
            self.usage = chunk.usage
        for choice in getattr(chunk, "choices", None) or []:
            if getattr(choice, "index", 0):
                continue  # only the first choice is ours
            self.finish_reason = choice.finish_reason or self.finish_reason
            delta = choice.delta
            for call in getattr(delta, "tool_calls", None) or []:
                self._add_call(call)
            content = getattr(delta, "content", None)
            if content:
                self.text.append(content)
                if not self.calls:  # text after a tool call began is not the answer
                    self.on_text(content)

    def _add_call(self, call: Any) -> None:
        entry = self.calls.setdefault(call.index, {"id": None, "name": "", "arguments": []})
        entry["id"] = call.id or entry["id"]
        function = getattr(call, "function", None)
        if function is not None:
            entry["name"] += function.name or ""
            entry["arguments"].append(function.arguments or "")

    def message(self) -> dict[str, Any]:
        content = "".join(self.text)
        message: dict[str, Any] = {"role": "assistant", "content": content or None}
        if self.calls:
            message["tool_calls"] = [
                {"id": c["id"] or f"call_{i}", "type": "function",
                 "function": {"name": c["name"], "arguments": "".join(c["arguments"]) or "{}"}}
                for i, c in sorted(self.calls.items())]
        return message


class OpenAICompatProvider(Provider):
    """A chat model behind the OpenAI Chat Completions API."""

    kind = "openai"
    streams = True

    def __init__(self, settings: ProviderSettings) -> None:
        super().__init__(settings)
        self._client = openai.AsyncOpenAI(
            base_url=settings.base_url,
            api_key=settings.api_key or "not-needed",  # local servers ignore the key
            timeout=settings.timeout_s,
            max_retries=settings.max_retries,
        )
        self._token_param = "max_tokens"
        # False once the server refused stream_options: without usage a stream would leave
        # the turn's token counts unknown, which compaction relies on, so answers come whole.
        self._stream_usage = True

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        on_text: TextSink | None = None,
    ) -> Completion:
        request: dict[str, Any] = {
            "model": self.model,
            "messages": [_wire_message(m) for m in messages],
        }
        if tools:
            request["tools"] = tools
        if temperature is not None:
            request["temperature"] = temperature
        if on_text is not None and not self._stream_usage:
            on_text = None
        if on_text is not None:  # usage comes in a last chunk of its own
            request |= {"stream": True, "stream_options": {"include_usage": True}}
        limit = max_tokens if max_tokens is not None else self.settings.max_output_tokens
        for _ in range(3):  # each refusal below is learnt once, then the call is made again
            try:
                return await self._call(request, limit, on_text)
            except ProviderError as err:
                if _refuses_stream_options(err) and "stream_options" in request:
                    log.warning("%s refuses stream_options (usage in a stream); replies from "
                                "it arrive whole", self._client.base_url)
                    self._stream_usage, on_text = False, None
                    del request["stream_options"], request["stream"]
                elif _wants_max_completion_tokens(err) and self._token_param == "max_tokens":
                    log.info("model %s wants max_completion_tokens; switching", self.model)
                    self._token_param = "max_completion_tokens"
                else:
                    raise
        return await self._call(request, limit, on_text)

    async def _call(self, request: dict[str, Any], limit: int, on_text: TextSink | None
                    ) -> Completion:
        with sdk_errors(openai, openai.OpenAIError, provider=self.kind,
                        timeout_s=self.settings.timeout_s, base_url=self._client.base_url,
                        secret=self.settings.api_key):
            params, raw = unchecked(request)
            response = await self._client.chat.completions.create(
                messages=[], **params, **{self._token_param: limit}, extra_body=raw)
            if on_text is None:
                return self._to_completion(response)
            reply = _StreamedReply(on_text)
            async with response:  # a cancelled turn closes the connection here
                async for chunk in response:
                    reply.add(chunk)
        return self._streamed_completion(reply)

    def _streamed_completion(self, reply: _StreamedReply) -> Completion:
        message = reply.message()
        if blank(message["content"]) and not message.get("tool_calls"):
            raise EmptyReplyError(
                f"openai: empty reply (finish_reason={reply.finish_reason})", provider=self.kind)
        return Completion(message=message, usage=from_openai_chat(reply.usage),
                          model=reply.model or self.model, finish_reason=reply.finish_reason)

    def _to_completion(self, response: Any) -> Completion:
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise EmptyReplyError("openai: the response had no choices", provider=self.kind)
        choice = choices[0]
        content = getattr(choice.message, "content", None)
        calls = _tool_calls(choice.message)
        if blank(content) and not calls:
            raise EmptyReplyError(
                f"openai: empty reply (finish_reason={choice.finish_reason})", provider=self.kind)
        message: dict[str, Any] = {"role": "assistant", "content": content or None}
        if calls:
            message["tool_calls"] = calls
        usage = getattr(response, "usage", None)
        return Completion(
            message=message,
            usage=from_openai_chat(usage),
            model=getattr(response, "model", None) or self.model,
            finish_reason=choice.finish_reason,
        )

    async def aclose(self) -> None:
        await self._client.close()

