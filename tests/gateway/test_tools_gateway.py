"""Tools in the live gateway: the model looks compacted turns up with history_search,
only ever in its own chat, over both provider wire formats, and a tool loop that never
ends is stopped with a plain answer and a transcript whose calls all have results."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

from agent.agent import MAX_TOOL_STEPS, TOOL_LIMIT_REPLY
from agent.compression.prompts import SUMMARY_MARKER
from tests.harness.base import echo_responder, text_of, tool_call_reply
from tests.harness.gateway import (
    close,
    config_for,
    is_summary_request,
    started_gateway,
    summarizing_responder,
)
from tests.harness.platform import RecordingPlatform
from tests.harness.tools import install_tool_plugin

CHAT = "test:1"
FACT = "7-3-9-1"
CODE = re.compile(r"\b\d-\d-\d-\d\b")


def chat_requests(fake: Any, path: str) -> list[dict[str, Any]]:
    """The bodies of the model turns the fake answered (summarizer calls left out)."""
    return [c.json for c in fake.calls_to(path) if c.json and not is_summary_request(c.json)]


def tool_results(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool_result blocks of an Anthropic message."""
    content = message.get("content")
    return [b for b in content if b.get("type") == "tool_result"] \
        if isinstance(content, list) else []


def unpaired(messages: list[dict[str, Any]]) -> list[str]:
    """What breaks the rule "every tool call is answered right after, every result answers
    a call" in an OpenAI-format transcript; empty when the transcript is whole."""
    problems: list[str] = []
    waiting: set[str] = set()
    for message in messages:
        if message["role"] == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in waiting:
                problems.append(f"result {call_id!r} answers no open call")
            waiting.discard(call_id)
            continue
        if waiting:
            problems.append(f"calls {sorted(waiting)} have no result")
        waiting = {c["id"] for c in message.get("tool_calls") or []}
    if waiting:
        problems.append(f"calls {sorted(waiting)} have no result at the end")
    return problems


async def say_all(platform: RecordingPlatform, texts: list[str], **kw: Any) -> None:
    """Each message answered before the next is said."""
    for text in texts:
        done = len(platform.delivered_ids) + 1
        await platform.say(text, **kw)
        await platform.wait_delivered(done)


async def test_a_fact_compacted_away_fifty_turns_ago_is_found_with_history_search(
        tmp_path, fake_openai):
    def responder(body: dict[str, Any]) -> Any:
        if is_summary_request(body):
            return summarizing_responder(body)  # a summary that never mentions the code
        last = body["messages"][-1]
        if last["role"] == "tool":  # answer from what the search returned, nothing else
            found = CODE.search(text_of(last["content"]))
            return f"Your locker code is {found.group()}." if found else "I cannot find it."
        if text_of(last["content"]) == "What was my locker code again?":
            return tool_call_reply("history_search", {"query": "locker code"},
                                   call_id="call_search_1")
        return echo_responder(body)

    fake_openai.responder = responder
    config = config_for(tmp_path, fake_openai.base_url, model={"context_length": 8192},
                        compression={"protect_last_n": 4})
    platform = RecordingPlatform()
    gw = await started_gateway(config, [platform])
    try:
        filler = "and the weather stayed mild all afternoon by the harbour " * 6
        await say_all(platform, [f"my locker code is {FACT}, please remember it"]
                      + [f"turn {n}: {filler}" for n in range(2, 52)] + ["/compress"])
        tip = await gw.store.live_session(CHAT)
        chain = await gw.store.chain(tip.id)
        live = [m.message for m in await gw.store.load_history(tip.id)]
        before = len(chat_requests(fake_openai, "/chat/completions"))
        await say_all(platform, ["What was my locker code again?"])
    finally:
        await close(gw)

    # The first compaction keeps the opening exchange; the second (/compress) folds it in.
    assert len(chain) >= 3, "fifty long turns on an 8K window compact, then /compress"
    assert platform.texts(CHAT)[-2].startswith("Compressed:")
    assert not any(FACT in json.dumps(m) for m in live), "the fact was compacted away"
    [summary] = [text_of(m["content"]) for m in live if SUMMARY_MARKER in text_of(m["content"])]
    prefix = summary[summary.index(SUMMARY_MARKER):]
    assert "history_search" in prefix[:prefix.index("]") + 1]

    asked, answered = chat_requests(fake_openai, "/chat/completions")[before:]
    assert FACT not in json.dumps(asked["messages"]), "the model could not see the fact"
    result = answered["messages"][-1]
    assert result["role"] == "tool" and result["tool_call_id"] == "call_search_1"
    assert FACT in result["content"]
    assert platform.texts(CHAT)[-1] == f"Your locker code is {FACT}."


