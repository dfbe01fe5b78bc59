"""Shared pieces for the tool-loop tests: a real agent on the fake OpenAI server, scripted
tool calls, and the pairing rule every request must keep. (No tests live here.)"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from agent.agent import Agent, AgentSettings
from agent.compression.compressor import ContextCompressor
from agent.providers.base import Provider
from agent.tools.budget import OutputBudget
from agent.tools.registry import Tool, ToolRegistry
from tests.harness.fake_openai import FakeOpenAI

Message = dict[str, Any]
SYSTEM = "You are a careful assistant with tools."


def tool_call(call_id: str, name: str, arguments: dict[str, Any] | str | None = None) -> Message:
    """One OpenAI-format tool call; a str `arguments` is sent as is (malformed JSON too)."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def calling(*calls: Message, content: str | None = None) -> Message:
    """An assistant reply for the fake that makes these (parallel) tool calls."""
    return {"role": "assistant", "content": content, "tool_calls": list(calls)}


def chat_requests(fake: FakeOpenAI) -> list[dict[str, Any]]:
    """Every chat request body the fake received, oldest first."""
    return [call.json for call in fake.calls_to("/v1/chat/completions")]


def tool_messages(messages: Sequence[Message]) -> list[Message]:
    return [m for m in messages if m.get("role") == "tool"]


def pairing_problems(messages: Sequence[Message]) -> list[str]:
    """The strict pairing a tool loop must keep: each assistant message with tool calls is
    followed at once by exactly one tool message per call, in the order of the calls, and
    no tool message stands anywhere else."""
    problems: list[str] = []
    i = 0
    while i < len(messages):
        message = messages[i]
        i += 1
        if message.get("role") == "tool":
            problems.append(f"tool message {message.get('tool_call_id')!r} at {i - 1} "
                            "does not follow its call")
            continue
        ids = [c["id"] for c in message.get("tool_calls") or ()]
        if not ids:
            continue
        end = i
        while end < len(messages) and messages[end].get("role") == "tool":
            end += 1
        answers = [m.get("tool_call_id") for m in messages[i:end]]
        if answers != ids:
            problems.append(f"calls {ids} at {i - 1} are answered by {answers}")
        i = end
    return problems


def make_agent(provider: Provider, tools: Iterable[Tool], *, budget: OutputBudget | None = None,
               settings: AgentSettings | None = None) -> Agent:
    """A real agent with the built-in compressor, these tools, and a system prompt."""
    listed = list(tools)
    agent = Agent.create(provider, ContextCompressor, settings or AgentSettings(),
                         tools=lambda engine: ToolRegistry(listed), budget=budget)
    agent.load([{"role": "system", "content": SYSTEM}])
    return agent


def ask(agent: Agent, text: str) -> None:
    agent.append([{"role": "user", "content": text}])


def numbered(length: int) -> str:
    """Text of exactly `length` characters where every position is recognisable."""
    text = "".join(f"<{i:06d}>" for i in range(length // 8 + 1))
    return text[:length]
