"""Anthropic Messages API: OpenAI-format history in, OpenAI-format assistant message out."""

from __future__ import annotations

import json
import logging
from typing import Any

import anthropic

from agent.attachments.parts import is_attachment, placeholder
from agent.errors import AuthError, EmptyReplyError, plain_error
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
from agent.usage import from_anthropic

log = logging.getLogger(__name__)

CONTINUES = "(conversation continues)"
EMPTY = "(empty)"
NO_RESULT = "(no result recorded)"
_PASSTHROUGH_BLOCKS = frozenset({"image", "document", "tool_use", "tool_result",
                                 "thinking", "redacted_thinking"})
_STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
                 "tool_use": "tool_calls", "refusal": "content_filter"}

Block = dict[str, Any]


def _image_block(part: dict[str, Any]) -> Block:
    image = part.get("image_url")
    url = image.get("url", "") if isinstance(image, dict) else str(image or "")
    if url.startswith("data:") and ";base64," in url:
        header, data = url[5:].split(";base64,", 1)
        source: dict[str, Any] = {"type": "base64", "media_type": header or "image/png",
                                  "data": data}
    else:
        source = {"type": "url", "url": url}
    return {"type": "image", "source": source}


def _blocks(content: Any) -> list[Block]:
    """OpenAI message content (string or parts) as Anthropic content blocks."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[Block] = []
    for part in content if isinstance(content, list) else [content]:
        if isinstance(part, str):
            part = {"type": "text", "text": part}
        if not isinstance(part, dict):
            continue
        if is_attachment(part):  # never sent as stored (agent/attachments/present.py)
            part = {"type": "text", "text": placeholder(part)}
        kind = part.get("type")
        if kind == "text":
            if not part.get("text"):
                continue  # the API rejects empty text blocks
            block = {"type": "text", "text": part["text"]}
        elif kind == "image_url":
            block = _image_block(part)
        elif kind in _PASSTHROUGH_BLOCKS:
            block = public_keys(part)  # already Anthropic-shaped, cache_control included
        else:
            block = {"type": "text", "text": json.dumps(public_keys(part), ensure_ascii=False)}
        if "cache_control" in part:
            block["cache_control"] = part["cache_control"]
        blocks.append(block)
    return blocks


def _tool_input(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    if not arguments:
        return {}
    try:
        parsed = json.loads(arguments)
    except (TypeError, ValueError, RecursionError):  # RecursionError: nested too deep
        return {"_raw": str(arguments)}
    return parsed if isinstance(parsed, dict) else {"_raw": str(arguments)}


def _tool_use_blocks(calls: list[dict[str, Any]]) -> list[Block]:
    blocks = []
    for call in calls:
        function = call.get("function") or {}
        blocks.append({"type": "tool_use", "id": call.get("id") or "", "name":
                       function.get("name") or "", "input": _tool_input(function.get("arguments"))})
    return blocks


def _tool_result(message: dict[str, Any]) -> Block:
    content = message.get("content")
    if isinstance(content, list):
        inner: Any = [b for b in _blocks(content) if b["type"] in ("text", "image")] or EMPTY
    else:
        inner = content if isinstance(content, str) and content else EMPTY
    block: Block = {"type": "tool_result", "tool_use_id": message.get("tool_call_id") or "",
                    "content": inner}
    if message.get("_is_error") or message.get("is_error"):
        block["is_error"] = True
    return block


def _convert_one(message: dict[str, Any]) -> tuple[str, list[Block]]:
    role = message.get("role")
    if role == "tool":
        return "user", [_tool_result(message)]
    blocks = _blocks(message.get("content"))
    if role == "assistant":
        blocks += _tool_use_blocks(message.get("tool_calls") or [])
        return "assistant", blocks
    return "user", blocks


def _mark(blocks: list[Block], marker: Any) -> list[Block]:
    """Put a message-level cache_control marker on the message's last block."""
    if marker is None:
        return blocks
    if not blocks:  # empty content still holds its cache breakpoint
        return [{"type": "text", "text": EMPTY, "cache_control": marker}]
    blocks[-1] = {**blocks[-1], "cache_control": marker}
    return blocks


def _repair_tool_pairs(turns: list[dict[str, Any]]) -> None:
    """Make every tool_use answered right after and every tool_result answer a tool_use.

    Compaction or a crash mid-turn can split a pair; the API rejects either half alone, so an
    orphan result becomes text and a missing result gets a stand-in.
    """
    for i, turn in enumerate(turns):
        if turn["role"] != "user":
            continue
        previous = turns[i - 1] if i > 0 else None
        asked = {b["id"] for b in previous["content"] if b["type"] == "tool_use"} if previous \
            else set()
        fixed: list[Block] = []
        for block in turn["content"]:
            if block["type"] == "tool_result" and block["tool_use_id"] not in asked:
                inner = block["content"]
                text = inner if isinstance(inner, str) else json.dumps(inner, ensure_ascii=False)
                block = {"type": "text", "text": f"[tool result {block['tool_use_id']}] {text}",
                         **({"cache_control": block["cache_control"]}
                            if "cache_control" in block else {})}
            fixed.append(block)
        answered = {b["tool_use_id"] for b in fixed if b["type"] == "tool_result"}
        missing = [{"type": "tool_result", "tool_use_id": tid, "content": NO_RESULT}
                   for tid in sorted(asked - answered)]
        # The API wants tool results before any other block of the user turn.
        results = missing + [b for b in fixed if b["type"] == "tool_result"]
        turn["content"] = results + [b for b in fixed if b["type"] != "tool_result"]
    last = turns[-1]
    if last["role"] == "assistant" and any(b["type"] == "tool_use" for b in last["content"]):
        ids = [b["id"] for b in last["content"] if b["type"] == "tool_use"]
        turns.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tid, "content": NO_RESULT} for tid in ids]})


