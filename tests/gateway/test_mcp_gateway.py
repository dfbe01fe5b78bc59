"""Tools from a real MCP server (the SDK's server API, tests/harness/mcp_server.py), over
stdio and over streamable HTTP, called by the model through the real gateway: each
result reaches the next request in the form the loop promises (issue 39, point 1)."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from agent.attachments.present import LIFTED, TOOL_PICTURES
from tests.harness.base import text_of
from tests.harness.fake_openai import sniff_image
from tests.harness.gateway import close, config_for, started_gateway
from tests.harness.mcp import (
    ASK,
    asking,
    http_entry,
    http_server,
    offered,
    requests,
    say_and_wait,
    stdio_entry,
)
from tests.harness.platform import RecordingPlatform

TIMEOUT_S = 2.0  # the server's tool timeout in these tests


def after_call(fake: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The last request's tool result, and the messages after it."""
    messages = requests(fake)[-1]["messages"]
    last = max(i for i, m in enumerate(messages) if m["role"] == "tool")
    return messages[last], messages[last + 1:]


@pytest.fixture(params=["stdio", "http"])
async def server_entry(request: pytest.FixtureRequest, tmp_path: Path
                       ) -> AsyncIterator[dict[str, Any]]:
    """The test server as a `tools.mcp` entry: a program (stdio) or a URL (HTTP)."""
    if request.param == "stdio":
        yield stdio_entry(tmp_path / "mcp.pid", timeout_s=TIMEOUT_S, chats=["test:*"])
        return
    async with http_server(tmp_path) as url:
        yield http_entry(url, timeout_s=TIMEOUT_S, chats=["test:*"])


@dataclass(frozen=True)
class Called:
    """What the next request carried after one tool call, and how long the turn took."""

    content: Any  # the tool message's
    following: list[dict[str, Any]]  # the messages after it
    seconds: float


CALLS = {"added": ("test__add", {"a": 2, "b": 3.5}),
         "long": ("test__long_text", {"chars": 120_000}),
         "pictured": ("test__image", {}),
         "raised": ("test__raise", {}),
         "slept": ("test__sleep", {"seconds": 30}),
         "weather": ("test__weather", {"city": "Oslo"}),
         "invalid": ("test__add", {"a": "two", "b": 1})}


async def ask(platform: RecordingPlatform, fake: Any, tool: str, arguments: dict[str, Any]
              ) -> Called:
    began = time.monotonic()
    await say_and_wait(platform, f"{ASK}{tool} {json.dumps(arguments)}")
    result, following = after_call(fake)
    return Called(result["content"], following, time.monotonic() - began)


def shown_like_a_users_picture(called: Called) -> bool:
    """A data URL in a user message right after the tool results (OpenAI takes pictures
    from users only), the result saying where it went."""
    [shown] = called.following
    [url] = [p["image_url"]["url"] for p in shown["content"] if p["type"] == "image_url"]
    return (LIFTED in called.content and shown["role"] == "user"
            and text_of(shown["content"]).startswith(TOOL_PICTURES)
            and url.startswith("data:image/png;base64,")
            and sniff_image(base64.b64decode(url.split(",", 1)[1])) == "image/png")


def counted(calls: Any) -> dict[str, float]:
    return {s.labels["tool"] + ":" + s.labels["outcome"]: s.value
            for metric in calls.collect() for s in metric.samples if s.name.endswith("_total")}


