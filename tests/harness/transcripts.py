"""Shared pieces for the compressor tests: a scripted provider, transcript builders, and
validators for the OpenAI and Anthropic message rules. (No tests live here.)"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from agent.compression.compressor import ContextCompressor
from agent.context_engine import EngineSettings
from agent.errors import ProviderError
from agent.providers.base import Completion, Provider, ProviderSettings
from agent.usage import CanonicalUsage

Message = dict[str, Any]

CHECKPOINT = (
    "## Active Task\nwhatever the model thought\n\n## Goal\nShip the release of the parser "
    "with every regression test green and the docs updated for the new flags.\n\n"
    "## Completed Actions\n1. Ran the test suite with pytest, 3 failures in tests/test_io.py.\n"
)


class ScriptedProvider(Provider):
    """A summary model at the network edge: answers from a script, records every request."""

    kind = "openai"

    def __init__(self, reply: str | Callable[[list[Message]], str] = CHECKPOINT, *,
                 context_length: int = 200_000, model: str = "scripted",
                 errors: Sequence[ProviderError] = ()) -> None:
        super().__init__(ProviderSettings(provider="openai", model=model,
                                          context_length=context_length))
        self.reply = reply
        self.errors = list(errors)
        self.requests: list[list[Message]] = []
        self.max_tokens: list[int | None] = []

    async def complete(self, messages: list[Message], *, tools: Any = None,
                       max_tokens: int | None = None,
                       temperature: float | None = None) -> Completion:
        self.requests.append(messages)
        self.max_tokens.append(max_tokens)
        if self.errors:
            raise self.errors.pop(0)
        text = self.reply(messages) if callable(self.reply) else self.reply
        return Completion({"role": "assistant", "content": text},
                          CanonicalUsage(input_tokens=100, output_tokens=50), self.model)


def make_engine(context_length: int = 200_000, provider: Provider | None = None,
                **kw: Any) -> ContextCompressor:
    provider = provider or ScriptedProvider()
    kw.setdefault("summary_provider", provider)
    return ContextCompressor(EngineSettings(context_length=context_length, **kw))


# --- transcript builders -----------------------------------------------------------------
def user(text: str) -> Message:
    return {"role": "user", "content": text}


def assistant(text: str | None, calls: Sequence[Message] = ()) -> Message:
    msg: Message = {"role": "assistant", "content": text}
    if calls:
        msg["tool_calls"] = list(calls)
    return msg


def call(call_id: str, name: str = "read_file", **args: Any) -> Message:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}


def result(call_id: str, text: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def chat(turns: int, *, size: int = 400, system: str | None = "You are helpful.",
         tag: str = "T") -> list[Message]:
    """A system prompt and `turns` rounds of ask, one tool call with result, answer."""
    msgs: list[Message] = [{"role": "system", "content": system}] if system else []
    for i in range(turns):
        cid = f"{tag}{i}"
        msgs += [user(f"{tag}-ask-{i} " + "u" * size),
                 assistant(None, [call(cid, path=f"/src/{tag.lower()}{i}.py")]),
                 result(cid, f"{tag}-out-{i} " + "r" * size),
                 assistant(f"{tag}-answer-{i} " + "a" * size)]
    return msgs


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(text_of(p.get("text", p.get("content"))) for p in content
                         if isinstance(p, dict))
    return ""


def all_text(msgs: Sequence[Message]) -> str:
    out: list[str] = []
    for m in msgs:
        out.append(text_of(m.get("content")))
        for c in m.get("tool_calls") or ():
            out.append(c["function"]["arguments"])
    return "\n".join(out)


# --- validators ---------------------------------------------------------------------------
def openai_problems(msgs: Sequence[Message]) -> list[str]:
    """Chat Completions rules: results directly after their call, every call answered."""
    problems: list[str] = []
    if not msgs:
        return ["empty"]
    first = 1 if msgs[0]["role"] == "system" else 0
    if first < len(msgs) and msgs[first]["role"] != "user":
        problems.append(f"first turn is {msgs[first]['role']}")
    pending: list[str] = []
    for i, m in enumerate(msgs):
        role = m["role"]
        if role == "system" and i > 0:
            problems.append(f"system message at {i}")
        if role == "tool":
            if m.get("tool_call_id") not in pending:
                problems.append(f"orphan tool result at {i}")
            else:
                pending.remove(m["tool_call_id"])
            continue
        if pending:
            problems.append(f"calls {pending} unanswered before {i}")
        pending = [c["id"] for c in m.get("tool_calls") or ()] if role == "assistant" else []
    if pending:
        problems.append(f"calls {pending} unanswered at the end")
    return problems


def to_anthropic(msgs: Sequence[Message]) -> list[tuple[str, list[Message]]]:
    """Anthropic shape: system dropped, tool results become user blocks, same roles merged."""
    turns: list[tuple[str, list[Message]]] = []
    for m in msgs:
        role = m["role"]
        if role == "system":
            continue
        if role == "tool":
            blocks = [{"type": "tool_result", "tool_use_id": m["tool_call_id"]}]
            role = "user"
        else:
            content = m.get("content")
            blocks = [{"type": "content"}] if content not in (None, "", []) else []
            blocks += [{"type": "tool_use", "id": c["id"]} for c in m.get("tool_calls") or ()]
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    return turns


def anthropic_problems(msgs: Sequence[Message]) -> list[str]:
    problems: list[str] = []
    turns = to_anthropic(msgs)
    if not turns or turns[0][0] != "user":
        problems.append("does not start with a user turn")
    for i, (role, blocks) in enumerate(turns):
        if not blocks:
            problems.append(f"empty {role} turn at {i}")
        if i and turns[i - 1][0] == role:
            problems.append(f"roles do not alternate at {i}")
        uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
        if uses:
            after = turns[i + 1][1] if i + 1 < len(turns) else []
            answered = {b["tool_use_id"] for b in after if b["type"] == "tool_result"}
            if not set(uses) <= answered:
                problems.append(f"tool_use {uses} not answered in the next turn")
        if role == "user" and i:
            wanted = {b["id"] for b in turns[i - 1][1] if b["type"] == "tool_use"}
            for b in blocks:
                if b["type"] == "tool_result" and b["tool_use_id"] not in wanted:
                    problems.append(f"tool_result {b['tool_use_id']} without its tool_use")
    return problems


def assert_valid(msgs: Sequence[Message]) -> None:
    assert openai_problems(msgs) == [], openai_problems(msgs)
    assert anthropic_problems(msgs) == [], anthropic_problems(msgs)