SECRET = "zanzibarquux"


async def test_history_search_in_one_chat_never_returns_another_chats_text(tmp_path,
                                                                           fake_openai):
    def responder(body: dict[str, Any]) -> Any:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return "I found: " + text_of(last["content"])
        if text_of(last["content"]) == "what is my secret word?":
            return tool_call_reply("history_search", {"query": SECRET})
        return echo_responder(body)

    fake_openai.responder = responder
    platform = RecordingPlatform()
    gw = await started_gateway(config_for(tmp_path, fake_openai.base_url), [platform])
    try:
        await say_all(platform, [f"my secret word is {SECRET}, hidden under the blue teapot"],
                      chat_id="2")
        await say_all(platform, ["hello from the first chat"], chat_id="1")
        mark = len(fake_openai.calls_to("/chat/completions"))
        await say_all(platform, ["what is my secret word?"], chat_id="1")
        from_a = [c.json for c in fake_openai.calls_to("/chat/completions")[mark:]]
        mark += len(from_a)
        await say_all(platform, ["what is my secret word?"], chat_id="2")
        from_b = [c.json for c in fake_openai.calls_to("/chat/completions")[mark:]]
    finally:
        await close(gw)

    result_a = from_a[-1]["messages"][-1]
    assert result_a["role"] == "tool"
    assert result_a["content"] == f"Nothing in this chat's history matches {SECRET!r}."
    assert not any("teapot" in json.dumps(body) for body in from_a)
    assert platform.texts("test:1")[-1] == f"I found: {result_a['content']}"
    result_b = from_b[-1]["messages"][-1]
    assert result_b["role"] == "tool" and "hidden under the blue teapot" in result_b["content"]
    assert "blue teapot" in platform.texts("test:2")[-1]


def anthropic_config(tmp_path: Any, fake: Any) -> Any:
    return config_for(tmp_path, fake.base_url, model={
        "provider": "anthropic", "name": "claude-fake", "api_key": "test-key",
        "context_length": 8192})


async def test_claude_looks_history_up_with_tool_use_and_tool_result_blocks(
        tmp_path, fake_anthropic):
    def responder(body: dict[str, Any]) -> Any:
        last = body["messages"][-1]
        results = tool_results(last)
        if results:
            found = re.search(r"called (\w+)", text_of(results[0]["content"]))
            return f"The boat is called {found.group(1)}." if found else "No idea."
        if text_of(last["content"]) == "what is the boat called?":
            return tool_call_reply("history_search", {"query": "boat"},
                                   call_id="toolu_search_1")
        return echo_responder(body)

    fake_anthropic.responder = responder
    platform = RecordingPlatform()
    gw = await started_gateway(anthropic_config(tmp_path, fake_anthropic), [platform])
    try:
        await say_all(platform, ["our boat is called Wavedancer", "what is the boat called?"])
    finally:
        await close(gw)

    assert platform.texts() == ["echo: our boat is called Wavedancer",
                                "The boat is called Wavedancer."]
    asked, answered = chat_requests(fake_anthropic, "/v1/messages")[1:]
    for body in (asked, answered):
        assert [t["name"] for t in body["tools"]] == ["history_search", "read_saved_output"]
    call, reply = answered["messages"][-2:]
    [use] = [b for b in call["content"] if b["type"] == "tool_use"]
    assert call["role"] == "assistant"
    assert (use["id"], use["name"], use["input"]) == ("toolu_search_1", "history_search",
                                                      {"query": "boat"})
    [result] = tool_results(reply)
    assert reply["role"] == "user" and result["tool_use_id"] == "toolu_search_1"
    assert "Wavedancer" in text_of(result["content"])