async def test_every_kind_of_result_reaches_the_next_request(tmp_path, fake_openai,
                                                              server_entry):
    fake_openai.responder = asking
    config = config_for(tmp_path, fake_openai.base_url, model={"vision": True},
                        tools={"mcp": {"test": server_entry}})
    platform = RecordingPlatform()
    gw = await started_gateway(config, [platform])
    try:
        got = {label: await ask(platform, fake_openai, *call) for label, call in CALLS.items()}
        tools = offered(requests(fake_openai)[0])
        calls = counted(gw.conversations.mcp.metrics.calls)  # type: ignore[union-attr]
        scraped = generate_latest(gw.metrics.registry).decode()
    finally:
        await close(gw)

    # Offered as NAME__tool beside the built-ins, sorted by name.
    assert [t for t in tools if t.startswith("test__")] == [
        "test__add", "test__image", "test__long_text", "test__raise", "test__sleep",
        "test__weather"]
    assert tools == sorted(tools)
    assert got["added"].content == "5.5"
    # The long text was saved by the output budget and previewed.
    long = got["long"].content
    assert long.startswith("[Saved output: 120,010 characters")
    assert "BEGIN The quick brown fox" in long and "END" not in long
    assert list((tmp_path / "tool_outputs").rglob(long.split("File ", 1)[1].split(";")[0]))
    assert shown_like_a_users_picture(got["pictured"])
    # Failures are results in words, and the turn goes on.
    assert got["raised"].content == "Error: test__raise: Error executing tool raise"
    assert got["slept"].content == (
        f"Error: test__sleep did not finish within {TIMEOUT_S:g} seconds.")
    assert got["slept"].seconds < TIMEOUT_S + 10, "the turn waited for the tool only"
    assert json.loads(got["weather"].content) == {"city": "Oslo", "celsius": 21, "sky": "clear"}
    assert got["invalid"].content.startswith(
        "Error: test__add: the arguments do not fit its schema (a: 'two' is not of type "
        "'number'), so it did not run.")
    assert platform.texts("test:1") == ["done"] * len(CALLS)
    assert calls == {"add:ok": 1, "long_text:ok": 1, "image:ok": 1, "raise:error": 1,
                     "sleep:timeout": 1, "weather:ok": 1, "add:invalid": 1}
    assert 'threadline_mcp_server_up{server="test"} 1.0' in scraped
    assert 'threadline_mcp_server_starts{server="test"} 1.0' in scraped


async def test_allow_deny_and_chats_decide_what_is_offered_and_a_forced_call_is_refused(
        tmp_path, fake_openai):
    fake_openai.responder = asking
    entry = stdio_entry(tmp_path / "mcp.pid", chats=["test:1", "test:7*"],
                        allow=["add", "sleep", "l*"], deny=["sleep"])
    config = config_for(tmp_path, fake_openai.base_url, tools={"mcp": {"test": entry}})
    platform = RecordingPlatform()
    gw = await started_gateway(config, [platform])
    try:
        for chat in ("1", "2", "70"):
            await say_and_wait(platform, f"{ASK}test__add {json.dumps({'a': 1, 'b': 1})}",
                               chat_id=chat)
        for chat, tool in (("1", "test__raise"), ("1", "test__sleep"), ("2", "test__add")):
            await say_and_wait(platform, f"{ASK}{tool} {{}}", chat_id=chat)
    finally:
        await close(gw)

    first = {chat: [t for t in offered(body) if t.startswith("test__")]
             for chat, body in zip(("1", "2", "70"), requests(fake_openai)[0:6:2], strict=True)}
    assert first == {"1": ["test__add", "test__long_text"], "2": [],
                     "70": ["test__add", "test__long_text"]}
    results = [m["content"] for body in requests(fake_openai)[1::2]
               for m in body["messages"][-1:] if m["role"] == "tool"]
    assert results[:3] == ["2", "Error: there is no tool named 'test__add'.", "2"]
    assert results[3:] == ["Error: there is no tool named 'test__raise'.",
                           "Error: there is no tool named 'test__sleep'.",
                           "Error: there is no tool named 'test__add'."]


async def test_a_server_without_chats_is_offered_only_in_an_admins_direct_messages(
        tmp_path, fake_openai):
    fake_openai.responder = asking
    config = config_for(tmp_path, fake_openai.base_url,
                        gateway={"admins": {"telegram": [42]}},
                        tools={"mcp": {"test": stdio_entry(tmp_path / "mcp.pid")}})
    platform = RecordingPlatform("telegram")
    gw = await started_gateway(config, [platform])
    try:
        ask_add = f"{ASK}test__add {json.dumps({'a': 1, 'b': 2})}"
        await say_and_wait(platform, ask_add, chat_id="42", user_id="42")  # the admin's DMs
        await say_and_wait(platform, ask_add, chat_id="43", user_id="43")  # someone else's
        await say_and_wait(platform, ask_add, chat_id="-100", user_id="42", is_group=True,
                           addressed_to_bot=True)  # the admin, in a group
    finally:
        await close(gw)

    calls, answers = requests(fake_openai)[0::2], requests(fake_openai)[1::2]
    assert ["test__add" in offered(body) for body in calls] == [True, False, False]
    assert [body["messages"][-1]["content"] for body in answers] == [
        "3", "Error: there is no tool named 'test__add'.",
        "Error: there is no tool named 'test__add'."]