def to_anthropic(
    messages: list[dict[str, Any]],
) -> tuple[str | list[Block] | None, list[dict[str, Any]]]:
    """Convert OpenAI-format history to (system, messages) for the Messages API."""
    system: list[Block] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.get("role") in ("system", "developer"):
            system += _mark(_blocks(message.get("content")), message.get("cache_control"))
            continue
        role, blocks = _convert_one(message)
        blocks = _mark(blocks, message.get("cache_control"))
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)  # the API requires alternating roles
        else:
            turns.append({"role": role, "content": blocks})
    if not turns or turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": CONTINUES}]})
    _repair_tool_pairs(turns)
    for turn in turns:
        if not turn["content"]:
            turn["content"] = [{"type": "text", "text": EMPTY}]
    _trim_final_assistant(turns[-1])
    return _system_param(system), turns


def _trim_final_assistant(turn: dict[str, Any]) -> None:
    # A trailing assistant turn is a prefill, and the API rejects trailing whitespace there.
    if turn["role"] == "assistant" and turn["content"][-1]["type"] == "text":
        last = turn["content"][-1]
        last["text"] = last["text"].rstrip() or EMPTY


def _system_param(blocks: list[Block]) -> str | list[Block] | None:
    if not blocks:
        return None
    if any("cache_control" in b for b in blocks) or any(b["type"] != "text" for b in blocks):
        return [b for b in blocks if b["type"] == "text"]
    return "\n\n".join(b["text"] for b in blocks)


def to_anthropic_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI function tools as Anthropic tools; native Anthropic tools pass through."""
    converted = []
    for tool in tools:
        if "input_schema" in tool or "function" not in tool:
            converted.append(public_keys(tool))
            continue
        function = tool["function"]
        item: dict[str, Any] = {
            "name": function["name"],
            "description": function.get("description") or "",
            "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
        }
        if "cache_control" in tool:
            item["cache_control"] = tool["cache_control"]
        converted.append(item)
    return converted


def from_anthropic_content(content: list[Any]) -> dict[str, Any]:
    """An Anthropic response's content blocks as an OpenAI-format assistant message."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in content:
        kind = getattr(block, "type", None)
        if kind == "text":
            texts.append(block.text)
        elif kind == "tool_use":
            calls.append({"id": block.id, "type": "function", "function": {
                "name": block.name, "arguments": json.dumps(block.input, ensure_ascii=False)}})
    text = "".join(texts)
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    return message


class AnthropicProvider(Provider):
    """Claude models through the official `anthropic` SDK."""

    kind = "anthropic"
    streams = True

    def __init__(self, settings: ProviderSettings) -> None:
        super().__init__(settings)
        try:
            self._client = anthropic.AsyncAnthropic(
                base_url=settings.base_url,
                api_key=settings.api_key,
                timeout=settings.timeout_s,
                max_retries=settings.max_retries,
            )
        except anthropic.AnthropicError as exc:
            # Without a key the SDK looks for credential profiles and fails on a broken one.
            raise AuthError(f"anthropic: no API key configured (model.api_key or "
                            f"ANTHROPIC_API_KEY) and no usable credentials profile: "
                            f"{plain_error(exc, known=settings.api_key)}", provider=self.kind) from exc

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        on_text: TextSink | None = None,
    ) -> Completion:
        if not (self._client.api_key or self._client.auth_token or self._client.credentials):
            raise AuthError("anthropic: no API key configured (model.api_key or "
                            "ANTHROPIC_API_KEY)", provider=self.kind)
        system, turns = to_anthropic(messages)
        request: dict[str, Any] = {
            "model": self.model,
            "messages": turns,
            "max_tokens": max_tokens or self.settings.max_output_tokens,
        }
        if system is not None:
            request["system"] = system
        if tools:
            request["tools"] = to_anthropic_tools(tools)
        if temperature is not None:
            request["temperature"] = temperature
        response = await (self._create(request) if on_text is None
                          else self._stream(request, on_text))
        message = from_anthropic_content(response.content or [])
        if blank(message["content"]) and not message.get("tool_calls"):
            raise EmptyReplyError(f"anthropic: empty reply (stop_reason={response.stop_reason})",
                                  provider=self.kind)
        usage = response.usage
        return Completion(
            message=message,
            usage=from_anthropic(usage),
            model=response.model or self.model,
            finish_reason=_STOP_REASONS.get(response.stop_reason or "", response.stop_reason),
        )

    async def _create(self, request: dict[str, Any]) -> Any:
        with sdk_errors(anthropic, anthropic.AnthropicError, provider=self.kind,
                        timeout_s=self.settings.timeout_s, base_url=self._client.base_url,
                        secret=self.settings.api_key):
            params, raw = unchecked(request)
            return await self._client.messages.create(messages=[], **params, extra_body=raw)

    async def _stream(self, request: dict[str, Any], on_text: TextSink) -> Any:
        """The SDK's message stream: text goes out as it comes, until a tool_use block
        begins; the final message (usage merged from its start and end) is returned."""
        with sdk_errors(anthropic, anthropic.AnthropicError, provider=self.kind,
                        timeout_s=self.settings.timeout_s, base_url=self._client.base_url,
                        secret=self.settings.api_key):
            params, raw = unchecked(request)
            async with self._client.messages.stream(messages=[], **params,
                                                    extra_body=raw) as stream:
                calling = False
                async for event in stream:
                    if event.type == "content_block_start":
                        calling = calling or event.content_block.type == "tool_use"
                    elif event.type == "text" and event.text and not calling:
                        on_text(event.text)
                return await stream.get_final_message()

    async def aclose(self) -> None:
        await self._client.close()