async def test_a_tool_loop_that_never_ends_stops_at_the_step_limit(tmp_path, fake_anthropic):
    ids = itertools.count(1)

    def responder(body: dict[str, Any]) -> Any:
        if is_summary_request(body):
            return summarizing_responder(body)
        return tool_call_reply("history_search", {"query": "anything at all"},
                               call_id=f"toolu_{next(ids)}")

    fake_anthropic.responder = responder
    platform = RecordingPlatform()
    gw = await started_gateway(anthropic_config(tmp_path, fake_anthropic), [platform])
    try:
        await say_all(platform, ["keep looking until you find it"])
        tip = await gw.store.live_session(CHAT)
        stored = [m.message for m in await gw.store.load_history(tip.id)]
    finally:
        await close(gw)

    assert platform.texts() == [TOOL_LIMIT_REPLY]
    assert len(chat_requests(fake_anthropic, "/v1/messages")) == MAX_TOOL_STEPS + 1
    assert unpaired(stored) == []
    calls = [m for m in stored if m.get("tool_calls")]
    assert len(calls) == MAX_TOOL_STEPS + 1
    assert stored[-1] == {"role": "assistant", "content": TOOL_LIMIT_REPLY}


async def test_every_request_offers_the_same_tools_in_name_order(tmp_path, fake_openai,
                                                                 monkeypatch):
    install_tool_plugin(tmp_path / "site", monkeypatch)  # a plugin named to sort first

    def responder(body: dict[str, Any]) -> Any:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return "The sum is " + text_of(last["content"])
        if text_of(last["content"]) == "add 2 and 3":
            return tool_call_reply("add_numbers", {"numbers": [2, 3]})
        return echo_responder(body)

    fake_openai.responder = responder
    platform = RecordingPlatform()
    gw = await started_gateway(config_for(tmp_path, fake_openai.base_url), [platform])
    try:
        await say_all(platform, ["hello", "add 2 and 3"])
    finally:
        await close(gw)

    assert platform.texts() == ["echo: hello", "The sum is 5.0"]
    requests = chat_requests(fake_openai, "/chat/completions")
    assert len(requests) == 3
    names = [t["function"]["name"] for t in requests[0]["tools"]]
    assert names == ["add_numbers", "history_search", "read_saved_output"]
    assert all(json.dumps(r["tools"]) == json.dumps(requests[0]["tools"]) for r in requests)


async def test_a_search_never_finds_its_own_earlier_results_or_one_text_twice(
        tmp_path, fake_openai):
    def responder(body: dict[str, Any]) -> Any:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return "Searched."
        asked = text_of(last["content"])
        if asked == "look it up":  # the word searched for is nowhere in the chat
            return tool_call_reply("history_search", {"query": "quokkaplanet"})
        if asked == "look the animal up":
            return tool_call_reply("history_search", {"query": "wombat"})
        return summarizing_responder(body)

    fake_openai.responder = responder
    platform = RecordingPlatform()
    config = config_for(tmp_path, fake_openai.base_url, model={"context_length": 8192},
                        compression={"protect_last_n": 4})
    gw = await started_gateway(config, [platform])
    try:
        # The first exchange is kept verbatim by a compaction: stored twice, found once.
        await say_all(platform, ["the wombat sleeps", "look it up", "look it up"])
        second = fake_openai.calls_to("/chat/completions")[-1].json["messages"][-1]
        await say_all(platform, [f"note {i}: " + "the tide comes in twice a day " * 40
                                 for i in range(8)])
        await say_all(platform, ["/compress", "look the animal up"])
        found = fake_openai.calls_to("/chat/completions")[-1].json["messages"][-1]
    finally:
        await close(gw)
    # The first search's "Nothing ... matches 'quokkaplanet'" is not a match for the second.
    assert second["content"] == "Nothing in this chat's history matches 'quokkaplanet'."
    assert any(t.startswith("Compressed:") for t in platform.texts())
    lines = found["content"].splitlines()[1:]
    snippets = [line.split("): ", 1)[1] for line in lines]
    assert any("wombat" in s for s in snippets)
    assert len(snippets) == len(set(snippets))  # each text once
